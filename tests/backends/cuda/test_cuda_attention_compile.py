"""The CUDA attention kernels, checked without a GPU.

- Lowering: which kernel (tensor cores or CUDA cores) and launch shape each case gets, typed errors.
- The tensor-core kernel's arithmetic, emulated in numpy tile for tile (same tile sizes, per-warp
  edge tests, base-2 online softmax, probabilities rounded to the storage type before P.V), equals
  the oracle: float16 within 2e-3 and bfloat16 within 1.6e-2 of the largest output magnitude (one
  rounding of each probability plus one of the result).
- Its warp-level data movement, emulated lane by lane with the PTX semantics of ldmatrix and
  mma.sync m16n8k16, using the index expressions read out of the rendered source: the fragments
  really compute Q.K^T and P.V, the staged output lands in its rows, and every ldmatrix phase is
  free of shared-memory bank conflicts.
- Golden text of one rendered source; nvcc compiles (2 in the default tier, the matrix of dtypes,
  masks, head dims and archs under the `cuda_compile` marker).
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.codegen import build as build_mod
from aitgen.codegen.backend import load_backend
from aitgen.codegen.kernels.cuda import attention as cuda_attn
from aitgen.codegen.lower import LowerContext
from aitgen.codegen.render import render
from aitgen.errors import UnsupportedOpError

LOG2E = np.float32(1.4426950408889634)
RNG = np.random.default_rng(0)


def _lower(y, arch="sm_80"):
    (call,) = cuda_attn.lower_attention(y.producer, LowerContext("cuda", None, None, arch=arch))
    return call


def _source(call) -> str:
    return render(call.spec.template, func=call.spec.func, **call.spec.param_dict())


def _sdpa(dtype, b, h, sq, sk, d, dv=None, mask=None, causal=False):
    q = ag.Tensor([b, h, sq, d], dtype, name="q")
    k = ag.Tensor([b, h, sk, d], dtype, name="k")
    v = ag.Tensor([b, h, sk, dv or d], dtype, name="v")
    m = None
    if mask == "add":
        m = ag.Tensor([b, 1, 1, sk], dtype, name="m")
    elif mask == "bool":
        m = ag.Tensor([b, 1, sq, sk], "bool", name="m")
    return ops.scaled_dot_product_attention(q, k, v, m, causal=causal)


# ---------------------------------------------------------------------------------------------
# lowering
# ---------------------------------------------------------------------------------------------

def test_lowering_picks_the_kernel_and_launch_shape():
    p = _lower(_sdpa("float16", 1, 12, 128, 128, 64, mask="add"), "sm_90a").spec.param_dict()
    # BERT-base s128 b1: 12 heads x 128 queries; one-warp CTAs give 96 of them for 132 SMs.
    assert p["warps"] == 1 and p["head_dim"] == 64 and p["mask_k_unit"] and "mma" in _lower(
        _sdpa("float16", 1, 12, 128, 128, 64)).spec.template
    assert _lower(_sdpa("bfloat16", 8, 16, 512, 512, 128, causal=True)).spec.param_dict()["warps"] == 4
    s = ag.IntVar("seq", 1, 4096)
    assert _lower(_sdpa("float16", 1, 12, s, s, 64)).spec.param_dict()["warps"] == 4  # sized for the bound
    for y in (_sdpa("float32", 1, 2, 10, 10, 64),          # float32: CUDA cores
              _sdpa("float16", 1, 2, 10, 10, 48),          # no tensor-core head dim
              _sdpa("bfloat16", 1, 2, 10, 10, 64, dv=128),  # v's head dim differs
              _sdpa("float16", 1, 2, 10, 10, ag.IntVar("d", 1, 64))):  # run-time head dim
        spec = _lower(y).spec
        assert "simt" in spec.template, y.producer
    assert _lower(_sdpa("float16", 1, 2, 10, 10, ag.IntVar("d", 1, 64))).spec.param_dict()["scale_from_head_dim"]
    with pytest.raises(UnsupportedOpError, match="attention.*head dims.*1024"):
        _lower(_sdpa("float32", 1, 2, 10, 10, 1024))


# ---------------------------------------------------------------------------------------------
# the blocked algorithm, emulated in numpy
# ---------------------------------------------------------------------------------------------

def _round(x, dtype):
    return np.asarray(x, np.float32).astype(ag.DType[dtype].np).astype(np.float32)


def emulate_mma(q, k, v, mask, causal, scale, dtype, cfg):
    """attention_mma.cu.j2's arithmetic: q [B, Sq, D], k, v [B, Sk, D] (storage values as float32),
    mask [B, Sq, Sk] (float: added, bool: True attends) or None."""
    nb, sq, d = q.shape
    sk = k.shape[1]
    bm, bn = cfg.block_m, cfg.block_n
    out = np.zeros(q.shape, np.float32)
    scale_log2 = np.float32(scale) * LOG2E
    with np.errstate(invalid="ignore", over="ignore"):
        for b in range(nb):
            for m0 in range(0, sq, bm):
                nq = min(bm, sq - m0)
                rows = m0 + np.arange(bm)
                qt = np.zeros((bm, d), np.float32)
                qt[:nq] = q[b, m0:m0 + nq]
                acc = np.zeros((bm, d), np.float32)
                row_max = np.full(bm, -np.inf, np.float32)
                row_sum = np.zeros(bm, np.float32)
                kend = min(sk, m0 + bm) if causal else sk
                for j0 in range(0, kend, bn):
                    nk = min(bn, sk - j0)
                    kt, vt = np.zeros((bn, d), np.float32), np.zeros((bn, d), np.float32)
                    kt[:nk], vt[:nk] = k[b, j0:j0 + nk], v[b, j0:j0 + nk]
                    cols = j0 + np.arange(bn)
                    x = (qt @ kt.T).astype(np.float32) * scale_log2
                    if mask is not None:
                        mv = mask[b][np.minimum(rows, sq - 1)][:, np.minimum(cols, sk - 1)]
                        x = np.where(mv, x, -np.inf) if mv.dtype == np.bool_ else x + mv.astype(np.float32) * LOG2E
                    for w in range(cfg.warps):  # the kernel bounds-checks only a warp's edge tiles
                        r = slice(16 * w, 16 * w + 16)
                        if nk < bn or (causal and j0 + bn - 1 > m0 + 16 * w):
                            dead = (cols[None, :] >= sk) | (causal & (cols[None, :] > rows[r, None]))
                            x[r] = np.where(dead, -np.inf, x[r])
                    m_new = np.maximum(row_max, x.max(axis=1))
                    base = np.where(m_new == -np.inf, np.float32(0), m_new)
                    corr = np.exp2(row_max - base)
                    p = np.exp2(x - base[:, None])
                    row_sum = row_sum * corr + p.sum(axis=1, dtype=np.float32)
                    acc = acc * corr[:, None] + _round(p, dtype) @ vt
                    row_max = m_new
                inv = np.where(row_sum > 0, 1 / np.where(row_sum > 0, row_sum, 1), 0).astype(np.float32)
                out[b, m0:m0 + nq] = (acc * inv[:, None])[:nq]
    return _round(out, dtype)


EMULATED = [  # dtype, batch, heads, Sq, Sk, head dim, mask, causal, warps
    ("float16", 2, 2, 130, 130, 64, None, False, 4),   # query and key tails
    ("float16", 1, 2, 150, 150, 128, None, True, 2),   # causal tile skipping, diagonal edges
    ("bfloat16", 2, 2, 70, 45, 64, "add", False, 1),   # additive mask with -inf, Sk < one tile
    ("float16", 1, 3, 77, 77, 64, "bool", True, 4),    # bool mask + causal, a fully masked row
    ("bfloat16", 1, 2, 20, 90, 128, None, True, 1),    # Sq < Sk causal (top-left)
]


@pytest.mark.parametrize("dtype,b,h,sq,sk,d,mask,causal,warps", EMULATED)
def test_blocked_online_softmax_equals_the_oracle(dtype, b, h, sq, sk, d, mask, causal, warps):
    npd = ag.DType[dtype].np
    feeds = {n: RNG.standard_normal((b, h, s, d)).astype(npd) for n, s in (("q", sq), ("k", sk), ("v", sk))}
    feeds["q"] = (feeds["q"].astype(np.float32) * 2).astype(npd)  # peaked softmax rows
    y = _sdpa(dtype, b, h, sq, sk, d, mask=mask, causal=causal)
    if mask == "add":
        m = np.where(RNG.random((b, 1, 1, sk)) < 0.2, -10000.0, 0.0)
        m[0, ..., :3] = -np.inf
        feeds["m"] = m.astype(npd)
    elif mask == "bool":
        m = RNG.random((b, 1, sq, sk)) < 0.8
        m[0, 0, 5, :] = False  # attends to nothing: zeros, not NaN
        feeds["m"] = m
    want = ag.reference.run({"y": y}, feeds)["y"].astype(np.float32)
    f32 = {n: a.astype(np.float32) if a.dtype != np.bool_ else a for n, a in feeds.items()}
    flat = [f32[n].reshape(b * h, -1, d) for n in "qkv"]
    mflat = None if mask is None else np.broadcast_to(f32["m"], (b, h, sq, sk)).reshape(b * h, sq, sk)
    cfg = cuda_attn.MmaConfig(warps, cuda_attn.MMA_BLOCK_N)
    got = emulate_mma(*flat, mflat, causal, 1 / np.sqrt(d), dtype, cfg).reshape(want.shape)
    tol = 2e-3 if dtype == "float16" else 1.6e-2
    assert np.isfinite(got).all()
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert err <= tol, err
    if mask == "bool":
        assert not got[0, 0, 5].any()


# ---------------------------------------------------------------------------------------------
# warp-level data movement, emulated lane by lane from the rendered source's index expressions
# ---------------------------------------------------------------------------------------------

def _c_expr(src: str, pattern: str) -> list[str]:
    """The arguments of the call `pattern(` ... `)` (first occurrence), split at top-level commas."""
    start = src.index(pattern) + len(pattern)
    depth, args, cur = 1, [], ""
    for ch in src[start:]:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                break
        if ch == "," and depth == 1:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return args + [cur.strip()]


def _ev(expr: str, **env) -> int:
    # C and Python agree on the precedence of * + >> & ^ for these non-negative ints; / is floor.
    return int(eval(expr.replace(" / ", " // "), {}, env))  # our own template's text


def _ldmatrix(smem, addrs, trans):
    """ldmatrix .x4: lane 8i + r gives the address of row r of matrix i; lane 4r + w receives the
    pair (row r, cols 2w, 2w+1) of each matrix, of its transpose with .trans."""
    mats = [np.stack([smem[a:a + 8] for a in addrs[8 * i:8 * i + 8]]) for i in range(4)]
    if trans:
        mats = [m.T for m in mats]
    return [[mats[i][ln // 4, 2 * (ln % 4):2 * (ln % 4) + 2] for i in range(4)] for ln in range(32)]


def _mma(c, a, b0, b1):
    """mma.sync m16n8k16 row.col on per-lane fragments (PTX ISA, 'Matrix fragments for mma.m16n8k16')."""
    am, bm = np.zeros((16, 16), np.float32), np.zeros((16, 8), np.float32)
    for ln in range(32):
        g, t = ln // 4, ln % 4
        am[g, 2 * t:2 * t + 2], am[g + 8, 2 * t:2 * t + 2] = a[ln][0], a[ln][1]
        am[g, 2 * t + 8:2 * t + 10], am[g + 8, 2 * t + 8:2 * t + 10] = a[ln][2], a[ln][3]
        bm[2 * t:2 * t + 2, g], bm[2 * t + 8:2 * t + 10, g] = b0[ln], b1[ln]
    cm = _c_to_matrix(c) + am @ bm
    return np.stack([np.r_[cm[ln // 4, 2 * (ln % 4):2 * (ln % 4) + 2], cm[ln // 4 + 8, 2 * (ln % 4):2 * (ln % 4) + 2]]
                     for ln in range(32)])


def _c_to_matrix(c):
    m = np.zeros((16, 8), np.float32)
    for ln in range(32):
        m[ln // 4, 2 * (ln % 4):2 * (ln % 4) + 2], m[ln // 4 + 8, 2 * (ln % 4):2 * (ln % 4) + 2] = c[ln][:2], c[ln][2:]
    return m


def _banks_conflict_free(addrs) -> bool:
    # Each 8-lane phase reads 8 rows of 16 bytes: conflict-free iff they cover all 32 banks.
    return all(len({(a * 2 // 4 + w) % 32 for a in addrs[8 * i:8 * i + 8] for w in range(4)}) == 32 for i in range(4))


@pytest.mark.parametrize("head_dim,warps", [(64, 4), (128, 1)])
def test_fragments_compute_qk_and_pv(head_dim, warps):
    y = _sdpa("float16", 1, 4, 200, 200, head_dim)
    call = _lower(y)
    cfg = cuda_attn.MmaConfig(warps, call.spec.param_dict()["block_n"])
    src = _source(call)
    hd, bm, bn, ch_n = head_dim, cfg.block_m, cfg.block_n, head_dim // 8
    swz_body = re.search(r"int swz\(int r, int chunk\) \{ return (.+?); \}", src).group(1)

    def swz(r, chunk):
        return _ev(swz_body, r=r, chunk=chunk, HD=hd)

    # load_tile: chunk c of the tile goes to swz(r, ch), from row r, columns 8 ch .. 8 ch + 7
    rc = re.search(r"const int r = (.+?), ch = (.+?);\n\s+T\* dst = s \+ swz\(r, ch\);", src)

    def tile(m):
        s = np.zeros(m.shape[0] * hd, np.float32)
        for c in range(m.size // 8):
            r, ch = _ev(rc.group(1), c=c, CH=ch_n), _ev(rc.group(2), c=c, CH=ch_n)
            s[swz(r, ch):swz(r, ch) + 8] = m[r, 8 * ch:8 * ch + 8]
        return s

    q, k, v = (_round(RNG.standard_normal((n, hd)), "float16") for n in (bm, bn, bn))
    sq_s, sk_s, sv_s = tile(q), tile(k), tile(v)
    warp = warps - 1
    qa = _c_expr(src, "ldmatrix_x4(qf, sq + swz(")
    ka = _c_expr(src, "ldmatrix_x4(bf, kt + swz(")
    va = _c_expr(src, "ldmatrix_x4_trans(bf, vt + swz(")
    mma_s = re.findall(r"mma16816<T>\(s\[(.+?)\], qf, bf\[(\d)\], bf\[(\d)\]\)", src)
    mma_o = re.findall(r"mma16816<T>\(acc\[(.+?)\], pf, bf\[(\d)\], bf\[(\d)\]\)", src)
    assert len(mma_s) == 2 and len(mma_o) == 2

    def ldsm(smem, exprs, trans, **env):
        addr = [swz(_ev(exprs[0], lane=ln, warp=warp, **env), _ev(exprs[1], lane=ln, **env)) for ln in range(32)]
        assert _banks_conflict_free(addr)
        return _ldmatrix(smem, addr, trans)

    def mmas(c, a, bf, calls, **env):
        for idx, b0, b1 in calls:
            i = _ev(idx, **env)
            c[i] = _mma(c[i], a, [f[int(b0)] for f in bf], [f[int(b1)] for f in bf])

    s = np.zeros((bn // 8, 32, 4), np.float32)
    for kk in range(hd // 16):
        qf = ldsm(sq_s, qa, False, kk=kk)
        for np_ in range(bn // 16):
            mmas(s, qf, ldsm(sk_s, ka, False, np=np_, kk=kk), mma_s, np=np_)
    got_s = np.concatenate([_c_to_matrix(s[i]) for i in range(bn // 8)], axis=1)
    np.testing.assert_allclose(got_s, q[16 * warp:16 * warp + 16] @ k.T, rtol=1e-5, atol=1e-4)

    # P.V: probabilities in the score fragments, packed to A fragments as the source packs them
    p = _round(RNG.random((16, bn)), "float16")
    for i in range(bn // 8):
        for ln in range(32):
            g, t = ln // 4, ln % 4
            s[i][ln] = np.r_[p[g, 8 * i + 2 * t:8 * i + 2 * t + 2], p[g + 8, 8 * i + 2 * t:8 * i + 2 * t + 2]]
    packs = re.findall(r"pack2<T>\(s\[(.+?)\]\[(\d)\], s\[(.+?)\]\[(\d)\]\)", src)
    acc = np.zeros((hd // 8, 32, 4), np.float32)
    for kk in range(bn // 16):
        pf = [[np.r_[s[_ev(i0, kk=kk)][ln][int(e0)], s[_ev(i1, kk=kk)][ln][int(e1)]] for i0, e0, i1, e1 in packs]
              for ln in range(32)]
        for dp in range(hd // 16):
            mmas(acc, pf, ldsm(sv_s, va, True, kk=kk, dp=dp), mma_o, dp=dp)
    want_o = p @ v
    np.testing.assert_allclose(np.concatenate([_c_to_matrix(acc[i]) for i in range(hd // 8)], axis=1), want_o,
                               rtol=1e-5, atol=1e-4)

    # staging into the warp's query-tile rows, then 16-byte row chunks out
    stage_r = re.search(r"const int r = (warp \* 16 \+ g \+ h \* 8);", src).group(1)
    assert "sq + swz(r, i) + 2 * t4" in src
    stage = np.full(bm * hd, np.nan, np.float32)
    for ln in range(32):
        g, t4 = ln // 4, ln % 4
        for h in range(2):
            r = _ev(stage_r, warp=warp, g=g, h=h)
            for i in range(hd // 8):
                a = swz(r, i) + 2 * t4
                stage[a:a + 2] = acc[i][ln][2 * h:2 * h + 2]
    out_rc = re.search(r"const int r = (warp \* 16 \+ c / CH), ch = (c % CH);", src)
    out = np.full((bm, hd), np.nan, np.float32)
    for ln in range(32):
        for c in range(ln, 16 * ch_n, 32):
            r, ch = _ev(out_rc.group(1), warp=warp, c=c, CH=ch_n), _ev(out_rc.group(2), c=c, CH=ch_n)
            out[r, 8 * ch:8 * ch + 8] = stage[swz(r, ch):swz(r, ch) + 8]
    np.testing.assert_allclose(out[16 * warp:16 * warp + 16], want_o, rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# rendered source and nvcc
# ---------------------------------------------------------------------------------------------

def test_rendered_source_golden(golden):
    call = _lower(_sdpa("float16", 2, 12, 128, 128, 64, mask="add", causal=True), "sm_90a")
    golden("cuda/attention_mma_f16_causal_add.cu", _source(call))


def _compile(calls, arch, tmp_path):
    """nvcc (the cuda backend's flags for `arch`) on each kernel, into one library, with a private
    object cache so every source really compiles."""
    be = load_backend("cuda")
    sources = {c.spec.func: build_mod.Source(f"{c.spec.func}.cu", _source(c)) for c in calls}
    return build_mod.build(list(sources.values()), tmp_path / f"attn_{arch}.so", compiler=be.compiler,
                           flags=be.compile_flags(arch), link_flags=be.link_flags(), workdir=tmp_path / arch,
                           cache_dir=tmp_path / "cache", jobs=1, progress=False)


@pytest.mark.parametrize("arch,case", [
    ("sm_80", ("float16", 2, 12, 128, 128, 64, "add", False)),
    ("sm_90a", ("bfloat16", 1, 8, 300, 300, 128, "bool", True)),
])
def test_nvcc_compiles(cuda_toolchain, arch, case, tmp_path):
    dtype, b, h, sq, sk, d, mask, causal = case
    call = _lower(_sdpa(dtype, b, h, sq, sk, d, mask=mask, causal=causal), arch)
    res = _compile([call], arch, tmp_path)
    assert res.out_so.exists() and res.cache_misses == 1
    assert "warning" not in res.log, res.log


@pytest.mark.cuda_compile
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_nvcc_compiles_every_variant(cuda_toolchain, arch, tmp_path):
    # Each dtype with and without causal, each mask kind and head dim at least once, and the
    # CUDA-core kernel for float32, odd head dims and a run-time head dim.
    cases = [("float16", 64, None, False), ("float16", 128, "add", True), ("bfloat16", 128, "bool", False),
             ("bfloat16", 64, "add", True), ("float16", 64, "bool", True)]
    calls = [_lower(_sdpa(dtype, 2, 4, 100, 100, d, mask=mask, causal=causal), arch) for dtype, d, mask, causal in cases]
    calls.append(_lower(_sdpa("float32", 2, 4, 100, 100, 64, mask="add", causal=True), arch))
    calls.append(_lower(_sdpa("float16", 2, 4, 100, 100, 48, dv=32, mask="bool"), arch))
    calls.append(_lower(_sdpa("bfloat16", 2, 4, 100, 100, ag.IntVar("d", 1, 256)), arch))
    res = _compile(calls, arch, tmp_path)
    assert res.cache_misses == len({c.spec.func for c in calls}) == len(calls)
    assert "warning" not in res.log, res.log
