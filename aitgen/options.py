"""CompileOptions: one frozen object passed down the pipeline. Environment variables are read at
the edges (CLI, compile_model), never inside passes."""
from __future__ import annotations

import dataclasses
from typing import Optional


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    target: str = "cpu"
    fusion: bool = True
    precision: Optional[str] = None      # None keeps the graph's dtypes; "float16" / "bfloat16" later
    arch: Optional[str] = None
    verify: bool = False                  # verify the graph after every pass (tests and debug mode)
    dump_passes: Optional[str] = None     # folder for NN-<pass>.txt dumps
    fold_constants: bool = True
    constant_fold_max_bytes: int = 1 << 30  # a folded constant larger than this stays a computation

    def replace(self, **kw) -> "CompileOptions":
        return dataclasses.replace(self, **kw)
