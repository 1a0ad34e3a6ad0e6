"""gemm and bmm -> one oneDNN matmul kernel (backends/cpu/templates/gemm_onednn.cpp.j2, which
configures the matmul of backends/cpu/src/onednn_kernels.cpp).

Python describes every operand to oneDNN as (sizes, strides) Dims: layouts (rcr, crr, ...) and
transposed bmm operands are strides over the stored tensor, leading dims of a row-major `a` fold
into M, and bmm batch dims are padded with 1s, which oneDNN broadcasts. Sizes are run-time dims, so
one kernel serves every shape of a spec (twelve BERT layers, any batch).
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Optional, Sequence

from ....errors import UnsupportedOpError
from ....ir.dims import Dim, IntImm, as_dim, prod
from ....ir.dtype import DType
from ....ir.op import Op, OpKind
from ....ir.tensor import Tensor
from ....ops.operand_views import StridedView, matrix_view, row_groups
from ....ops.qlinear import own_parts
from ...cexpr import COMPUTE, STORAGE, load, store
from ...lower import LowerContext, int8_reduced_weights_rule, lowering
from ...bounds import bound_refs
from ...spec import CONSTANTS_VERSION, BoundRef, KernelCall, KernelSpec
from . import epilogue

Md = tuple[list[Dim], list[Dim]]  # (sizes, strides) of one oneDNN memory descriptor


@functools.lru_cache(maxsize=None)
def cpu_flags() -> frozenset:
    """The building machine's CPU flags (/proc/cpuinfo): CPU libraries are built -march=native, for
    the machine that builds them. Empty where there is no /proc/cpuinfo."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    return frozenset(next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), []))


def native_bf16() -> bool:
    """Whether oneDNN 3.2 has jit bf16 matmul/conv here: AMX, AVX512-BF16, or AVX-512 (avx512_core,
    where it emulates bf16 math in its jit kernels). Elsewhere (AVX2) it would run its reference
    kernels, so bf16 operands go through float32 scratch instead (the issue's "via fp32 elsewhere")."""
    return {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= cpu_flags()


def int8_vnni() -> bool:
    """Whether oneDNN's int8 kernels here sum u8 x s8 products exactly in int32 (VNNI's vpdpbusd:
    avx512_vnni, avx_vnni, AMX). Without VNNI they sum pairs in int16 (vpmaddubsw), which
    saturates, and halve the weights of s8 x s8 products. ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA),
    read by oneDNN when the model loads, can cap it below VNNI; the build honours the same cap."""
    cap = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "ALL").upper()
    if cap in ("SSE41", "AVX", "AVX2", "AVX512_CORE"):
        return False
    if cap.startswith("AVX2_VNNI"):
        return "avx_vnni" in cpu_flags()
    return bool({"avx512_vnni", "avx_vnni", "amx_int8"} & cpu_flags())


int8_reduced_weights_rule("cpu", lambda: not int8_vnni())


def precision_fallback(precision: Optional[str]) -> Optional[str]:
    """What a requested precision becomes on this CPU when it lacks the instructions that make it
    fast (compile_model warns with it and report.json's precision keeps it), else None. Measured on
    an AVX2-only EPYC (benchmarks/results/cpu_bf16_avx2_s14.json, cpu_int8_avx2.json)."""
    if precision == "bfloat16" and not native_bf16():
        return ("bfloat16 on a CPU without AVX-512: oneDNN has no jit bfloat16 kernels here, so GEMM, conv "
                "and attention compute in float32 on converted operands; expect float32's speed or a little "
                "less (BERT-base 140 ms against 136 on an AVX2 EPYC), with bfloat16's rounding")
    if precision == "int8" and not int8_vnni():
        return ("int8 on a CPU without VNNI: oneDNN sums u8 x s8 pairs in int16, so the weights keep 7 bits "
                "(the sums cannot saturate); int8 models ran 1.7-1.9x faster than float32 on an AVX2 EPYC, "
                "against about 3.5x with AVX512-VNNI (BERT-base 87 ms against 150 fp32, ResNet-50 26 "
                "against 50)")
    return None


