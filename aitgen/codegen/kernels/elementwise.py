"""Element-wise ops -> one kernel each: the math renders once as an inline functor; the skeleton
(flat loop, or broadcast strides with a contiguous inner loop) is the backend's template."""
from __future__ import annotations

from ...ir.dims import Dim, IntImm, prod
from ...ir.dtype import DType
from ...ir.op import Op, OpKind
from ...ops.registry import Category, registered_kinds, get_opdef
from ..cexpr import COMPUTE, STORAGE, load, store
from ..lower import LowerContext, lowering
from ..spec import KernelCall, KernelSpec

_SQRT1_2 = "0.7071067811865476f"
_K0 = "0.7978845608028654f"  # sqrt(2/pi)

# C++ of each op over compute-type operands a0, a1, a2 (T: the compute type).
_EXPR = {
    OpKind.RELU: "(a0 > T(0) ? a0 : T(0))",
    OpKind.SILU: "a0 / (1.0f + std::exp(-a0))",
    OpKind.SIGMOID: "1.0f / (1.0f + std::exp(-a0))",
    OpKind.TANH: "std::tanh(a0)",
    OpKind.HARDSWISH: "a0 * std::min(std::max(a0 + 3.0f, 0.0f), 6.0f) / 6.0f",
    OpKind.EXP: "std::exp(a0)",
    OpKind.LOG: "std::log(a0)",
    OpKind.SQRT: "std::sqrt(a0)",
    OpKind.RSQRT: "1.0f / std::sqrt(a0)",
    OpKind.RECIPROCAL: "1.0f / a0",
    OpKind.ABS: "(a0 < T(0) ? -a0 : a0)",
    OpKind.NEG: "-a0",
    OpKind.ERF: "std::erf(a0)",
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
            return f"0.5f * a0 * (1.0f + std::tanh({_K0} * (a0 + 0.044715f * a0 * a0 * a0)))"
        return f"0.5f * a0 * (1.0f + std::erf(a0 * {_SQRT1_2}))"
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


@lowering("cpu", *[k for k in registered_kinds() if get_opdef(k).category is Category.ELEMENTWISE])
def lower_elementwise(op: Op, ctx: LowerContext) -> list[KernelCall]:
    out = op.outputs[0]
    ins = op.inputs
    operand_dtypes = [t.dtype for t in ins]
    # where: the condition computes as bool, the branches in their own type
    ct = COMPUTE[ins[-1].dtype] if op.kind is OpKind.WHERE else COMPUTE[ins[0].dtype]
    args = [{"t": STORAGE[d], "ct": COMPUTE[d], "load": load(d, f"in{i}", "IDX")} for i, d in enumerate(operand_dtypes)]
    common = dict(expr=op_expr(op), compute=ct, out_t=STORAGE[out.dtype], out_ct=COMPUTE[out.dtype],
                  store_fn=store(out.dtype, "fn(" + ", ".join(f"a{i}" for i in range(len(ins))) + ")"), args=args)
    flat = all(tuple(t.shape) == tuple(out.shape) for t in ins)
    if flat or len(out.shape) == 0:
        spec = KernelSpec.make(ctx.template("elementwise.cpp.j2"), mode="flat", rank=1,
                               inner=[1] * len(ins), **common)
        return [KernelCall(spec, [out, *ins], [prod(out.shape)], op.name or op.kind.value)]
    strides = [broadcast_strides(t.shape, out.shape) for t in ins]
    inner = [0 if s[-1] == 0 else 1 for s in strides]
    spec = KernelSpec.make(ctx.template("elementwise.cpp.j2"), mode="strided", rank=len(out.shape),
                           inner=inner, **common)
    dims: list = list(out.shape)
    for s in strides:
        dims.extend(s)
    return [KernelCall(spec, [out, *ins], dims, op.name or op.kind.value)]
