"""The model argument of `aitgen compile | inspect | debug`: `module.py:function`, `zoo:NAME`
(with --config) or `model.onnx` (with --dim) -> the outputs it defines."""
from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from typing import Optional

from ..errors import UnknownDimError, UsageError

FORMS = "module.py:function, zoo:NAME or model.onnx"


def load_outputs(spec: str, config: Optional[dict] = None, dims: Optional[dict] = None, fold_qdq: bool = False):
    """`path/to/module.py:function` (or `zoo:NAME`, built with `config`, or `model.onnx`, its symbolic
    dims bounded by `dims`, its QDQ pairs folded with `fold_qdq`) -> the outputs it returns."""
    if spec.lower().endswith(".onnx"):
        return _onnx(spec, config, dims, fold_qdq)
    if fold_qdq:
        raise UsageError("--fold-qdq applies to .onnx models only")
    if dims:
        raise UsageError("--dim applies to .onnx models only (a zoo model takes its dims as --config NAME=LB:UB)")
    if spec.startswith("zoo:"):
        return _zoo(spec[4:], config or {})
    if config:
        raise UsageError("--config applies to zoo:NAME models only")
    return _module(spec)


def _onnx(spec: str, config, dims, fold_qdq: bool = False):
    if not os.path.exists(spec):
        raise UsageError(f"no such file: {spec}")
    if not os.path.isfile(spec):
        raise UsageError(f"{spec} is not a file (the model argument is {FORMS})")
    if config:
        raise UsageError("--config applies to zoo:NAME models only (an ONNX model takes --dim NAME=LB:UB)")
    from ..frontend.onnx import load
    try:
        _, outputs = load(spec, dim_bounds=dims, fold_qdq=fold_qdq)
    except UnknownDimError as e:
        raise UsageError(f"--dim {', '.join(e.unknown)}: {spec} has no such dim; its symbolic dims: "
                         f"{', '.join(e.known) or '(none: every dim is fixed)'}") from None
    return outputs


def _zoo(name: str, config: dict):
    from .. import models

    if name not in models.list_models():
        raise UsageError(f"unknown zoo model '{name}'; the zoo has: {', '.join(models.list_models())}")
    _check_config(name, config, models._impl(name).create)
    try:
        _, outputs = models.get(name, **config)
    except (ValueError, TypeError) as e:   # a value the zoo refuses (seq above max_position, ...)
        raise UsageError(f"zoo:{name}: {e} (--config {' '.join(f'{k}={_show(v)}' for k, v in config.items())})") \
            from None
    return outputs


def _check_config(name: str, config: dict, create) -> None:
    """Every --config key is a setting of the zoo model, of the kind its default has."""
    params = inspect.signature(create).parameters
    settings = ", ".join(f"{k}={_show(p.default)}" for k, p in params.items())
    for key, value in config.items():
        p = params.get(key)
        if p is None:
            raise UsageError(f"zoo:{name} has no setting '{key}'; its settings (and defaults): {settings}")
        want = _kind(str(p.annotation), p.default)
        if want is not None and not _fits(value, want):
            raise UsageError(f"--config {key}={_show(value)}: zoo:{name} wants {_WANT[want]} for {key} "
                             f"(default {_show(p.default)})")


_WANT = {"dim": "an int or a dynamic dim LB:UB", "int": "an int", "float": "a number", "str": "a word",
         "ints": "a tuple of ints, e.g. (1, 1, 1, 1)"}


def _kind(annotation: str, default) -> Optional[str]:
    if "DimArg" in annotation or "IntVar" in annotation:
        return "dim"
    if annotation.startswith(("Sequence[int]", "tuple[int", "Tuple[int")) or isinstance(default, tuple):
        return "ints"
    for kind, t in (("int", int), ("float", float), ("str", str)):
        if annotation == kind or (annotation in ("", "_empty") and type(default) is t):
            return kind
    return None


def _fits(value, kind: str) -> bool:
    from ..ir.dims import IntVar

    is_int = isinstance(value, int) and not isinstance(value, bool)
    if kind == "dim":
        return is_int or isinstance(value, IntVar)
    if kind == "int":
        return is_int
    if kind == "float":
        return is_int or isinstance(value, float)
    if kind == "str":
        return isinstance(value, str)
    return isinstance(value, (tuple, list)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def _show(value) -> str:
    from ..ir.dims import IntVar

    return f"{value.lower}:{value.upper}" if isinstance(value, IntVar) else repr(value)


def _module(spec: str):
    path, sep, func = spec.rpartition(":")
    if not sep or not path or not func:
        if not os.path.exists(spec):
            raise UsageError(f"no such file or folder: {spec} (the model argument is {FORMS})")
        raise UsageError(f"expected {FORMS}, got {spec!r}")
    if not os.path.exists(path):
        raise UsageError(f"no such file: {path}")
    if not os.path.isfile(path):
        raise UsageError(f"{path} is not a file (the model argument is {FORMS})")
    mod_name = "_aitgen_user_" + os.path.splitext(os.path.basename(path))[0]
    loader = importlib.util.spec_from_file_location(mod_name, path)
    if loader is None:
        raise UsageError(f"{path} is not a Python module (the model argument is {FORMS})")
    module = importlib.util.module_from_spec(loader)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        loader.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    fn = getattr(module, func, None)
    if not callable(fn):
        have = sorted(k for k, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == mod_name)
        raise UsageError(f"{path} has no function '{func}'" + (f"; it defines: {', '.join(have)}" if have else ""))
    out = fn()
    # A function may return (inputs, outputs) like aitgen.models.get, or just the outputs.
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict):
        out = out[1]
    return out
