"""Norm ops against independent numpy (float64, one-pass variance, explicit loops) and torch.

Tolerances (output vs float64 truth): float32 rtol=atol=1e-5 (outputs are O(1), the oracle computes
in float32); float16 rtol=atol=2e-3 (~4 half-ulps at 1); bfloat16 rtol=atol=2e-2 (~2.5 ulps at 1).
Low-precision truth is computed from the rounded inputs, so only compute and output rounding count.
"""
import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import DTypeError, ShapeError

TOL = {"float32": (1e-5, 1e-5), "float16": (2e-3, 2e-3), "bfloat16": (2e-2, 2e-2)}


def _rand(rng, shape, dtype="float32", loc=0.0):
    return (rng.standard_normal(shape) + loc).astype(ag.DType[dtype].np)


def _close(got, want, dtype="float32"):
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol)


# -- independent truths -------------------------------------------------------------------------

def _layernorm_truth(x, w, b, eps, num_axes):
    x = x.astype(np.float64)
    rows = x.reshape(-1, int(np.prod(x.shape[x.ndim - num_axes:])))
    out = np.empty_like(rows)
    for i, r in enumerate(rows):  # one-pass moments, per row
        n = r.size
        mean = r.sum() / n
        var = (r * r).sum() / n - mean * mean
        out[i] = (r - mean) / np.sqrt(var + eps)
    out = out.reshape(x.shape)
    if w is not None:
        out = out * w.astype(np.float64)
    if b is not None:
        out = out + b.astype(np.float64)
    return out


def _rmsnorm_truth(x, w, eps, num_axes):
    x = x.astype(np.float64)
    rows = x.reshape(-1, int(np.prod(x.shape[x.ndim - num_axes:])))
    out = np.stack([r / np.sqrt(np.dot(r, r) / r.size + eps) for r in rows]).reshape(x.shape)
    return out if w is None else out * w.astype(np.float64)


def _groupnorm_truth(x, groups, w, b, eps):
    x = x.astype(np.float64)
    n, c = x.shape[0], x.shape[-1]
    cg = c // groups
    out = np.empty_like(x)
    for s in range(n):
        for g in range(groups):
            block = x[s, ..., g * cg:(g + 1) * cg]
            m = block.mean()
            v = ((block - m) ** 2).mean()
            out[s, ..., g * cg:(g + 1) * cg] = (block - m) / np.sqrt(v + eps)
    if w is not None:
        out = out * w.astype(np.float64)
    if b is not None:
        out = out + b.astype(np.float64)
    return out


# -- batchnorm --------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(5,), (3, 7), (2, 4, 4, 6), (1, 3, 2, 2, 8)])
def test_batchnorm_matches_per_channel_loop(shape):
    rng = np.random.default_rng(0)
    c = shape[-1]
    x = _rand(rng, shape)
    scale, bias, mean = _rand(rng, c), _rand(rng, c), _rand(rng, c)
    var = rng.uniform(0.1, 2.0, c).astype(np.float32)
    xt = ag.Tensor(shape, name="x")
    y = ops.batchnorm(xt, *(ag.constant(p) for p in (scale, bias, mean, var)), eps=1e-3)
    got = ag.reference.run(y, {"x": x})["output_0"]
    want = np.empty(shape)
    for ch in range(c):
        xc = x[..., ch].astype(np.float64)
        want[..., ch] = (xc - mean[ch]) / np.sqrt(var[ch] + 1e-3) * scale[ch] + bias[ch]
    _close(got, want)


# -- layernorm --------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,num_axes", [((4, 16), 1), ((2, 3, 8), 1), ((2, 3, 8), 2),
                                            ((2, 3, 4, 5), 3), ((7,), 1)])
@pytest.mark.parametrize("affine", ["none", "weight", "both", "bias_only"])
def test_layernorm_random_shapes(shape, num_axes, affine):
    rng = np.random.default_rng(1)
    norm = shape[len(shape) - num_axes:]
    x = _rand(rng, shape, loc=3.0)  # a large mean: one-pass and two-pass differ unless done right
    w = _rand(rng, norm) if affine in ("weight", "both") else None
    b = _rand(rng, norm) if affine in ("both", "bias_only") else None
    xt = ag.Tensor(shape, name="x")
    y = ops.layernorm(xt, None if w is None else ag.constant(w), None if b is None else ag.constant(b),
                      eps=1e-5, num_axes=num_axes)
    assert y.shape == xt.shape and y.producer.inputs[0] is xt
    assert len(y.producer.inputs) == {"none": 1, "weight": 2, "both": 3, "bias_only": 3}[affine]
    got = ag.reference.run(y, {"x": x})["output_0"]
    _close(got, _layernorm_truth(x, w, b, 1e-5, num_axes))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_layernorm_low_precision(dtype):
    rng = np.random.default_rng(2)
    x, w, b = _rand(rng, (6, 32), dtype), _rand(rng, 32, dtype), _rand(rng, 32, dtype)
    xt = ag.Tensor([6, 32], dtype, name="x")
    y = ops.layernorm(xt, ag.constant(w), ag.constant(b))
    assert y.dtype == ag.DType[dtype]
    got = ag.reference.run(y, {"x": x})["output_0"]
    assert got.dtype == ag.DType[dtype].np
    _close(got, _layernorm_truth(x, w, b, 1e-5, 1), dtype)


