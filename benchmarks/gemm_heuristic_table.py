"""What the no-profile heuristic gives the GEMMs of bert_base (s128 b1) and resnet50 (b1, convs as
implicit GEMMs), fp16, on sm_90a (132 SMs) and sm_80 (108 SMs): config, work units (tiles x
split), waves, wave efficiency. No GPU: counts only. Writes benchmarks/results/gemm_heuristic.json.

    python benchmarks/gemm_heuristic_table.py [--out PATH]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from aitgen.ir.dtype import DType
from aitgen.profiler.candidates import conv_candidates, gemm_candidates
from aitgen.profiler.heuristic import SMS, rank

# (name, M, N, K): BERT-base at 128 tokens (QKV, attention out, FFN up, FFN down).
BERT = [("bert.qkv", 128, 2304, 768), ("bert.attn_out", 128, 768, 768), ("bert.ffn1", 128, 3072, 768),
        ("bert.ffn2", 128, 768, 3072)]


def resnet50_convs() -> list[tuple[str, int, int, int]]:
    """Implicit GEMMs of ResNet-50 b1 at 224: M = P*Q, N = out channels, K = C*R*S (unique ones)."""
    out = [("r50.stem7x7", 112 * 112, 64, 3 * 49)]
    c_in = 64
    for stage, (width, blocks, hw) in enumerate([(64, 3, 56), (128, 4, 28), (256, 6, 14), (512, 3, 7)]):
        for b in range(blocks):
            m = hw * hw
            out.append((f"r50.s{stage}b{b}.1x1a", m, width, c_in))
            out.append((f"r50.s{stage}b{b}.3x3", m, width, width * 9))
            out.append((f"r50.s{stage}b{b}.1x1b", m, width * 4, width))
            if b == 0:
                out.append((f"r50.s{stage}b{b}.down", m, width * 4, c_in))
            c_in = width * 4
    seen, uniq = set(), []
    for name, m, n, k in out:
        if (m, n, k) not in seen:
            seen.add((m, n, k))
            uniq.append((name, m, n, k))
    return uniq


def row(arch: str, name: str, m: int, n: int, k: int, conv: bool) -> dict:
    """The heuristic's choice for one shape (conv: the sm_80 implicit-GEMM kernel, no split-K)."""
    cands = conv_candidates(DType.float16) if conv else gemm_candidates(arch, DType.float16)
    ranked = rank(SMS[arch], cands, m, n, k, 1, streamk=not conv)
    e = ranked[0]
    reach = any(r.tiles >= SMS[arch] for r in ranked)
    return dict(shape=name, m=m, n=n, k=k, arch=arch, sms=SMS[arch], config=e.cfg.name, tiles=e.tiles,
                ctas=e.ctas, waves=e.waves, wave_eff=round(e.wave_eff, 3), any_fills=reach)


def table() -> list[dict]:
    rows = []
    for arch in ("sm_90a", "sm_80"):
        rows += [row(arch, *s, conv=False) for s in BERT]
        rows += [row(arch, *s, conv=True) for s in resnet50_convs()]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "gemm_heuristic.json"))
    args = ap.parse_args()
    rows = table()
    for r in rows:
        print(f"{r['arch']:7} {r['shape']:18} {r['m']:6}x{r['n']:5}x{r['k']:5} {r['config']:44} "
              f"tiles {r['tiles']:5} waves {r['waves']:3} eff {r['wave_eff']:.2f}")
    Path(args.out).write_text(json.dumps(dict(sms=SMS, rows=rows), indent=1) + "\n")


if __name__ == "__main__":
    main()