def onednn_types(dtype: DType, what: str = "matmul") -> dict:
    """Storage type, the oneDNN type computed in, and whether operands go through float32 scratch.

    bfloat16 runs natively where oneDNN has jit kernels for it (native_bf16: AMX, avx512_core_bf16,
    avx512_core; float32 accumulation), else through float32 scratch; float16 has no oneDNN CPU
    kernels without avx512_fp16, so it converts to float32 and back.
    """
    if dtype is DType.float32:
        return dict(storage=STORAGE[dtype], storage_code="f32", convert=False)
    if dtype is DType.bfloat16:
        return dict(storage=STORAGE[dtype], storage_code="bf16", convert=not native_bf16())
    if dtype is DType.float16:
        return dict(storage=STORAGE[dtype], storage_code="f16", convert=True)
    raise UnsupportedOpError(f"{what}: oneDNN kernels take float32, float16 or bfloat16, not {dtype}")


def result_types(op: Op, a: Tensor, out: Tensor) -> dict:
    """onednn_types of the operands, plus f32_dst: a bf16 product whose epilogue ends in float32
    (Capabilities.epilogue_widen) has oneDNN write its float32 accumulator, never rounded to bf16."""
    types = onednn_types(a.dtype, f"{op.kind.value} '{op.name}'")
    widen = a.dtype is DType.bfloat16 and out.dtype is DType.float32
    if out.dtype is not a.dtype and not widen:
        raise UnsupportedOpError(f"{op.kind.value} '{op.name}': {a.dtype.value} operands with a {out.dtype.value} "
                                 "result have no CPU kernel (only bfloat16 -> float32)")
    return dict(types, f32_dst=widen)


def is_constant(ctx: LowerContext, t: Tensor) -> bool:
    """Whether t's bytes are a graph constant (itself, or a view of one): its kernel may prepack it."""
    ext = ctx.plan.external(t)
    return ext is not None and ext.is_constant


def dense_strides(shape: Sequence[Dim]) -> list[Dim]:
    out: list[Dim] = []
    acc: Dim = IntImm(1)
    for d in reversed(shape):
        out.append(acc)
        acc = acc * d
    return out[::-1]


def md_dims(*mds: Md) -> list[Dim]:
    """Flatten descriptors into the kernel's dims: sizes then strides, per descriptor."""
    out: list[Dim] = []
    for sizes, strides in mds:
        out += [as_dim(s) for s in sizes] + [as_dim(s) for s in strides]
    return out


def matmul_call(ctx: LowerContext, op: Op, out: Tensor, a: Tensor, b: Tensor, bias: Optional[Tensor],
                a_md: Md, b_md: Md, c_md: Md, extras: Sequence[Tensor] = (),
                dst_md: Optional[epilogue.DstMd] = None, a_offset: Optional[Dim] = None,
                out_strides=None, quant: Optional[tuple] = None) -> KernelCall:
    """`extras`: the fused epilogue's operands; `dst_md` describes one in c_md's coordinates;
    `a_offset`: where a view of `a` starts, in elements (the last dim); `out_strides`: the output's
    strides where it is a strided slice of a concat (c_md already says so to oneDNN); `quant`: an
    int8 QGEMM's (act code, x_scale, w_scale) (quant_params), its scales read after the extras."""
    rank = len(c_md[0])
    if out.dtype in LOOP_DTYPES:
        return _loop_call(ctx, op, out, a, b, bias, a_md, b_md, c_md, extras, a_offset, out_strides)
    dims = md_dims(a_md, b_md, c_md)
    if bias is not None:  # [1, .., 1, N] dense: oneDNN broadcasts it over the rows
        n = c_md[0][-1]
        dims += md_dims(([IntImm(1)] * (rank - 1) + [n], [n] * (rank - 1) + [IntImm(1)]))
    prepack = is_constant(ctx, b)
    # int8: float32 storage around the primitive (an int8 a, or result, is the quant params')
    types = result_types(op, a, out) if quant is None else dict(onednn_types(DType.float32), f32_dst=False)
    ep, key, loop_dims = epilogue.plan(op, out, list(extras), first_ptr=3 + (bias is not None), key_offset=len(dims),
                                       prepack=prepack, convert=types["convert"],
                                       own_dtype=a.dtype if quant is None else DType.float32,
                                       dst_md=dst_md or epilogue.batched_md(c_md[0]), rank=rank,
                                       out_strides=out_strides)
    dims += key
    tail = dims + ([CONSTANTS_VERSION] if prepack else []) + loop_dims
    src_offset = -1
    if a_offset is not None and a_offset != 0:
        src_offset = len(tail)
        tail.append(a_offset)
    ptrs = [out, a, b] + ([bias] if bias is not None else []) + list(extras)
    qp = quant_params(quant, ptrs, op)
    # Float kernels carry bounds on |values| from producer to reader (codegen/bounds.py), as convs do.
    slots = {} if quant is not None else {"bound_at": len(ptrs)}
    spec = KernelSpec.make(ctx.template("gemm_onednn.cpp.j2"), rank=rank, has_bias=bias is not None,
                           prepack=prepack, nkey=len(dims), src_offset=src_offset, **types, **ep, **qp, **slots)
    return KernelCall(spec, ptrs + (bound_refs(ptrs) if slots else []), tail, op.name or op.kind.value)


