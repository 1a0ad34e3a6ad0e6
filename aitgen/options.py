"""CompileOptions: one frozen object passed down the pipeline. Environment variables are read at
the edges (CLI, compile_model), never inside passes."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from .capabilities import Capabilities


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    target: str = "cpu"
    fusion: bool = True
    precision: Optional[str] = None      # None keeps the graph's dtypes; "float16" / "bfloat16": convert_precision
    # precision="int8" (passes/quantize_int8.py): the feeds (a tuple of dicts name -> array) the
    # activation scales are calibrated on, and how ("minmax" | "percentile" | "entropy"). Left out of
    # equality and hashing: arrays have neither, and the built graph already holds the scales.
    calibration: Optional[tuple] = dataclasses.field(default=None, compare=False, hash=False, repr=False)
    calibration_method: str = "minmax"
    # How `precision` applies (passes/convert_precision.py): "uniform" narrows every float tensor,
    # "mixed" only the matmul family's operands (torch.autocast's policy); None: the backend's
    # default (backend.yaml mixed_precision lists the precisions it runs mixed).
    precision_policy: Optional[str] = None
    arch: Optional[str] = None            # resolved by compile_model: "sm_80" / "sm_90a" on CUDA, None on the CPU
    verify: bool = False                  # verify the graph after every pass (tests and debug mode)
    dump_passes: Optional[str] = None     # folder for NN-<pass>.txt dumps
    fold_constants: bool = True
    constant_fold_max_bytes: int = 1 << 30  # a folded constant larger than this stays a computation
    allow_tf32: bool = False              # CUDA float32 GEMM/conv through TF32 tensor cores (else SIMT float32)
    # CPU float32 3x3 stride-1 convs as Winograd F(4x4, 3x3) where the shape makes it pay
    # (aitgen/cpu_winograd.h): about twice as fast, rounding about 1e-5 of the output's magnitude.
    winograd: bool = True
    cuda_graph: bool = False              # CUDA: capture the run sequence as a CUDA graph (per bound dims)
    profile: bool = False                 # CUDA/ROCm: time GEMM/conv configs on the GPU first (aitgen.profiler)
    streams: int = 1                      # CUDA: independent kernels on up to this many streams (codegen/streams.py)
    # What the target's kernels render (aitgen/capabilities.py): compile_model and
    # compiler.compile_options ask the backend; passes that create optional forms need it.
    caps: Optional["Capabilities"] = None

    def __post_init__(self):
        if self.precision_policy not in (None, "mixed", "uniform"):
            from .errors import DTypeError
            raise DTypeError(f"precision_policy {self.precision_policy!r}: expected 'mixed', 'uniform' or None")
        if self.calibration_method not in ("minmax", "percentile", "entropy"):
            from .errors import CalibrationError
            raise CalibrationError(f"calibration_method {self.calibration_method!r}: expected 'minmax', "
                                   "'percentile' or 'entropy'")
        if self.caps is not None and self.caps.target != self.target:
            # opts.replace(target=...) must not carry the old backend's answers along.
            raise ValueError(f"CompileOptions: caps are target '{self.caps.target}'s, the target is '{self.target}'")

    def replace(self, **kw) -> "CompileOptions":
        return dataclasses.replace(self, **kw)
