#!/usr/bin/env python
"""Where aitgen's CPU time goes, next to where onnxruntime's goes, for one zoo model.

    python benchmarks/profile_cpu.py bert_base                 # full size (seq 128, batch 1)
    python benchmarks/profile_cpu.py resnet50 --small --iters 5
    python benchmarks/profile_cpu.py mobilenet_v2 --imported --top 60   # also aitgen's ONNX import

aitgen: the built model's run sequence (<workdir>/obj/src/model.cpp) is rebuilt with a steady-clock
timer around every kernel call (the kernels' objects come from the build cache) and run --iters times;
the report gives milliseconds per run by template, by op and per call, and what is left outside the
kernels (the container, input checks, ctypes). onnxruntime: its own profiler (enable_profiling) on the
ONNX export of the torch twin, per run by op type and per node. Same weights, inputs and threads as
benchmarks/cpu_vs_peers.py; timers add a little, so the totals are a little above its medians.
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def timed_model_cpp(text: str) -> tuple[str, int]:
    """model.cpp with each `k_xxx(p, d);` call timed into ait_prof_ns[i], i = the call's index."""
    n = 0

    def wrap(m: re.Match) -> str:
        nonlocal n
        n += 1
        return (f"{m.group(1)}{{ const auto t0_ = std::chrono::steady_clock::now(); {m.group(2)}(p, d); "
                f"ait_prof_ns[{n - 1}] += std::chrono::duration<double, std::nano>("
                "std::chrono::steady_clock::now() - t0_).count(); }")

    body = re.sub(r"(\n[ \t]+)(k_[0-9a-f]+)\(p, d\);", wrap, text)
    head = ("#include <chrono>\n"
            f"static double ait_prof_ns[{max(n, 1)}] = {{}};\n"
            'extern "C" __attribute__((visibility("default"))) double* ait_profile_ns(void) { return ait_prof_ns; }\n')
    return head + body, n


def profile_aitgen(work: Path, feeds: dict, iters: int, top: int = 20) -> dict:
    import ctypes

    import numpy as np

    from aitgen.codegen import build as build_mod
    from aitgen.codegen.backend import load_backend
    from aitgen.runtime.model import Model

    report = json.loads((work / "report.json").read_text())
    meta = json.loads((work / "model.json").read_text())
    src = work / "obj" / "src"
    sources = []
    for f in sorted(src.glob("*.cpp")):
        text = f.read_text()
        if f.name == "model.cpp":
            text, n = timed_model_cpp(text)
            if n != len(report["kernels"]):
                raise RuntimeError(f"found {n} kernel calls in model.cpp, report.json lists {len(report['kernels'])}")
        sources.append(build_mod.Source(f.name, text))
    prof = work / "profile"
    prof.mkdir(exist_ok=True)
    backend = load_backend(meta["target"])
    # A loadable workdir of its own: the loader takes only a library named model_<16 hex>.so whose
    # sha256 model.json records, and a regular weights file (a copy, not a link).
    digest = hashlib.sha256("\0".join(s.name + s.text for s in sources).encode()).hexdigest()[:16]
    library = f"model_{digest}.so"
    build_mod.build(sources, prof / library, compiler=backend.compiler, flags=backend.compile_flags(),
                    link_flags=backend.link_flags(), workdir=prof / "obj", progress=False)
    for old in prof.glob("model_*.so"):
        if old.name != library:
            old.unlink()
    # Replace, never write through: an earlier version of this script left a symlink to the
    # workdir's weights here, and copying onto it fails (SameFileError) or would clobber them.
    (prof / "weights.safetensors").unlink(missing_ok=True)
    shutil.copyfile(work / "weights.safetensors", prof / "weights.safetensors")
    sha = hashlib.sha256((prof / library).read_bytes()).hexdigest()
    (prof / "model.json").write_text(json.dumps({**meta, "library": library, "library_sha256": sha}))

    with Model(prof) as model:
        model._lib.ait_profile_ns.restype = ctypes.POINTER(ctypes.c_double)
        ns = model._lib.ait_profile_ns()
        n = len(report["kernels"])
        for _ in range(3):
            model.run(feeds)
        for i in range(n):
            ns[i] = 0.0
        t0 = time.perf_counter()
        for _ in range(iters):
            model.run(feeds)
        run_ms = (time.perf_counter() - t0) * 1e3 / iters
        per_call = np.array([ns[i] for i in range(n)]) / 1e6 / iters
    calls = [{**k, "ms": float(ms)} for k, ms in zip(report["kernels"], per_call)]
    by_template, by_op = collections.Counter(), collections.Counter()
    count = collections.Counter()
    for c in calls:
        t = Path(c["template"]).name.replace(".cpp.j2", "")
        by_template[t] += c["ms"]
        count[t] += 1
        by_op[_op_family(c["op"])] += c["ms"]
    kernels_ms = float(per_call.sum())
    return {"run_ms": run_ms, "kernels_ms": kernels_ms, "outside_kernels_ms": run_ms - kernels_ms,
            "by_template": {k: {"ms": v, "calls": count[k]} for k, v in by_template.most_common()},
            "by_op": dict(by_op.most_common()),
            "top_calls": sorted(calls, key=lambda c: -c["ms"])[:top]}


