"""aitgen: a deep-learning inference compiler in the AITemplate family.

Public API (see DESIGN.md): IntVar, Tensor, ops, nn, reference, models, errors, Graph.
"""
import sys as _sys

from . import errors, ir, ops
from .ir import DType, Graph, IntImm, IntVar, Op, OpKind, Tensor, constant, verify
from .options import CompileOptions
from . import reference  # noqa: E402
from .frontend import nn  # noqa: E402
from . import models, passes  # noqa: E402
from .compiler import compile_model  # noqa: E402
from .runtime import Model  # noqa: E402

_sys.modules[__name__ + ".nn"] = nn

__version__ = "0.1.0"


def load_onnx(model, **kwargs):
    """`aitgen.frontend.onnx.load` (onnx is imported on first use: pip install 'aitgen[onnx]')."""
    from .frontend.onnx import load
    return load(model, **kwargs)


__all__ = ["errors", "ir", "ops", "nn", "reference", "models", "passes", "DType", "Graph", "IntImm",
           "IntVar", "Op", "OpKind", "Tensor", "constant", "verify", "CompileOptions", "compile_model", "Model",
           "load_onnx"]
