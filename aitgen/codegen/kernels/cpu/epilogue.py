"""The fused epilogue of a oneDNN kernel (gemm, bmm, conv2d): oneDNN post-ops where they express
it, else a loop over the output in the same kernel, right after the oneDNN call.

Post-ops are what make it fast: oneDNN applies them to the accumulators before the store, so the
result goes to memory once. They express a chain, where each node reads the previous value and
at most one operand: eltwise post-ops for the unary kinds (and x - e as -x + e), binary post-ops
for add/sub/mul/div with an operand that has the output's storage type and a shape oneDNN's
descriptor of the output can broadcast (described in the output's coordinates: a folded GEMM's
[M, N] takes [1, N], [M, N], [M, 1] and scalars). Anything else (a DAG reading the accumulator
twice, compares and where, casts, a broadcast the folded [M, N] cannot describe, binary operands
of float16, which computes through float32 scratch) is the loop.

Only post-ops that keep the op's semantics on NaN and +-inf are used (tests/security/
test_nan_semantics.py). oneDNN's relu, clip and binary max/min are max/min instructions that
return the other operand for a NaN (relu(NaN) = 0, where the oracle and torch give NaN), its
gelu_erf gives NaN for +inf, exp gives +inf for NaN, pow(x, -0.5) gives 0 for -inf and log is off
for subnormals. No chain of post-ops can say relu exactly (a max drops NaN; any product with 0
turns -inf into NaN), so those kinds run in the loop: one more (vectorised) pass over the output
after oneDNN's. Measured on Model.run, medians of interleaved runs: a [128, 768] x [768, 3072]
GEMM + bias + relu +0.1..1.7%, the same + erf GELU +2.6..5%, a 3x3 64-channel conv on 56x56 +
bias + relu +0.6..0.9%. Relu, erf GELU and clamps are the exception (GUARDED): post-ops that the
kernel runs only on calls whose operands prove every value they read finite.

Both are rendered whenever there is an epilogue: oneDNN may take some post-ops only in a slower
implementation (a per-row [M, 1] operand makes the matmul fall back to its reference kernel), so
the kernel compares the implementation with and without post-ops when it creates a primitive and
runs the loop instead when they differ. The loop is also what an empty reduction (K = 0) runs.

Layout of the kernel's dims: the descriptors of the oneDNN call, then one (sizes, strides) pair per
binary post-op operand (all part of the primitive cache key), then the constants version when the
weight is prepacked, then the loop's dims: the output's shape and each operand's broadcast strides.
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

from ....errors import UnsupportedOpError
from ....ir.dims import Dim, IntImm, prod
from ....ir.dtype import DType
from ....ir.op import Op, OpKind
from ....ir.tensor import Tensor
from ....ops.fused import Epilogue, split_operands
from ....ops.qlinear import extra_scales
from ...cexpr import COMPUTE, STORAGE, load, store
from ..common.access import broadcast_strides
from ..common.expr import expr_cpp

Md = tuple[list[Dim], list[Dim]]
DstMd = Callable[[Sequence[Dim]], Optional[Md]]  # an operand's shape -> its desc in dst coordinates

# Unary kinds -> (oneDNN eltwise algorithm, alpha, beta); the names are PostAlg in onednn_kernels.h.
# RELU, CLAMP, GELU (erf), EXP, LOG and RSQRT are left to the loop: see the module's docstring.
_ELTWISE = {
    OpKind.TANH: ("tanh", 0.0, 0.0),
    OpKind.SIGMOID: ("logistic", 0.0, 0.0),
    OpKind.SILU: ("swish", 1.0, 0.0),
    OpKind.HARDSWISH: ("hardswish", 1.0 / 6.0, 0.5),  # x * clip(x / 6 + 1/2, 0, 1): NaN * ... = NaN
    OpKind.ABS: ("abs", 0.0, 0.0),
    OpKind.SQRT: ("sqrt", 0.0, 0.0),
    OpKind.NEG: ("linear", -1.0, 0.0),           # alpha * x + beta
    OpKind.RECIPROCAL: ("pow", 1.0, -1.0),       # alpha * x ^ beta
}
_BINARY = {OpKind.ADD: "add", OpKind.SUB: "sub", OpKind.MUL: "mul", OpKind.DIV: "div"}
# A binary post-op operand's type when it is not the destination's (PostOp::src1_dt in onednn_kernels.h)
QDT = {DType.int8: 1, DType.uint8: 2, DType.float32: 3}
_COMMUTATIVE = {OpKind.ADD, OpKind.MUL}


# int8 kernels (QGEMM / QCONV2D) take relu as oneDNN's eltwise post-op, not the loop: their
# accumulator is an integer, so a NaN could only come from a float epilogue operand (a residual),
# and an int8 model is approximate by design. Where one does, oneDNN's relu gives 0 and the
# oracle NaN. What it saves: ResNet-50's bottleneck convs (relu(conv + residual)) skip a pass
# over their float32 result.
INT8_RELU = True
# And GELU (erf), while nothing but the accumulator and bias reaches it (no float operand before it
# in the chain): its input is then finite, and oneDNN's gelu_erf differs from the loop only on +inf.
# What it saves: BERT's FFN (gelu(x W1 + b)) skips a pass over its float32 result, and its result
# can be stored int8 for the next GEMM (quantize_int8._requantize).
INT8_GELU = True
# Other kernels (float32, bfloat16, float16 storage) take relu and erf GELU as post-ops under a
# guard (backends/cpu/include/aitgen/onednn_guard.h): the kernel bounds the values they read from
# the operands' magnitudes and runs the plain primitive and the loop when the bound does not prove
# them finite, so NaN and +-inf come out as the op defines them. A guarded chain holds only what the
# guard can bound: the accumulator, bias, add / sub / mul operands, negation, relu, GELU and clamps
# (relu6; oneDNN's clip is a min and a max, which drop NaN). What it saves on an AMX Xeon
# (bfloat16, 2 threads, benchmarks/ab_workdirs.py medians): ResNet-50's relu(conv + residual) and
# BERT's FFN GELU skip a pass over their results, 10.1 -> 7.06 ms and 28.4 -> about 24.0 ms (the
# scans cost 0.57 ms of ResNet-50's, against post-ops without a guard).
GUARDED = True
_GUARDABLE = {"relu", "gelu_erf", "clip", "linear", "add", "sub", "mul"}


def own_operands(op: Op) -> tuple[list[Tensor], list[Tensor]]:
    """(the op's own operands, its epilogue's extra operands)."""
    return split_operands(op.inputs, op.attrs)


def _eltwise(n) -> Optional[dict]:
    if n.kind is OpKind.GELU and n.attrs.approximate == "tanh":
        return dict(alg="gelu_tanh", alpha=0.0, beta=0.0, src1=-1)
    if n.kind in _ELTWISE:
        alg, a, b = _ELTWISE[n.kind]
        return dict(alg=alg, alpha=a, beta=b, src1=-1)
    return None


def _post_ops(ep: Epilogue, out: Tensor, extras: list[Tensor], convert: bool, dst_md: DstMd,
              int8: bool = False, scales: Sequence[float] = (), guard: bool = False) -> Optional[list]:
    """The chain as post-ops: [{alg, alpha, beta, src1 (extra index or -1), md (a Md or None),
    dt (src1's type: -1 the destination's, else a QDT code), guard}]. An int8 kernel (`int8`) reads float32
    operands whatever its destination stores, and adds a quantised one (scales[j] > 0: q * scale) as
    (v / scale + q) * scale: oneDNN's binary post-ops take no scale of their own. `guard`: relu and
    erf GELU may be post-ops under the kernel's guard (GUARDED)."""
    ops = _chain(ep, out, extras, convert, dst_md, int8, scales, guard and not convert)
    if ops and any(p.get("guard") for p in ops) and not all(p["alg"] in _GUARDABLE for p in ops):
        return None  # a chain the guard cannot bound: the loop does it all
    return ops


