"""Parameter and Module: the torch-like base of every layer.

A Module builds graph ops when called; it holds no graph itself. Its Parameters are constant
Tensors, so a graph built from a module reads the parameters' current numpy values, and
load_state_dict before building (or before the oracle runs) changes what the graph computes.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Any, Iterator, Mapping, Optional

import numpy as np

from ...errors import DTypeError, ShapeError, StateDictError
from ...ir.dtype import DType, as_dtype
from ...ir.tensor import Tensor

__all__ = ["Parameter", "Module", "IncompatibleKeys"]

IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def _to_numpy(value: Any) -> np.ndarray:
    """numpy arrays, lists, and torch tensors (so a torch state_dict loads without a detour)."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        t = value.detach().cpu()
        if str(getattr(t, "dtype", "")) == "torch.bfloat16":  # torch cannot hand bfloat16 to numpy
            return t.float().numpy().astype(DType.bfloat16.np)
        return t.numpy()
    return np.asarray(value)


class Parameter(Tensor):
    """A named constant Tensor owned by a Module. The value is copied, never aliased, so that
    mutating the caller's array cannot change a graph behind its back."""

    def __init__(self, value: np.ndarray, dtype=None, name: Optional[str] = None):
        arr = _to_numpy(value)
        if dtype is not None:
            dt = as_dtype(dtype)
        elif arr.dtype == np.float64:  # numpy's default float would double every weight's size
            dt = DType.float32
        else:
            dt = as_dtype(arr.dtype)
        try:
            arr = arr.astype(dt.np, copy=True)
        except (TypeError, ValueError) as e:
            raise DTypeError(f"parameter '{name}': cannot convert {arr.dtype} to {dt}: {e}") from None
        super().__init__(arr.shape, dt, name=name, value=arr)

    def numpy(self) -> np.ndarray:
        return self.value

    def __repr__(self) -> str:
        nm = f" '{self.name}'" if self.name else ""
        return f"Parameter{nm}({self.dtype.short}{list(self.value.shape)})"


