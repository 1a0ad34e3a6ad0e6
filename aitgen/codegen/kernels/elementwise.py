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
from ...ops.fused import single_op_expr  # noqa: F401 - re-exported: backends lower lone ops through it
from ...ops.registry import Category, registered_kinds, get_opdef
from ..cexpr import COMPUTE, STORAGE, load, store
from ..lower import LowerContext, lowering
from ..spec import KernelCall, KernelSpec

_K0 = "0.7978845608028654f"  # sqrt(2/pi)

# C++ of each op over compute-type operands a0, a1, a2 (T: the compute type).
_EXPR = {
    OpKind.RELU: "(a0 > T(0) || a0 != a0 ? a0 : T(0))",  # NaN stays NaN (numpy's maximum)
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
    # Added for the ONNX importer: std:: functions only, so CUDA device code compiles them too.
    OpKind.SIN: "std::sin(a0)",
    OpKind.COS: "std::cos(a0)",
    OpKind.TAN: "std::tan(a0)",
    OpKind.ASIN: "std::asin(a0)",
    OpKind.ACOS: "std::acos(a0)",
    OpKind.ATAN: "std::atan(a0)",
    OpKind.SINH: "std::sinh(a0)",
    OpKind.COSH: "std::cosh(a0)",
    OpKind.ASINH: "std::asinh(a0)",
    OpKind.ACOSH: "std::acosh(a0)",
    OpKind.ATANH: "std::atanh(a0)",
    OpKind.EXPM1: "std::expm1(a0)",
    OpKind.LOG1P: "std::log1p(a0)",
    OpKind.FLOOR: "std::floor(a0)",
    OpKind.CEIL: "std::ceil(a0)",
    OpKind.ROUND: "std::nearbyint(a0)",  # the default rounding mode: half to even, as numpy
    OpKind.SIGN: "(a0 != a0 ? a0 : T((a0 > T(0)) - (a0 < T(0))))",  # NaN stays NaN
    OpKind.ISNAN: "(a0 != a0)",
    OpKind.ISINF: "(a0 == INFINITY || a0 == -INFINITY)",
    OpKind.BITWISE_NOT: "T(~a0)",
    OpKind.BITWISE_AND: "T(a0 & a1)",
    OpKind.BITWISE_OR: "T(a0 | a1)",
    OpKind.BITWISE_XOR: "T(a0 ^ a1)",
}

# Integer and float spellings of the two remainders; an integer remainder by 0 gives 0 (the
# oracle does the same) instead of a trap.
_MOD_FLOAT = ("(std::fmod(a0, a1) != T(0) && ((std::fmod(a0, a1) < T(0)) != (a1 < T(0)))"
              " ? std::fmod(a0, a1) + a1 : std::fmod(a0, a1))")
_MOD_INT = "(a1 == T(0) ? T(0) : (a0 % a1 != T(0) && ((a0 % a1 < T(0)) != (a1 < T(0))) ? T(a0 % a1 + a1) : T(a0 % a1)))"


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
    if k is OpKind.MOD:
        return _MOD_FLOAT if operand_dtypes[0].is_float else _MOD_INT
    if k is OpKind.FMOD:
        return "std::fmod(a0, a1)" if operand_dtypes[0].is_float else "(a1 == T(0) ? T(0) : T(a0 % a1))"
    return _EXPR[k]


def node_compute_type(kind: OpKind, operand_dtypes: list[DType]) -> str:
    """T of a node: its operands' compute type (where: the branches')."""
    return COMPUTE[operand_dtypes[-1]] if kind is OpKind.WHERE else COMPUTE[operand_dtypes[0]]


def expr_cpp(expr, input_dtypes: list[DType], prefix: str = "n", qualifier: str = "inline") -> dict:
    """C++ for a fused Expr: one inline function per node and the statements that chain them.

    Slots are `s<i>` variables of their compute type; the caller loads s0..s{num_inputs-1} and
    stores the output slots. Returns {"functions": [...], "statements": [...], "slot_types": [...]}.
    `qualifier` declares each function: "inline" on the CPU, "AIT_HD" (__host__ __device__) on CUDA.
    """
    slot_dtypes = expr.slot_dtypes(input_dtypes)
    functions, statements = [], []
    for i, n in enumerate(expr.nodes):
        slot = expr.num_inputs + i
        operand_dtypes = [slot_dtypes[a] for a in n.args]
        t = node_compute_type(n.kind, operand_dtypes)
        params = ", ".join(f"{COMPUTE[d]} a{j}" for j, d in enumerate(operand_dtypes))
        functions.append(f"{qualifier} {COMPUTE[n.dtype]} {prefix}{slot}({params}) {{ using T = {t}; "
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
           OpKind.POW, OpKind.SQRT, OpKind.RSQRT, OpKind.SIN, OpKind.COS, OpKind.TAN, OpKind.ASIN,
           OpKind.ACOS, OpKind.ATAN, OpKind.SINH, OpKind.COSH, OpKind.ASINH, OpKind.ACOSH, OpKind.ATANH,
           OpKind.EXPM1, OpKind.LOG1P, OpKind.MOD, OpKind.FMOD}


