"""Reductions (sum, mean, amax, var, any, argmax, norms) and the matmul family (mm, addmm, bmm).

Reductions work in their operand's layout: torch's dims are mapped to the stored axes, and what
is left keeps its order (mean over H, W of an NHWC conv output is a reduction over stored axes 1, 2).

Linear layers arrive decomposed as addmm(bias, x, permute(w, [1, 0])); permute is a layout here, so
the gemm reads w as stored, layout 'rcr', with the bias fused.
"""
from __future__ import annotations

from ... import ops
from ...ir.dims import prod
from ...ir.dtype import DType
from ...ir.op import OpKind
from ._value import Perm, Value, norm_perm
from .ops_elementwise import cast, operands
from .registry import Unavailable, aten

# -- reductions --------------------------------------------------------------------------------


def _axes(cx, v: Value, dims) -> tuple[list[int], list[int]]:
    """(torch dims, stored axes) reduced; None or [] means every dim, as in torch."""
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        tdims = list(range(v.ndim))
    else:
        dims = [dims] if isinstance(dims, int) else list(dims)
        tdims = sorted({int(d) % max(v.ndim, 1) for d in dims})
    perm = v.perm if v.perm is not None else tuple(range(v.ndim))
    return tdims, sorted(perm.index(d) for d in tdims)


def _result_perm(v: Value, axes: list[int], keepdim: bool) -> Perm:
    if keepdim or v.perm is None:
        return v.perm if keepdim else None
    kept = [p for i, p in enumerate(v.perm) if i not in axes]
    rank = {d: i for i, d in enumerate(sorted(kept))}
    return norm_perm(tuple(rank[d] for d in kept))


def _reduce(fn, *, dims_arg: str = "dim"):
    def conv(cx, a):
        v = a["self"]
        _, axes = _axes(cx, v, a.get(dims_arg))
        keep = bool(a.get("keepdim", False))
        t = cast(v.t, cx.out_dtype())
        return Value(fn(t, axes, keep), _result_perm(v, axes, keep))
    return conv


aten("sum.dim_IntList", "sum.default")(_reduce(lambda t, ax, k: ops.reduce_sum(t, ax, keepdims=k)))
def _mean(t, axes, keep):
    if t.ndim == 4 and axes == [1, 2] and t.dtype.is_float:  # over H, W of NHWC: global average pooling
        return ops.global_avg_pool(t, keepdims=keep)
    return ops.reduce_mean(t, axes, keepdims=keep)


aten("mean.dim", "mean.default")(_reduce(_mean))
aten("amax.default")(_reduce(lambda t, ax, k: ops.reduce_max(t, ax, keepdims=k)))
aten("amin.default")(_reduce(lambda t, ax, k: ops.reduce_min(t, ax, keepdims=k)))
aten("max.default")(_reduce(lambda t, ax, k: ops.reduce_max(t, ax, keepdims=k)))
aten("min.default")(_reduce(lambda t, ax, k: ops.reduce_min(t, ax, keepdims=k)))
if hasattr(ops, "reduce_prod"):
    aten("prod.dim_int", "prod.default")(_reduce(lambda t, ax, k: ops.reduce_prod(t, ax, keepdims=k)))


@aten("var.correction", "var.dim", "std.correction", "std.dim", "var_mean.correction")
def _var(cx, a):
    v = a["self"]
    _, axes = _axes(cx, v, a.get("dim"))
    corr = a.get("correction")
    if corr is None:
        corr = 1 if a.get("unbiased", True) else 0
    if float(corr) != int(corr):
        cx.fail(f"a fractional correction ({corr})")
    keep = bool(a["keepdim"])
    t = cast(v.t, cx.out_dtype())
    out = ops.reduce_var(t, axes, keepdims=keep, correction=int(corr))
    perm = _result_perm(v, axes, keep)
    name = cx.node.target._opname
    if name == "std":
        out = ops.sqrt(out)
    if name == "var_mean":
        return Value(out, perm), Value(ops.reduce_mean(t, axes, keepdims=keep), perm)
    return Value(out, perm)