def test_layernorm_dynamic_batch_and_seq():
    batch, seq = ag.IntVar("batch", 1, 8), ag.IntVar("seq", 1, 64)
    xt = ag.Tensor([batch, seq, 24], name="x")
    rng = np.random.default_rng(3)
    w, b = _rand(rng, 24), _rand(rng, 24)
    y = ops.layernorm(xt, ag.constant(w), ag.constant(b))
    assert y.shape[0] is batch and y.shape[1] is seq
    for n, s in [(1, 5), (3, 17)]:
        x = _rand(rng, (n, s, 24))
        _close(ag.reference.run(y, {"x": x})["output_0"], _layernorm_truth(x, w, b, 1e-5, 1))


def test_layernorm_matches_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(4)
    x, w, b = _rand(rng, (2, 5, 4, 6)), _rand(rng, (4, 6)), _rand(rng, (4, 6))
    y = ops.layernorm(ag.Tensor(x.shape, name="x"), ag.constant(w), ag.constant(b), eps=1e-4, num_axes=2)
    got = ag.reference.run(y, {"x": x})["output_0"]
    want = F.layer_norm(torch.from_numpy(x), (4, 6), torch.from_numpy(w), torch.from_numpy(b), eps=1e-4)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


# -- rmsnorm ----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,num_axes", [((3, 16), 1), ((2, 4, 8), 2), ((9,), 1)])
@pytest.mark.parametrize("with_weight", [False, True])
def test_rmsnorm_random_shapes(shape, num_axes, with_weight):
    rng = np.random.default_rng(5)
    x = _rand(rng, shape)
    w = _rand(rng, shape[len(shape) - num_axes:]) if with_weight else None
    y = ops.rmsnorm(ag.Tensor(shape, name="x"), None if w is None else ag.constant(w), eps=1e-6,
                    num_axes=num_axes)
    _close(ag.reference.run(y, {"x": x})["output_0"], _rmsnorm_truth(x, w, 1e-6, num_axes))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_rmsnorm_low_precision_dynamic(dtype):
    seq = ag.IntVar("seq", 1, 32)
    rng = np.random.default_rng(6)
    w = _rand(rng, 16, dtype)
    y = ops.rmsnorm(ag.Tensor([seq, 16], dtype, name="x"), ag.constant(w))
    for s in (2, 11):
        x = _rand(rng, (s, 16), dtype)
        _close(ag.reference.run(y, {"x": x})["output_0"], _rmsnorm_truth(x, w, 1e-6, 1), dtype)


def test_rmsnorm_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    x, w = _rand(rng, (4, 3, 10)), _rand(rng, (10,))
    y = ops.rmsnorm(ag.Tensor(x.shape, name="x"), ag.constant(w), eps=1e-6)
    got = ag.reference.run(y, {"x": x})["output_0"]
    want = torch.nn.functional.rms_norm(torch.from_numpy(x), (10,), torch.from_numpy(w), eps=1e-6)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


# -- groupnorm --------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,groups", [((2, 8), 4), ((2, 5, 6), 3), ((2, 4, 3, 8), 2),
                                          ((1, 3, 3, 6), 6), ((3, 2, 2, 4), 1)])
@pytest.mark.parametrize("affine", [False, True])
def test_groupnorm_random_shapes(shape, groups, affine):
    rng = np.random.default_rng(8)
    c = shape[-1]
    x = _rand(rng, shape, loc=2.0)
    w, b = (_rand(rng, c), _rand(rng, c)) if affine else (None, None)
    y = ops.groupnorm(ag.Tensor(shape, name="x"), groups, None if w is None else ag.constant(w),
                      None if b is None else ag.constant(b), eps=1e-5)
    _close(ag.reference.run(y, {"x": x})["output_0"], _groupnorm_truth(x, groups, w, b, 1e-5))


def test_groupnorm_dynamic_batch_and_spatial():
    n, h = ag.IntVar("n", 1, 4), ag.IntVar("h", 1, 16)
    rng = np.random.default_rng(9)
    w, b = _rand(rng, 8), _rand(rng, 8)
    y = ops.groupnorm(ag.Tensor([n, h, 3, 8], name="x"), 4, ag.constant(w), ag.constant(b))
    for nn_, hh in [(1, 2), (3, 5)]:
        x = _rand(rng, (nn_, hh, 3, 8))
        _close(ag.reference.run(y, {"x": x})["output_0"], _groupnorm_truth(x, 4, w, b, 1e-5))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_groupnorm_low_precision(dtype):
    rng = np.random.default_rng(10)
    x = _rand(rng, (2, 4, 4, 8), dtype)
    y = ops.groupnorm(ag.Tensor(x.shape, dtype, name="x"), 2)
    _close(ag.reference.run(y, {"x": x})["output_0"], _groupnorm_truth(x, 2, None, None, 1e-5), dtype)