def quant_operands(op: Op, own: list) -> tuple[tuple, list]:
    """An int8 op's (ops/qlinear.py) quant description (quant_params') and its own operands as the
    float op's: [x, w, bias?]."""
    x, w, xs, ws, bias, out_scale = own_parts(own, op.attrs)
    quant = (op.attrs.act, xs, ws, op.attrs.out_act, out_scale, x.dtype is not DType.float32)
    return quant, [x, w] + ([bias] if bias is not None else [])


def shifted_int8(t: Tensor) -> bool:
    """Whether the int8 tensor t lies as u8 = q + 128 on CPUs where oneDNN's int8 matmul prefers a
    u8 source (onednn_kernels.cpp shift_s8_src: no VNNI): a QGEMM's s8 requantised result that only
    QGEMMs read, each as its own x (a BERT FFN's GELU output, read by its second linear layer). Its
    producer (MatmulConfig::dst_shifted) and readers (src_shifted) both ask this of the same tensor,
    and their kernels the same run-time test, so they agree; nothing else reads the bytes."""
    p = t.producer
    if (t.dtype is not DType.int8 or t.is_output or p is None or p.kind is not OpKind.QGEMM
            or p.attrs.out_act is not DType.int8 or not t.users):
        return False
    return all(u.kind is OpKind.QGEMM and u.inputs[0] is t and u.attrs.act is DType.int8
               and u.attrs.operand_views is None and sum(x is t for x in u.inputs) == 1 for u in t.users)


def quant_params(quant: Optional[tuple], ptrs: list, op: Optional[Op] = None) -> dict:
    """The int8 kernels' params (`quant`: 1 s8 / 2 u8 activations; `scales_ptr`; `out_quant`: the
    result requantised, 0 / 1 s8 / 2 u8; `src_int8`: x comes quantised), their scale operands
    appended to `ptrs`; none for a float kernel (its rendered source stays as it was). With `op`
    (a QGEMM), also `src_shifted` / `dst_shifted`: its x / result is a shifted_int8 tensor."""
    if quant is None:
        return {}
    act, x_scale, w_scale, out_act, out_scale, src_int8 = quant
    at = len(ptrs)
    ptrs += [x_scale, w_scale] + ([out_scale] if out_act is not None else [])
    code = {None: 0, DType.int8: 1, DType.uint8: 2}
    params = dict(quant=code[act], scales_ptr=at, out_quant=code[out_act], src_int8=src_int8)
    if op is not None:
        params.update(src_shifted=src_int8 and shifted_int8(op.inputs[0]), dst_shifted=shifted_int8(op.outputs[0]))
    return params


# Matmuls of these dtypes run our own loop (gemm_loop.cpp.j2): oneDNN 3.2's CPU matmul has no
# float64 and no float8 (float8 computes in float32 and rounds once, as the oracle does).
LOOP_DTYPES = (DType.float64, DType.float8_e4m3fn, DType.float8_e5m2, DType.float8_e4m3fnuz, DType.float8_e5m2fnuz)