@aten("any.dim", "any.dims", "any.default", "all.dim", "all.dims", "all.default")
def _any_all(cx, a):
    v = a["self"]
    _, axes = _axes(cx, v, a.get("dim"))
    keep = bool(a.get("keepdim", False))
    is_any = cx.node.target._opname == "any"
    # bool has no reduction in the IR: any = max over 0/1, all = min over 0/1.
    t = cast(v.t if v.dtype == DType.bool else ops.not_equal(v.t, 0), DType.int32)
    r = (ops.reduce_max if is_any else ops.reduce_min)(t, axes, keepdims=keep)
    return Value(ops.not_equal(r, 0), _result_perm(v, axes, keep))


def _arg(cx, v: Value, dim, keep: bool, largest: bool):
    fn = getattr(ops, "argmax" if largest else "argmin", None)
    if fn is None:
        return None
    if dim is None:  # over the flattened tensor
        return Value(fn(ops.reshape(cx.tensor(v), [-1]), 0, keepdims=False)) if not keep else None
    _, (axis,) = _axes(cx, v, [dim])
    return Value(fn(v.t, axis, keepdims=keep), _result_perm(v, [axis], keep))


@aten("max.dim", "min.dim")
def _max_dim(cx, a):
    v, keep, largest = a["self"], bool(a["keepdim"]), cx.node.target._opname == "max"
    _, axes = _axes(cx, v, [a["dim"]])
    vals = Value((ops.reduce_max if largest else ops.reduce_min)(v.t, axes, keepdims=keep),
                 _result_perm(v, axes, keep))
    idx = _arg(cx, v, a["dim"], keep, largest)
    return vals, idx if idx is not None else Unavailable(f"the indices of {cx.node.target._opname}.dim")


@aten("argmax.default", "argmin.default")
def _argmax(cx, a):
    out = _arg(cx, a["self"], a["dim"], bool(a["keepdim"]), cx.node.target._opname == "argmax")
    if out is None:
        cx.fail("argmax/argmin needs the IR's argmax op" if a["dim"] is not None else
                "argmax/argmin over all dims with keepdim")
    return out


@aten("linalg_vector_norm.default")
def _vector_norm(cx, a):
    v, order = a["self"], float(a["ord"])
    _, axes = _axes(cx, v, a["dim"])
    keep, t = bool(a["keepdim"]), cast(v.t, cx.out_dtype())
    if order == 2:
        out = ops.sqrt(ops.reduce_sum(ops.mul(t, t), axes, keepdims=keep))
    elif order == 1:
        out = ops.reduce_sum(ops.abs(t), axes, keepdims=keep)
    elif order == float("inf"):
        out = ops.reduce_max(ops.abs(t), axes, keepdims=keep)
    else:
        cx.fail(f"vector norm of order {order} (1, 2 and inf are supported)")
    return Value(out, _result_perm(v, axes, keep))


@aten("logsumexp.default")
def _logsumexp(cx, a):
    v = a["self"]
    _, axes = _axes(cx, v, a["dim"])
    keep, t = bool(a["keepdim"]), cast(v.t, cx.out_dtype())
    m = ops.reduce_max(t, axes, keepdims=True)
    s = ops.log(ops.reduce_sum(ops.exp(ops.sub(t, m)), axes, keepdims=True))
    out = ops.add(s, m)
    if not keep:
        out = ops.squeeze(out, axes)
    return Value(out, _result_perm(v, axes, keep))


# -- matmul ------------------------------------------------------------------------------------

def _mat(v: Value, swapped: tuple[int, ...]):
    """(stored tensor, transposed?) for a matmul operand: a swap of the last two dims is free."""
    if v.perm == swapped:
        return v.t, True
    return None, False


def _mm(cx, x: Value, w: Value, bias=None):
    a, ta = _mat(x, (1, 0))
    b, tb = _mat(w, (1, 0))
    a = a if ta else cx.tensor(x)
    b = b if tb else cx.tensor(w)
    layout = ("c" if ta else "r") + ("c" if tb else "r") + "r"
    return ops.gemm(a, b, bias, layout=layout)


@aten("mm.default")
def _mm_conv(cx, a):
    return _mm(cx, a["self"], a["mat2"])


@aten("addmm.default")
def _addmm(cx, a):
    bias, beta, alpha = a["self"], a["beta"], a["alpha"]
    n = cx.dim(cx.out_fake().shape[1])
    b = cx.tensor(bias) if isinstance(bias, Value) else None
    if b is not None and beta == 1 and alpha == 1 and b.ndim <= 2 and b.shape[-1] == n and \
            all(d == 1 for d in b.shape[:-1]) and b.dtype == cx.out_dtype():
        b1 = b if b.ndim == 1 else ops.reshape(b, [b.shape[-1]])
        return _mm(cx, a["mat1"], a["mat2"], b1)  # a Linear: the bias goes into the gemm
    y = _mm(cx, a["mat1"], a["mat2"])
    if alpha != 1:
        y = ops.mul(y, alpha)
    if beta != 0:
        (bb,), _ = operands(cx, [bias], cx.out_dtype())
        y = ops.add(y, ops.mul(bb, beta) if beta != 1 else bb)
    return y


