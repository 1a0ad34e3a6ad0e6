"""The fused epilogue of a GPU GEMM-shaped kernel (gemm, bmm, conv fprop, grouped GEMM), the part
every GPU backend shares: CUDA's CUTLASS visitor trees (kernels/cuda/epilogue.py adds the CUTLASS
types and the tree's loads) and ROCm's Composable Kernel device ops (whose D tensors are these
loads, stride 0 where they broadcast, and whose element-wise operation calls the same functor).

The library sees every such kernel's result as a row-major [M, N] matrix per batch index L. The
epilogue's math renders once, as a scalar functor (common/expr.py expr_cpp, `AIT_HD`), that one
generic shape applies (CUTLASS: Compute<functor>(AccFetch, loads...); CK: the CDE element-wise
operation over the accumulator and the D tensors). Each extra operand is a load whose kind
follows from how it broadcasts over (L, M, N):

    aux     [L?, M, N]  same shape as the result (a residual)      row stride, batch stride
    row     [L?, 1, N]  one value per column (a bias)               batch stride
    col     [L?, M, 1]  one value per row                           batch stride
    scalar  [L?, 1, 1]                                              batch stride

(`L?`: either the result's batch dims or none, batch stride 0). Other broadcasts (an attention
mask [B, 1, 1, S] over a [B, H, S, S] batch, an M made of several axes of which some broadcast)
have no load: such an epilogue runs as a second kernel over the result in place
(epilogue_apply.cu.j2, any broadcast strides), the GEMM keeping only its bias. The op's own bias
is the first load (a row); the functor adds it to the accumulator before the epilogue DAG sees
it, as the op's semantics say.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Sequence

from ....errors import UnsupportedOpError
from ....ir.dims import Dim, IntImm, gcd_static, prod
from ....ir.dtype import DType
from ....ir.op import Op
from ....ir.tensor import Tensor
from ...cexpr import STORAGE
from ..common.access import broadcast_strides
from ..common.expr import expr_cpp

@dataclasses.dataclass(frozen=True)
class MnlAxes:
    """Which axes of the result are the GEMM's L (batch) and M (rows); N is the last axis."""
    l: tuple[int, ...]
    m: tuple[int, ...]

    @staticmethod
    def folded(rank: int) -> "MnlAxes":
        """A GEMM (or NHWC conv) result: every leading axis folds into M."""
        return MnlAxes((), tuple(range(rank - 1)))

    @staticmethod
    def batched(rank: int) -> "MnlAxes":
        return MnlAxes(tuple(range(rank - 2)), (rank - 2,))


@dataclasses.dataclass(frozen=True)
class Load:
    kind: str              # aux | row | col | scalar
    tensor: Tensor
    stride_m: Dim          # element strides over (M, N, L); 0 where it broadcasts
    stride_n: Dim
    stride_l: Dim


def vector_width(extent: Dim, itemsize: int, max_bytes: int = 16) -> int:
    """Widest vector (elements, at most max_bytes) that always divides `extent`: static sizes
    give their own divisors, a symbolic size the constant factor of its polynomial (64*seq)."""
    g = gcd_static(extent) if not extent.is_static else extent.value
    w = max_bytes // itemsize
    while w > 1 and (g == 0 or g % w):
        w //= 2
    return max(w, 1)


def classify(t: Tensor, out_shape: Sequence[Dim], axes: MnlAxes) -> Optional[Load]:
    """How an epilogue operand is read over the result's (M, N, L); None when no load can."""
    strides = broadcast_strides(tuple(t.shape), tuple(out_shape))
    zero = IntImm(0)

    def group(ax: tuple[int, ...]) -> Optional[bool]:
        """True: the operand spans these axes (dense); False: broadcast over all of them."""
        spans = [not (strides[i] == zero and out_shape[i] != 1) for i in ax]
        if all(spans) or not any(spans):
            return bool(ax) and all(spans)
        return None

    n_full = not (strides[-1] == zero and out_shape[-1] != 1)
    m_full, l_full = group(axes.m), group(axes.l)
    if m_full is None or l_full is None:
        return None
    sm = strides[axes.m[-1]] if m_full else zero
    sl = strides[axes.l[-1]] if l_full else zero
    sn = IntImm(1) if n_full else zero
    kind = {(True, True): "aux", (False, True): "row", (True, False): "col", (False, False): "scalar"}
    return Load(kind[(m_full, n_full)], t, sm, sn, sl)


@dataclasses.dataclass
class EpiloguePlan:
    functor: dict            # epilogue_fn.inc.j2's params
    loads: list[Load]        # the functor's arguments after the accumulator, in order
    out_dtype: DType
    # Set when some operand has no load: the GEMM applies only the bias, and this functor (the
    # epilogue DAG over the stored result) runs after it in place, reading `apply_operands`.
    apply: Optional[dict] = None
    apply_operands: tuple[Tensor, ...] = ()


