"""Shared test options: --update-golden rewrites golden files instead of comparing with them."""
from __future__ import annotations

import os

# Two test workers share two cores: a multi-threaded BLAS per worker oversubscribes them and small
# matmuls in the oracle slow down by orders of magnitude. Set before numpy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pathlib  # noqa: E402

import pytest

GOLDEN_DIR = pathlib.Path(__file__).parent / "golden"

# Property tests draw new random graphs on every run, which is how they find bugs. CI sets
# HYPOTHESIS_PROFILE=ci: the same examples every run (derandomize), so a red run is reproducible
# with `HYPOTHESIS_PROFILE=ci pytest ...` and never a new draw's luck.
try:
    from hypothesis import settings as _hyp_settings
except ImportError:  # the dev extra is absent: the property tests skip on their own
    pass
else:
    _hyp_settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
    _hyp_settings.register_profile("dev", print_blob=True)
    _hyp_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", help="rewrite tests/golden/* from the current output")


@pytest.fixture
def golden(request):
    """golden(name, text): compare text with tests/golden/<name> (or write it with --update-golden)."""
    def check(name: str, text: str) -> None:
        path = GOLDEN_DIR / name
        if request.config.getoption("--update-golden"):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        assert path.exists(), f"golden file {path} missing; run pytest --update-golden"
        assert text == path.read_text(), f"output differs from golden {path}; run pytest --update-golden if intended"
    return check


@pytest.hookimpl(tryfirst=True)   # before -m selects: the marks added here must count there
def pytest_collection_modifyitems(config, items):
    """Tests marked slow (full-size models through the oracle) run with -m slow or AITGEN_RUN_SLOW=1;
    tests marked cuda_compile (nvcc builds of zoo models, minutes) with -m cuda_compile or
    AITGEN_RUN_CUDA_COMPILE=1; rocm_compile (hipcc builds of Composable Kernel instances, ~45 s
    each per arch) with -m rocm_compile or AITGEN_RUN_ROCM_COMPILE=1. Each is its own CI step.
    mock_census (the op catalogue built for every dtype and arch and run on the mock device, an
    hour of nvcc on 2 cores) runs with -m mock_census or AITGEN_RUN_MOCK_CENSUS=1, by hand.

    Every other test that asks for the `cuda_toolchain` fixture (nvcc + CUTLASS: the host-emulated
    kernels, single-kernel compiles) is marked cuda_compile here, so the CI step that installs the
    cuda extra runs it; the default tier has no CUTLASS and would only skip it."""
    for item in items:
        if "cuda_toolchain" in getattr(item, "fixturenames", ()) and not any(
                m in item.keywords for m in ("cuda_compile", "gpu", "mock_census")):
            item.add_marker(pytest.mark.cuda_compile)
    markexpr = config.getoption("markexpr") or ""
    for marker, env in (("slow", "AITGEN_RUN_SLOW"), ("cuda_compile", "AITGEN_RUN_CUDA_COMPILE"),
                        ("rocm_compile", "AITGEN_RUN_ROCM_COMPILE"), ("mock_census", "AITGEN_RUN_MOCK_CENSUS")):
        if marker in markexpr or os.environ.get(env) == "1":
            continue
        skip = pytest.mark.skip(reason=f"{marker}: run with -m {marker} or {env}=1")
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def cuda_toolchain():
    """nvcc and the pinned CUTLASS headers (the cuda extra), or a skip that says which is missing."""
    from aitgen.codegen import locate
    from aitgen.errors import ToolchainError
    try:
        locate.nvcc()
        locate.cutlass()
    except ToolchainError as e:
        pytest.skip(f"CUDA toolchain missing: {e}")


@pytest.fixture(scope="session")
def rocm_toolchain():
    """hipcc and the Composable Kernel headers (locate.ck(): AITGEN_CK_HOME, ROCm's, or
    shared/3rdparty beside the checkout), or a skip that says which is missing. Cheap builds
    (copies, own kernels) stay in the default tier; CK instances go behind rocm_compile."""
    from aitgen.codegen import locate
    from aitgen.errors import ToolchainError
    try:
        locate.hipcc()
        locate.ck()
    except ToolchainError as e:
        pytest.skip(f"ROCm toolchain missing: {e}")


@pytest.fixture
def cli_copy_model(tmp_path):
    """`module:build` of a copy-only model written to a file (a dynamic input returned as is and
    reshaped), what `aitgen compile --target <gpu>` is checked with for every GPU backend."""
    import textwrap
    mod = tmp_path / "m.py"
    mod.write_text(textwrap.dedent("""
        import aitgen as ag
        from aitgen import ops

        def build():
            x = ag.Tensor([ag.IntVar("b", 1, 8), 4], name="x")
            return {"y": x, "flat": ops.reshape(x, [-1])}
    """))
    return f"{mod}:build"
