"""CUDA test tiers.

- Compile-only tests (default tier, and `cuda_compile` for zoo-sized builds) need nvcc and the
  pinned CUTLASS, not a GPU; the `cuda_toolchain` fixture (tests/conftest.py) skips them, naming what is missing.
- `gpu` tests need a device and its driver: skipped here before any fixture runs, so no build is
  spent on a machine that cannot run it. They build for the present GPU's arch (`gpu_arch`).
"""
from __future__ import annotations

import os

import pytest

from aitgen.runtime import device

# AITGEN_GPU_PREBUILD=<arch> (scripts/gpu_prebuild.py --only tier): the gpu tier runs on a machine
# without a GPU to fill the object cache with its builds, for that arch; every build is compiled
# (load=False) and its test then skips, so the lent GPU machine links instead of compiling.
PREBUILD_ARCH = os.environ.get("AITGEN_GPU_PREBUILD") or None


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is not None and not device.cuda_available() and not PREBUILD_ARCH:
        pytest.skip(f"gpu: {device._probe()[1]}")


@pytest.fixture(scope="session")
def gpu_arch():
    """The arch a build for the present GPU uses (sm_80 for any 8.x, sm_90a for 9.0)."""
    if PREBUILD_ARCH:
        return PREBUILD_ARCH
    from aitgen.codegen.backend import load_backend
    return load_backend("cuda").resolve_arch(None, device.cuda_capability)


@pytest.fixture(scope="session", autouse=True)
def _prebuild_only():
    """In prebuild mode, compile_model builds without loading and the test skips where it would
    load (session-scoped, so module fixtures that build are covered too)."""
    if not PREBUILD_ARCH:
        yield
        return
    import aitgen
    from aitgen.runtime.model import Model
    real = aitgen.compile_model

    def compile_only(*args, load: bool = True, **kw):
        work = real(*args, load=False, **kw)
        if load:
            pytest.skip(f"AITGEN_GPU_PREBUILD={PREBUILD_ARCH}: built, not run")
        return work

    def no_load(*args, **kw):
        pytest.skip(f"AITGEN_GPU_PREBUILD={PREBUILD_ARCH}: built, not run")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(aitgen, "compile_model", compile_only)
        mp.setattr(Model, "load", classmethod(no_load))
        yield