def access_plan(out_shape, in_shapes) -> tuple[list[Dim], list[str], list[list[Dim]]]:
    """How each operand is read over the output: (merged dims, kinds, outer strides).

    Static size-1 dims of the output are dropped; neighbouring dims merge when every operand reads
    both alike (dense in both, or broadcast in both). An operand's kind is "full" (the output's
    shape: read at the output's index), "scalar" (one element) or "strided" (broadcast in some
    dims); a strided operand gets a stride per merged dim but the innermost (which is 1 or 0).
    """
    return merge_access(out_shape, [broadcast_strides(tuple(s), tuple(out_shape)) for s in in_shapes])


def merge_access(out_shape, operand_strides) -> tuple[list[Dim], list[str], list[list[Dim]]]:
    """access_plan for operands read at any strides over the output's index space (broadcast dims
    have stride 0; a strided view of another tensor, any stride): dims merge where every operand
    steps across both as across one (stride[j] == stride[j+1] * size[j+1]). A "strided" operand's
    list holds a stride for every merged dim, the innermost included."""
    r = len(out_shape)
    keep = [j for j in range(r) if not (out_shape[j].is_static and out_shape[j].value == 1)]
    groups: list[list[int]] = []  # dims of the output (indices into out_shape)
    for j in keep:
        if groups and all(s[groups[-1][-1]] == s[j] * out_shape[j] for s in operand_strides):
            groups[-1].append(j)
        else:
            groups.append([j])
    dims = [prod([out_shape[j] for j in g]) for g in groups]
    dense = _dense_strides(tuple(dims))
    kinds, strides = [], []
    for s in operand_strides:
        st = [s[g[-1]] for g in groups]
        if all(a == b for a, b in zip(st, dense)):
            kinds.append("full")
            strides.append([])
        elif all(a == 0 for a in st):
            kinds.append("scalar")
            strides.append([])
        else:
            kinds.append("strided")
            strides.append(st)
    return dims, kinds, strides


