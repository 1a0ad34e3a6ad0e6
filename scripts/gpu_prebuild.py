"""Prebuild the GPU check's objects on a machine without a GPU, to carry them to the lent one.

The lent GPU machine has 15 minutes in all; nvcc on CUTLASS sm_90a units takes about a minute and
4 GB per unit. So the objects its first steps need are compiled here (compile_model(load=False),
the same graphs and options the steps build, so the same sources) into a fresh object cache, which
is packed into .gpu_carry/cache.tar.xz. Cache keys and recorded headers name no path of this machine
(aitgen/codegen/build.py), so the other machine's builds hit them wherever its checkout and CUTLASS
sit. scripts/gpu_check.sh unpacks the archive into its AITGEN_CACHE_DIR when it is there.

    PYTHONPATH=. python scripts/gpu_prebuild.py                 # sm_90a (an H100/H200), budget 40 MiB
    python scripts/gpu_prebuild.py --arch sm_80 --only smoke    # one set
    python scripts/gpu_prebuild.py --only tier --out .gpu_carry/tier     # the rest of the gpu tier
    # then: run(carry=[".whl", ".gpu_carry"], command="bash scripts/gpu_check.sh")

Sets, in order, until the packed archive would pass --budget-mib (the device tool carries 64 MiB in
all, the CUTLASS wheel included): smoke (test_gpu_smoke.py's build), bench (gpu_vs_torch.py's
bert_base s128 and resnet50, float16), bandwidth (gpu_bandwidth.py), sweep (gpu_gemm_sweep.py's
default shapes), streams (gpu_streams.py's two builds), catalogue (the gpu tier's op-catalogue
builds: most of its units; 8 minutes on 2 cores, 383 objects, 0.8 MiB packed), and, only when named,
tier (every build of the gpu tier, run here in prebuild mode: about 25 minutes on 2 cores). Each
run packs one archive: give later ones their own --out (.gpu_carry/<set>/), gpu_check.sh unpacks
them all. A set that does not fit is left out whole (its objects are removed from the archive), and
the report says so. Writes .gpu_carry/prebuild.json: per set, seconds, objects, bytes.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETS = ("smoke", "bench", "bandwidth", "sweep", "streams", "catalogue", "tier")


def build_smoke(arch: str, work: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "backends" / "cuda"))
    import aitgen as ag
    from test_gpu_smoke import smoke_graph   # the graph the smoke step builds, to the byte
    outs, _, _ = smoke_graph()
    ag.compile_model(outs, target="cuda", arch=arch, workdir=work / "smoke", fusion=False, load=False)


def build_bench(arch: str, work: Path) -> None:
    import aitgen as ag
    from aitgen import models
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_vs_torch import CONFIGS
    for name in ("bert_base", "resnet50"):
        _, _, outputs = models.build(name, **CONFIGS[name]["full"])
        ag.compile_model(outputs, target="cuda", arch=arch, workdir=work / name, precision="float16", load=False)


def build_bandwidth(arch: str, work: Path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_bandwidth
    for expr in ("gelu", "affine"):
        gpu_bandwidth.build_model(work / "bandwidth", arch, expr=expr)


def build_sweep(arch: str, work: Path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_gemm_sweep
    args = gpu_gemm_sweep.parse_args([])
    args.workdir = str(work / "sweep")
    for name in args.shapes:
        m, n, k = gpu_gemm_sweep.SHAPES[name]
        for dt in args.dtypes:
            for rep in (1, args.repeat):
                gpu_gemm_sweep.build(name, dt, m, n, k, rep, args, arch=arch)


def build_streams(arch: str, work: Path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_streams
    args = gpu_streams.parse_args([])
    args.workdir = str(work / "streams")
    for n in (1, args.streams):
        gpu_streams.build(args, n, arch=arch)


def build_catalogue(arch: str, work: Path) -> None:
    """The gpu tier's op-catalogue builds (test_gpu_ops.py: every case, per dtype and fusion
    setting): the bulk of the tier's translation units."""
    sys.path.insert(0, str(ROOT / "tests" / "backends" / "cuda"))
    import aitgen as ag
    from aitgen.codegen.lower import supported_kinds
    from op_catalogue import build_all
    for dtype in ("float32", "float16", "bfloat16"):
        for fusion in (False, True):
            outs, _, _ = build_all(dtype, fusion, supported_kinds("cuda"))
            ag.compile_model(outs, target="cuda", arch=arch, workdir=work / f"ops_{dtype}_{int(fusion)}", fusion=fusion,
                             load=False)


