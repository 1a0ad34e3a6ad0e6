"""CPU gemm / bmm / conv2d / conv_transpose2d (oneDNN) against the oracle.

Many cases go into one model per test (one build). Every model runs at two run-time sizes, which
exercises the per-shape primitive cache; constant weights take the prepacked path, graph inputs as
weights the plain (matmul) or reorder-per-call (conv) path.

Tolerances: float32 rtol 1e-5 with atol 1e-5 x max|reference| (oneDNN sums in another order than
BLAS, so a value that cancels to near zero differs by a few ulps of the terms, not of itself);
float16 (computed in float32, rounded once) rtol/atol 2e-3; bfloat16 (oneDNN's native bf16 kernels,
float32 accumulation, one rounding) rtol/atol 1.6e-2, both atol relative to max|reference|.
"""
import threading

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import RuntimeInputError, UnsupportedOpError

F32 = dict(rtol=1e-5, atol=1e-5)
TOL = {"float32": F32, "float16": dict(rtol=2e-3, atol=2e-3), "bfloat16": dict(rtol=1.6e-2, atol=1.6e-2)}

_rng = np.random.default_rng(1234)


def const(shape, dtype="float32", scale=0.3, name=None):
    return ag.constant((_rng.standard_normal(shape) * scale).astype(ag.DType[dtype].np), name=name)


def rand(shape, dtype="float32"):
    return _rng.standard_normal(shape).astype(ag.DType[dtype].np)


def check(got, want, tol=F32, names=None):
    for k in names or want:
        assert got[k].shape == want[k].shape and got[k].dtype == want[k].dtype, k
        g, w = got[k].astype(np.float32), want[k].astype(np.float32)
        scale = max(1.0, float(np.abs(w).max(initial=0.0)))
        np.testing.assert_allclose(g, w, rtol=tol["rtol"], atol=tol["atol"] * scale, err_msg=k)


def run_check(model, outs, feeds, tol=F32):
    got = model.run(feeds)
    check(got, ag.reference.run(outs, feeds), tol)
    return got


# -- gemm -----------------------------------------------------------------------------------

def test_gemm_layouts_bias_dynamic(tmp_path):
    m = ag.IntVar("m", 1, 64)
    outs, shapes = {}, {}  # input name -> its shape at run-time size M
    for k, n in ((20, 12), (67, 129)):  # small, and odd sizes that leave vector tails
        x = ag.Tensor([m, 3, k], name=f"x{k}")        # leading dims fold into M
        xt = ag.Tensor([k, m], name=f"xt{k}")         # a stored [K, M] (layouts c..)
        w_kn, w_nk = ag.Tensor([k, n], name=f"wkn{k}"), ag.Tensor([n, k], name=f"wnk{k}")
        shapes.update({x.name: lambda s, k=k: (s, 3, k), xt.name: lambda s, k=k: (k, s),
                       w_kn.name: lambda s, k=k, n=n: (k, n), w_nk.name: lambda s, k=k, n=n: (n, k)})
        bias = const(n)
        for layout in ("rrr", "rcr", "crr", "ccr"):
            a = xt if layout[0] == "c" else x
            wshape, w_in = ((n, k), w_nk) if layout[1] == "c" else ((k, n), w_kn)
            outs[f"{layout}_{k}_const_bias"] = ops.gemm(a, const(wshape), bias, layout=layout)
            outs[f"{layout}_{k}_const"] = ops.gemm(a, const(wshape), layout=layout)
            outs[f"{layout}_{k}_input_bias"] = ops.gemm(a, w_in, bias, layout=layout)
            outs[f"{layout}_{k}_input"] = ops.gemm(a, w_in, layout=layout)
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    for size in (5, 64):
        run_check(model, outs, {name: rand(f(size)) for name, f in shapes.items()})