def _op_family(op: str) -> str:
    """'encoder_layer_3_attention_output_dense' -> 'encoder_layer_N_attention_output_dense'."""
    return re.sub(r"\d+", "N", op)


def profile_ort(path: Path, feeds: dict, out_names: list, threads: int, iters: int, top: int = 20) -> dict:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.enable_profiling = True
    so.profile_file_prefix = str(path.with_suffix("")) + "_ortprof"
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    mine = {i.name: feeds[i.name] for i in sess.get_inputs()}
    for _ in range(3):
        sess.run(out_names, mine)
    t0 = time.perf_counter()
    for _ in range(iters):
        sess.run(out_names, mine)
    run_ms = (time.perf_counter() - t0) * 1e3 / iters
    events = json.loads(Path(sess.end_profiling()).read_text())
    nodes = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    runs = 3 + iters  # the profiler saw the warm-up too
    by_type, by_node = collections.Counter(), collections.Counter()
    for e in nodes:
        by_type[e["args"]["op_name"]] += e["dur"] / 1e3 / runs
        by_node[e["name"].removesuffix("_kernel_time")] += e["dur"] / 1e3 / runs
    return {"run_ms": run_ms, "kernels_ms": sum(by_type.values()), "by_op_type": dict(by_type.most_common()),
            "top_nodes": dict(by_node.most_common(top))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default="bert_base")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--workdir", type=Path, default=Path("build/profile_cpu"))
    ap.add_argument("--out", type=Path, default=None, help="also write the breakdown as JSON")
    ap.add_argument("--top", type=int, default=20, help="how many calls and nodes to list")
    ap.add_argument("--imported", action="store_true",
                    help="also profile aitgen's build of the ONNX export (what a user importing it gets)")
    args = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before anything loads OpenMP
    sys.path.insert(0, str(HERE))
    import cpu_vs_peers as bench

    import torch

    from aitgen import models
    from aitgen.models import torch_refs

    torch.set_num_threads(args.threads)
    cfg = bench.CONFIGS[args.model]["small" if args.small else "full"]
    module, inputs, outputs = models.build(args.model, **cfg)
    feeds = bench.make_feeds(inputs, cfg)
    work = args.workdir / args.model
    _, build, model = bench.aitgen_runner(outputs, feeds, work)
    model.close()
    twin = torch_refs.from_aitgen(args.model, module, cfg, torch.float32)
    peer_feeds = bench.nchw(feeds)
    onnx_path = work.parent / f"{args.model}.onnx"
    bench.onnx_export(twin, peer_feeds, list(outputs), onnx_path)
    del twin

    res = {"model": args.model, "config": cfg, "aitgen_build": build,
           "aitgen": profile_aitgen(work, feeds, args.iters, args.top),
           "onnxruntime": profile_ort(onnx_path, peer_feeds, list(outputs), args.threads, args.iters, args.top)}
    if args.imported:
        imported = work.parent / f"{args.model}_onnx"
        _, res["aitgen_onnx_build"], model = bench.aitgen_onnx_runner(onnx_path, peer_feeds, list(outputs), imported)
        model.close()
        res["aitgen_onnx"] = profile_aitgen(imported, peer_feeds, args.iters, args.top)
    o = res["onnxruntime"]
    for key in ("aitgen", "aitgen_onnx"):
        if key not in res:
            continue
        a = res[key]
        print(f"{args.model}: {key} {a['run_ms']:.2f} ms/run (kernels {a['kernels_ms']:.2f}, outside "
              f"{a['outside_kernels_ms']:.2f}); onnxruntime {o['run_ms']:.2f} ms/run (nodes {o['kernels_ms']:.2f})")
        print(f"\n{key} by template (ms/run, calls):")
        for k, v in a["by_template"].items():
            print(f"  {k:24s} {v['ms']:8.2f}  {v['calls']:4d}")
        print(f"\n{key} by op (layer numbers folded to N):")
        for k, v in list(a["by_op"].items())[:args.top]:
            print(f"  {k:60s} {v:8.2f}")
    print("\nonnxruntime by op type (ms/run):")
    for k, v in o["by_op_type"].items():
        print(f"  {k:24s} {v:8.2f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
