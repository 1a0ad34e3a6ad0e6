"""The argument parser of `aitgen`; its own errors are UsageErrors, printed on one line by main."""
from __future__ import annotations

import argparse

from ..errors import UsageError
from . import targets
from .bench import cmd_bench
from .commands import cmd_compile, cmd_debug, cmd_inspect, cmd_run

_CONFIG_HELP = ("a zoo model's configuration, repeatable: layers=2, hidden=64, seq=1:128 (a dynamic dim, "
                "as --dim writes it; 1..128 works too); see aitgen.models")
_DIM_HELP = ("bounds of an ONNX model's symbolic dim, repeatable: batch=1:32 (default 1:64 for every "
             "dim not named; a name the model lacks is an error)")
_MODEL_HELP = "module.py:function (returning the outputs dict), zoo:NAME or model.onnx"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are raised, not printed with the usage and exited on: main
    prints them as one line, like every other error."""

    def error(self, message: str):
        raise UsageError(f"{message} (see {self.prog} --help)")


def version() -> str:
    """The installed distribution's version, else the package's own (a source tree on sys.path)."""
    try:
        from importlib.metadata import PackageNotFoundError, version as dist_version
        return dist_version("aitgen")
    except PackageNotFoundError:
        from .. import __version__
        return __version__


def _target(text: str) -> str:
    try:
        return targets.check_target(text)
    except UsageError as e:
        # argparse reports an ArgumentTypeError's message as it is, prefixed with the option.
        raise argparse.ArgumentTypeError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="aitgen", description="aitgen: a deep-learning inference compiler",
               epilog="Errors print one line; set AITGEN_DEBUG=1 for the full message and traceback.")
    p.add_argument("--version", action="version", version=f"aitgen {version()}")
    sub = p.add_subparsers(dest="command", required=True)
    ins = sub.add_parser("inspect", help="print a model's graph after the pass pipeline, with op counts; "
                                         "or, given a build directory, draw it (graph.html, memory.png)")
    ins.add_argument("target", help=f"{_MODEL_HELP}, or a directory `aitgen compile` built")
    ins.add_argument("--no-fusion", action="store_true", help="skip the fusion passes")
    ins.add_argument("--summary", action="store_true", help="op counts only, no graph text")
    ins.add_argument("--verify", action="store_true", help="verify the IR after every pass")
    ins.add_argument("--dump-passes", metavar="DIR", help="write NN-<pass>.txt after every pass")
    ins.add_argument("--config", action="append", metavar="KEY=VALUE", help=_CONFIG_HELP)
    ins.add_argument("--dim", action="append", metavar="NAME=LB:UB", help=_DIM_HELP)
    ins.set_defaults(func=cmd_inspect)

    comp = sub.add_parser("compile", help="compile a model into a workdir (shared library + weights + report)")
    comp.add_argument("model", help=_MODEL_HELP)
    comp.add_argument("--target", default="auto", type=_target,
                      help=f"{targets.describe()}; default: auto, which is cuda where an NVIDIA GPU answers, "
                           "rocm where an AMD GPU does, else cpu")
    comp.add_argument("--workdir", required=True, help="directory to build into")
    comp.add_argument("--arch", help="CUDA: sm_80 or sm_90a (sm_90 means sm_90a); ROCm: gfx90a or gfx940 "
                                     "(gfx942 where hipcc takes it); default: the GPU present, else sm_80 / "
                                     "gfx90a. No GPU is needed to build")
    comp.add_argument("--precision", choices=["float16", "bfloat16", "int8"],
                      help="compute in float16/bfloat16 (inputs and outputs keep their dtypes); int8 "
                           "(CPU): GEMMs/convs quantised after calibration on --calibration")
    comp.add_argument("--calibration", nargs="+", action="extend", metavar="FEED.npz",
                      help="with --precision int8: the calibration feeds, one .npz per feed "
                           "(numpy.savez(path, **inputs))")
    comp.add_argument("--calibration-method", choices=["minmax", "percentile", "entropy"], default="minmax",
                      help="with --precision int8: how activation ranges are chosen (default minmax)")
    comp.add_argument("--precision-policy", choices=["mixed", "uniform"],
                      help="mixed: only GEMM/conv/attention operands narrow (torch.autocast's policy; the CPU's "
                           "default for bfloat16); uniform: every float tensor. Default: the backend's")
    comp.add_argument("--fold-qdq", action="store_true",
                      help="model.onnx on the CPU: QuantizeLinear/DequantizeLinear pairs around MatMul/Gemm/Conv "
                           "(onnxruntime's QDQ format) become int8 kernels where that is exact")
    comp.add_argument("--no-fusion", action="store_true", help="skip the fusion passes")
    comp.add_argument("--no-winograd", action="store_true",
                      help="CPU: float32 3x3 stride-1 convs direct, not as Winograd F(4x4, 3x3) (which is about "
                           "twice as fast and rounds at about 1e-5 of the output's magnitude)")
    comp.add_argument("--config", action="append", metavar="KEY=VALUE", help=_CONFIG_HELP)
    comp.add_argument("--dim", action="append", metavar="NAME=LB:UB", help=_DIM_HELP)
    comp.set_defaults(func=cmd_compile)

    dbg = sub.add_parser("debug", help="numerical bisect: build with every intermediate exposed and name the "
                                       "first tensor that differs from the oracle (exit 1 if one does)")
    dbg.add_argument("model", help=_MODEL_HELP)
    dbg.add_argument("--target", default="cpu", type=_target, help=f"{targets.describe()}; default: cpu")
    dbg.add_argument("--workdir", required=True, help="directory to build into")
    dbg.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance (default 1e-4)")
    dbg.add_argument("--atol", type=float, default=1e-5,
                     help="absolute tolerance, times max(1, the largest |value| of the tensor) (default 1e-5)")
    dbg.add_argument("--no-fusion", action="store_true", help="skip the fusion passes")
    dbg.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                     help="use these inputs (all of them) instead of random ones")
    dbg.add_argument("--all", action="store_true", help="print every tensor, not only 40 around the first divergence")
    dbg.add_argument("--config", action="append", metavar="KEY=VALUE", help=_CONFIG_HELP)
    dbg.add_argument("--dim", action="append", metavar="NAME=LB:UB", help=_DIM_HELP)
    dbg.set_defaults(func=cmd_debug)

    run = sub.add_parser("run", help="run a built model on .npy inputs")
    run.add_argument("workdir", help="a directory compile built")
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="one per input")
    run.add_argument("--out", "--output-dir", dest="out", metavar="DIR",
                     help="write each output to DIR/<name>.npy (characters other than A-Z a-z 0-9 _ . - become _; "
                          "a name that then collides with another output's gets a short hash appended; the lines "
                          "printed give each output's file)")
    run.add_argument("--mock-device", action="store_true",
                     help="run a CUDA build's host side with no GPU on the mock device: every kernel launch is "
                          "recorded and checked (pointers, alignment, launch limits, graph capture, stream order), "
                          "none executes; inputs not given are zeros at their largest shapes")
    run.add_argument("--threads", type=int, metavar="N",
                     help="CPU models: OpenMP threads per run (default: OMP_NUM_THREADS, else every core)")
    run.add_argument("--cuda-graph", action="store_true",
                     help="with --mock-device: run three times with CUDA graphs on (eager, capture, replay)")
    run.set_defaults(func=cmd_run)

    bench = sub.add_parser("bench", help="time a built model on random inputs at their max shapes: latency "
                                         "percentiles, spread, throughput")
    bench.add_argument("workdir", help="a directory compile built")
    bench.add_argument("--iters", type=int, default=50, help="timed runs (default 50)")
    bench.add_argument("--warmup", type=int, default=5, help="untimed runs first (default 5)")
    bench.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                       help="use this input instead of a random one")
    bench.add_argument("--batch", type=int, metavar="N",
                       help="inferences per run, for the throughput (default: the size of the leading dim when "
                            "every input's first dim is the same dynamic dim, else 1)")
    bench.add_argument("--threads", type=int, metavar="N",
                       help="CPU models: OpenMP threads per run (default: OMP_NUM_THREADS, else every core)")
    bench.add_argument("--json", nargs="?", const="-", metavar="FILE",
                       help="also write every figure, the input shapes and the CPU's ISA as JSON to FILE; "
                            "--json alone prints only the JSON, on stdout")
    bench.set_defaults(func=cmd_bench)

    # `aitgen serve` (Ray Serve / Triton): its parser imports neither engine; the command does.
    from ..serving.cli import add_parser as add_serve
    add_serve(sub)
    return p