class Module:
    """Base class of layers. Assigning a Parameter or a Module to an attribute registers it, in
    assignment order; calling the module calls `forward`."""

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", {})  # name -> Parameter, or None (bias=False)
        object.__setattr__(self, "_modules", {})     # name -> Module, or None
        object.__setattr__(self, "_path", None)      # dotted name, set by assign_names

    # -- registration ------------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        params = self.__dict__.get("_parameters")
        if params is None:
            if isinstance(value, (Parameter, Module)):
                raise AttributeError(f"cannot assign {type(value).__name__} '{name}' before "
                                     f"{type(self).__name__}.__init__ called Module.__init__()")
            object.__setattr__(self, name, value)
            return
        mods = self._modules
        if isinstance(value, Parameter):
            mods.pop(name, None)
            params[name] = value  # re-assignment keeps the original position, as in torch
        elif isinstance(value, Module):
            params.pop(name, None)
            mods[name] = value
        elif value is None and (name in params or name in mods):
            (params if name in params else mods)[name] = None
        else:
            params.pop(name, None)
            mods.pop(name, None)
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Optional[Parameter]) -> None:
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter('{name}'): expected a Parameter or None, "
                            f"got {type(param).__name__}")
        if param is None:
            self._parameters[name] = None
            object.__setattr__(self, name, None)
        else:
            setattr(self, name, param)

    def add_module(self, name: str, module: Optional["Module"]) -> None:
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module('{name}'): expected a Module or None, got {type(module).__name__}")
        if module is None:
            self._modules[name] = None
            object.__setattr__(self, name, None)
        else:
            setattr(self, name, module)

    # -- calling -----------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def _op_name(self, suffix: Optional[str] = None) -> Optional[str]:
        """The name for ops this module builds: its dotted path once assign_names has run, so
        errors and printed graphs point at 'encoder.layer.0.attention.query'."""
        if not self._path:
            return None
        return self._path if suffix is None else f"{self._path}.{suffix}"

    # Inference-only modules: these exist so that code written for torch runs unchanged.
    def eval(self) -> "Module":
        return self

    def train(self, mode: bool = True) -> "Module":
        return self

    # -- traversal ---------------------------------------------------------------------------
    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        seen: set[int] = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator["Module"]:
        for _, m in self.named_children():
            yield m

    def named_modules(self, prefix: str = "", remove_duplicate: bool = True) -> Iterator[tuple[str, "Module"]]:
        """Pre-order: this module (named `prefix`), then each child's subtree in registration order."""
        seen: set[int] = set()
        stack: list[tuple[str, Module]] = [(prefix, self)]
        while stack:  # iterative: 96-layer models would not exhaust recursion, but deeper ones might
            name, mod = stack.pop()
            if remove_duplicate:
                if id(mod) in seen:
                    continue
                seen.add(id(mod))
            yield name, mod
            kids = [(f"{name}.{k}" if name else k, m) for k, m in mod._modules.items() if m is not None]
            stack.extend(reversed(kids))

    def modules(self) -> Iterator["Module"]:
        for _, m in self.named_modules():
            yield m

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, Parameter) in torch's order: each module's own parameters in
        registration order, then its children's. A shared parameter is yielded once, under the
        first name it is reached by (unless remove_duplicate=False)."""
        seen: set[int] = set()
        mods = self.named_modules(prefix, remove_duplicate) if recurse else [(prefix, self)]
        for mname, mod in mods:
            for pname, p in mod._parameters.items():
                if p is None:
                    continue
                if remove_duplicate:
                    if id(p) in seen:
                        continue
                    seen.add(id(p))
                yield (f"{mname}.{pname}" if mname else pname), p

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def num_parameters(self) -> int:
        return sum(int(p.value.size) for p in self.parameters())

    # -- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """Name -> copy of the value. Shared parameters appear under every name, as in torch, so a
        torch state_dict of the same architecture has exactly the same keys."""
        return {n: p.value.copy() for n, p in self.named_parameters(remove_duplicate=False)}

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Copy values into the parameters, converting dtypes. Everything is checked before
        anything is written, so a failed load leaves the module as it was."""
        own = list(self.named_parameters(remove_duplicate=False))
        names = {n for n, _ in own}
        missing = [n for n, _ in own if n not in state_dict]
        unexpected = [k for k in state_dict if k not in names]
        if strict and (missing or unexpected):
            parts = []
            if missing:
                parts.append(f"missing keys {missing}")
            if unexpected:
                parts.append(f"unexpected keys {unexpected}")
            err = StateDictError(f"load_state_dict into {type(self).__name__}: " + "; ".join(parts))
            err.missing_keys, err.unexpected_keys = missing, unexpected
            raise err
        staged: list[tuple[Parameter, np.ndarray]] = []
        for name, p in own:
            if name not in state_dict:
                continue
            arr = _to_numpy(state_dict[name])
            want = tuple(p.value.shape)
            if tuple(arr.shape) != want:
                raise ShapeError(f"load_state_dict: parameter '{name}' has shape {list(want)}, "
                                 f"the state_dict holds shape {list(arr.shape)}")
            if arr.dtype.kind not in "biufV":
                raise DTypeError(f"load_state_dict: parameter '{name}' ({p.dtype}) cannot take "
                                 f"values of dtype {arr.dtype}")
            try:
                staged.append((p, arr.astype(p.dtype.np, copy=True)))
            except (TypeError, ValueError) as e:
                raise DTypeError(f"load_state_dict: parameter '{name}' ({p.dtype}): {e}") from None
        for p, arr in staged:
            p.value = arr
        return IncompatibleKeys(missing, unexpected)

    def assign_names(self, prefix: str = "") -> "Module":
        """Name every Parameter tensor by its dotted path (graph constants then read like
        'encoder.layer.0.attention.query.weight') and let ops built later carry module paths."""
        for name, mod in self.named_modules(prefix):
            object.__setattr__(mod, "_path", name or None)
        for name, p in self.named_parameters(prefix):
            p.name = name
        return self

    # -- printing ----------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        kids = [(k, m) for k, m in self._modules.items() if m is not None]
        extra = self.extra_repr()
        if not kids:
            return f"{type(self).__name__}({extra})"
        lines = [f"{type(self).__name__}("]
        if extra:
            lines.append("  " + extra)
        for k, m in kids:
            body = repr(m).replace("\n", "\n  ")
            lines.append(f"  ({k}): {body}")
        lines.append(")")
        return "\n".join(lines)
