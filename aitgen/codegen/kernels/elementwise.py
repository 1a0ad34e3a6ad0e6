"""Element-wise ops and fused element-wise groups -> one kernel each.

The math renders once, as one inline function per expression node (expr_cpp), which GEMM/conv
epilogues reuse; the skeleton is backends/cpu/templates/elementwise.cpp.j2. A single op is an
expression of one node, so both take the same path. The kernel walks the outputs' shape after
merging neighbouring dims that every operand reads alike (dense or broadcast), so a bias add over
[batch, seq, 768] is a [batch*seq, 768] loop and a same-shape DAG is one flat loop.
"""
from __future__ import annotations

from ...ir.dims import Dim, IntImm, prod
from ...ir.dtype import DType
from ...ir.op import Op, OpKind
from ...ops.registry import Category, registered_kinds, get_opdef
from ..cexpr import COMPUTE, STORAGE, load, store
from ..lower import LowerContext, lowering
from ..spec import KernelCall, KernelSpec

_K0 = "0.7978845608028654f"  # sqrt(2/pi)

# C++ of each op over compute-type operands a0, a1, a2 (T: the compute type).
_EXPR = {
    OpKind.RELU: "(a0 > T(0) ? a0 : T(0))",
    # Vectorisable forms from cpu_vmath.h: a libm call in the loop body keeps it scalar.
    OpKind.SILU: "a0 * ait::sigmoid_poly(a0)",
    OpKind.SIGMOID: "ait::sigmoid_poly(a0)",
    OpKind.TANH: "ait::tanh_poly(a0)",
    OpKind.HARDSWISH: "a0 * std::min(std::max(a0 + 3.0f, 0.0f), 6.0f) / 6.0f",
    OpKind.EXP: "std::exp(a0)",
    OpKind.LOG: "std::log(a0)",
    OpKind.SQRT: "std::sqrt(a0)",
    OpKind.RSQRT: "1.0f / std::sqrt(a0)",
    OpKind.RECIPROCAL: "1.0f / a0",
    OpKind.ABS: "(a0 < T(0) ? -a0 : a0)",
    OpKind.NEG: "-a0",
    OpKind.ERF: "ait::erf_poly(a0)",
    OpKind.LOGICAL_NOT: "!a0",
    OpKind.CAST: "a0",
    OpKind.ADD: "a0 + a1",
    OpKind.SUB: "a0 - a1",
    OpKind.MUL: "a0 * a1",
    OpKind.POW: "std::pow(a0, a1)",
    OpKind.MAXIMUM: "(a0 > a1 || a0 != a0 ? a0 : a1)",  # numpy propagates NaN
    OpKind.MINIMUM: "(a0 < a1 || a0 != a0 ? a0 : a1)",
    OpKind.EQUAL: "a0 == a1",
    OpKind.NOT_EQUAL: "a0 != a1",
    OpKind.LESS: "a0 < a1",
    OpKind.LESS_EQUAL: "a0 <= a1",
    OpKind.GREATER: "a0 > a1",
    OpKind.GREATER_EQUAL: "a0 >= a1",
    OpKind.LOGICAL_AND: "a0 && a1",
    OpKind.LOGICAL_OR: "a0 || a1",
    OpKind.WHERE: "(a0 ? a1 : a2)",
}


def op_expr(op: Op) -> str:
    """The op's math as a C++ expression of a0.. in the operands' compute type."""
    return node_expr(op.kind, op.attrs, [t.dtype for t in op.inputs], op.outputs[0].dtype)


def node_expr(kind: OpKind, a, operand_dtypes: list[DType], out_dtype: DType) -> str:
    """One element-wise op (of a graph or of a fused Expr) as C++ over a0.., type T."""
    k = kind
    if k is OpKind.GELU:
        if a.approximate == "tanh":
            return f"0.5f * a0 * (1.0f + ait::tanh_poly({_K0} * (a0 + 0.044715f * a0 * a0 * a0)))"
        return "ait::gelu_erf(a0)"
    if k is OpKind.CLAMP:
        lo = "a0" if a.min is None else f"std::max(a0, T({_lit(a.min)}))"
        return lo if a.max is None else f"std::min({lo}, T({_lit(a.max)}))"
    if k is OpKind.DIV:
        return "a0 / a1" if operand_dtypes[0].is_float else "(a1 == T(0) ? T(0) : T(a0 / a1))"
    if k is OpKind.CAST and out_dtype is DType.bool:
        return "a0 != T(0)"
    return _EXPR[k]