def test_groupnorm_matches_torch_nchw():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    x, w, b = _rand(rng, (2, 5, 3, 12)), _rand(rng, 12), _rand(rng, 12)
    y = ops.groupnorm(ag.Tensor(x.shape, name="x"), 3, ag.constant(w), ag.constant(b), eps=1e-5)
    got = ag.reference.run(y, {"x": x})["output_0"]
    nchw = torch.from_numpy(x).permute(0, 3, 1, 2)
    want = torch.nn.functional.group_norm(nchw, 3, torch.from_numpy(w), torch.from_numpy(b), eps=1e-5)
    np.testing.assert_allclose(got, want.permute(0, 2, 3, 1).numpy(), rtol=1e-5, atol=1e-5)


def test_norm_graph_verifies_after_copy():
    # The verifier re-infers each op from its operands alone, so the operand conventions must hold.
    x = ag.Tensor([ag.IntVar("b", 1, 4), 6], name="x")
    w = ag.constant(np.ones(6, np.float32))
    outs = {"ln": ops.layernorm(x, bias=w), "rms": ops.rmsnorm(x, w), "gn": ops.groupnorm(x, 2, w, w),
            "bn": ops.batchnorm(x, w, w, w, w)}
    ag.verify(ag.Graph.from_outputs(outs))


# -- bad inputs -------------------------------------------------------------------------------

def test_groupnorm_channels_not_divisible():
    with pytest.raises(ShapeError, match=r"groupnorm 'gn'.*not divisible by groups 4"):
        ops.groupnorm(ag.Tensor([2, 3, 6], name="x"), 4, name="gn")


def test_groupnorm_dynamic_channels():
    with pytest.raises(ShapeError, match=r"groupnorm.*channel dim must be static"):
        ops.groupnorm(ag.Tensor([2, ag.IntVar("c", 1, 8)], name="x"), 2)


def test_layernorm_weight_shape_mismatch():
    with pytest.raises(ShapeError, match=r"layernorm.*weight has shape \[5\], expected \[4\]"):
        ops.layernorm(ag.Tensor([2, 4], name="x"), ag.constant(np.ones(5, np.float32)))


def test_layernorm_weight_dtype_mismatch():
    with pytest.raises(DTypeError, match=r"layernorm.*weight has dtype float32, x has float16"):
        ops.layernorm(ag.Tensor([2, 4], "float16", name="x"), ag.constant(np.ones(4, np.float32)))


def test_layernorm_num_axes_out_of_range():
    with pytest.raises(ShapeError, match=r"layernorm.*num_axes must be in \[1, rank 2\], got 3"):
        ops.layernorm(ag.Tensor([2, 4], name="x"), num_axes=3)


def test_layernorm_bias_only_with_dynamic_norm_dims():
    x = ag.Tensor([2, ag.IntVar("s", 1, 8)], name="x")
    with pytest.raises(ShapeError, match=r"layernorm.*bias without a weight"):
        ops.layernorm(x, bias=ag.Tensor([x.shape[1]], name="b"))


def test_rmsnorm_int_operand():
    with pytest.raises(DTypeError, match=r"rmsnorm.*needs a float operand"):
        ops.rmsnorm(ag.Tensor([2, 4], "int32", name="x"))


def test_batchnorm_param_shape_mismatch():
    p = ag.constant(np.ones(4, np.float32))
    with pytest.raises(ShapeError, match=r"batchnorm.*var has shape \[3\], expected \[4\]"):
        ops.batchnorm(ag.Tensor([2, 4], name="x"), p, p, p, ag.constant(np.ones(3, np.float32)))


def test_norm_negative_eps():
    with pytest.raises(ValueError, match=r"layernorm.*eps"):
        ops.layernorm(ag.Tensor([2, 4], name="x"), eps=-1.0)


def test_norms_on_empty_batch():
    # An IntVar may be bound to 0: the output is empty, with no NaN warnings from empty statistics.
    n = ag.IntVar("n", 0, 4)
    x = ag.Tensor([n, 6], name="x")
    outs = {"ln": ops.layernorm(x), "rms": ops.rmsnorm(x), "gn": ops.groupnorm(x, 3)}
    with np.errstate(all="raise"):
        res = ag.reference.run(outs, {"x": np.zeros((0, 6), np.float32)})
    assert all(v.shape == (0, 6) for v in res.values())