def _loop_call(ctx: LowerContext, op: Op, out: Tensor, a: Tensor, b: Tensor, bias: Optional[Tensor],
               a_md: Md, b_md: Md, c_md: Md, extras: Sequence[Tensor], a_offset: Optional[Dim],
               out_strides) -> KernelCall:
    """matmul_call's kernel for LOOP_DTYPES: the same descriptors, a plain loop, and the fused
    epilogue as the loop over the output that the oneDNN kernels also have (no post-ops)."""
    rank = len(c_md[0])
    dims = md_dims(a_md, b_md, c_md)
    if bias is not None:
        n = c_md[0][-1]
        dims += md_dims(([IntImm(1)] * (rank - 1) + [n], [n] * (rank - 1) + [IntImm(1)]))
    ep, key, loop_dims = epilogue.plan(op, out, list(extras), first_ptr=3 + (bias is not None),
                                       key_offset=len(dims), prepack=False, convert=True,
                                       dst_md=epilogue.batched_md(c_md[0]), rank=rank, out_strides=out_strides,
                                       post_ops=False)
    tail = dims + key + loop_dims
    src_offset = -1
    if a_offset is not None and a_offset != 0:
        src_offset = len(tail)
        tail.append(a_offset)
    r = rank
    spec = KernelSpec.make(ctx.template("gemm_loop.cpp.j2"), rank=rank, has_bias=bias is not None,
                           src_offset=src_offset, storage=STORAGE[out.dtype], ct=COMPUTE[out.dtype],
                           load_a=load(a.dtype, "a", f"ao + k * ast[{r - 1}]"),
                           load_b=load(b.dtype, "b", f"bo + k * bst[{r - 2}] + n * bst[{r - 1}]"),
                           load_bias=load(out.dtype, "bias", "n * bias_st"), store=store(out.dtype, "acc"),
                           **ep)
    ptrs = [out, a, b] + ([bias] if bias is not None else []) + list(extras)
    return KernelCall(spec, ptrs, tail, op.name or op.kind.value)


def _matrix(rows: Dim, cols: Dim, transposed: bool) -> Md:
    """A [rows, cols] operand stored row-major, or (transposed) stored as [cols, rows]."""
    return ([rows, cols], [IntImm(1), rows] if transposed else [cols, IntImm(1)])


@lowering("cpu", OpKind.GEMM, epilogue=True, features=("operand_views", "strided_output", "epilogue_widen"))
def lower_gemm(op: Op, ctx: LowerContext) -> list[KernelCall]:
    own, extras = epilogue.own_operands(op)
    a, b = own[:2]
    quant = None
    if op.kind is OpKind.QGEMM:   # [a, w int8, x_scale, w_scale, bias?, out_scale?]: the same matmul, int8
        quant, own = quant_operands(op, own)
    bias = own[2] if len(own) == 3 else None
    out = op.outputs[0]
    ta, tb = getattr(op.attrs, "trans_a", False), op.attrs.trans_b
    m, n = prod(out.shape[:-1]), out.shape[-1]  # a's leading dims fold into M
    view = (op.attrs.operand_views or (None,))[0]
    if view is not None:  # a strided window of `a` (fuse_memory_ops): its rows and columns as they lie
        rows, row_stride, k, col_stride = matrix_view(view)
        a_md: Md = ([rows, k], [row_stride, col_stride])
    else:
        k = a.shape[0] if ta else a.shape[-1]
        a_md = _matrix(m, k, ta)
    out_strides = ctx.plan.strided_writes.get(out)
    c_md: Md = ([m, n], [n, IntImm(1)])
    if out_strides is not None:  # a strided slice of a concat (the memory plan): rows at their stride
        rows = matrix_view(StridedView(tuple(out.shape), tuple(out_strides)))
        if rows is None:  # batches of rows (memory/concat.py allows it for a plain A)
            return [_batched_rows(ctx, op, out, a, b, bias, extras, tuple(out_strides), quant)]
        c_md = ([m, n], [rows[1], IntImm(1)])
    return [matmul_call(ctx, op, out, a, b, bias, a_md, _matrix(k, n, tb), c_md, extras,
                        epilogue.folded_md(out.shape), a_offset=view.offset if view is not None else None,
                        out_strides=out_strides, quant=quant)]


# int8 GEMMs (passes/quantize_int8.py) lower as GEMMs: one oneDNN int8 matmul (gemm_onednn.cpp.j2).
# Not strided_output: a requantised (int8) result has no strided store.
lowering("cpu", OpKind.QGEMM, epilogue=True, features=("operand_views",))(lower_gemm)


