"""The `rocm_compile` tier of the CK fused attention (kernels/rocm/attention.py,
templates/attention_ck.hip.j2): hipcc builds a small model whose attention takes CK for gfx90a,
its code object is read back (the fused kernel, its MFMA and exp instructions), the build's host
side runs on the mock device, and CK's own IsSupportedArgument and causal-mask predicate run on
the host over what the template builds. No numerics: no AMD GPU here and CK cannot be emulated
(the SIMT fallback's numerics are the host emulator's, test_rocm_own_kernels.py; the CK dims are
replayed in numpy through CK's addressing in test_rocm_attention.py)."""
from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.codegen.backend import load_backend
from aitgen.runtime.model import Model

from ck_helpers import compile_ck, device_asm, exported, hip_env, hipcc, lowered, source

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_rocm_ck_objects import ACCEPT_MAIN  # noqa: E402
from test_rocm_zoo_compile import mock_runs  # noqa: E402

pytestmark = pytest.mark.rocm_compile

H, D = 2, 64


def packed_self_attention(seq, causal=True):
    """q, k, v as windows of one [2, S, 3*H*D] input, the result written in [B, S, H, D] order:
    a single CK call reading and writing through views (no GEMM to compile)."""
    x = ag.Tensor([2, seq, 3 * H * D], dtype="float16", name="x")
    parts = [ops.slice(x, [0, 0, j * H * D], [2, seq, (j + 1) * H * D]) for j in range(3)]
    q, k, v = (ops.permute(ops.reshape(t, [2, seq, H, D]), [0, 2, 1, 3]) for t in parts)
    att = ops.scaled_dot_product_attention(q, k, v, causal=causal)
    return {"y": ops.reshape(ops.permute(att, [0, 2, 1, 3]), [2, seq, H * D])}


@pytest.fixture(scope="module")
def built(rocm_toolchain, tmp_path_factory):
    work = tmp_path_factory.mktemp("ck_attention") / "m"
    t0 = time.perf_counter()
    ag.compile_model(packed_self_attention(ag.IntVar("seq", 1, 200)), target="rocm", arch="gfx90a", workdir=work,
                     precision="float16", load=False)
    return work, time.perf_counter() - t0


def test_fused_attention_compiles_to_mfma(built, tmp_path):
    work, seconds = built
    _, (call,) = lowered(packed_self_attention(ag.IntVar("seq", 1, 200)))
    assert call.spec.template.endswith("attention_ck.hip.j2")
    (obj,) = [p for p in work.rglob(f"{call.spec.func}*.o")]
    assert call.spec.func in exported(obj)
    asm = device_asm(obj, "gfx90a", tmp_path)
    kernels = re.findall(r"^[0-9a-f]+ <(_Z\w+)>:", asm, re.M)
    # two kernels: CK instantiates one with and one without a main loop over the head dim
    assert kernels and all("kernel_batched_gemm_softmax_gemm_xdl_cshuffle_v1" in k for k in kernels)
    assert len(re.findall(r"v_mfma_f32_32x32x8f16", asm)) >= 32    # both GEMMs on the MFMA units
    assert len(re.findall(r"v_exp_f32", asm)) >= 16                 # the softmax between them
    print(f"CK attention model (one CK unit) built in {seconds:.1f} s (this process's cache state)")


def test_bfloat16_d128_unit_compiles_for_gfx940(tmp_path):
    """The other class (head dim 128: 64 of it per step, a 128-wide O tile, V through an (8, 32)
    thread cluster) in bfloat16, unmasked, for the other arch: CK's 1k bf16 MFMA."""
    q = ag.Tensor([2, 4, 96, 128], dtype="bfloat16", name="q")
    _, (call,) = lowered({"y": ops.scaled_dot_product_attention(q, q, q)}, "gfx940")
    p = call.spec.param_dict()
    assert p["inst"]["name"] == "d128" and p["ctype"] == "ck::bhalf_t" and not p["causal"]
    t0 = time.perf_counter()
    obj = compile_ck(call, tmp_path, "gfx940")
    seconds = time.perf_counter() - t0
    asm = device_asm(obj, "gfx940", tmp_path)
    kernels = re.findall(r"^[0-9a-f]+ <(_Z\w+)>:", asm, re.M)
    assert kernels and all("kernel_batched_gemm_softmax_gemm_xdl_cshuffle_v1" in k for k in kernels)
    assert len(re.findall(r"v_mfma_f32_32x32x8_?bf16", asm)) >= 32 and len(re.findall(r"v_exp_f32", asm)) >= 16
    print(f"bfloat16 d128 CK attention unit compiled for gfx940 in {seconds:.1f} s")


