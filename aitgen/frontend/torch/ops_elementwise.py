"""Element-wise ATen ops: arithmetic with torch's type promotion, comparisons, where, activations,
casts and the identities (clone, alias, inference-mode dropout).

Element-wise ops keep their operand's layout (an NHWC conv output stays NHWC through ReLU and the
residual add); a lower-rank operand that broadcasts against a permuted one is first given the
full rank in torch's order, then the same layout (a constant is transposed here, not in the graph).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ... import ops
from ...ir.dims import Dim, IntImm
from ...ir.dtype import DType
from ...ir.tensor import Tensor, constant
from ._value import Perm, Value
from .registry import Unavailable, aten

# -- operands --------------------------------------------------------------------------------


def cast(t: Tensor, dtype: DType, cx=None) -> Tensor:
    if t.dtype == dtype:
        return t
    if t.is_constant:  # folded here: a cast of a parameter is just another constant
        v = np.trunc(t.value) if dtype.is_int and t.value.dtype.kind == "f" else t.value
        out = constant(v.astype(dtype.np), dtype=dtype)
        return cx.imp.layouts.derive(t, out, dtype.value) if cx is not None else out
    return ops.cast(t, dtype)


def scalar(cx, x):
    """A Python/Dim scalar operand as a Python number (a dynamic size has no tensor form here)."""
    if isinstance(x, Dim):
        if not x.is_static:
            cx.fail(f"a dynamic size ({x}) used as a tensor value is not supported")
        return x.value
    return x


def operands(cx, xs, dtype: Optional[DType], keep_bool: tuple[int, ...] = ()) -> tuple[list, Perm]:
    """Operands of an element-wise op in one common layout, tensors cast to `dtype`.

    The layout is that of the first full-rank operand that is not a constant (None: torch's order).
    Python scalars stay scalars; the builders turn them into constants of the other operand's
    dtype. Positions in keep_bool (where's condition) are not cast."""
    rank = len(cx.out_fake().shape)
    # The layout of the first full-rank computed operand (a constant can be transposed for free),
    # so add(x, y) costs at most one permute, of y, and none when y is stored like x.
    full = [x for x in xs if isinstance(x, Value) and x.ndim == rank]
    lead = next((x for x in full if not x.t.is_constant), full[0] if full else None)
    perm = lead.perm if lead is not None else None
    out = []
    for i, x in enumerate(xs):
        if isinstance(x, Value):
            if perm is None:
                t = cx.tensor(x)
            elif x.ndim == rank:
                t = cx.layout(x, perm)
            elif x.ndim == 0:
                t = x.t
            else:  # broadcast: give it the full rank, then the layout
                tt = cx.tensor(x)
                shape = [IntImm(1)] * (rank - x.ndim) + list(tt.shape)
                if tt.is_constant:
                    tt = cx.imp.layouts.derive(
                        tt, constant(tt.value.reshape([d.value for d in shape]), dtype=tt.dtype), "r")
                else:
                    tt = ops.reshape(tt, shape)
                t = cx.layout(Value(tt), perm)
            if dtype is not None and i not in keep_bool:
                t = cast(t, dtype, cx)
            out.append(t)
        elif isinstance(x, Tensor):
            out.append(x)
        else:
            out.append(scalar(cx, x))
    if not any(isinstance(o, Tensor) for o in out):
        cx.fail("an element-wise op with no tensor operand")
    return out, perm


def promoted(cx, *args: str) -> DType:
    """torch's result type of the named arguments (comparisons compute in it, then return bool)."""
    import torch

    from ._dtype import ir_dtype
    vals = [cx.fake(a) for a in args]
    dt = vals[0].dtype if len(vals) == 1 else torch.result_type(*vals)
    return ir_dtype(dt, cx.label)


# -- arithmetic --------------------------------------------------------------------------------

def _binary(fn, *names, alpha_on: Optional[str] = None, compare: bool = False):
    def conv(cx, a):
        dtype = promoted(cx, *names) if compare else cx.out_dtype()
        xs = [a[n] for n in names]
        alpha = a.get("alpha", 1) if alpha_on else 1
        (x, y), perm = operands(cx, xs, dtype)
        if alpha != 1:
            y = ops.mul(y, alpha) if isinstance(y, Tensor) else y * alpha
        return Value(fn(x, y), perm)
    return conv


aten("add.Tensor", "add.Scalar")(_binary(ops.add, "self", "other", alpha_on="other"))
aten("sub.Tensor", "sub.Scalar")(_binary(ops.sub, "self", "other", alpha_on="other"))
aten("mul.Tensor", "mul.Scalar")(_binary(ops.mul, "self", "other"))
aten("div.Tensor", "div.Scalar")(_binary(ops.div, "self", "other"))
aten("maximum.default")(_binary(ops.maximum, "self", "other"))
aten("minimum.default")(_binary(ops.minimum, "self", "other"))
for _n, _f in (("eq", ops.equal), ("ne", ops.not_equal), ("lt", ops.less), ("le", ops.less_equal),
               ("gt", ops.greater), ("ge", ops.greater_equal)):
    aten(f"{_n}.Tensor", f"{_n}.Scalar")(_binary(_f, "self", "other", compare=True))


@aten("rsub.Tensor", "rsub.Scalar")
def _rsub(cx, a):
    (x, y), perm = operands(cx, [a["self"], a["other"]], cx.out_dtype())
    x = ops.mul(x, a["alpha"]) if a["alpha"] != 1 else x
    return Value(ops.sub(y, x), perm)


@aten("pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar")
def _pow(cx, a):
    (x, e), perm = operands(cx, [a["self"], a["exponent"]], cx.out_dtype())
    if not isinstance(e, Tensor) and e == 2:  # x*x: exact, and fine for integers too
        return Value(ops.mul(x, x), perm)
    if not cx.out_dtype().is_float:
        cx.fail("an integer power other than 2 is not supported (aitgen's pow is float only)")
    return Value(ops.pow(x, float(e) if not isinstance(e, Tensor) else e), perm)


def _floor(x: Tensor) -> Tensor:
    """floor through a truncating cast when the IR has no floor op: trunc(x) - (trunc(x) > x)."""
    if hasattr(ops, "floor"):
        return ops.floor(x)
    t = cast(cast(x, DType.int64), x.dtype)
    return ops.where(ops.greater(t, x), ops.sub(t, 1.0), t)


@aten("div.Tensor_mode", "div.Scalar_mode")
def _div_mode(cx, a):
    dt = cx.out_dtype()
    (x, y), perm = operands(cx, [a["self"], a["other"]], dt)
    mode = a["rounding_mode"]
    if mode is None:
        return Value(ops.div(x, y), perm)
    if dt.is_float:
        q = ops.div(x, y)
        return Value(_floor(q) if mode == "floor" else cast(cast(q, DType.int64), dt), perm)
    q = ops.div(x, y)  # integer division truncates toward zero, as torch's 'trunc'
    if mode == "trunc":
        return Value(q, perm)
    # floor: one less where the division was inexact and the signs differ
    yt = y if isinstance(y, Tensor) else cx.const(y, dt)
    inexact = ops.not_equal(ops.mul(q, yt), x)
    neg = ops.not_equal(ops.less(x, 0), ops.less(yt, 0))
    return Value(ops.where(ops.logical_and(inexact, neg), ops.sub(q, 1), q), perm)


@aten("remainder.Tensor", "remainder.Scalar", "fmod.Tensor", "fmod.Scalar")
def _remainder(cx, a):
    dt = cx.out_dtype()
    if not dt.is_float:
        cx.fail("integer remainder/fmod is not supported")
    (x, y), perm = operands(cx, [a["self"], a["other"]], dt)
    q = ops.div(x, y)
    q = _floor(q) if cx.node.target._opname == "remainder" else cast(cast(q, DType.int64), dt)
    return Value(ops.sub(x, ops.mul(q, y)), perm)


# -- unary -----------------------------------------------------------------------------------

def _unary(fn, keep_dtype: bool = False):
    def conv(cx, a):
        v = a["self"]
        t = v.t if keep_dtype else cast(v.t, cx.out_dtype())
        return Value(fn(t), v.perm)
    return conv


for _n, _f in (("relu", ops.relu), ("sigmoid", ops.sigmoid), ("tanh", ops.tanh), ("exp", ops.exp),
               ("log", ops.log), ("sqrt", ops.sqrt), ("rsqrt", ops.rsqrt), ("erf", ops.erf), ("neg", ops.neg),
               ("abs", ops.abs), ("reciprocal", ops.reciprocal), ("silu", ops.silu), ("hardswish", ops.hardswish)):
    aten(f"{_n}.default")(_unary(_f))
for _n in ("sin", "cos", "floor", "ceil", "round", "sign", "tan", "atan", "asin", "acos", "trunc"):
    if hasattr(ops, _n):  # added by other importers' work; used when present
        aten(f"{_n}.default")(_unary(getattr(ops, _n)))
if not hasattr(ops, "floor"):
    aten("floor.default")(_unary(_floor))
aten("log1p.default")(_unary(lambda x: ops.log(ops.add(x, 1.0))))   # within float32 tolerance for |x| >~ 1e-7
aten("expm1.default")(_unary(lambda x: ops.sub(ops.exp(x), 1.0)))


@aten("gelu.default")
def _gelu(cx, a):
    v = a["self"]
    return Value(ops.gelu(v.t, approximate=a["approximate"]), v.perm)


@aten("hardtanh.default", "clamp.default", "clamp_min.default", "clamp_max.default")
def _clamp(cx, a):
    v, name = a["self"], cx.node.target._opname
    lo, hi = {"hardtanh": (a.get("min_val"), a.get("max_val")), "clamp": (a.get("min"), a.get("max")),
              "clamp_min": (a.get("min"), None), "clamp_max": (None, a.get("max"))}[name]
    t = cast(v.t, cx.out_dtype())
    if not t.dtype.is_float and any(b is not None and float(b) != int(b) for b in (lo, hi)):
        cx.fail("clamping an integer tensor to a fractional bound")
    return Value(ops.clamp(t, None if lo is None else float(lo), None if hi is None else float(hi)), v.perm)


@aten("clamp.Tensor")
def _clamp_tensor(cx, a):
    (x, lo, hi), perm = operands(cx, [a["self"], a["min"], a["max"]], cx.out_dtype())
    if lo is not None:
        x = ops.maximum(x, lo)
    if hi is not None:
        x = ops.minimum(x, hi)
    return Value(x, perm)


@aten("leaky_relu.default")
def _leaky_relu(cx, a):
    v = a["self"]
    return Value(ops.where(ops.greater(v.t, 0.0), v.t, ops.mul(v.t, float(a["negative_slope"]))), v.perm)


@aten("elu.default")
def _elu(cx, a):
    v, alpha, scale, iscale = a["self"], float(a["alpha"]), float(a["scale"]), float(a["input_scale"])
    neg = ops.mul(ops.sub(ops.exp(ops.mul(v.t, iscale)), 1.0), alpha * scale)
    return Value(ops.where(ops.greater(v.t, 0.0), ops.mul(v.t, scale), neg), v.perm)


@aten("hardsigmoid.default")
def _hardsigmoid(cx, a):
    v = a["self"]
    return Value(ops.div(ops.clamp(ops.add(v.t, 3.0), 0.0, 6.0), 6.0), v.perm)


@aten("softplus.default")
def _softplus(cx, a):
    v, beta, thr = a["self"], float(a["beta"]), float(a["threshold"])
    bx = ops.mul(v.t, beta)
    soft = ops.div(ops.log(ops.add(ops.exp(bx), 1.0)), beta)
    return Value(ops.where(ops.greater(bx, thr), v.t, soft), v.perm)


# -- logic, where, casts -----------------------------------------------------------------------

def _as_bool(t: Tensor) -> Tensor:
    return t if t.dtype == DType.bool else ops.not_equal(t, 0)


@aten("logical_not.default", "bitwise_not.default")
def _not(cx, a):
    v = a["self"]
    if cx.node.target._opname == "bitwise_not" and v.dtype != DType.bool:
        cx.fail("bitwise_not of an integer tensor is not supported")
    return Value(ops.logical_not(_as_bool(v.t)), v.perm)


def _logical(fn, bitwise: bool):
    def conv(cx, a):
        if bitwise and cx.out_dtype() != DType.bool:
            cx.fail("bitwise ops on integer tensors are not supported")
        (x, y), perm = operands(cx, [a["self"], a["other"]], None)
        x, y = (_as_bool(t) if isinstance(t, Tensor) else bool(t) for t in (x, y))
        if not isinstance(y, Tensor):
            y = cx.const(y, DType.bool)
        return Value(fn(x, y), perm)
    return conv


aten("logical_and.default")(_logical(ops.logical_and, False))
aten("logical_or.default")(_logical(ops.logical_or, False))
aten("logical_xor.default")(_logical(ops.not_equal, False))
aten("bitwise_and.Tensor", "bitwise_and.Scalar")(_logical(ops.logical_and, True))
aten("bitwise_or.Tensor", "bitwise_or.Scalar")(_logical(ops.logical_or, True))
aten("bitwise_xor.Tensor", "bitwise_xor.Scalar")(_logical(ops.not_equal, True))


@aten("where.self", "where.ScalarSelf", "where.ScalarOther", "where.Scalar")
def _where(cx, a):
    (c, x, y), perm = operands(cx, [a["condition"], a["self"], a["other"]], cx.out_dtype(), keep_bool=(0,))
    return Value(ops.where(_as_bool(c), x, y), perm)


@aten("masked_fill.Scalar", "masked_fill.Tensor")
def _masked_fill(cx, a):
    val = a["value"]
    if isinstance(val, Value):
        if val.ndim:
            cx.fail("masked_fill with a value tensor of rank > 0")
        val = val.t
    (x, m, fill), perm = operands(cx, [a["self"], a["mask"], val], cx.out_dtype(), keep_bool=(1,))
    return Value(ops.where(_as_bool(m), fill, x), perm)


@aten("_to_copy.default", "to.dtype", "_to_dim_order_copy.default")
def _to_copy(cx, a):
    v = a["self"]
    return Value(cast(v.t, cx.out_dtype()), v.perm)


@aten("clone.default", "alias.default", "contiguous.default", "detach.default", "lift_fresh_copy.default",
      "dropout.default", "native_dropout.default", "_native_batch_norm_legit_functional.default")
def _identity(cx, a):
    name = cx.node.target._opname
    if name in ("dropout", "native_dropout") and a.get("train"):
        cx.fail("dropout in training mode (export the model in eval mode)")
    if name == "_native_batch_norm_legit_functional":
        cx.fail("batch norm in training mode (export the model in eval mode)")
    v = a.get("self", a.get("input"))
    return (v, Unavailable("the dropout mask")) if name == "native_dropout" else v
