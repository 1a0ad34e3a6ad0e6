"""conv2d / conv_transpose2d against naive per-pixel loops through the oracle, and against torch."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import aitgen as ag
from aitgen import ops
from aitgen.errors import DTypeError, ShapeError
from aitgen.ops.registry import Category, get_opdef
from op_helpers import rand, run1, pad4  # noqa: E402

# float32 oracle vs float64 loops over the same inputs.
F32 = dict(rtol=1e-5, atol=1e-5)


def naive_conv(x, w, b, stride, pad, dil, groups):
    """Direct definition: one dot product per (n, oh, ow, o) over its group's taps."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, h, wd, c = x.shape
    o, kh, kw, cg = w.shape
    pt, pb, pl, pr = pad
    ho = (h + pt + pb - dil * (kh - 1) - 1) // stride + 1
    wo = (wd + pl + pr - dil * (kw - 1) - 1) // stride + 1
    og = o // groups
    out = np.zeros((n, ho, wo, o))
    for oh in range(ho):
        for ow in range(wo):
            for i in range(kh):
                for j in range(kw):
                    ih, iw = oh * stride - pt + i * dil, ow * stride - pl + j * dil
                    if 0 <= ih < h and 0 <= iw < wd:
                        for g in range(groups):
                            px = x[:, ih, iw, g * cg:(g + 1) * cg]
                            out[:, oh, ow, g * og:(g + 1) * og] += px @ w[g * og:(g + 1) * og, i, j, :].T
    return out if b is None else out + b