def _batched_rows(ctx: LowerContext, op: Op, out: Tensor, a: Tensor, b: Tensor, bias: Optional[Tensor],
                  extras: Sequence[Tensor], out_strides: tuple, quant: Optional[tuple] = None) -> KernelCall:
    """A GEMM whose result is written as batches of rows (ViT's patches into its tokens with a
    batch > 1: [B, 4, 4, H] at [17 H, 4 H, H, 1]): a batched matmul over the runs of leading dims
    that fold (row_groups), A (row-major, no view) described in the same runs, b broadcast."""
    shape = list(out.shape)
    groups = row_groups(StridedView(tuple(shape), out_strides))
    a_strides = dense_strides(a.shape)

    def run_stride(g, strides):  # a run steps by its innermost dim of size > 1
        big = [i for i in g if shape[i] != 1]
        return strides[big[-1] if big else g[-1]]
    sizes = [prod([shape[i] for i in g]) for g in groups]
    a_md: Md = (sizes + [a.shape[-1]], [run_stride(g, a_strides) for g in groups] + [IntImm(1)])
    c_md: Md = (sizes + [shape[-1]], [run_stride(g, out_strides) for g in groups] + [IntImm(1)])
    b_md = _batched(b.shape, len(c_md[0]), op.attrs.trans_b)
    return matmul_call(ctx, op, out, a, b, bias, a_md, b_md, c_md, extras, epilogue.grouped_md(shape, groups),
                       out_strides=out_strides, quant=quant)


def _batched(shape: Sequence[Dim], rank: int, transposed: bool) -> Md:
    """A [.., rows, cols] operand padded to `rank` with leading 1s; transposed: stored [.., cols, rows]."""
    padded = [IntImm(1)] * (rank - len(shape)) + list(shape)
    strides = dense_strides(padded)
    if transposed:
        padded[-2:], strides[-2:] = padded[-1:-3:-1], strides[-1:-3:-1]
    return padded, strides


@lowering("cpu", OpKind.BMM, epilogue=True, features=("epilogue_widen",))
def lower_bmm(op: Op, ctx: LowerContext) -> list[KernelCall]:
    (a, b), extras = epilogue.own_operands(op)
    out = op.outputs[0]
    ta, tb = op.attrs.trans_a, op.attrs.trans_b
    m, n = out.shape[-2:]
    k = a.shape[-2] if ta else a.shape[-1]
    if not ta and all(d == 1 for d in b.shape[:-2]):
        # One b for every batch: a's batch folds into M, a single (larger, faster) GEMM.
        rows = prod(out.shape[:-1])
        return [matmul_call(ctx, op, out, a, b, None, _matrix(rows, k, False), _matrix(k, n, tb),
                            ([rows, n], [n, IntImm(1)]), extras, epilogue.folded_md(out.shape))]
    rank = len(out.shape)
    c_md = (list(out.shape), dense_strides(out.shape))
    return [matmul_call(ctx, op, out, a, b, None, _batched(a.shape, rank, ta), _batched(b.shape, rank, tb), c_md,
                        extras, epilogue.batched_md(out.shape))]


def lower_grouped_gemm(op: Op, members: list[Op], ctx: LowerContext) -> list[KernelCall]:
    """Independent GEMMs (group_ops) as one kernel: each member exactly the call lower_gemm makes
    for it (its oneDNN configuration, prepacked weight and epilogue), run in turn by
    backends/cpu/templates/grouped_onednn.cpp.j2 from its slice of the pointers and dims."""
    if any(m.outputs[0].dtype in LOOP_DTYPES for m in members):  # no oneDNN configs: one loop kernel each
        return [call for m in members for call in lower_gemm(m, ctx)]
    configs, ptrs, dims = [], [], []
    for m in members:
        (call,) = lower_gemm(m, ctx)
        # (a grouped kernel takes no bound slots: its members' bounds are scanned, as before them)
        config = {k: v for k, v in call.spec.param_dict().items() if k != "bound_at"}
        configs.append(dict(config, ptr_at=len(ptrs), dims_at=len(dims)))
        ptrs += [t for t in call.ptrs if not isinstance(t, BoundRef)]
        dims += call.dims
    spec = KernelSpec.make(ctx.template("grouped_onednn.cpp.j2"), members=configs)
    return [KernelCall(spec, ptrs, dims, op.name or op.kind.value)]
