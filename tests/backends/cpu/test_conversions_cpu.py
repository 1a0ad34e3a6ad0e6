"""The CPU kernels' float16/bfloat16 <-> float32 conversions (backends/cpu/include/aitgen/cpu_kernel.h):
exact, and in forms that GCC vectorises at the backend's flags, so that no kernel converts a tensor
one element at a time (without AVX512-FP16, GCC 12 converts _Float16 with scalar F16C only)."""
from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from aitgen._paths import backends_dir
from aitgen.codegen.backend import load_backend
from aitgen.ir.dtype import DType

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

_SRC = r"""
#include <cstdio>
#include <vector>
#include "aitgen/cpu_kernel.h"
// Each loop on its own line: -fopt-info-vec names loops by line.
void h2f(const ait::half* x, float* y, long n) { for (long i = 0; i < n; ++i) y[i] = ait::to_f32(x[i]); }
void f2h(const float* x, ait::half* y, long n) { for (long i = 0; i < n; ++i) y[i] = ait::from_f32<ait::half>(x[i]); }
void b2f(const ait::bf16* x, float* y, long n) { for (long i = 0; i < n; ++i) y[i] = ait::to_f32(x[i]); }
void f2b(const float* x, ait::bf16* y, long n) { for (long i = 0; i < n; ++i) y[i] = ait::from_f32<ait::bf16>(x[i]); }
int main(int argc, char** argv) {
  long n = 0;
  FILE* in = std::fopen(argv[1], "rb");
  std::fread(&n, 8, 1, in);
  std::vector<float> x(n), y(n);
  std::fread(x.data(), 4, n, in);
  std::fclose(in);
  std::vector<ait::half> h(65536), hx(n);
  std::vector<ait::bf16> b(65536), bx(n);
  std::vector<float> hf(65536), bf(65536);
  for (long i = 0; i < 65536; ++i) h[i].bits = b[i].bits = static_cast<uint16_t>(i);
  h2f(h.data(), hf.data(), 65536);
  b2f(b.data(), bf.data(), 65536);
  f2h(x.data(), hx.data(), n);
  f2b(x.data(), bx.data(), n);
  FILE* out = std::fopen(argv[2], "wb");
  std::fwrite(hf.data(), 4, 65536, out);
  std::fwrite(bf.data(), 4, 65536, out);
  std::fwrite(hx.data(), 2, n, out);
  std::fwrite(bx.data(), 2, n, out);
  std::fclose(out);
}
"""


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(the source's vectorisation report, float inputs, the program's four results)."""
    d = tmp_path_factory.mktemp("cvt")
    (d / "cvt.cpp").write_text(_SRC.lstrip("\n"))
    cfg = load_backend("cpu")
    incs = [f"-I{backends_dir() / i}" for i in cfg.includes]
    flags = [f for f in cfg.cxxflags if f not in ("-fPIC", "-fvisibility=hidden")]
    r = subprocess.run(["g++", *flags, *incs, "-fopt-info-vec-optimized", str(d / "cvt.cpp"), "-o", str(d / "cvt")],
                       capture_output=True, text=True, timeout=300, check=True)
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2 ** 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    # random bit patterns (every exponent, NaN and inf), plus the edges of half's range
    x = np.concatenate([bits.view(np.float32), np.float32([0.0, -0.0, 65504, 65520, 65519.99, 6e-8, 3e-8, 2.98e-8,
                                                          np.inf, -np.inf, np.nan, 1 + 2 ** -11, 1 + 3 * 2 ** -11])])
    with open(d / "in.bin", "wb") as f:
        f.write(np.int64(x.size).tobytes() + x.tobytes())
    subprocess.run([str(d / "cvt"), str(d / "in.bin"), str(d / "out.bin")], check=True, timeout=300)
    raw = (d / "out.bin").read_bytes()
    hf = np.frombuffer(raw, np.float32, 65536)
    bf = np.frombuffer(raw, np.float32, 65536, 4 * 65536)
    hx = np.frombuffer(raw, np.uint16, x.size, 8 * 65536)
    bx = np.frombuffer(raw, np.uint16, x.size, 8 * 65536 + 2 * x.size)
    return r.stderr, x, (hf, bf, hx, bx)


def test_conversions_vectorise(converted):
    report = converted[0]
    lines = {int(m) for m in re.findall(r"cvt\.cpp:(\d+):\d+: optimized: loop vectorized", report)}
    src = _SRC.lstrip("\n").splitlines()
    loops = {i + 1 for i, ln in enumerate(src) if ln.startswith(("void h2f", "void f2h", "void b2f", "void f2b"))}
    assert len(loops) == 4 and loops <= lines, (sorted(loops), report[-3000:])


def test_float16_exact(converted):
    _, x, (hf, _, hx, _) = converted
    want = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    same = (hf.view(np.uint32) == want.view(np.uint32)) | (np.isnan(hf) & np.isnan(want))
    assert same.all(), np.flatnonzero(~same)[:10]
    with np.errstate(over="ignore", invalid="ignore"):  # large floats become inf, as they should
        ref = x.astype(np.float16).view(np.uint16)     # numpy rounds to nearest even
    nan = np.isnan(x)
    assert (hx[~nan] == ref[~nan]).all(), x[~nan][hx[~nan] != ref[~nan]][:10]
    assert np.isnan(hx[nan].view(np.float16)).all()


def test_bfloat16_exact(converted):
    _, x, (_, bf, _, bx) = converted
    want = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
    assert ((bf.view(np.uint32) == want.view(np.uint32)) | np.isnan(want)).all()
    with np.errstate(over="ignore", invalid="ignore"):
        ref = x.astype(DType.bfloat16.np).view(np.uint16)  # ml_dtypes' bfloat16: round to nearest even
    nan = np.isnan(x)
    assert (bx[~nan] == ref[~nan]).all()
    assert np.isnan((bx[nan].astype(np.uint32) << 16).view(np.float32)).all()