def test_bmm_broadcast_and_transposes(tmp_path):
    b = ag.IntVar("b", 1, 8)
    a4 = ag.Tensor([b, 1, 5, 7], name="a4")
    a4t = ag.Tensor([b, 1, 7, 5], name="a4t")
    b4 = ag.Tensor([1, 3, 7, 4], name="b4")
    b4t = ag.Tensor([1, 3, 4, 7], name="b4t")
    a3 = ag.Tensor([b, 3, 5, 7], name="a3")
    q = ag.Tensor([b, 2, 6, 8], name="q")
    k = ag.Tensor([b, 2, 6, 8], name="k")
    outs = {
        "both_bcast": ops.bmm(a4, b4),                                    # a and b broadcast
        "trans_a": ops.bmm(a4t, b4, trans_a=True),
        "trans_b": ops.bmm(a4, b4t, trans_b=True),
        "trans_ab": ops.bmm(a4t, b4t, trans_a=True, trans_b=True),
        "rank_pad": ops.bmm(a3, ag.Tensor([3, 7, 4], name="b3")),        # b has fewer dims
        "fold": ops.bmm(a3, const((1, 7, 4))),                            # one b: batch folds into M
        "const_b": ops.bmm(a3, const((3, 7, 4))),                         # prepacked batched weight
        "scores": ops.bmm(q, k, trans_b=True),                            # attention-like, both inputs
        "matmul": ops.matmul(q, ops.bmm(k, q, trans_a=True)),
    }
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    for size in (1, 6):
        feeds = {"a4": rand((size, 1, 5, 7)), "a4t": rand((size, 1, 7, 5)), "b4": rand((1, 3, 7, 4)),
                 "b4t": rand((1, 3, 4, 7)), "a3": rand((size, 3, 5, 7)), "b3": rand((3, 7, 4)),
                 "q": rand((size, 2, 6, 8)), "k": rand((size, 2, 6, 8))}
        run_check(model, outs, feeds)


# -- conv -----------------------------------------------------------------------------------

def _nhw(n, h, w):
    return ag.IntVar(n, 1, 4), ag.IntVar(h, 3, 24), ag.IntVar(w, 3, 24)


def test_conv2d_attrs_dynamic_batch_and_spatial(tmp_path):
    n, h, w = _nhw("n", "h", "w")
    x = ag.Tensor([n, h, w, 8], name="x")
    x3 = ag.Tensor([n, h, w, 3], name="x3")
    wi = ag.Tensor([6, 3, 3, 8], name="wi")
    outs = {
        "basic_bias": ops.conv2d(x, const((6, 3, 3, 8)), const(6), padding=1),
        "stride_asym": ops.conv2d(x, const((5, 3, 2, 8)), stride=(2, 3), padding=(1, 0, 2, 1)),
        "dilation": ops.conv2d(x, const((4, 3, 3, 8)), const(4), dilation=(2, 1), padding=(2, 1)),
        "groups": ops.conv2d(x, const((6, 3, 3, 4)), const(6), padding=1, groups=2),
        "groups4_asym": ops.conv2d(x, const((8, 2, 3, 2)), stride=(1, 2), padding=(0, 1, 1, 0), groups=4),
        "depthwise": ops.conv2d(x, const((8, 3, 3, 1)), const(8), padding=1, groups=8, stride=2),
        "depthwise_mult": ops.conv2d(x, const((16, 3, 3, 1)), padding=(1, 2, 0, 1), groups=8),
        "pointwise_s2": ops.conv2d(x, const((12, 1, 1, 8)), const(12), stride=2),
        "stem_7x7": ops.conv2d(x3, const((8, 7, 7, 3)), const(8), stride=2, padding=3),
        "input_weight": ops.conv2d(x, wi, padding=1),
        "input_weight_bias": ops.conv2d(x, wi, const(6), stride=2),
    }
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    for sn, sh, sw in ((1, 9, 11), (3, 16, 7)):
        feeds = {"x": rand((sn, sh, sw, 8)), "x3": rand((sn, sh, sw, 3)), "wi": rand((6, 3, 3, 8))}
        run_check(model, outs, feeds)


def test_conv_transpose2d(tmp_path):
    n, h, w = _nhw("n", "h", "w")
    x = ag.Tensor([n, h, w, 8], name="x")
    wi = ag.Tensor([8, 3, 3, 5], name="wi")
    outs = {
        "s2_outpad_bias": ops.conv_transpose2d(x, const((8, 3, 3, 5)), const(5), stride=2, padding=1, output_padding=1),
        "groups_asym": ops.conv_transpose2d(x, const((8, 3, 2, 3)), const(6), stride=(2, 1), padding=(1, 0, 0, 1),
                                            groups=2),
        "dilation": ops.conv_transpose2d(x, const((8, 3, 3, 4)), stride=2, dilation=2, padding=1),
        "outpad_no_pad": ops.conv_transpose2d(x, const((8, 2, 2, 4)), stride=3, output_padding=(2, 1)),
        "depthwise": ops.conv_transpose2d(x, const((8, 3, 3, 1)), const(8), stride=2, padding=1, groups=8),
        "input_weight": ops.conv_transpose2d(x, wi, const(5), stride=2, padding=(0, 1, 1, 0), output_padding=1),
    }
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    for sn, sh, sw in ((1, 4, 5), (2, 7, 3)):
        run_check(model, outs, {"x": rand((sn, sh, sw, 8)), "wi": rand((8, 3, 3, 5))})