def expr_kernel(expr, outs, ins, views=None, out_strides=None) -> tuple[dict, list]:
    """Template params (backends/cpu/templates/elementwise_body.inc.j2) and dims of one evaluation
    of `expr` over `ins` into `outs` (all of the outputs' shape); the single and the grouped kernel
    take the same ones.

    `views[i]` (a StridedView, or None) reads operand i as a window of its tensor: its strides and
    offset go into the dims. `out_strides`: the strides the (one) output is written at, where it is
    a strided slice of a concat (memory_planning). Dims: the merged output dims; then the outer
    strides of each strided operand; then the output's outer strides (and its innermost one, where
    that is not 1); then, per strided operand whose innermost stride is neither 0 nor 1, that
    stride; then the element offset of each operand read at one.
    """
    out_shape = tuple(outs[0].shape)
    views = list(views) if views is not None else [None] * len(ins)
    in_dtypes = [t.dtype for t in ins]
    cpp = expr_cpp(expr, in_dtypes)
    strides = [broadcast_strides(tuple(t.shape), out_shape) if v is None else _view_strides(v, out_shape)
               for t, v in zip(ins, views)]
    if out_strides is not None:
        assert len(outs) == 1, "a strided write is of one output"
        strides.append(list(out_strides))  # merged like an operand's; its plan is the last one
    dims, kinds, merged = merge_access(out_shape, strides)
    out_plan = None
    if out_strides is not None:
        kinds, out_plan = kinds[:-1], merged.pop()
        if out_plan == []:  # the output is dense after all
            out_plan = None
    flat = "strided" not in kinds and out_plan is None
    rank = 1 if flat else len(dims)
    call_dims: list = [prod(out_shape)] if flat else list(dims)
    strided = [i for i, k in enumerate(kinds) if k == "strided"]
    for i in strided:
        call_dims += merged[i][:-1]
    out_at, out_inner = None, "i"
    if out_plan is not None:
        out_at = len(call_dims)
        call_dims += out_plan[:-1]
        if out_plan[-1] != 1:  # a static 1 innermost dim dropped: the row steps at another stride
            out_inner = f"i * d[{len(call_dims)}]"
            call_dims.append(out_plan[-1])
    inner_at: dict[int, int] = {}
    for i in strided:
        if merged[i][-1] != 0 and merged[i][-1] != 1:
            inner_at[i] = len(call_dims)
            call_dims.append(merged[i][-1])
    args = []
    for i, (t, kind) in enumerate(zip(ins, kinds)):
        if kind == "scalar":
            idx_flat = idx_strided = "0"
        elif kind == "full":
            idx_flat, idx_strided = "i", "row + i"
        else:
            k = strided.index(i)
            inner = "" if merged[i][-1] == 0 else " + i" if i not in inner_at else f" + i * d[{inner_at[i]}]"
            idx_flat, idx_strided = None, f"base{k}{inner}"
        offset_at = None
        if views[i] is not None and views[i].offset != 0:
            offset_at = len(call_dims)
            call_dims.append(views[i].offset)
        args.append({"t": STORAGE[t.dtype], "ct": COMPUTE[t.dtype], "offset_at": offset_at,
                     "load_flat": load(t.dtype, f"in{i}", idx_flat) if idx_flat else "",
                     "load_strided": load(t.dtype, f"in{i}", idx_strided)})
    slot_dtypes = expr.slot_dtypes(in_dtypes)
    stores = [{"t": STORAGE[o.dtype], "value": store(o.dtype, f"s{slot}")} for o, slot in zip(outs, expr.outputs)]
    for o, slot in zip(outs, expr.outputs):
        assert slot_dtypes[slot] == o.dtype, f"output dtype {o.dtype} vs expression {slot_dtypes[slot]}"
    weight = sum(8 if n.kind in _COSTLY else 1 for n in expr.nodes)
    params = dict(text=str(expr), functions=cpp["functions"], statements=cpp["statements"], args=args,
                  outs=stores, par_threshold=max(4096, PAR_WORK // max(weight, 1)),
                  mode="flat" if flat else "strided", rank=rank, nstrided=len(strided), out_at=out_at,
                  out_index=f"obase + {out_inner}" if out_at is not None else "row + i")
    return params, call_dims


def _view_strides(view, out_shape) -> list[Dim]:
    """A view's strides over the output's index space (0 where the output broadcasts it)."""
    r = len(out_shape)
    shape = (IntImm(1),) * (r - len(view.shape)) + tuple(view.shape)
    st = (IntImm(0),) * (r - len(view.strides)) + tuple(view.strides)
    return [IntImm(0) if (n == 1 and o != 1) else s for n, o, s in zip(shape, out_shape, st)]


def lower_expr(expr, outs, ins, ctx: LowerContext, label: str, views=None) -> list[KernelCall]:
    """One kernel evaluating `expr` over `ins` into `outs` (all of the outputs' shape)."""
    params, dims = expr_kernel(expr, outs, ins, views, ctx.plan.strided_writes.get(outs[0]))
    spec = KernelSpec.make(ctx.template("elementwise.cpp.j2"), k=params)
    return [KernelCall(spec, [*outs, *ins], dims, label)]


@lowering("cpu", *[k for k in registered_kinds() if get_opdef(k).category is Category.ELEMENTWISE
                   and k is not OpKind.FUSED_ELEMENTWISE], features=("strided_output",))
def lower_elementwise(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return lower_expr(single_op_expr(op), op.outputs, op.inputs, ctx, op.name or op.kind.value)


@lowering("cpu", OpKind.FUSED_ELEMENTWISE, features=("operand_views", "strided_output"))
def lower_fused_elementwise(op: Op, ctx: LowerContext) -> list[KernelCall]:
    return lower_expr(op.attrs.expr, op.outputs, op.inputs, ctx, op.name or op.kind.value,
                      getattr(op.attrs, "operand_views", None))


# -- grouped: independent element-wise ops (group_ops) as one kernel ------------------------------

# Work items of the grouped kernel: about this many elements each (a block of a flat member, a run
# of rows of a strided one), all members' items in one parallel loop.
GROUP_BLOCK = 8192


def lower_grouped_elementwise(op: Op, members: list[Op], ctx: LowerContext) -> list[KernelCall]:
    """One parallel loop over the items of every member (backends/cpu/templates/elementwise_grouped.cpp.j2)."""
    ms, ptrs, dims = [], [], []
    for m in members:
        params, d = expr_kernel(m.attrs.expr, m.outputs, m.inputs, getattr(m.attrs, "operand_views", None),
                                ctx.plan.strided_writes.get(m.outputs[0]))
        ms.append(dict(params, ptr_at=len(ptrs), dims_at=len(dims)))
        ptrs += [*m.outputs, *m.inputs]
        dims += d
    spec = KernelSpec.make(ctx.template("elementwise_grouped.cpp.j2"), members=ms, block=GROUP_BLOCK,
                           par_threshold=min(m["par_threshold"] for m in ms))
    return [KernelCall(spec, ptrs, dims, op.name or op.kind.value)]