def functor(op: Op, out: Tensor, bias: bool, extras: Sequence[Tensor], epilogue: bool, who: str) -> dict:
    """The scalar functor: (acc[, bias], extras...) -> the result in float32; with `epilogue`
    False, acc[ + bias] alone (the kernel whose epilogue runs as a pass after it). Public: ROCm's
    CK device ops call it as their CDE operation over the D tensors."""
    ep = getattr(op.attrs, "epilogue", None) if epilogue else None
    params = ["float acc"] + (["float bias"] if bias else [])
    statements = ["const float s0 = acc + bias;" if bias else "const float s0 = acc;"]
    functions: list[str] = []
    result = "s0"
    if ep is not None:
        acc_dtype = op.inputs[0].dtype
        dtypes = ep.expr.slot_dtypes([acc_dtype] + [t.dtype for t in extras])
        if dtypes[ep.expr.outputs[0]] != out.dtype:
            raise UnsupportedOpError(f"{op.kind.value} '{op.name}': an epilogue that changes the result's "
                                     f"dtype has no {who} kernel")
        cpp = expr_cpp(ep.expr, [acc_dtype] + [t.dtype for t in extras], prefix="ep", qualifier="AIT_HD")
        functions = cpp["functions"]
        params += [f"float s{j + 1}" for j in range(len(extras))]
        statements += cpp["statements"]
        result = f"s{ep.expr.outputs[0]}"
    return dict(functions=functions, params=params, statements=statements, result=result)


def plan(op: Op, out: Tensor, bias: Optional[Tensor], extras: Sequence[Tensor], axes: MnlAxes,
         types: Mapping[DType, str], who: str) -> EpiloguePlan:
    """The functor and the loads of `op`'s epilogue (bias first). `types`: the dtypes the backend's
    GEMM kernels read and write (dtype -> its C++ type), `who` the backend as errors name it;
    UnsupportedOpError for the others."""
    for t in ([bias] if bias is not None else []) + list(extras):
        if t.dtype not in types:
            raise UnsupportedOpError(f"{op.kind.value} '{op.name}': epilogue operand '{t.name}' has dtype "
                                     f"{t.dtype}; the {who} epilogue reads float16, bfloat16 or float32")
    if out.dtype not in types:
        raise UnsupportedOpError(f"{op.kind.value} '{op.name}': result dtype {out.dtype} has no {who} GEMM kernel")
    bias_loads = [Load("row", bias, IntImm(0), IntImm(1), IntImm(0))] if bias is not None else []
    loads = [classify(t, out.shape, axes) for t in extras]
    if any(ld is None for ld in loads):
        return EpiloguePlan(functor(op, out, bias is not None, (), False, who), bias_loads, out.dtype,
                            apply=functor(op, out, False, extras, True, who), apply_operands=tuple(extras))
    return EpiloguePlan(functor(op, out, bias is not None, extras, True, who), bias_loads + loads, out.dtype)


def accumulator_functor(op: Op, out: Tensor, who: str) -> dict:
    """acc -> acc: the functor of a kernel whose whole epilogue runs in a pass after it."""
    return functor(op, out, False, (), False, who)


def full_functor(op: Op, out: Tensor, bias: Optional[Tensor], extras: Sequence[Tensor], who: str) -> dict:
    """The whole epilogue as one functor, for kernels that index every operand by strides."""
    return functor(op, out, bias is not None, extras, True, who)


def general_loads(tensors: Sequence[Tensor], out: Tensor, first_ptr: int, first_dim: int) -> tuple[list[dict], list[Dim]]:
    """Operands read at the result's coordinates: each one's broadcast strides over every axis of
    the result (any broadcast), as dims."""
    loads, dims = [], []
    for j, t in enumerate(tensors):
        loads.append(dict(storage=STORAGE[t.dtype], ptr=first_ptr + j, dims=first_dim + len(dims)))
        dims += broadcast_strides(tuple(t.shape), tuple(out.shape))
    return loads, dims


def apply_kernel(p: EpiloguePlan, out: Tensor, first_ptr: int) -> tuple[dict, list[Dim]]:
    """Params and dims of epilogue_apply.cu.j2 (p.apply set): the result's size and shape, then
    the operands' strides."""
    shape = list(out.shape)
    loads, dims = general_loads(p.apply_operands, out, first_ptr, 1 + len(shape))
    return dict(functor=p.apply, rank=len(shape), storage=STORAGE[out.dtype], loads=loads), [prod(shape)] + shape + dims


def strided_loads(p: EpiloguePlan, first_ptr: int, first_dim: int) -> tuple[list[dict], list[Dim]]:
    """For the SIMT kernels, which index every operand alike: (M, N, L) strides of each load."""
    out, dims = [], []
    for j, ld in enumerate(p.loads):
        out.append(dict(kind=ld.kind, storage=STORAGE[ld.tensor.dtype], ptr=first_ptr + j,
                        dims=first_dim + len(dims)))
        dims += [ld.stride_m, ld.stride_n, ld.stride_l]
    return out, dims