_VIEWS = ("view", "_unsafe_view", "reshape")


def _unmerged(cx, node, v: Value):
    """The Value [*B, M, K] that torch viewed as v = [prod(B), M, K] on the way into a bmm (through
    clones and no-op expands), or None."""
    import torch

    env = cx.imp.env
    while isinstance(node, torch.fx.Node) and isinstance(node.target, torch._ops.OpOverload) and node.args:
        src = node.args[0]
        if not isinstance(src, torch.fx.Node):
            return None
        if node.target._opname in _VIEWS:
            u = env.get(src)
            if isinstance(u, Value) and u.ndim >= 4 and u.shape[-2:] == v.shape[-2:] and \
                    prod(u.shape[:-2]) == v.shape[0]:
                return u
            return None
        if env.get(src) is not env.get(node):  # not an identity (clone, alias, expand to itself)
            return None
        node = src
    return None


def _bmm(cx, x: Value, y: Value, names=("self", "mat2")):
    # torch decomposes a 4-D matmul into views to [B*H, M, K], a bmm and a view back; the IR's bmm
    # takes the batch dims as they are, so the views go (and fuse_attention sees q @ kT directly)
    x4, y4 = _unmerged(cx, cx.raw[names[0]], x), _unmerged(cx, cx.raw[names[1]], y)
    four = x4 is not None and y4 is not None and x4.shape[:-2] == y4.shape[:-2]
    xs, ys = (x4, y4) if four else (x, y)
    swap = tuple(range(xs.ndim - 2)) + (xs.ndim - 1, xs.ndim - 2)
    a, ta = _mat(xs, swap)
    b, tb = _mat(ys, swap)
    a, b = a if ta else cx.tensor(xs), b if tb else cx.tensor(ys)
    src = b.producer.inputs[0] if b.producer is not None and b.producer.kind is OpKind.EXPAND else None
    if not (four or ta or tb) and src is not None and all(d == 1 for d in src.shape[:-2]):
        # x @ w.t() on a 3-D x decomposes to bmm(x, expand(w.t())): one weight for every batch is a gemm
        w = src if src.ndim == 2 else ops.reshape(src, list(src.shape[-2:]))
        return ops.gemm(a, w, layout="rrr")
    out = ops.bmm(a, b, trans_a=ta, trans_b=tb)
    return ops.reshape(out, [x.shape[0]] + list(out.shape[-2:])) if four else out


@aten("bmm.default")
def _bmm_conv(cx, a):
    return _bmm(cx, a["self"], a["mat2"])


@aten("baddbmm.default")
def _baddbmm(cx, a):
    y = _bmm(cx, a["batch1"], a["batch2"], ("batch1", "batch2"))
    if a["alpha"] != 1:
        y = ops.mul(y, a["alpha"])
    if a["beta"] != 0:
        (b,), _ = operands(cx, [a["self"]], cx.out_dtype())
        y = ops.add(y, ops.mul(b, a["beta"]) if a["beta"] != 1 else b)
    return y


@aten("linear.default")
def _linear(cx, a):
    bias = a["bias"]
    return ops.linear(cx.tensor(a["input"]), cx.tensor(a["weight"]),
                      None if bias is None else cx.tensor(bias))


@aten("matmul.default")
def _matmul(cx, a):
    x, y = cx.tensor(a["self"]), cx.tensor(a["other"])
    if x.ndim < 2 or y.ndim < 2:
        # torch's 1-D rules: a vector is a row (left) or a column (right), the unit dim then dropped
        x1, y1 = x.ndim == 1, y.ndim == 1
        x = ops.unsqueeze(x, 0) if x1 else x
        y = ops.unsqueeze(y, 1) if y1 else y
        out = ops.matmul(x, y)
        if x1:
            out = ops.squeeze(out, [out.ndim - 2])
        if y1:
            out = ops.squeeze(out, [out.ndim - 1])
        return out
    return ops.matmul(x, y)