def test_conv_transpose2d_unexpressible_output_padding(tmp_path):
    # output_padding beyond padding + stride needs a negative padding oneDNN refuses: a clear error
    x = ag.Tensor([1, 4, 4, 2], name="x")
    y = ops.conv_transpose2d(x, const((2, 3, 3, 2)), stride=2, dilation=3, output_padding=2)
    with pytest.raises(UnsupportedOpError, match="output_padding"):
        ag.compile_model({"y": y}, target="cpu", workdir=tmp_path / "m")


@pytest.mark.parametrize("seed", [0, 1])
def test_random_shapes(tmp_path, seed):
    # A handful of random gemm and conv configurations per seed, all in one model (one build).
    r = np.random.default_rng(seed)
    n = ag.IntVar("n", 1, 5)
    outs, shapes = {}, {}
    for i in range(4):
        k, nn = (int(v) for v in r.integers(1, 70, 2))
        layout = ("rrr", "rcr")[int(r.integers(2))]
        x = ag.Tensor([n, int(r.integers(1, 4)), k], name=f"g{i}")
        shapes[x.name] = (int(x.shape[1].value), k)
        w = const((nn, k) if layout == "rcr" else (k, nn))
        outs[f"gemm{i}"] = ops.gemm(x, w, const(nn) if r.integers(2) else None, layout=layout)
    for i in range(4):
        g = int(r.choice([1, 1, 2, 3]))
        c, o = g * int(r.integers(1, 6)), g * int(r.integers(1, 6))
        kh, kw = (int(v) for v in r.integers(1, 4, 2))
        stride, dil = tuple(int(v) for v in r.integers(1, 3, 2)), tuple(int(v) for v in r.integers(1, 3, 2))
        pad = tuple(int(v) for v in r.integers(0, 3, 4))
        hw = (int(r.integers(6, 12)), int(r.integers(6, 12)))
        x = ag.Tensor([n, *hw, c], name=f"c{i}")
        shapes[x.name] = (*hw, c)
        bias = const(o) if r.integers(2) else None
        outs[f"conv{i}"] = ops.conv2d(x, const((o, kh, kw, c // g)), bias, stride, pad, dil, g)
        op_ = tuple(int(r.integers(0, s)) for s in stride)
        outs[f"deconv{i}"] = ops.conv_transpose2d(x, const((c, kh, kw, o // g)), bias, stride, pad, op_, dil, g)
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    for size in (1, 5):
        run_check(model, outs, {name: rand((size, *s)) for name, s in shapes.items()})


# -- storage types --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_storage(tmp_path, dtype):
    m = ag.IntVar("m", 1, 16)
    x = ag.Tensor([m, 24], dtype, name="x")
    wi = ag.Tensor([24, 10], dtype, name="wi")
    a = ag.Tensor([m, 2, 5, 24], dtype, name="a")
    img = ag.Tensor([m, 6, 7, 4], dtype, name="img")
    outs = {
        "linear": ops.linear(x, const((10, 24), dtype), const(10, dtype)),
        "gemm_input": ops.gemm(x, wi, const(10, dtype)),
        "bmm": ops.bmm(a, a, trans_b=True),
        "conv": ops.conv2d(img, const((6, 3, 3, 4), dtype), const(6, dtype), padding=1),
        "dwconv": ops.conv2d(img, const((4, 3, 3, 1), dtype), padding=1, groups=4, stride=2),
        "deconv": ops.conv_transpose2d(img, const((4, 3, 3, 5), dtype), const(5, dtype), stride=2, padding=1),
    }
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    for size in (3, 16):
        feeds = {"x": rand((size, 24), dtype), "wi": rand((24, 10), dtype), "a": rand((size, 2, 5, 24), dtype),
                 "img": rand((size, 6, 7, 4), dtype)}
        run_check(model, outs, feeds, TOL[dtype])


# -- constants, reloads, threads, bad input --------------------------------------------------

def test_set_constants_repacks(tmp_path):
    n = ag.IntVar("n", 1, 4)
    x = ag.Tensor([n, 6, 6, 4], name="x")
    cw, fw, fb = const((8, 3, 3, 4), name="conv_w"), const((5, 8), name="fc_w"), const(5, name="fc_b")
    h = ops.relu(ops.conv2d(x, cw, padding=1))
    outs = {"conv": h, "fc": ops.linear(ops.reshape(h, [n * 36, 8]), fw, fb)}
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    feeds = {"x": rand((2, 6, 6, 4))}
    before = run_check(model, outs, feeds)  # packs the weights
    new = {"conv_w": rand((8, 3, 3, 4)), "fc_w": rand((5, 8)), "fc_b": rand(5)}
    model.set_constants(new)
    cw.value, fw.value, fb.value = new["conv_w"], new["fc_w"], new["fc_b"]
    for size in (2, 3):  # a new shape and a cached one both see the new weights
        got = run_check(model, outs, {"x": rand((size, 6, 6, 4))})
    assert not np.allclose(got["fc"][:1], before["fc"][:1])
    model.close()


def test_rebuild_same_workdir_new_weights(tmp_path):
    # Same code, other weights, same workdir: the library (and its kernels' packed weights) stays
    # loaded, and the new model's weights may land at the old one's address with the same
    # constants version; the content fingerprint must still tell them apart.
    x = ag.Tensor([3, 16], name="x")
    xv = rand((3, 16))
    for seed in range(2):
        outs = {"y": ops.linear(x, const((8, 16)), const(8))}
        model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
        run_check(model, outs, {"x": xv})
        model.close()


def test_concurrent_runtimes(tmp_path):
    n = ag.IntVar("n", 1, 8)
    x = ag.Tensor([n, 8, 8, 4], name="x")
    h = ops.relu(ops.conv2d(x, const((8, 3, 3, 4)), const(8), padding=1, stride=2))
    flat = ops.reshape(h, [n * 16, 8])
    outs = {"y": ops.linear(flat, const((16, 8)), const(16)), "s": ops.bmm(h, h, trans_b=True)}
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m", num_runtimes=3)
    cases = [{"x": rand((s, 8, 8, 4))} for s in (1, 2, 5, 8)]
    wants = [ag.reference.run(outs, f) for f in cases]
    errors = []

    def worker(i):
        try:
            for j in range(6):
                c = (i + j) % len(cases)  # threads hit new shapes at once: first-time creation races
                check(model.run(cases[c]), wants[c])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_bad_input_then_ok_and_empty_batch(tmp_path):
    m = ag.IntVar("m", 0, 8)
    x = ag.Tensor([m, 16], name="x")
    outs = {"y": ops.linear(x, const((4, 16)), const(4))}
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    with pytest.raises(RuntimeInputError, match="'x'"):
        model.run({"x": rand((2, 15))})
    run_check(model, outs, {"x": rand((2, 16))})
    assert model.run({"x": rand((0, 16))})["y"].shape == (0, 4)


# -- a small network ------------------------------------------------------------------------

def test_conv_relu_gemm_net(tmp_path):
    n = ag.IntVar("n", 1, 4)
    x = ag.Tensor([n, 16, 16, 3], name="x")
    h = ops.relu(ops.conv2d(x, const((8, 3, 3, 3)), const(8), stride=2, padding=1))
    h = ops.relu(ops.conv2d(h, const((8, 3, 3, 8)), const(8), padding=1) + h)
    h = ops.relu(ops.conv2d(h, const((16, 1, 1, 8)), const(16), stride=2))
    logits = ops.linear(ops.reshape(h, [n, 4 * 4 * 16]), const((10, 256), scale=0.05), const(10))
    outs = {"logits": logits}
    model = ag.compile_model(outs, target="cpu", workdir=tmp_path / "m")
    for size in (1, 4):
        run_check(model, outs, {"x": rand((size, 16, 16, 3))})


def test_resnet50_tiny(tmp_path):
    inputs, outputs = ag.models.get("resnet50", layers=(1, 1, 1, 1), width=8, image_size=32)
    try:
        model = ag.compile_model(outputs, target="cpu", workdir=tmp_path / "m")
    except UnsupportedOpError as e:  # pool / norm kernels land separately
        pytest.skip(f"not every resnet op has a CPU kernel yet: {e}")
    feeds = {name: rand([d.value if d.is_static else 2 for d in t.shape], t.dtype.value) for name, t in inputs.items()}
    check(model.run(feeds), ag.reference.run(outputs, feeds), dict(rtol=1e-4, atol=1e-4))