def node_compute_type(kind: OpKind, operand_dtypes: list[DType]) -> str:
    """T of a node: its operands' compute type (where: the branches')."""
    return COMPUTE[operand_dtypes[-1]] if kind is OpKind.WHERE else COMPUTE[operand_dtypes[0]]


def expr_cpp(expr, input_dtypes: list[DType], prefix: str = "n") -> dict:
    """C++ for a fused Expr: one inline function per node and the statements that chain them.

    Slots are `s<i>` variables of their compute type; the caller loads s0..s{num_inputs-1} and
    stores the output slots. Returns {"functions": [...], "statements": [...], "slot_types": [...]}.
    """
    slot_dtypes = expr.slot_dtypes(input_dtypes)
    functions, statements = [], []
    for i, n in enumerate(expr.nodes):
        slot = expr.num_inputs + i
        operand_dtypes = [slot_dtypes[a] for a in n.args]
        t = node_compute_type(n.kind, operand_dtypes)
        params = ", ".join(f"{COMPUTE[d]} a{j}" for j, d in enumerate(operand_dtypes))
        functions.append(f"inline {COMPUTE[n.dtype]} {prefix}{slot}({params}) {{ using T = {t}; "
                         f"return {node_expr(n.kind, n.attrs, operand_dtypes, n.dtype)}; }}")
        args = ", ".join(f"s{a}" for a in n.args)
        statements.append(f"const {COMPUTE[n.dtype]} s{slot} = {prefix}{slot}({args});")
    return {"functions": functions, "statements": statements, "slot_types": [COMPUTE[d] for d in slot_dtypes]}


def _lit(v: float) -> str:
    return repr(float(v)) + "f" if abs(v) != float("inf") else ("INFINITY" if v > 0 else "-INFINITY")


def _dense_strides(shape: tuple[Dim, ...]) -> list[Dim]:
    out, acc = [], IntImm(1)
    for d in reversed(shape):
        out.append(acc)
        acc = acc * d
    return out[::-1]


def broadcast_strides(inp_shape: tuple[Dim, ...], out_shape: tuple[Dim, ...]) -> list[Dim]:
    """Strides of an operand read at the output's indices: 0 along broadcast dims."""
    r = len(out_shape)
    padded = (IntImm(1),) * (r - len(inp_shape)) + tuple(inp_shape)
    dense = _dense_strides(padded)
    return [IntImm(0) if (p == 1 and o != 1) else s for p, o, s in zip(padded, out_shape, dense)]


# One OpenMP fork costs a few microseconds: below this much work (elements x node cost) a kernel
# runs on one thread. Transcendental nodes cost about as much as 8 cheap ones.
PAR_WORK = 65536
_COSTLY = {OpKind.GELU, OpKind.ERF, OpKind.TANH, OpKind.SIGMOID, OpKind.SILU, OpKind.EXP, OpKind.LOG,
           OpKind.POW, OpKind.SQRT, OpKind.RSQRT}


def single_op_expr(op: Op):
    """A lone element-wise op as an expression of one node, so it takes the fused path."""
    from ...ops.fused import Expr, ExprNode
    n = len(op.inputs)
    node = ExprNode(op.kind, op.attrs, tuple(range(n)), op.outputs[0].dtype)
    return Expr(n, (node,), (n,))