def _chain(ep: Epilogue, out: Tensor, extras: list[Tensor], convert: bool, dst_md: DstMd,
           int8: bool, scales: Sequence[float], guard: bool) -> Optional[list]:
    e = ep.expr
    cur, ops = 0, []
    for i, n in enumerate(e.nodes):
        if not n.dtype.is_float:
            return None
        if guard and n.args == (cur,) and (n.kind is OpKind.RELU or
                                          (n.kind is OpKind.GELU and n.attrs.approximate != "tanh")):
            ops.append(dict(alg="relu" if n.kind is OpKind.RELU else "gelu_erf", alpha=0.0, beta=0.0, src1=-1,
                            guard=True))
        elif guard and n.args == (cur,) and n.kind is OpKind.CLAMP and _clip_bounds(n.attrs) is not None:
            lo, hi = _clip_bounds(n.attrs)   # relu6 and other clamps: oneDNN's clip max(lo, min(hi, x))
            ops.append(dict(alg="clip", alpha=lo, beta=hi, src1=-1, guard=True))
        elif int8 and n.kind is OpKind.RELU and n.args == (cur,):
            ops.append(dict(alg="relu", alpha=0.0, beta=0.0, src1=-1))   # see INT8_RELU
        elif (int8 and INT8_GELU and n.kind is OpKind.GELU and n.attrs.approximate != "tanh" and n.args == (cur,)
              and not any(p["src1"] >= 0 for p in ops)):
            ops.append(dict(alg="gelu_erf", alpha=0.0, beta=0.0, src1=-1))   # see INT8_GELU
        elif n.kind is OpKind.CAST and n.args == (cur,) and n.dtype is DType.float32 is out.dtype:
            pass  # the widening cast: the primitive already writes float32 (f32_dst), nothing to do
        elif len(n.args) == 1 and n.args[0] == cur and (p := _eltwise(n)) is not None:
            ops.append(p)
        elif len(n.args) == 2 and n.kind in _BINARY and cur in n.args and n.args[0] != n.args[1]:
            other = n.args[1] if n.args[0] == cur else n.args[0]
            if other == 0 or other >= e.num_inputs or convert:
                return None  # the accumulator twice, another node, or float16 scratch
            x = extras[other - 1]
            md = dst_md(x.shape)
            scale = scales[other - 1] if scales else 0.0
            if md is None or not (x.dtype == out.dtype or (int8 and (x.dtype is DType.float32 or scale))):
                return None
            dt = QDT[DType.float32] if int8 and x.dtype is DType.float32 else QDT.get(x.dtype, -1) if scale else -1
            if scale:   # int8 or uint8 holding x / scale
                if n.kind is not OpKind.ADD:
                    return None
                ops += [dict(alg="linear", alpha=1.0 / scale, beta=0.0, src1=-1),
                        dict(alg="add", alpha=0.0, beta=0.0, src1=other - 1, md=md, dt=dt),
                        dict(alg="linear", alpha=scale, beta=0.0, src1=-1)]
            elif n.args[0] != cur and n.kind not in _COMMUTATIVE:
                if n.kind is not OpKind.SUB:
                    return None
                ops.append(dict(alg="linear", alpha=-1.0, beta=0.0, src1=-1))  # e - x = -x + e
                ops.append(dict(alg="add", alpha=0.0, beta=0.0, src1=other - 1, md=md, dt=dt))
            else:
                ops.append(dict(alg=_BINARY[n.kind], alpha=0.0, beta=0.0, src1=other - 1, md=md, dt=dt))
        else:
            return None
        cur = e.num_inputs + i
    return ops if e.outputs[0] == cur else None