def build_tier(arch: str, work: Path) -> None:
    """Every build of the gpu tier (tests/backends/cuda -m gpu), the catalogue's included: the tier
    runs here in prebuild mode (AITGEN_GPU_PREBUILD, tests/backends/cuda/conftest.py), where each
    build compiles and its test skips instead of loading. Tests that touch a GPU before they build
    fail here and are only counted."""
    import subprocess
    env = dict(os.environ, AITGEN_GPU_PREBUILD=arch, AITGEN_RUN_CUDA_COMPILE="0")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-n", "0",
                           "--basetemp", str(work / "tier"), str(ROOT / "tests" / "backends" / "cuda")],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    print("\n".join(proc.stdout.splitlines()[-3:]), flush=True)


BUILDERS = {"smoke": build_smoke, "bench": build_bench, "bandwidth": build_bandwidth, "sweep": build_sweep,
            "streams": build_streams, "catalogue": build_catalogue, "tier": build_tier}


def entries(cache: Path) -> set[Path]:
    return {p for p in cache.rglob("*.entry")}


def pack(cache: Path, members: list[Path], dest: Path) -> int:
    """An xz tar of `members` (paths under `cache`, relative names); returns its size."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", preset=6) as tar:
        for p in sorted(members):
            tar.add(p, arcname=str(p.relative_to(cache)), recursive=False)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(buf.getvalue())
    return len(buf.getvalue())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--only", nargs="*", choices=SETS, default=list(SETS[:-1]))  # tier: opt-in (20 min)
    ap.add_argument("--budget-mib", type=float, default=40.0)
    ap.add_argument("--out", default=str(ROOT / ".gpu_carry"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = Path(tempfile.mkdtemp(prefix="aitgen_prebuild_cache_"))
    os.environ["AITGEN_CACHE_DIR"] = str(cache)   # fresh: only what these sets compile
    # Keys by nvcc's release ("release 13.0"), not its patch build, which differs between this image
    # and the GPU machine's; gpu_check.sh sets the same (codegen/deps.py tool_key).
    os.environ["AITGEN_CACHE_TOOL_MATCH"] = "release"
    work = Path(tempfile.mkdtemp(prefix="aitgen_prebuild_work_"))
    kept: list[Path] = []
    report: dict = {"arch": args.arch, "budget_mib": args.budget_mib, "sets": {}}
    for name in args.only:
        before = entries(cache)
        t0 = time.perf_counter()
        rec: dict = {}
        try:
            BUILDERS[name](args.arch, work)
        except Exception as e:   # one set failing to build leaves the others
            rec["error"] = f"{type(e).__name__}: {str(e)[:500]}"
        new = sorted(entries(cache) - before)
        rec.update(seconds=round(time.perf_counter() - t0, 1), objects=len(new),
                   bytes=sum(p.stat().st_size for p in new))
        size = pack(cache, kept + new, out / "cache.tar.xz")
        if size > args.budget_mib * 2**20:
            rec["carried"] = False
            rec["why"] = f"the archive would be {size / 2**20:.1f} MiB, over the {args.budget_mib} MiB budget"
            pack(cache, kept, out / "cache.tar.xz")
        else:
            rec["carried"] = True
            kept += new
            rec["archive_mib"] = round(size / 2**20, 2)
        report["sets"][name] = rec
        print(f"prebuild {name}: {json.dumps(rec)}", flush=True)
    report["archive_bytes"] = (out / "cache.tar.xz").stat().st_size
    report["objects"] = len(kept)
    (out / "prebuild.json").write_text(json.dumps(report, indent=1))
    print(f"prebuild: {len(kept)} objects, {report['archive_bytes'] / 2**20:.1f} MiB in {out / 'cache.tar.xz'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
