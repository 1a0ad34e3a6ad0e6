"""Scaled-dot-product attention on ROCm: Composable Kernel's fused batched GEMM-softmax-GEMM where
the op fits it, else our SIMT kernel (kernels/gpu/attention.py, shared with CUDA).

CK's DeviceBatchedGemmSoftmaxGemmPermute_Xdl_CShuffle (attention_ck.hip.j2) computes
out = softmax(scale * Q K^T [causal]) V per batch item on the MFMA units (flash-attention style:
an online softmax over 128-key tiles, P rounded to the operands' type for the second GEMM, float32
accumulation), reading every operand through per-dim lengths and strides. Where it fits:
- q, k, v and the result all float16 or all bfloat16;
- no mask tensor (mask "none"), causal or not: CK's MaskOutUpperTriangle removes key n from query
  m where n > m, top-left aligned as ours is (ops/attention.py: query i sees keys j <= i), so it
  agrees for Sq != Sk too (checked on CK's own predicate in test_rocm_ck_objects.py);
- static head dims D (q, k) and Dv (v), each a multiple of 8 and at most 128 (the two head-dim
  classes below); q, k, the result read and written 8 elements (16 bytes) at a time along D / Dv,
  v 4 at a time along Dv, so the sizes, every row and batch stride and every element offset
  (the strided views of a packed QKV projection, a result written in [B, S, H, D] order) must be
  multiples of 8, which keeps every vector 16-byte aligned (the arena aligns tensors to 256);
- at least one key (Sk's lower bound >= 1: CK's key loop runs at least once, with nothing to read);
- sizes and each operand's extent within CK's int32 index_t.
Everything else (float32, a mask tensor, odd or large head dims, unaligned views) runs the SIMT
kernel. Every rule IsSupportedArgument applies is decided here, so a built model never meets its
refusal on a supported device (gfx908 / gfx90a / gfx940 at this CK pin).

The merged batch dims of attention_args become CK's G dims (at least two: a single batch dim is
padded with a leading size-1 one, so BERT-, GPT- and ViT-shaped attention share translation units);
CK's M is Sq, N is Sk, K is D and O is Dv. The scale is CK's Acc0 element op (Scale), a run-time
argument. One instance per (dtype, head-dim class, causal, G dims): sizes and strides are run-time
arguments (GemmSpecialization::MNKOPadding pads every size to the tile).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from ....ir.dims import Dim, IntImm, gcd_static, prod
from ....ir.dtype import DType
from ....ir.op import Op, OpKind
from ...lower import LowerContext, lowering
from ...spec import KernelCall, KernelSpec
from ..common.attention import AttentionArgs, attention_args
from ..gpu.attention import simt_call
from .configs import WAVE, XDL
from .gemm import CK_TYPE, INT32_MAX

CK_DTYPES = (DType.float16, DType.bfloat16)
VEC = 8          # 16-byte vectors of 16-bit elements: Q, K along D; the result along Dv
VEC_V = 4        # V along Dv (CK's B1 transfer: a 4-wide slice of Dv per thread)
MIN_G_DIMS = 2


@dataclasses.dataclass(frozen=True)
class AttnTile:
    """One head-dim class: 256 threads (4 waves stacked along the queries), 128 queries x 128 keys
    per tile, `k` of the head dim per step of the first GEMM and `o` of Dv per workgroup."""
    name: str
    max_head_dim: int
    k: int
    o: int
    block: int = 256
    m: int = 128
    n: int = 128
    gemm1_k: int = 32    # keys per step of the second GEMM
    b1k1: int = 2

    def instance(self) -> dict:
        """Every number of the CK instance (attention_ck.hip.j2 prints them). The first GEMM's
        waves (4 x 1) cover 128 x 128 with one 32x32 MFMA along M and four along N per wave; the
        second GEMM reuses them over 128 x o. Q and K load 8-wide along D into (K0, M|N, 8) thread
        clusters; V 4-wide along Dv into (gemm1_k / 2, o / 4, 1); the C-shuffle writes 64-wide
        slices 8 at a time. Square 128 x 128 tiles also mean that under the causal mask a tile CK
        does not skip holds at least one key for each of its rows."""
        waves = self.block // WAVE
        mxdl, nxdl = 1, self.n // XDL
        waves_m, waves_n = self.m // (mxdl * XDL), self.n // (nxdl * XDL)
        o_xdl = self.o // (waves_n * XDL)
        k0 = self.k // VEC
        ab_threads = self.block // k0
        v_threads_o = self.o // VEC_V
        v_threads_k = self.block // v_threads_o
        shuffle_n = waves_n * 2 * XDL
        c_threads_n = shuffle_n // VEC
        c_threads_m = self.block // c_threads_n
        if (waves_m * waves_n != waves or self.m % ab_threads or self.n % ab_threads or o_xdl % 2
                or (self.gemm1_k // self.b1k1) % v_threads_k or (self.m // mxdl) % c_threads_m):
            raise ValueError(f"CK attention tile {self.name}: inconsistent numbers")
        # CK's own instances pad the LDS rows of the 32-wide K steps, not the 64-wide ones.
        lds_extra = "true" if self.k <= 32 else "false"
        ab = dict(cluster=[k0, ab_threads, 1], order=[1, 0, 2], vec_dim=2, src_vec=VEC, dst_vec=VEC,
                  lds_extra=lds_extra)
        return dict(name=self.name, block=self.block, m=self.m, n=self.n, k=self.k, o=self.o, gemm1_k=self.gemm1_k,
                    ak1=VEC, bk1=VEC, b1k1=self.b1k1, xdl=XDL, mxdl=mxdl, nxdl=nxdl, o_xdl=o_xdl, a=ab, b=ab,
                    b1=dict(cluster=[v_threads_k, v_threads_o, 1], order=[0, 2, 1], vec_dim=1, src_vec=VEC_V,
                            dst_vec=self.b1k1, lds_extra="false"),
                    c=dict(shuffle=[1, 2], cluster=[1, c_threads_m, 1, c_threads_n], vec=VEC))


# Smallest first: an op takes the first class whose head dim covers both D and Dv. Shapes from
# CK's own fp16/bf16 gmk_gnk_gno_gmo instances.
TILES = (AttnTile("d64", 64, k=32, o=64), AttnTile("d128", 128, k=64, o=128))
for _t in TILES:
    _t.instance()


def _divisible(d: Dim, n: int) -> bool:
    """`d` is a multiple of n for every value it can take (0 is: a broadcast stride)."""
    return (d.value if d.is_static else gcd_static(d)) % n == 0


def _as_dim(x) -> Dim:
    return x if isinstance(x, Dim) else IntImm(int(x))


@dataclasses.dataclass(frozen=True)
class CkLayout:
    """attention_args' dims regrouped for CK: sizes, per-operand batch strides over the G dims,
    row strides and element offsets of q, k, v, out."""
    batch: list
    bstrides: list          # [q, k, v, out], each one stride per G dim
    rows: list              # q, k, v, out
    offsets: list           # q, k, v, out
    scale_bits: int


def ck_layout(a: AttentionArgs) -> CkLayout:
    """Parse AttentionArgs.dims (its documented layout) and pad the batch to MIN_G_DIMS dims."""
    rb, d = a.rb, list(a.dims)
    at = 4 + rb
    per = [d[at + i * rb: at + (i + 1) * rb] for i in range(5)]      # q, k, v, out, mask
    at += 5 * rb
    rows = d[at:at + 4]
    scale_bits = d[at + 6]
    offsets = d[at + 7:at + 11]
    pad = max(0, MIN_G_DIMS - rb)
    batch = [IntImm(1)] * pad + list(a.batch)
    bstrides = [[IntImm(0)] * pad + list(s) for s in per[:4]]
    return CkLayout(batch, bstrides, rows, offsets, int(scale_bits))


def ck_refusal(op: Op, a: AttentionArgs) -> Optional[str]:
    """Why CK's fused attention does not take `op` (None: it does). Each reason is one of CK's
    compile-time or IsSupportedArgument rules, or a semantics CK does not have."""
    dtypes = {t.dtype for t in op.inputs[:3]} | {op.outputs[0].dtype}
    if a.dtype not in CK_DTYPES or len(dtypes) != 1:
        return f"operands {sorted(t.value for t in dtypes)}: CK's fused attention takes float16 or bfloat16"
    if a.mask != "none":
        return "a mask tensor: CK's instance applies no additive or boolean mask (only the causal one)"
    if not (a.head_dim.is_static and a.value_dim.is_static):
        return "a symbolic head dim: the instance's head-dim class is chosen at build time"
    hd, vd = a.head_dim.value, a.value_dim.value
    if hd == 0 or vd == 0 or hd % VEC or vd % VEC:
        return f"head dims {hd}, {vd}: CK's vector loads need multiples of {VEC}"
    if max(hd, vd) > TILES[-1].max_head_dim:
        return f"head dims {hd}, {vd}: beyond the largest class ({TILES[-1].max_head_dim})"
    if a.sk.lower < 1:
        return "no keys possible (Sk can be 0): CK's key loop always runs once"
    lay = ck_layout(a)
    for i, name in enumerate(("q", "k", "v", "result")):
        vals = [_as_dim(lay.rows[i]), _as_dim(lay.offsets[i])] + [_as_dim(s) for s in lay.bstrides[i]]
        if not all(_divisible(v, VEC) for v in vals):
            return f"{name}'s strides or offset are not multiples of {VEC}: its 16-byte vectors would be unaligned"
    sizes = [a.sq, a.sk, *lay.batch]
    extents = [prod(t.shape) for t in (*op.inputs[:3], op.outputs[0])]
    if any(_as_dim(s).upper > INT32_MAX for s in sizes + extents):
        return "sizes or operands past CK's int32 index_t"
    return None


def head_dim_class(a: AttentionArgs) -> AttnTile:
    need = max(a.head_dim.value, a.value_dim.value)
    return next(t for t in TILES if need <= t.max_head_dim)


def ck_call(op: Op, ctx: LowerContext, a: AttentionArgs) -> KernelCall:
    """The CK call; dims: Sq, Sk, D, Dv, the G sizes, the G strides of q, k, v, out, the row
    strides of q, k, v, out, the scale's float32 bits, the element offsets of q, k, v, out."""
    lay = ck_layout(a)
    g = len(lay.batch)
    dims = [a.sq, a.sk, a.head_dim, a.value_dim, *lay.batch]
    for s in lay.bstrides:
        dims.extend(s)
    dims += [*lay.rows, lay.scale_bits, *lay.offsets]
    tile = head_dim_class(a)
    spec = KernelSpec.make(ctx.template("attention_ck.hip.j2"), ctype=CK_TYPE[a.dtype], causal=a.causal,
                           g_dims=g, inst=tile.instance(), n_dims=len(dims))
    return KernelCall(spec, a.ptrs[:4], dims, op.name or op.kind.value)


@lowering("rocm", OpKind.ATTENTION)
def lower_attention(op: Op, ctx: LowerContext) -> list[KernelCall]:
    a = attention_args(op, ctx.backend)
    if ck_refusal(op, a) is None:
        return [ck_call(op, ctx, a)]
    return [simt_call(op, ctx, a)]