def _clip_bounds(a) -> Optional[tuple[float, float]]:
    """(lo, hi) of a clamp as oneDNN's clip takes them, FLT_MAX for an open side (the guard admits
    only values far inside it), or None where clip differs from the op: bounds that are not finite
    or cross (numpy's clip gives the upper one there, oneDNN's the lower)."""
    flt_max = 3.4028234663852886e38
    lo = -flt_max if a.min is None else a.min
    hi = flt_max if a.max is None else a.max
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        return None
    return lo, hi


def plan(op: Op, out: Tensor, extras: list[Tensor], *, first_ptr: int, key_offset: int, prepack: bool,
         convert: bool, dst_md: DstMd, rank: int, out_strides=None,
         post_ops: bool = True, own_dtype: Optional[DType] = None) -> tuple[dict, list[Dim], list[Dim]]:
    """Kernel params (`epilogue`, `post_ops`), dims that join the primitive key (after key_offset),
    and the loop's dims (after the constants version). `rank` is the rank of dst_md's descriptors.
    `out_strides`: where the output lies at strides of its own (a slice of a concat written in
    place, the memory plan), its strides in its own shape's order; the loop then writes there."""
    ep: Optional[Epilogue] = getattr(op.attrs, "epilogue", None)
    if ep is None:
        return dict(epilogue=None, post_ops=[], post_rank=0), [], []
    # own_dtype: the op's own result (slot 0), when the epilogue widens it (bf16 -> float32: the
    # kernel's primitive then writes float32, and the loop below reads that back as slot 0).
    own = own_dtype or out.dtype
    int8 = op.kind in (OpKind.QGEMM, OpKind.QCONV2D)
    scales = extra_scales(op.attrs, len(extras)) if int8 else (0.0,) * len(extras)
    requant = int8 and op.attrs.out_act is not None
    # the values the epilogue computes on: a quantised extra is read as float32(q) * scale
    ext_dtypes = [DType.float32 if sc else x.dtype for x, sc in zip(extras, scales)]
    result = DType.float32 if requant else out.dtype   # a requantised result: after the epilogue
    if ep.expr.slot_dtypes([own] + ext_dtypes)[ep.expr.outputs[0]] != result:
        raise UnsupportedOpError(f"{op.kind.value} '{op.name}': the epilogue's result type is not the op's")
    if own is not result and not (own is DType.bfloat16 and result is DType.float32):
        raise UnsupportedOpError(f"{op.kind.value} '{op.name}': an epilogue from {own.value} to {out.dtype.value} "
                                 "has no CPU kernel (only bfloat16 -> float32)")
    key: list[Dim] = []
    post = (_post_ops(ep, out, extras, convert, dst_md, int8 and INT8_RELU, scales, guard=GUARDED and not int8)
            if post_ops else None) or []
    if requant and not post:
        # the kernel stores int8: no loop can follow it (quantize_int8 makes only post-op forms)
        raise UnsupportedOpError(f"{op.kind.value} '{op.name}': a requantised result with an epilogue that has "
                                 "no oneDNN post-op form")
    for p in post:
        p.setdefault("dt", -1)
        p.setdefault("guard", False)
        md = p.pop("md", None)
        p["src1"] = first_ptr + p["src1"] if p["src1"] >= 0 else -1
        p["md"] = key_offset + len(key) if md is not None else -1
        if md is not None:
            key += list(md[0]) + list(md[1])
        p["alpha"], p["beta"] = _flt(p["alpha"]), _flt(p["beta"])
    loop_at = key_offset + len(key) + (1 if prepack else 0)
    shape = list(out.shape)
    loop_dims: list[Dim] = list(shape)
    args = []
    for j, (x, sc) in enumerate(zip(extras, scales)):
        strides = broadcast_strides(x.shape, out.shape)
        loop_dims += strides
        ld = load(x.dtype, f"e{j}", "IDX")
        args.append(dict(t=STORAGE[x.dtype], ct="float" if sc else COMPUTE[x.dtype],
                         load=f"(static_cast<float>({ld}) * {_flt(sc)})" if sc else ld, ptr=first_ptr + j,
                         inner=0 if strides[-1] == 0 else 1))
    if out_strides is not None:
        loop_dims += list(out_strides)
    cpp = expr_cpp(ep.expr, [own] + ext_dtypes, prefix="ep")
    out_slot = ep.expr.outputs[0]
    params = dict(functions=cpp["functions"], statements=cpp["statements"], rank=len(shape), dims_at=loop_at,
                  args=args, acc=load(out.dtype, "orow", "i"), acc_t=COMPUTE[out.dtype], out_t=STORAGE[out.dtype],
                  store=store(out.dtype, f"s{out_slot}"), value=f"s{out_slot}",
                  # float16 rows a block at a time through F16C (cpu_convert.h), not per element;
                  # bfloat16's per-element form (a shift) already vectorises, as in elementwise.py
                  blocked=out.dtype is DType.float16,
                  out_strided=out_strides is not None, loop=not requant)
    return dict(epilogue=params, post_ops=post, post_rank=rank), key, loop_dims


