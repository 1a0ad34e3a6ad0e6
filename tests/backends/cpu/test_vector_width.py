"""cpu_reduce.h's float32 row helpers use GCC vectors of the target's width. GCC 12 lowers the
compares and selects of vectors wider than the target one lane at a time (16-lane vectors on AVX2
made ResNet-50's max pool 38x slower, 3.8 ms against 0.1): compiled for AVX2 and for AVX-512, the
hot loops of the NaN-propagating max pool, the row max and the softmax exp must stay in vector
instructions. A compile-only check (g++ -S), on any x86-64 machine with g++."""
from __future__ import annotations

import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SRC = r"""
#include "aitgen/cpu_reduce.h"
void probe_pool_max(float* y, const float* x, const int64_t* off, int ntaps, int64_t n) {
  ait::pool_max<float, float>(y, x, off, ntaps, n);
}
float probe_row_max(const float* x, int64_t n) { return ait::row_max(x, n); }
double probe_exp_sum(const float* x, int64_t n, float m, float* e) { return ait::row_exp_sum(x, n, m, e); }
"""


def _functions(asm: str) -> dict[str, str]:
    out, name, body = {}, None, []
    for line in asm.splitlines():
        m = re.match(r"^(_Z\w*probe_\w+):", line)
        if m:
            name, body = m.group(1), []
        elif name and ".cfi_endproc" in line:
            out[re.search(r"probe_\w+?(?=P|$)", name).group(0)] = "\n".join(body)
            name = None
        elif name:
            body.append(line)
    return out


def _compile(tmp_path, text: str, march: str) -> dict[str, str]:
    """The probes' assembly per function, compiled as the CPU backend compiles kernels (-O3, no
    trapping math) for `march`."""
    src = tmp_path / "probe.cpp"
    src.write_text(text)
    asm = tmp_path / "probe.s"
    subprocess.run(["g++", "-std=c++17", "-O3", f"-march={march}", "-fno-trapping-math", "-S",
                    f"-I{ROOT / 'backends/cpu/include'}", f"-I{ROOT / 'backends/common/include'}",
                    str(src), "-o", str(asm)], check=True, capture_output=True, timeout=300)
    return _functions(asm.read_text())


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or not shutil.which("g++"),
                    reason="an x86-64 check that needs g++")
@pytest.mark.parametrize("march,reg", [("haswell", "ymm"), ("skylake-avx512", "zmm")])
def test_row_helpers_stay_vectorised(tmp_path, march, reg):
    funcs = _compile(tmp_path, SRC, march)
    assert set(funcs) == {"probe_pool_max", "probe_row_max", "probe_exp_sum"}, sorted(funcs)
    for name, body in funcs.items():
        # lanes moved one at a time (what GCC's lowering of a too-wide select emits) and no vector
        # compare/select at all are both the regression; the old 16-lane header had 12-28 lane moves
        # in the max loops and no vector select in the exp-sum on haswell, 0 and 2-44 now
        lane_moves = len(re.findall(r"\b(vinsertps|vextractps|vpinsrd|vpextrd|vunpcklps|vmovlhps)\b", body))
        selects = len(re.findall(r"\b(vmaxps|vblendvps|vcmp\w*ps|vpblendvb|vandn?ps)\b", body))
        vector = len(re.findall(rf"%{reg}\d+", body))
        assert lane_moves == 0 and selects >= 2 and vector >= 4, (name, march, lane_moves, selects, vector)


SRC16 = r"""
#include "aitgen/cpu_reduce.h"
using ait::half;
using ait::bf16;
void probe_max_h(half* y, const half* x, const int64_t* off, int t, int64_t n) { ait::pool_max<float, half>(y, x, off, t, n); }
void probe_max_b(bf16* y, const bf16* x, const int64_t* off, int t, int64_t n) { ait::pool_max<float, bf16>(y, x, off, t, n); }
void probe_avg_h(half* y, const half* x, const int64_t* off, int t, int64_t n) { ait::pool_avg<half>(y, x, off, t, n, 9.0f); }
void probe_avg_b(bf16* y, const bf16* x, const int64_t* off, int t, int64_t n) { ait::pool_avg<bf16>(y, x, off, t, n, 9.0f); }
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or not shutil.which("g++"),
                    reason="an x86-64 check that needs g++")
@pytest.mark.parametrize("march,reg", [("haswell", "ymm"), ("skylake-avx512", "zmm")])
def test_16bit_helpers_convert_in_bulk(tmp_path, march, reg):
    """float16 and bfloat16 pools convert whole vectors (cpu_reduce.h to_f32_block /
    from_f32_block): F16C's vcvtph2ps / vcvtps2ph for float16, a widening move and a shift for
    bfloat16, each at the target's width. The element-wise forms they replaced ran a float16
    softmax 13x and an average pool 16x slower than float32."""
    funcs = _compile(tmp_path, SRC16, march)
    assert set(funcs) == {"probe_max_h", "probe_max_b", "probe_avg_h", "probe_avg_b"}, sorted(funcs)
    for name, body in funcs.items():
        if name.endswith("_h"):
            assert re.search(rf"vcvtph2ps\s+[^\n]*%{reg}\d+", body), (name, march, "no vector vcvtph2ps")
            assert re.search(r"vcvtps2ph\b", body), (name, march, "no vcvtps2ph")
        else:
            assert re.search(rf"vpmovzxwd\s+[^\n]*%{reg}\d+", body), (name, march, "no widening load")
            assert re.search(rf"vpslld\s+\$16,[^\n]*%{reg}\d+", body), (name, march, "no shift by 16")
