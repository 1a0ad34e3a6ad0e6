"""aitgen/cpu_convert.h's bulk conversions against the element-wise ones of cpu_kernel.h, built for
AVX2 (F16C) and for AVX-512 and run on this machine where its CPU has the instructions: every one of
the 65536 float16 and bfloat16 bit patterns to float32 (bit-exact; a NaN stays a NaN), and float32
values to both types (bit-exact for bfloat16; for float16 every non-NaN value, NaN staying NaN):
random ones over float16's whole range and beyond, exact halfway cases (round to nearest even),
subnormals, signed zeros, infinities, NaNs. Lengths leave a remainder after the vector loops."""
from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest
from cpu_cases import cpu_flags

ROOT = Path(__file__).resolve().parents[3]

PROBE = r"""
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "aitgen/cpu_convert.h"

static uint32_t bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static float from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

int main() {
  long bad = 0;
  const int64_t n = 65536 - 3;  // not a multiple of 8 or 16: the tails run too
  std::vector<ait::half> h(65536);
  std::vector<ait::bf16> b(65536);
  for (int i = 0; i < 65536; ++i) h[i].bits = b[i].bits = static_cast<uint16_t>(i);
  std::vector<float> fh(n), fb(n);
  ait::to_f32_block(h.data(), fh.data(), n);
  ait::to_f32_block(b.data(), fb.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const float eh = ait::to_f32(h[i]), eb = ait::to_f32(b[i]);
    if (std::isnan(eh) ? !std::isnan(fh[i]) : bits(eh) != bits(fh[i])) ++bad;
    if (bits(eb) != bits(fb[i])) ++bad;
  }
  std::vector<float> v;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mag(-30.0f, 20.0f);
  for (int i = 0; i < 200000; ++i) v.push_back((rng() & 1 ? -1.0f : 1.0f) * std::exp2(mag(rng)));
  for (int i = 0; i < 65536; ++i) {  // halfway between neighbouring float16 and bfloat16 values
    const float a = ait::to_f32(h[i]);
    if (std::isfinite(a)) v.push_back(std::nextafter(a, INFINITY)), v.push_back(a);
    v.push_back(from_bits((static_cast<uint32_t>(i) << 16) | 0x8000u));
    v.push_back(from_bits((static_cast<uint32_t>(i) << 16) | 0x7fffu));
  }
  for (float s : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 65504.0f, 65520.0f, 65519.99f, 5.96e-8f,
                  2.98e-8f, 1e-45f, 3.4e38f, from_bits(0x7f800001u), from_bits(0xffc00001u)})
    v.push_back(s);
  v.push_back(1.0f);  // odd length
  const int64_t m = static_cast<int64_t>(v.size());
  std::vector<ait::half> oh(m);
  std::vector<ait::bf16> ob(m);
  ait::from_f32_block(v.data(), oh.data(), m);
  ait::from_f32_block(v.data(), ob.data(), m);
  for (int64_t i = 0; i < m; ++i) {
    const ait::half eh = ait::from_f32<ait::half>(v[i]);
    const ait::bf16 eb = ait::from_f32<ait::bf16>(v[i]);
    if (std::isnan(v[i]) ? !std::isnan(ait::to_f32(oh[i])) : eh.bits != oh[i].bits) ++bad;
    if (eb.bits != ob[i].bits) ++bad;
  }
  std::printf("checked %ld + %ld, mismatches %ld\n", static_cast<long>(n), static_cast<long>(m), bad);
  return bad == 0 ? 0 : 1;
}
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or not shutil.which("g++"),
                    reason="an x86-64 check that needs g++")
@pytest.mark.parametrize("march,needs", [("haswell", {"avx2", "f16c", "fma"}),
                                         ("skylake-avx512", {"avx512f", "avx512bw", "avx512vl", "avx512dq"})])
def test_bulk_conversions_match_the_elementwise_ones(tmp_path, march, needs):
    if not needs <= cpu_flags():
        pytest.skip(f"this CPU lacks {sorted(needs - cpu_flags())} to run code built for {march}")
    src = tmp_path / "probe.cpp"
    src.write_text(PROBE)
    exe = tmp_path / "probe"
    subprocess.run(["g++", "-std=c++17", "-O3", f"-march={march}", "-fno-trapping-math",
                    f"-I{ROOT / 'backends/cpu/include'}", f"-I{ROOT / 'backends/common/include'}",
                    str(src), "-o", str(exe)], check=True, capture_output=True, timeout=300)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "mismatches 0" in r.stdout, (march, r.stdout, r.stderr)
