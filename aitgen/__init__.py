"""aitgen: a deep-learning inference compiler in the AITemplate family.

Public API (see DESIGN.md): IntVar, Tensor, ops, nn, reference, models, errors, Graph, compile_model,
Model. Everything is imported on first use (module __getattr__): `import aitgen` stays cheap, and a
process that only loads a built model (`aitgen.Model.load`) never imports the compiler, the passes,
the importers or the model zoo.
"""
from __future__ import annotations

import importlib as _importlib

__version__ = "0.1.0"

# public name -> (module, attribute); attribute None: the module itself
_LAZY = {
    "errors": ("aitgen.errors", None),
    "ir": ("aitgen.ir", None),
    "ops": ("aitgen.ops", None),
    "nn": ("aitgen.frontend.nn", None),
    "reference": ("aitgen.reference", None),
    "models": ("aitgen.models", None),
    "passes": ("aitgen.passes", None),
    "DType": ("aitgen.ir", "DType"),
    "Graph": ("aitgen.ir", "Graph"),
    "IntImm": ("aitgen.ir", "IntImm"),
    "IntVar": ("aitgen.ir", "IntVar"),
    "Op": ("aitgen.ir", "Op"),
    "OpKind": ("aitgen.ir", "OpKind"),
    "Tensor": ("aitgen.ir", "Tensor"),
    "constant": ("aitgen.ir", "constant"),
    "verify": ("aitgen.ir", "verify"),
    "CompileOptions": ("aitgen.options", "CompileOptions"),
    "compile_model": ("aitgen.compiler", "compile_model"),
    "compile_options": ("aitgen.compiler", "compile_options"),
    "Model": ("aitgen.runtime.model", "Model"),
}

__all__ = sorted([*_LAZY, "load_onnx"])


def __getattr__(name: str):
    if name in _LAZY:
        module, attr = _LAZY[name]
        mod = _importlib.import_module(module)
        if module == "aitgen.ir":  # a Tensor's operators (x + y, x @ w) are installed by aitgen.ops
            _importlib.import_module("aitgen.ops")
        value = mod if attr is None else getattr(mod, attr)
    elif not name.startswith("__"):
        try:  # a subpackage or module (aitgen.frontend, aitgen.codegen, ...), as an attribute
            value = _importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module 'aitgen' has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module 'aitgen' has no attribute {name!r}")
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def load_onnx(model, **kwargs):
    """`aitgen.frontend.onnx.load` (onnx is imported on first use: pip install 'aitgen[onnx]')."""
    from .frontend.onnx import load
    return load(model, **kwargs)
