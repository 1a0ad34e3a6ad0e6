"""`aitgen bench DIR`: latency percentiles, spread and throughput of a built model, as text or JSON.

Throughput is inferences per second = batch * 1000 / mean_ms. The batch counted is --batch, else
the size of the inputs' shared leading dim when every input's first dim is the same dynamic dim
(it runs at its upper bound, or at the size of a given input), else 1."""
from __future__ import annotations

import ctypes
import json
import os
import platform
import sys
from typing import Optional

from ..errors import UsageError
from .values import parse_inputs, threads_option

# oneDNN's dnnl_cpu_isa_t (include/oneapi/dnnl/dnnl_types.h, oneDNN 3.2)
_ONEDNN_ISA = {0x0: "default", 0x1: "sse41", 0x3: "avx", 0x7: "avx2", 0xf: "avx2_vnni", 0x1f: "avx2_vnni_2",
               0x27: "avx512_core", 0x67: "avx512_core_vnni", 0xe7: "avx512_core_bf16",
               0x1ef: "avx512_core_fp16", 0xfef: "avx512_core_amx", 0x1fef: "avx512_core_amx_fp16"}
# The /proc/cpuinfo flags that decide which kernels oneDNN and the compiler use.
_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
          "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16")


def cmd_bench(args) -> int:
    from ..debug import random_inputs
    from ..runtime.model import Model

    if args.iters < 1:
        raise UsageError(f"--iters must be at least 1, got {args.iters}")
    if args.warmup < 0:
        raise UsageError(f"--warmup must be at least 0, got {args.warmup}")
    if args.batch is not None and args.batch < 1:
        raise UsageError(f"--batch must be at least 1, got {args.batch}")
    given = parse_inputs(args.input)
    with Model.load(args.workdir, **threads_option(args)) as model:
        feeds = {**random_inputs(model.input_specs), **given}
        stats = model.benchmark(feeds, iters=args.iters, warmup=args.warmup)
        batch = args.batch if args.batch is not None else leading_batch(model.meta, feeds)
        isa = cpu_isa()
        meta = model.meta
    throughput = batch * 1000.0 / stats["mean_ms"] if stats["mean_ms"] > 0 else float("inf")
    result = {"workdir": os.path.abspath(args.workdir), "target": meta.get("target"), "arch": meta.get("arch"),
              "iters": stats["iters"], "warmup": args.warmup, "batch": batch,
              "inputs": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in feeds.items()},
              **{k: stats[k] for k in ("median_ms", "p90_ms", "p99_ms", "min_ms", "max_ms", "mean_ms", "stdev_ms")},
              "throughput_per_s": throughput, "cpu": isa}
    if args.json == "-":
        print(json.dumps(result, indent=1))
        return 0
    shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in feeds.items())
    print(f"inputs: {shapes}")
    print(f"median (p50) {stats['median_ms']:.3f} ms, p90 {stats['p90_ms']:.3f} ms, p99 {stats['p99_ms']:.3f} ms, "
          f"min {stats['min_ms']:.3f} ms, max {stats['max_ms']:.3f} ms over {stats['iters']} runs")
    print(f"mean {stats['mean_ms']:.3f} ms, stdev {stats['stdev_ms']:.3f} ms; throughput "
          f"{throughput:,.1f} inferences/s (batch {batch})")
    if stats["mean_ms"] > 2 * stats["median_ms"]:
        print(f"note: a few slow runs (max {stats['max_ms']:.3f} ms) pull the mean, and the throughput, far from "
              "the median: another process may share the cores; rerun with more --warmup/--iters")
    if args.json:
        try:
            with open(args.json, "w") as f:
                f.write(json.dumps(result, indent=1) + "\n")
        except OSError as e:
            raise UsageError(f"--json {args.json}: cannot write it ({e.strerror or e})") from None
        print(f"wrote {args.json}")
    return 0


def leading_batch(meta: dict, feeds: dict) -> int:
    """The size of the leading dim every input shares when it is dynamic (the same IntVar name in
    model.json), else 1."""
    firsts = {(t.get("shape") or [None])[0] for t in meta.get("inputs", {}).values()}
    if len(firsts) != 1:
        return 1
    (dim,) = firsts
    if dim is None or str(dim).isdigit():
        return 1
    sizes = {v.shape[0] for v in feeds.values() if getattr(v, "ndim", 0) > 0}
    return sizes.pop() if len(sizes) == 1 else 1


def cpu_isa() -> dict:
    """What the CPU offers: the model name, the vector/matrix flags that matter, and the ISA oneDNN
    runs at when a CPU model has it loaded (looked up without loading it)."""
    info: dict = {"machine": platform.machine(), "model": None, "flags": [], "onednn_isa": None,
                  "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read(1 << 20)
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and info["model"] is None:
            info["model"] = value.strip()
        elif key == "flags" and not info["flags"]:
            have = set(value.split())
            info["flags"] = [f for f in _FLAGS if f in have]
    info["onednn_isa"] = _onednn_isa()
    return info


def _onednn_isa() -> Optional[str]:
    mode = getattr(os, "RTLD_NOLOAD", None)
    if mode is None or not sys.platform.startswith("linux"):
        return None
    try:
        lib = ctypes.CDLL("libdnnl.so.3", mode=mode)   # only if the model's library loaded it
        fn = lib.dnnl_get_effective_cpu_isa
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    code = fn()
    return _ONEDNN_ISA.get(code, hex(code))