def test_mock_run(built):
    """The host side on the mock device, eagerly and as a HIP graph (every check passes), and the
    grid CK launches: one workgroup per 128 queries per batch item (Dv = 64: one O tile)."""
    work, _ = built
    print(mock_runs(work))
    with Model.load(work, mock_device=True) as m:
        for seq in (200, 7):
            m.run({"x": np.zeros((2, seq, 3 * H * D), np.float16)})
            (launch,) = [ln for ln in m.launch_log() if "batched_gemm_softmax_gemm" in ln.kernel]
            assert not launch.failure
            assert launch.block == (256, 1, 1) and launch.grid == (-(-seq // 128) * 2 * H, 1, 1), launch


def _static(call) -> str:
    return ", ".join(str(int(d)) for d in call.dims)


def oracle_keep(sq: int, sk: int) -> np.ndarray:
    """Which keys the oracle's causal attention lets each query see: equal scores (q = k = 0) and
    v = identity spread each query's weight evenly over exactly its visible keys."""
    q = ag.Tensor([1, sq, 8], dtype="float32", name="q")
    k = ag.Tensor([1, sk, 8], dtype="float32", name="k")
    v = ag.Tensor([1, sk, sk], dtype="float32", name="v")
    y = ops.scaled_dot_product_attention(q, k, v, causal=True)
    out = ag.reference.run({"y": y}, {"q": np.zeros((1, sq, 8), np.float32), "k": np.zeros((1, sk, 8), np.float32),
                                      "v": np.eye(sk, dtype=np.float32)[None]})["y"][0]
    return out > 0


def test_ck_itself_accepts_what_the_template_builds_and_masks_as_the_oracle(tmp_path):
    """CK's own IsSupportedArgument (host code; the device's name interposed as gfx90a) on the
    argument make_argument builds from each call's real dims: the packed-view causal call, a
    causal Sq != Sk one, a bfloat16 head-dim-128 one with a single batch dim (padded to two G
    dims), a head dim of 96 (padded to the class's 128) and one of 8. Controls: the same unit
    refuses a head dim of 20 (its 8-wide vectors) and a value dim of 12 (the result's). Then CK's
    causal predicate (the instance's C0MatrixMask) against the oracle's visible keys for
    Sq < Sk and Sq > Sk: the reason CK takes causal attention whatever the lengths."""
    cc = hipcc()

    def attn(dt="float16", d=64, causal=False, sq=128, sk=None, batch=(2, 4)):
        sk = sk or sq
        q = ag.Tensor([*batch, sq, d], dtype=dt, name="q")
        k = ag.Tensor([*batch, sk, d], dtype=dt, name="k")
        v = ag.Tensor([*batch, sk, d], dtype=dt, name="v")
        return {"y": ops.scaled_dot_product_attention(q, k, v, causal=causal)}

    problems = [packed_self_attention(200), attn(causal=True, sq=100, sk=77), attn("bfloat16", 128, batch=(8,)),
                attn(d=96, sq=197), attn(d=8, sq=33, sk=65)]
    calls = [lowered(p)[1][0] for p in problems]
    assert all(c.spec.template.endswith("attention_ck.hip.j2") for c in calls)
    units, lines = [], []
    for j, call in enumerate(calls):
        src = source(call)
        units.append(f"namespace t{j} {{\n{src[:src.index('AIT_KERNEL')]}\n}}\n")   # host only: no launch
        lines.append(f"  const int64_t d{j}[] = {{{_static(call)}}};")
    bad_d, bad_dv = list(calls[0].dims), list(calls[0].dims)
    bad_d[2], bad_dv[3] = 20, 12
    lines.append(f"  const int64_t bad_d[] = {{{', '.join(str(int(x)) for x in bad_d)}}};")
    lines.append(f"  const int64_t bad_dv[] = {{{', '.join(str(int(x)) for x in bad_dv)}}};")
    checks = [f"ACCEPTS(t{j}, d{j})" for j in range(len(calls))] + ["ACCEPTS(t0, bad_d)", "ACCEPTS(t0, bad_dv)"]
    lines.append('  std::printf("' + " ".join(["%d"] * len(checks)) + '\\n", ' + ", ".join(checks) + ");")
    shapes = [(5, 9), (9, 5)]
    for sq, sk in shapes:   # t1 is causal: one row of 0/1 (1 = CK masks the key out) per query
        lines.append(f"  {{ const t1::Instance::C0MatrixMask mask({sk});\n"
                     f"    for (int m = 0; m < {sq}; ++m) {{ for (int n = 0; n < {sk}; ++n) "
                     "std::printf(\"%d\", mask.IsMaskedElement(m, n) ? 1 : 0); std::printf(\" \"); }\n"
                     "    std::printf(\"\\n\"); }")
    path = tmp_path / "accept.hip"
    headers = ["aitgen/ck_attention.hpp", "cstdio", "cstring"]
    path.write_text("".join(f"#include <{h}>\n" for h in headers) + "".join(units) + ACCEPT_MAIN % "\n".join(lines))
    flags = [f for f in load_backend("rocm").compile_flags("gfx90a") if not f.startswith("--offload-arch")]
    t0 = time.perf_counter()
    r = subprocess.run([cc, *flags, "--cuda-host-only", str(path), "-o", str(tmp_path / "accept")],
                       capture_output=True, text=True, env=hip_env())
    assert r.returncode == 0, r.stderr[-4000:]
    print(f"host-only CK attention check compiled in {time.perf_counter() - t0:.1f} s")
    out = subprocess.run([str(tmp_path / "accept")], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].split() == ["1"] * len(calls) + ["0", "0"]
    for (sq, sk), line in zip(shapes, out[1:]):
        masked = np.array([[c == "1" for c in row] for row in line.split()])
        assert masked.shape == (sq, sk)
        np.testing.assert_array_equal(~masked, oracle_keep(sq, sk))
