"""The Composable Kernel instances of the ROCm GEMM-shaped kernels (gemm, bmm, conv2d): a small
table of tiles, the heuristic that picks one per problem without a GPU, and every template number
CK's XDL device ops take, derived here (templates only print them).

Each instance is one CK template instantiation (~45 s of hipcc per arch on 2 cores), so the table
is short and an instance depends only on what CK must know at compile time: layouts, dtypes,
vector widths, tile and the epilogue functor. Problem sizes (M, N, K, strides, batch) are run-time
arguments (GemmSpecialization::MNKPadding pads any size to the tile), so every BERT layer, every
model with the same epilogue and vector widths, shares one object through the content cache.

CK refuses an argument at run time (IsSupportedArgument) when a vector width does not divide the
dimension it runs along: K for a K-contiguous operand, M or N for an M/N-contiguous one, N for the
result and the D tensors. vector_width() picks the widest width that divides the size known at
build time (a symbolic size: the constant factor of its polynomial), so CK's check holds for
every size the model can bind; a problem no width fits is impossible (width 1 always divides).

Candidates and the profiler: candidates() is every table row whose transfers take the problem's
vector widths (the same checks choose() applies), the heuristic's pick first; rocm/profile.py times
them on an AMD GPU and stores the fastest in the sqlite ProfileCache shared with CUDA
(aitgen.profiler), keyed by backend "rocm", arch and the CK pin (ck_version()). pick() is what the
lowering instantiates: the cached winner of the problem's largest M bucket, else choose()'s. One
instance per translation unit, not a dispatch on M as CUDA's: every instance runs every M
(MNKPadding), each costs ~45 s of hipcc, and the heuristic sizes for M's upper bound too.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

from ....errors import ToolchainError, UnsupportedOpError
from ....ir.dims import Dim, gcd_static
from ....profiler import select
from ....profiler.cache import ProfileCache
from ... import locate
from ..gpu.profiling import default_cache

WAVE = 64          # CDNA wavefront
XDL = 32           # MPerXDL = NPerXDL: the 32x32 MFMAs (v_mfma_f32_32x32x8f16, x8bf16_1k, x2f32)
VECTOR_BYTES = 16  # CK's widest global load in these transfers: 8 fp16/bf16, 4 fp32

# Compute units per arch: the heuristic wants at least this many tiles per launch (MI210/MI250X
# GCD: 104/110; MI300A (gfx940 class): 228).
CU_COUNT = {"gfx90a": 104, "gfx940": 228}


@dataclasses.dataclass(frozen=True)
class Tile:
    """One row of the instance table: threads, block tile (M x N), MFMAs per wave (M, N)."""
    name: str
    block: int
    m: int
    n: int
    mxdl: int
    nxdl: int

    def check(self) -> None:
        waves_m, waves_n = self.m // (self.mxdl * XDL), self.n // (self.nxdl * XDL)
        if waves_m * self.mxdl * XDL != self.m or waves_n * self.nxdl * XDL != self.n \
                or waves_m * waves_n * WAVE != self.block:
            raise ValueError(f"CK tile {self.name}: {self.block} threads do not cover {self.m}x{self.n}")


# Largest first (the heuristic walks it in order). The shapes are CK's own fp16 XDL instances.
TILES = (
    Tile("256x128", 256, 256, 128, 4, 2),
    Tile("128x128", 256, 128, 128, 2, 2),
    Tile("64x128", 128, 64, 128, 2, 2),
    Tile("64x64", 64, 64, 64, 2, 2),
)
for _t in TILES:
    _t.check()


def vector_width(*extents: Dim, itemsize: int = 2) -> int:
    """Widest vector (elements, at most 16 bytes) that divides every extent for all its values."""
    w = VECTOR_BYTES // itemsize
    for e in extents:
        g = e.value if e.is_static else gcd_static(e)
        while w > 1 and (g == 0 or g % w):
            w //= 2
    return w


def k_per_block(itemsize: int) -> int:
    """Four 16-byte K vectors per row of the tile: 32 for 16-bit types, 16 for float32."""
    return 4 * VECTOR_BYTES // itemsize


def transfer(tile: Tile, k_contiguous: bool, along_m: bool, vec: int, itemsize: int = 2) -> dict:
    """CK's block-transfer numbers for the A (along_m) or B operand: thread cluster over (K0, M|N,
    K1), its orders, the source vector dim and widths, the LDS padding.

    K-contiguous (A row-major, B column-major): K1 = one 16-byte vector (8 halves, 4 floats),
    vectors along K (dim 2), as CK's mk/nk instances. M/N-contiguous: K1 = 4 bytes (2 halves, 1
    float), vectors along M|N (dim 1), each thread a 4-wide M|N slice (CK's km/kn instances); the
    width must divide that slice. Either way K0 (4, resp. 16) is the same for every dtype, so the
    thread clusters are too."""
    mn = tile.m if along_m else tile.n
    if k_contiguous:
        k1 = VECTOR_BYTES // itemsize
        k0 = k_per_block(itemsize) // k1
        cluster = (k0, tile.block // k0, 1)
        if mn % cluster[1]:
            raise ValueError(f"tile {tile.name}: {cluster[1]} threads do not divide {mn}")
        return dict(k1=k1, cluster=list(cluster), order=[1, 0, 2], src_order=[1, 0, 2], vec_dim=2,
                    src_vec=vec, dst_vec=k1, lds_extra=1)
    k1 = 4 // itemsize
    k0 = k_per_block(itemsize) // k1
    slice_mn = 4
    threads_mn = mn // slice_mn
    threads_k = tile.block // threads_mn
    if threads_mn * threads_k != tile.block or k0 % threads_k:
        raise ValueError(f"tile {tile.name}: no {slice_mn}-wide cluster over {k0}x{mn}")
    return dict(k1=k1, cluster=[threads_k, threads_mn, 1], order=[0, 2, 1], src_order=[0, 2, 1], vec_dim=1,
                src_vec=math.gcd(vec, slice_mn), dst_vec=k1, lds_extra=0)


def cde_transfer(tile: Tile, vec: int) -> dict:
    """The C-shuffle epilogue: one MFMA per wave per shuffle in M and N, the (1, M, 1, N) thread
    cluster that writes the shuffled (waves_m * 32) x (waves_n * 32) tile `vec` elements at a time,
    reading every D tensor with the same width."""
    tile_n = (tile.n // (tile.nxdl * XDL)) * XDL
    tile_m = (tile.m // (tile.mxdl * XDL)) * XDL
    threads_n = tile_n // vec
    threads_m = tile.block // threads_n
    if threads_n * vec != tile_n or threads_m * threads_n != tile.block or threads_m == 0 or tile_m % threads_m:
        raise ValueError(f"tile {tile.name}: no C-shuffle cluster for vector width {vec}")
    return dict(shuffle=[1, 1], cluster=[1, threads_m, 1, threads_n], vec=vec)


def instance(tile: Tile, a_k_contiguous: bool, b_k_contiguous: bool, vec_a: int, vec_b: int, vec_c: int,
             itemsize: int = 2) -> dict:
    """Every number of one DeviceGemmMultipleD_Xdl_CShuffle-family instance (the `inst` param of
    the templates); `itemsize`: A's and B's."""
    a = transfer(tile, a_k_contiguous, True, vec_a, itemsize)
    b = transfer(tile, b_k_contiguous, False, vec_b, itemsize)
    return dict(name=f"{tile.name} va{a['src_vec']} vb{b['src_vec']} vc{vec_c}", block=tile.block, m=tile.m,
                n=tile.n, k=k_per_block(itemsize), ak1=a["k1"], bk1=b["k1"], xdl=XDL, mxdl=tile.mxdl, nxdl=tile.nxdl,
                a=a, b=b, cde=cde_transfer(tile, vec_c))


def tiles_of(tile: Tile, m: Dim, n: Dim, batch: Dim) -> int:
    """Workgroups a launch of `tile` has at the problem's largest sizes."""
    return -(-m.upper // tile.m) * -(-n.upper // tile.n) * batch.upper


@dataclasses.dataclass(frozen=True)
class CkConfig:
    """One candidate instance of a problem (a select.Problem's candidate): the table row and the
    vector widths it was checked against; `inst` is what the templates read."""
    tile: Tile
    a_k_contiguous: bool
    b_k_contiguous: bool
    vec_a: int
    vec_b: int
    vec_c: int
    itemsize: int

    @property
    def inst(self) -> dict:
        return instance(self.tile, self.a_k_contiguous, self.b_k_contiguous, self.vec_a, self.vec_b, self.vec_c,
                        self.itemsize)

    @property
    def name(self) -> str:
        return self.inst["name"]

    def as_params(self) -> dict:
        """What the cache stores: the name (which select.find matches) and the tile, for humans."""
        return dict(name=self.name, tile=self.tile.name, block=self.tile.block)


def candidates(arch: str, m: Dim, n: Dim, batch: Dim, a_k_contiguous: bool, b_k_contiguous: bool,
               vec_a: int, vec_b: int, vec_c: int, what: str, itemsize: int = 2) -> tuple[CkConfig, ...]:
    """Every table row whose transfers take these vector widths (what CK's IsSupportedArgument and
    its static checks need: instance() raises otherwise), choose()'s pick first, then table order."""
    if arch not in CU_COUNT:
        raise UnsupportedOpError(f"{what}: no CK instances for arch {arch!r} (known: {sorted(CU_COUNT)})")
    out: list[CkConfig] = []
    for tile in TILES:
        cfg = CkConfig(tile, a_k_contiguous, b_k_contiguous, vec_a, vec_b, vec_c, itemsize)
        try:
            cfg.inst
        except ValueError:
            continue
        out.append(cfg)
    if not out:
        raise UnsupportedOpError(f"{what}: no CK instance takes vector widths a={vec_a} b={vec_b} c={vec_c}")
    first = choose(arch, m, n, batch, a_k_contiguous, b_k_contiguous, vec_a, vec_b, vec_c, what, itemsize)
    return tuple(sorted(out, key=lambda c: c.inst != first))


def ck_version() -> str:
    """The CK pin (PIN.md's commit, else a digest of ck.hpp) as the profile key's library version:
    a new pin is a new key, never a stale answer."""
    try:
        return "ck-" + locate.ck().version
    except ToolchainError:   # no headers: nothing compiles here, but a lowering (render tests) still runs
        return "ck-" + locate.CK_COMMIT[:12]


def _first(p: select.Problem, m: int) -> CkConfig:
    return p.candidates[0]   # candidates() put the heuristic's pick (sized for M's upper bound) first


def pick(p: select.Problem, arch: str, cache: Optional[ProfileCache] = None) -> CkConfig:
    """The instance a problem is built with: the profiled winner of its largest M bucket (the
    problem's upper bound, what choose() sizes for too), else the heuristic's."""
    cache = cache if cache is not None else default_cache()
    return select.winner(p, select.m_buckets(p.m)[-1], arch, cache, ck_version(), heuristic=_first)


def choose(arch: str, m: Dim, n: Dim, batch: Dim, a_k_contiguous: bool, b_k_contiguous: bool,
           vec_a: int, vec_b: int, vec_c: int, what: str, itemsize: int = 2) -> dict:
    """The instance for one problem: the largest tile that still gives every CU a workgroup at the
    problem's largest sizes (a dynamic M is sized for its upper bound: the batch a server is
    built for), else the smallest; tiles whose transfers cannot take the vector widths are skipped."""
    cus = CU_COUNT.get(arch)
    if cus is None:
        raise UnsupportedOpError(f"{what}: no CK instances for arch {arch!r} (known: {sorted(CU_COUNT)})")
    fitting: list[dict] = []
    chosen: Optional[dict] = None
    for tile in TILES:
        try:
            inst = instance(tile, a_k_contiguous, b_k_contiguous, vec_a, vec_b, vec_c, itemsize)
        except ValueError:
            continue
        fitting.append(inst)
        if chosen is None and tiles_of(tile, m, n, batch) >= cus:
            chosen = inst
    if not fitting:
        raise UnsupportedOpError(f"{what}: no CK instance takes vector widths a={vec_a} b={vec_b} c={vec_c}")
    return chosen if chosen is not None else fitting[-1]