def _flt(v: float) -> str:
    """A float literal for the config. Post-op parameters are the fixed constants of _ELTWISE: an
    infinite one has no C++ literal here, and standing in FLT_MAX for it would clamp +-inf."""
    assert math.isfinite(v), v
    return repr(float(v)) + "f"


# -- operand descriptors in the coordinates of oneDNN's dst ------------------------------------

def _padded(shape: Sequence[Dim], rank: int) -> list[Dim]:
    return [IntImm(1)] * (rank - len(shape)) + list(shape)


def _dense(shape: Sequence[Dim]) -> list[Dim]:
    out, acc = [], IntImm(1)
    for d in reversed(list(shape)):
        out.append(acc)
        acc = acc * d
    return out[::-1]


def folded_md(out_shape: Sequence[Dim]) -> DstMd:
    """dst [M, N] over an output [..., N] whose leading dims fold into M."""
    lead, n = list(out_shape[:-1]), out_shape[-1]

    def md(shape: Sequence[Dim]) -> Optional[Md]:
        p = _padded(shape, len(out_shape))
        if all(a == b for a, b in zip(p, out_shape)):
            m = prod(lead)
            return [m, n], [n, IntImm(1)]
        last = p[-1]
        if all(a == 1 for a in p[:-1]):
            return [IntImm(1), last], [last, IntImm(1)]
        if last == 1 and all(a == b for a, b in zip(p[:-1], lead)):
            return [prod(lead), IntImm(1)], [IntImm(1), IntImm(1)]
        return None
    return md