def naive_conv_t(x, w, b, stride, pad, out_pad, dil, groups):
    """Scatter definition: every input pixel adds weight * value at oh = ih*s - pt + i*d."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, h, wd, c = x.shape
    _, kh, kw, cog = w.shape
    pt, pb, pl, pr = pad
    ho = (h - 1) * stride - pt - pb + dil * (kh - 1) + out_pad + 1
    wo = (wd - 1) * stride - pl - pr + dil * (kw - 1) + out_pad + 1
    cig = c // groups
    out = np.zeros((n, ho, wo, cog * groups))
    for ih in range(h):
        for iw in range(wd):
            for i in range(kh):
                for j in range(kw):
                    oh, ow = ih * stride - pt + i * dil, iw * stride - pl + j * dil
                    if 0 <= oh < ho and 0 <= ow < wo:
                        for g in range(groups):
                            px = x[:, ih, iw, g * cig:(g + 1) * cig]
                            out[:, oh, ow, g * cog:(g + 1) * cog] += px @ w[g * cig:(g + 1) * cig, i, j, :]
    return out if b is None else out + b


def test_registered():
    for kind in (ag.OpKind.CONV2D, ag.OpKind.CONV_TRANSPOSE2D):
        assert get_opdef(kind).category == Category.CONV


CONV_CASES = [
    # n, h, w, c, o, k, stride, padding, dilation, groups, bias
    (1, 5, 5, 3, 4, 3, 1, 1, 1, 1, True),
    (2, 8, 7, 4, 6, 3, 2, (1, 2, 0, 1), 1, 1, True),      # asymmetric padding, stride 2
    (1, 9, 9, 2, 3, 3, 1, 2, 2, 1, False),               # dilation
    (2, 6, 6, 6, 4, 3, 1, (1, 1), 1, 2, True),           # groups
    (1, 7, 6, 5, 5, 3, 2, 1, 1, 5, True),                # depthwise
    (1, 6, 6, 4, 8, (3, 1), 1, (1, 0), 1, 4, False),     # depthwise, multiplier 2, non-square
    (1, 5, 7, 3, 2, 1, 2, 0, 1, 1, True),                # 1x1 strided
    (1, 11, 11, 3, 4, 7, 3, 3, 1, 1, True),              # stem-like 7x7
]


def _conv_case(rng, n, h, w, c, o, k, stride, padding, dilation, groups, bias):
    kh, kw = (k, k) if isinstance(k, int) else k
    x, wt = rand(rng, (n, h, w, c)), rand(rng, (o, kh, kw, c // groups))
    b = rand(rng, (o,)) if bias else None
    return x, wt, b


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d(case):
    n, h, w, c, o, k, stride, padding, dilation, groups, bias = case
    rng = np.random.default_rng(sum(case[:5]))
    x, wt, b = _conv_case(rng, *case)
    y = ops.conv2d(ag.Tensor(x.shape, name="x"), ag.constant(wt), None if b is None else ag.constant(b),
                   stride, padding, dilation, groups)
    want = naive_conv(x, wt, b, stride, pad4(padding), dilation, groups)
    assert tuple(d.value for d in y.shape) == want.shape
    np.testing.assert_allclose(run1(y, {"x": x}), want, **F32)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 2), h=st.integers(1, 7), w=st.integers(1, 7), cg=st.integers(1, 3),
       og=st.integers(1, 3), groups=st.integers(1, 3), kh=st.integers(1, 3), kw=st.integers(1, 3),
       stride=st.integers(1, 3), dil=st.integers(1, 2), pads=st.tuples(*[st.integers(0, 2)] * 4))
def test_conv2d_random(n, h, w, cg, og, groups, kh, kw, stride, dil, pads):
    pt, pb, pl, pr = pads
    # A kernel that does not fit is an error, covered by test_error_kernel_too_large.
    assume(h + pt + pb >= dil * (kh - 1) + 1 and w + pl + pr >= dil * (kw - 1) + 1)
    rng = np.random.default_rng(h * 31 + w)
    x, wt, b = rand(rng, (n, h, w, cg * groups)), rand(rng, (og * groups, kh, kw, cg)), rand(rng, (og * groups,))
    y = ops.conv2d(ag.Tensor(x.shape, name="x"), ag.constant(wt), ag.constant(b), stride, pads, dil, groups)
    np.testing.assert_allclose(run1(y, {"x": x}), naive_conv(x, wt, b, stride, pads, dil, groups), **F32)


T_CASES = [
    # n, h, w, cin, cout, k, stride, padding, output_padding, dilation, groups
    (1, 4, 4, 3, 2, 3, 1, 0, 0, 1, 1),
    (2, 3, 5, 4, 6, 3, 2, 1, 1, 1, 2),
    (1, 4, 3, 2, 3, 2, 2, 0, 0, 1, 1),               # the usual 2x upsampler
    (1, 3, 4, 4, 4, 3, 3, (1, 0, 2, 1), 2, 2, 4),    # asymmetric padding, dilation, depthwise
]


@pytest.mark.parametrize("case", T_CASES)
def test_conv_transpose2d(case):
    n, h, w, cin, cout, k, stride, padding, out_pad, dil, groups = case
    rng = np.random.default_rng(sum(case[:5]))
    x, wt, b = rand(rng, (n, h, w, cin)), rand(rng, (cin, k, k, cout // groups)), rand(rng, (cout,))
    y = ops.conv_transpose2d(ag.Tensor(x.shape, name="x"), ag.constant(wt), ag.constant(b), stride, padding,
                             out_pad, dil, groups)
    want = naive_conv_t(x, wt, b, stride, pad4(padding), out_pad, dil, groups)
    assert tuple(d.value for d in y.shape) == want.shape
    np.testing.assert_allclose(run1(y, {"x": x}), want, **F32)


def test_conv2d_dynamic():
    """Dynamic batch, height and width: output dims are symbolic and right at two sizes."""
    N, H, W = ag.IntVar("n", 1, 4), ag.IntVar("h", 3, 32), ag.IntVar("w", 3, 32)
    rng = np.random.default_rng(7)
    wt, b = rand(rng, (4, 3, 3, 3)), rand(rng, (4,))
    y = ops.conv2d(ag.Tensor([N, H, W, 3], name="x"), ag.constant(wt), ag.constant(b), 2, (1, 0, 1, 1))
    assert y.shape[0] is N and not y.shape[1].is_static and not y.shape[2].is_static
    for n, h, w in ((1, 9, 8), (3, 16, 5)):
        x = rand(rng, (n, h, w, 3))
        want = naive_conv(x, wt, b, 2, (1, 0, 1, 1), 1, 1)
        env = {N: n, H: h, W: w}
        assert tuple(d.evaluate(env) for d in y.shape) == want.shape
        np.testing.assert_allclose(run1(y, {"x": x}), want, **F32)


def test_conv_transpose2d_dynamic():
    N, H = ag.IntVar("n", 1, 4), ag.IntVar("h", 1, 16)
    rng = np.random.default_rng(8)
    wt = rand(rng, (2, 3, 3, 3))
    y = ops.conv_transpose2d(ag.Tensor([N, H, 5, 2], name="x"), ag.constant(wt), None, 2, 1, 1)
    for n, h in ((1, 3), (2, 6)):
        x = rand(rng, (n, h, 5, 2))
        want = naive_conv_t(x, wt, None, 2, (1, 1, 1, 1), 1, 1, 1)
        assert tuple(d.evaluate({N: n, H: h}) for d in y.shape) == want.shape
        np.testing.assert_allclose(run1(y, {"x": x}), want, **F32)


@pytest.mark.parametrize("dtype,tol", [(np.float16, 2e-3), (ml_dtypes.bfloat16, 1e-2)])
def test_low_precision(dtype, tol):
    """16-bit storage, float32 math, one rounding per op: within a few ulps of the storage type."""
    name = "float16" if dtype == np.float16 else "bfloat16"
    rng = np.random.default_rng(9)
    x, wt, b = rand(rng, (1, 6, 6, 4), dtype), rand(rng, (4, 3, 3, 2), dtype), rand(rng, (4,), dtype)
    wt_t = rand(rng, (4, 2, 2, 3), dtype)
    X = ag.Tensor(x.shape, name, name="x")
    y = ops.conv2d(X, ag.constant(wt, name), ag.constant(b, name), 1, 1, 1, 2)
    z = ops.conv_transpose2d(X, ag.constant(wt_t, name), None, 2)
    got = ag.reference.run({"y": y, "z": z}, {"x": x})
    assert got["y"].dtype == np.dtype(dtype) and got["z"].dtype == np.dtype(dtype)
    want_y = naive_conv(x, wt, b.astype(np.float64), 1, (1, 1, 1, 1), 1, 2)
    want_z = naive_conv_t(x, wt_t, None, 2, (0, 0, 0, 0), 0, 1, 1)
    # rtol = a few ulps of the storage type; atol covers sums that cancel to near zero.
    np.testing.assert_allclose(got["y"].astype(np.float64), want_y, rtol=tol, atol=tol * 4)
    np.testing.assert_allclose(got["z"].astype(np.float64), want_z, rtol=tol, atol=tol * 4)


# -- torch ----------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_vs_torch(case):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    n, h, w, c, o, k, stride, padding, dilation, groups, bias = case
    rng = np.random.default_rng(sum(case[:5]) + 1)
    x, wt, b = _conv_case(rng, *case)
    y = ops.conv2d(ag.Tensor(x.shape, name="x"), ag.constant(wt), None if b is None else ag.constant(b),
                   stride, padding, dilation, groups)
    pt, pb, pl, pr = pad4(padding)
    xt = F.pad(torch.from_numpy(x).permute(0, 3, 1, 2), (pl, pr, pt, pb))  # NHWC -> NCHW, then pad
    want = F.conv2d(xt, torch.from_numpy(wt).permute(0, 3, 1, 2), None if b is None else torch.from_numpy(b),
                    stride, 0, dilation, groups).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(run1(y, {"x": x}), want, **F32)


@pytest.mark.parametrize("case", T_CASES)
def test_conv_transpose2d_vs_torch(case):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    n, h, w, cin, cout, k, stride, padding, out_pad, dil, groups = case
    rng = np.random.default_rng(sum(case[:5]) + 2)
    x, wt, b = rand(rng, (n, h, w, cin)), rand(rng, (cin, k, k, cout // groups)), rand(rng, (cout,))
    y = ops.conv_transpose2d(ag.Tensor(x.shape, name="x"), ag.constant(wt), ag.constant(b), stride, padding,
                             out_pad, dil, groups)
    pt, pb, pl, pr = pad4(padding)
    # torch pads symmetrically only: run unpadded and crop (top, bottom, left, right).
    full = F.conv_transpose2d(torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(wt).permute(0, 3, 1, 2),
                              torch.from_numpy(b), stride, 0, out_pad, groups, dil)
    want = full[:, :, pt:full.shape[2] - pb, pl:full.shape[3] - pr].permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(run1(y, {"x": x}), want, **F32)


# -- bad inputs -----------------------------------------------------------------------------

def T(*shape, dtype="float32"):
    return ag.Tensor(shape, dtype)


def _raises(err, fn, *words):
    with pytest.raises(err) as info:
        fn()
    for w in words:
        assert w in str(info.value), f"{w!r} not in {str(info.value)!r}"


def test_error_groups():
    _raises(ShapeError, lambda: ops.conv2d(T(1, 5, 5, 6), T(4, 3, 3, 2), groups=4), "conv2d", "not divisible by groups")
    _raises(ShapeError, lambda: ops.conv2d(T(1, 5, 5, 6), T(3, 3, 3, 3), groups=2), "conv2d", "output channels 3")
    _raises(ShapeError, lambda: ops.conv_transpose2d(T(1, 5, 5, 6), T(6, 3, 3, 2), groups=4),
            "conv_transpose2d", "not divisible")


def test_error_weight_channels():
    _raises(ShapeError, lambda: ops.conv2d(T(1, 5, 5, 3), T(4, 3, 3, 2)), "conv2d", "2 input channels per group", "[4, 3, 3, 2]")
    _raises(ShapeError, lambda: ops.conv_transpose2d(T(1, 5, 5, 3), T(4, 3, 3, 2)), "conv_transpose2d", "C_in=4")


def test_error_kernel_too_large():
    _raises(ShapeError, lambda: ops.conv2d(T(1, 2, 5, 3), T(4, 3, 3, 3)), "conv2d", "larger than the padded input")
    _raises(ShapeError, lambda: ops.conv2d(T(1, 5, 5, 3), T(4, 3, 3, 3), dilation=3, padding=0), "conv2d", "effective")


def test_error_rank():
    _raises(ShapeError, lambda: ops.conv2d(T(5, 5, 3), T(4, 3, 3, 3)), "conv2d", "4-D NHWC")
    _raises(ShapeError, lambda: ops.conv2d(T(1, 5, 5, 3), T(4, 3, 3)), "conv2d", "weight must be 4-D")


def test_error_bias():
    _raises(ShapeError, lambda: ops.conv2d(T(1, 5, 5, 3), T(4, 3, 3, 3), T(3)), "conv2d", "bias")
    _raises(ShapeError, lambda: ops.conv_transpose2d(T(1, 5, 5, 3), T(3, 3, 3, 2), T(3), groups=1),
            "conv_transpose2d", "bias")


def test_error_dtype():
    _raises(DTypeError, lambda: ops.conv2d(T(1, 5, 5, 3), T(4, 3, 3, 3, dtype="float16")), "conv2d", "float16")
    _raises(DTypeError, lambda: ops.conv2d(T(1, 5, 5, 3, dtype="int32"), T(4, 3, 3, 3, dtype="int32")), "conv2d")


def test_error_attrs():
    _raises(ShapeError, lambda: ops.conv2d(T(1, 5, 5, 3), T(4, 3, 3, 3), stride=0), "conv2d", "stride")
    _raises(ShapeError, lambda: ops.conv2d(T(1, 5, 5, 3), T(4, 3, 3, 3), padding=(1, 2, 3)), "conv2d", "padding")
    _raises(ShapeError, lambda: ops.conv_transpose2d(T(1, 5, 5, 3), T(3, 3, 3, 2), stride=2, output_padding=2),
            "conv_transpose2d", "output_padding")
    _raises(ShapeError, lambda: ops.conv_transpose2d(T(1, 1, 1, 3), T(3, 3, 3, 2), padding=2),
            "conv_transpose2d", "not positive")
