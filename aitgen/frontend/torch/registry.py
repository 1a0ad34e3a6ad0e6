"""Converters from ATen ops to aitgen ops, registered by the overload's name.

    @aten("add.Tensor", "add.Scalar")
    def _add(cx: Ctx, a: Args) -> Value | Tensor | tuple: ...

`a` holds the node's arguments bound to the overload's schema by name (defaults filled in), with
fx nodes already replaced by what the importer made of them: a Value for a tensor, a Dim for a
SymInt, a tuple for a multi-output node. A converter returns a Value (a layout-aware result), a
Tensor (in torch's axis order), or a tuple of those for a multi-output op (an `Unavailable` in
place of an output aitgen does not compute, such as max_pool2d's indices).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # pragma: no cover
    from ._importer import Ctx

Converter = Callable[["Ctx", "Args"], Any]
CONVERTERS: dict[str, Converter] = {}


def aten(*names: str):
    """Register a converter for the named overloads ("convolution.default", "add.Tensor")."""
    def deco(fn: Converter) -> Converter:
        for n in names:
            CONVERTERS[n] = fn
        return fn
    return deco


@dataclasses.dataclass(frozen=True)
class Unavailable:
    """An output of a multi-output op that aitgen does not compute; an error if anything reads it."""
    what: str


class Args(dict):
    """Schema-bound arguments; a missing key is a converter bug, reported as such."""

    def __missing__(self, key):
        raise KeyError(f"converter asked for argument '{key}', which the schema does not have")


def bind(target, args: tuple, kwargs: dict) -> Args:
    """Arguments by schema name, defaults included (torch's own schema, so no guessing)."""
    out = Args()
    for i, arg in enumerate(target._schema.arguments):
        if i < len(args) and not arg.kwarg_only:
            out[arg.name] = args[i]
        elif arg.name in kwargs:
            out[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
        else:
            out[arg.name] = None
    return out


def overload_name(target) -> str:
    """'add.Tensor' for torch.ops.aten.add.Tensor ('aten::add.Tensor')."""
    return f"{target._opname}.{target._overloadname}"