def grouped_md(out_shape: Sequence[Dim], groups: Sequence[Sequence[int]]) -> DstMd:
    """dst [G1, .., Gk, N] over an output [..., N] whose leading dims fold into the runs `groups`
    (ops.operand_views.row_groups): an operand maps when each run is all its own or all 1s."""
    lead = list(out_shape[:-1])

    def md(shape: Sequence[Dim]) -> Optional[Md]:
        p = _padded(shape, len(out_shape))
        sizes: list[Dim] = []
        for g in groups:
            if all(p[i] == lead[i] for i in g):
                sizes.append(prod([lead[i] for i in g]))
            elif all(p[i] == 1 for i in g):
                sizes.append(IntImm(1))
            else:
                return None
        sizes.append(p[-1])
        return sizes, _dense(sizes)  # a run of its own dims is dense in it: they fold
    return md


def batched_md(out_shape: Sequence[Dim]) -> DstMd:
    """dst with the output's own shape (a batched matmul): broadcast dims are sizes of 1."""
    def md(shape: Sequence[Dim]) -> Optional[Md]:
        p = _padded(shape, len(out_shape))
        return p, _dense(p)
    return md


def nhwc_md(out_shape: Sequence[Dim]) -> DstMd:
    """dst [N, C, H, W] (logical) over an NHWC output."""
    def md(shape: Sequence[Dim]) -> Optional[Md]:
        p = _padded(shape, 4)
        s = _dense(p)
        return [p[0], p[3], p[1], p[2]], [s[0], s[3], s[1], s[2]]
    return md