def access_plan(out_shape, in_shapes) -> tuple[list[Dim], list[str], list[list[Dim]]]:
    """How each operand is read over the output: (merged dims, kinds, outer strides).

    Static size-1 dims of the output are dropped; neighbouring dims merge when every operand reads
    both alike (dense in both, or broadcast in both). An operand's kind is "full" (the output's
    shape: read at the output's index), "scalar" (one element) or "strided" (broadcast in some
    dims); a strided operand gets a stride per merged dim but the innermost (which is 1 or 0).
    """
    r = len(out_shape)
    keep = [j for j in range(r) if not (out_shape[j].is_static and out_shape[j].value == 1)]
    cls = []
    for s in in_shapes:
        padded = (IntImm(1),) * (r - len(s)) + tuple(s)
        cls.append(["d" if padded[j] == out_shape[j] else "b" for j in keep])
    groups: list[list[int]] = []  # positions in keep
    for k in range(len(keep)):
        if groups and all(c[k] == c[groups[-1][-1]] for c in cls):
            groups[-1].append(k)
        else:
            groups.append([k])
    dims = [prod([out_shape[keep[k]] for k in g]) for g in groups]
    kinds, strides = [], []
    for c in cls:
        gc = [c[g[0]] for g in groups]
        if all(x == "d" for x in gc):
            kinds.append("full")
            strides.append([])
        elif all(x == "b" for x in gc):
            kinds.append("scalar")
            strides.append([])
        else:
            st, acc = [], IntImm(1)
            for m in reversed(range(len(groups))):
                st.append(acc if gc[m] == "d" else IntImm(0))
                if gc[m] == "d":
                    acc = acc * dims[m]
            kinds.append("strided")
            strides.append(st[::-1])
    return dims, kinds, strides


def lower_expr(expr, outs, ins, ctx: LowerContext, label: str) -> list[KernelCall]:
    """One kernel evaluating `expr` over `ins` into `outs` (all of the outputs' shape)."""
    out_shape = tuple(outs[0].shape)
    in_dtypes = [t.dtype for t in ins]
    cpp = expr_cpp(expr, in_dtypes)
    dims, kinds, strides = access_plan(out_shape, [t.shape for t in ins])
    flat = "strided" not in kinds
    args, nstrided = [], 0
    for i, (t, kind) in enumerate(zip(ins, kinds)):
        if kind == "scalar":
            idx_flat = idx_strided = "0"
        elif kind == "full":
            idx_flat, idx_strided = "i", "row + i"
        else:
            inner = strides[i][-1] != 0
            idx_flat, idx_strided = None, f"base{nstrided}" + (" + i" if inner else "")
            nstrided += 1
        args.append({"t": STORAGE[t.dtype], "ct": COMPUTE[t.dtype],
                     "load_flat": load(t.dtype, f"in{i}", idx_flat) if idx_flat else "",
                     "load_strided": load(t.dtype, f"in{i}", idx_strided)})
    slot_dtypes = expr.slot_dtypes(in_dtypes)
    stores = [{"t": STORAGE[o.dtype], "value": store(o.dtype, f"s{slot}")} for o, slot in zip(outs, expr.outputs)]
    for o, slot in zip(outs, expr.outputs):
        assert slot_dtypes[slot] == o.dtype, f"{label}: output dtype {o.dtype} vs expression {slot_dtypes[slot]}"
    weight = sum(8 if n.kind in _COSTLY else 1 for n in expr.nodes)
    common = dict(text=str(expr), functions=cpp["functions"], statements=cpp["statements"], args=args,
                  outs=stores, par_threshold=max(4096, PAR_WORK // max(weight, 1)))
    ptrs = [*outs, *ins]
    if flat:
        spec = KernelSpec.make(ctx.template("elementwise.cpp.j2"), mode="flat", rank=1, nstrided=0, **common)
        return [KernelCall(spec, ptrs, [prod(out_shape)], label)]
    spec = KernelSpec.make(ctx.template("elementwise.cpp.j2"), mode="strided", rank=len(dims),
                           nstrided=nstrided, **common)
    call_dims: list = list(dims)
    for kind, st in zip(kinds, strides):
        if kind == "strided":
            call_dims.extend(st[:-1])
    return [KernelCall(spec, ptrs, call_dims, label)]


@lowering("cpu", *[k for k in registered_kinds() if get_opdef(k).category is Category.ELEMENTWISE
                   and k is not OpKind.FUSED_ELEMENTWISE])
def lower_elementwise(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return lower_expr(single_op_expr(op), op.outputs, op.inputs, ctx, op.name or op.kind.value)


@lowering("cpu", OpKind.FUSED_ELEMENTWISE)
def lower_fused_elementwise(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return lower_expr(op.attrs.expr, op.outputs, op.inputs, ctx, op.name or op.kind.value)
