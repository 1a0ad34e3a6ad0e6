"""`aitgen` command line: compile | run | bench | inspect | debug.

    aitgen compile model.py:build --target cpu --workdir build/m     # or zoo:NAME
    aitgen compile zoo:bert_base --config layers=2 --config seq=1:128 --workdir build/b
    aitgen compile model.onnx --target cpu --workdir build/m --dim batch=1:32
    aitgen run build/m --input x=x.npy --out results/                 # prints names/shapes, writes .npy
    aitgen bench build/m --iters 50 --json bench.json                 # random inputs at max shapes
    aitgen inspect model.py:build --summary
    aitgen inspect build/m                                            # graph.html, memory.png, per-pass table
    aitgen debug model.py:build --target cpu --workdir build/dbg      # first tensor that diverges

A dynamic dim is NAME=LB:UB in --dim and --config alike. Every error is one line on stderr,
`aitgen: <ErrorType>: <message>`; exit statuses are listed in app.py.
"""
from .app import main
from .commands import is_build_dir
from .parser import build_parser
from .sources import load_outputs
from .values import output_files, parse_config, parse_dims

__all__ = ["main", "build_parser", "load_outputs", "parse_config", "parse_dims", "output_files", "is_build_dir"]
