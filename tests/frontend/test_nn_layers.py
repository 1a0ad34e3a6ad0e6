"""Every nn layer's graph, evaluated by aitgen.reference, against plain numpy and against torch.nn.

torch modules get our weights converted at the edge: NHWC <-> NCHW activations, OHWI <-> OIHW conv
weights, [in, kh, kw, out/g] <-> [in, out/g, kh, kw] transposed-conv weights, and MultiheadAttention's
in_proj_weight as the concatenation of q/k/v.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import aitgen as ag
from aitgen import nn

sys.path.insert(0, os.path.dirname(__file__))  # the helper next to this file, under any import mode
import nn_numpy_ref as R  # noqa: E402

# float32 throughout; float64 numpy and torch's float32 kernels sum in other orders than the
# oracle, so allow a few ulps of the O(1) outputs these small layers produce.
RTOL = ATOL = 1e-5


@pytest.fixture(autouse=True)
def _seed():
    nn.manual_seed(0)


def rand(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def run(layer_out: ag.Tensor, **feeds) -> np.ndarray:
    return ag.reference.run({"y": layer_out}, feeds)["y"]


def apply(layer, x: np.ndarray, name: str = "x") -> np.ndarray:
    return run(layer(ag.Tensor(list(x.shape), dtype=ag.ir.as_dtype(x.dtype), name=name)), **{name: x})


def close(a, b):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=RTOL, atol=ATOL)


def torch_mod():
    return pytest.importorskip("torch")


def to_torch(torch, module, ours, convert=None):
    """Load our state_dict into the torch module (converting named entries), in eval mode."""
    sd = {k: (convert(k, v) if convert else v) for k, v in ours.state_dict().items()}
    missing, unexpected = module.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v))
                                                  for k, v in sd.items()}, strict=False)
    assert not unexpected and all(k.endswith("num_batches_tracked") for k in missing)
    return module.eval()


def torch_nhwc(torch, module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module(torch.from_numpy(x.transpose(0, 3, 1, 2).copy())).numpy().transpose(0, 2, 3, 1)


def ohwi_to_oihw(k, v):
    return v.transpose(0, 3, 1, 2) if v.ndim == 4 else v


# -- Linear ----------------------------------------------------------------------------------

@pytest.mark.parametrize("bias", [True, False])
def test_linear(bias):
    lin = nn.Linear(6, 5, bias=bias)
    x = rand(2, 3, 6)
    y = apply(lin, x)
    assert y.shape == (2, 3, 5)
    close(y, R.linear(x, lin.weight.value, lin.bias.value if bias else None))
    torch = torch_mod()
    t = to_torch(torch, torch.nn.Linear(6, 5, bias=bias), lin)
    with torch.no_grad():
        close(y, t(torch.from_numpy(x)).numpy())


# -- convolutions ------------------------------------------------------------------------------

CONV_CASES = [
    dict(cin=3, cout=4, k=3, stride=1, padding=1, dilation=1, groups=1, bias=True),
    dict(cin=4, cout=6, k=(3, 2), stride=(2, 1), padding=(1, 0), dilation=1, groups=2, bias=False),
    dict(cin=4, cout=4, k=3, stride=2, padding=2, dilation=2, groups=4, bias=True),  # depthwise
    dict(cin=2, cout=3, k=3, stride=1, padding="same", dilation=1, groups=1, bias=True),
]


@pytest.mark.parametrize("c", CONV_CASES)
def test_conv2d(c):
    conv = nn.Conv2d(c["cin"], c["cout"], c["k"], stride=c["stride"], padding=c["padding"],
                     dilation=c["dilation"], groups=c["groups"], bias=c["bias"])
    x = rand(2, 7, 6, c["cin"])
    y = apply(conv, x)
    want = R.conv2d(x, conv.weight.value, conv.bias.value if c["bias"] else None, conv.stride,
                    conv.padding, conv.dilation, c["groups"])
    assert y.shape == want.shape
    close(y, want)
    torch = torch_mod()
    t = to_torch(torch, torch.nn.Conv2d(c["cin"], c["cout"], c["k"], stride=c["stride"], padding=c["padding"],
                                        dilation=c["dilation"], groups=c["groups"], bias=c["bias"]),
                 conv, ohwi_to_oihw)
    close(y, torch_nhwc(torch, t, x))


CONVT_CASES = [
    dict(cin=3, cout=4, k=3, stride=2, padding=1, output_padding=1, groups=1, dilation=1, bias=True),
    dict(cin=4, cout=6, k=(2, 3), stride=(1, 2), padding=0, output_padding=0, groups=2, dilation=1, bias=False),
    dict(cin=2, cout=2, k=3, stride=2, padding=(2, 1), output_padding=(1, 0), groups=1, dilation=2, bias=True),
]


@pytest.mark.parametrize("c", CONVT_CASES)
def test_conv_transpose2d(c):
    conv = nn.ConvTranspose2d(c["cin"], c["cout"], c["k"], stride=c["stride"], padding=c["padding"],
                              output_padding=c["output_padding"], groups=c["groups"], bias=c["bias"],
                              dilation=c["dilation"])
    x = rand(2, 5, 4, c["cin"])
    y = apply(conv, x)
    want = R.conv_transpose2d(x, conv.weight.value, conv.bias.value if c["bias"] else None, conv.stride,
                              conv.padding, conv.output_padding, conv.dilation, c["groups"])
    assert y.shape == want.shape
    close(y, want)
    torch = torch_mod()
    t = to_torch(torch, torch.nn.ConvTranspose2d(c["cin"], c["cout"], c["k"], stride=c["stride"],
                                                 padding=c["padding"], output_padding=c["output_padding"],
                                                 groups=c["groups"], bias=c["bias"], dilation=c["dilation"]),
                 conv, ohwi_to_oihw)
    close(y, torch_nhwc(torch, t, x))


# -- normalisation ------------------------------------------------------------------------------

def test_batchnorm2d():
    bn = nn.BatchNorm2d(5, eps=1e-3)
    x = rand(2, 4, 3, 5)
    y = apply(bn, x)
    close(y, R.batchnorm(x, bn.weight.value, bn.bias.value, bn.running_mean.value, bn.running_var.value, 1e-3))
    torch = torch_mod()
    t = to_torch(torch, torch.nn.BatchNorm2d(5, eps=1e-3), bn)
    close(y, torch_nhwc(torch, t, x))


@pytest.mark.parametrize("shape,affine,bias", [(8, True, True), ((3, 8), True, True), (8, False, False),
                                               (8, True, False)])
def test_layernorm(shape, affine, bias):
    ln = nn.LayerNorm(shape, eps=1e-5, elementwise_affine=affine, bias=bias)
    x = rand(2, 3, 8) * 3 + 1
    y = apply(ln, x)
    nax = 1 if isinstance(shape, int) else len(shape)
    close(y, R.layernorm(x, ln.weight.value if affine else None, ln.bias.value if ln.bias is not None else None,
                         1e-5, nax))
    torch = torch_mod()
    t = to_torch(torch, torch.nn.LayerNorm(shape, eps=1e-5, elementwise_affine=affine, bias=bias), ln)
    with torch.no_grad():
        close(y, t(torch.from_numpy(x)).numpy())


@pytest.mark.parametrize("groups,affine", [(2, True), (6, True), (1, False)])
def test_groupnorm(groups, affine):
    gn = nn.GroupNorm(groups, 6, eps=1e-5, affine=affine)
    x = rand(2, 4, 3, 6) * 2 - 0.5
    y = apply(gn, x)
    w = gn.weight.value if affine else np.ones(6)
    b = gn.bias.value if affine else np.zeros(6)
    close(y, R.groupnorm(x, groups, w, b, 1e-5))
    torch = torch_mod()
    t = to_torch(torch, torch.nn.GroupNorm(groups, 6, eps=1e-5, affine=affine), gn)
    close(y, torch_nhwc(torch, t, x))


def test_rmsnorm():
    rn = nn.RMSNorm(8, eps=1e-6)
    x = rand(3, 5, 8)
    y = apply(rn, x)
    close(y, R.rmsnorm(x, rn.weight.value, 1e-6))
    torch = torch_mod()
    t = to_torch(torch, torch.nn.RMSNorm(8, eps=1e-6), rn)
    with torch.no_grad():
        close(y, t(torch.from_numpy(x)).numpy())


# -- embedding, activations, shapes, pooling ---------------------------------------------------

@pytest.mark.parametrize("idt", ["int64", "int32"])
def test_embedding(idt):
    emb = nn.Embedding(11, 4, padding_idx=0)
    assert not emb.weight.value[0].any()
    ids = np.array([[1, 0, 10], [3, 3, 7]], dtype=idt)
    y = apply(emb, ids, name="ids")
    close(y, emb.weight.value[ids])
    torch = torch_mod()
    t = to_torch(torch, torch.nn.Embedding(11, 4, padding_idx=0), emb)
    with torch.no_grad():
        close(y, t(torch.from_numpy(ids.astype(np.int64))).numpy())


ACTS = [("ReLU", {}), ("ReLU6", {}), ("GELU", {}), ("GELU", {"approximate": "tanh"}), ("SiLU", {}),
        ("Sigmoid", {}), ("Tanh", {}), ("Hardswish", {})]


@pytest.mark.parametrize("name,kw", ACTS)
def test_activation(name, kw):
    x = rand(4, 9) * 4
    y = apply(getattr(nn, name)(**kw), x)
    close(y, R.gelu_tanh(x) if kw else R.ACTIVATIONS[name](x))
    torch = torch_mod()
    with torch.no_grad():
        close(y, getattr(torch.nn, name)(**kw)(torch.from_numpy(x)).numpy())


@pytest.mark.parametrize("dim", [-1, 1, 0])
def test_softmax(dim):
    x = rand(3, 4, 5) * 3
    y = apply(nn.Softmax(dim), x)
    close(y, R.softmax(x, dim))
    torch = torch_mod()
    with torch.no_grad():
        close(y, torch.nn.Softmax(dim)(torch.from_numpy(x)).numpy())


@pytest.mark.parametrize("start,end", [(1, -1), (0, 1), (1, 2)])
def test_flatten(start, end):
    x = rand(2, 3, 4, 5)
    y = apply(nn.Flatten(start, end), x)
    torch = torch_mod() if start == 1 and end == -1 else None
    want = x.reshape(x.shape[:start] + (-1,) + x.shape[end % 4 + 1:])
    close(y, want)
    if torch is not None:
        close(y, torch.nn.Flatten()(torch.from_numpy(x)).numpy())


POOL_CASES = [
    ("MaxPool2d", dict(kernel_size=3, stride=2, padding=1)),
    ("MaxPool2d", dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 1), dilation=(2, 1))),
    ("MaxPool2d", dict(kernel_size=2, ceil_mode=True)),
    ("AvgPool2d", dict(kernel_size=2)),
    ("AvgPool2d", dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    ("AvgPool2d", dict(kernel_size=3, stride=2, padding=1, count_include_pad=True)),
    ("AvgPool2d", dict(kernel_size=2, stride=2, ceil_mode=True, count_include_pad=False)),
]


@pytest.mark.parametrize("name,kw", POOL_CASES)
def test_pool(name, kw):
    x = rand(2, 7, 6, 3)
    layer = getattr(nn, name)(**kw)
    y = apply(layer, x)
    if not kw.get("ceil_mode"):  # numpy windows here are floor-mode only; torch covers ceil mode
        if name == "MaxPool2d":
            want = R.max_pool2d(x, layer.kernel_size, layer.stride, layer.padding, layer.dilation)
        else:
            want = R.avg_pool2d(x, layer.kernel_size, layer.stride, layer.padding, layer.count_include_pad)
        close(y, want)
    torch = torch_mod()
    close(y, torch_nhwc(torch, getattr(torch.nn, name)(**kw), x))


def test_adaptive_avg_pool():
    x = rand(2, 5, 3, 4)
    y = apply(nn.AdaptiveAvgPool2d(1), x)
    assert y.shape == (2, 1, 1, 4)
    close(y, x.astype(np.float64).mean(axis=(1, 2), keepdims=True))
    torch = torch_mod()
    close(y, torch_nhwc(torch, torch.nn.AdaptiveAvgPool2d(1), x))


# -- attention ---------------------------------------------------------------------------------

def mha_torch(torch, ours, bias=True):
    e = ours.embed_dim
    t = torch.nn.MultiheadAttention(e, ours.num_heads, bias=bias, batch_first=True)
    sd = ours.state_dict()
    new = {"in_proj_weight": np.concatenate([sd["q_proj.weight"], sd["k_proj.weight"], sd["v_proj.weight"]]),
           "out_proj.weight": sd["out_proj.weight"]}
    if bias:
        new["in_proj_bias"] = np.concatenate([sd["q_proj.bias"], sd["k_proj.bias"], sd["v_proj.bias"]])
        new["out_proj.bias"] = sd["out_proj.bias"]
    t.load_state_dict({k: torch.from_numpy(v) for k, v in new.items()})
    return t.eval()


def mha_numpy(m, q, k, v, mask=None, causal=False):
    sd = m.state_dict()
    g = lambda n: sd.get(n)  # noqa: E731
    return R.mha(q, k, v, g("q_proj.weight"), g("q_proj.bias"), g("k_proj.weight"), g("k_proj.bias"),
                 g("v_proj.weight"), g("v_proj.bias"), g("out_proj.weight"), g("out_proj.bias"),
                 m.num_heads, mask, causal)


@pytest.mark.parametrize("bias", [True, False])
def test_mha_self_attention(bias):
    m = nn.MultiheadAttention(8, 2, bias=bias)
    x = rand(2, 5, 8)
    y = apply(m, x)
    close(y, mha_numpy(m, x, x, x))
    torch = torch_mod()
    t = mha_torch(torch, m, bias)
    with torch.no_grad():
        xt = torch.from_numpy(x)
        close(y, t(xt, xt, xt, need_weights=False)[0].numpy())


def test_mha_cross_attention_with_masks():
    m = nn.MultiheadAttention(12, 3)
    q, kv = rand(2, 4, 12, seed=2), rand(2, 6, 12, seed=3)
    mask = rand(4, 6, seed=4)
    tq, tkv = ag.Tensor([2, 4, 12], name="q"), ag.Tensor([2, 6, 12], name="kv")
    y = run(m(tq, tkv, attn_mask=ag.constant(mask)), q=q, kv=kv)
    close(y, mha_numpy(m, q, kv, kv, mask=mask))
    bool_mask = np.zeros((4, 6), bool)
    bool_mask[:, 4:] = True  # True = may not attend, as in torch.nn.MultiheadAttention
    yb = run(m(tq, tkv, attn_mask=ag.constant(bool_mask)), q=q, kv=kv)
    close(yb, mha_numpy(m, q, kv, kv, mask=np.where(bool_mask, -np.inf, 0.0)))
    torch = torch_mod()
    t = mha_torch(torch, m)
    with torch.no_grad():
        tq_, tkv_ = torch.from_numpy(q), torch.from_numpy(kv)
        close(y, t(tq_, tkv_, tkv_, attn_mask=torch.from_numpy(mask), need_weights=False)[0].numpy())
        close(yb, t(tq_, tkv_, tkv_, attn_mask=torch.from_numpy(bool_mask), need_weights=False)[0].numpy())


def test_mha_per_head_mask():
    """torch's [B*H, Sq, Sk] mask form, split into [B, H, Sq, Sk]."""
    m = nn.MultiheadAttention(8, 2)
    x = rand(3, 4, 8)
    mask = rand(6, 4, 4, seed=9)
    y = run(m(ag.Tensor([3, 4, 8], name="x"), attn_mask=ag.constant(mask)), x=x)
    close(y, mha_numpy(m, x, x, x, mask=mask.reshape(3, 2, 4, 4)))
    torch = torch_mod()
    t = mha_torch(torch, m)
    with torch.no_grad():
        xx = torch.from_numpy(x)
        close(y, t(xx, xx, xx, attn_mask=torch.from_numpy(mask), need_weights=False)[0].numpy())


def test_mha_causal():
    m = nn.MultiheadAttention(8, 4)
    x = rand(2, 6, 8)
    xt = ag.Tensor([2, 6, 8], name="x")
    y = run(m(xt, causal=True), x=x)
    close(y, mha_numpy(m, x, x, x, causal=True))
    torch = torch_mod()
    t = mha_torch(torch, m)
    causal = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)
    with torch.no_grad():
        xx = torch.from_numpy(x)
        close(y, t(xx, xx, xx, attn_mask=causal, need_weights=False)[0].numpy())


# -- dynamic batch -----------------------------------------------------------------------------

def test_dynamic_batch():
    """One graph with a symbolic batch (and sequence length), evaluated at two sizes."""
    batch = ag.IntVar("batch", 1, 16)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
            self.bn = nn.BatchNorm2d(8)
            self.act = nn.ReLU()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.flat = nn.Flatten()
            self.proj = nn.Linear(8, 8)
            self.attn = nn.MultiheadAttention(8, 2)
            self.ln = nn.LayerNorm(8)

        def forward(self, img, tokens):
            v = self.proj(self.flat(self.pool(self.act(self.bn(self.conv(img))))))
            return v, self.ln(self.attn(tokens))

    net = Net().assign_names()
    img = ag.Tensor([batch, 9, 9, 3], name="img")
    seq = ag.IntVar("seq", 1, 32)
    tok = ag.Tensor([batch, seq, 8], name="tok")
    v, a = net(img, tok)
    assert v.shape[0] is batch and a.shape[0] is batch
    sd = net.state_dict()
    for n, s in ((1, 5), (3, 2)):
        xi, xt = rand(n, 9, 9, 3, seed=n), rand(n, s, 8, seed=n + 10)
        out = ag.reference.run({"v": v, "a": a}, {"img": xi, "tok": xt})
        h = R.conv2d(xi, sd["conv.weight"], sd["conv.bias"], (2, 2), 1)
        h = np.maximum(R.batchnorm(h, sd["bn.weight"], sd["bn.bias"], sd["bn.running_mean"],
                                   sd["bn.running_var"], 1e-5), 0)
        close(out["v"], R.linear(h.mean(axis=(1, 2)), sd["proj.weight"], sd["proj.bias"]))
        att = mha_numpy(net.attn, xt, xt, xt)
        close(out["a"], R.layernorm(att, sd["ln.weight"], sd["ln.bias"], 1e-5))


# -- randomised convolution configurations -------------------------------------------------------

@st.composite
def conv_configs(draw):
    groups = draw(st.sampled_from([1, 2, 3]))
    return dict(cin=groups * draw(st.integers(1, 3)), cout=groups * draw(st.integers(1, 3)), groups=groups,
                k=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
                stride=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
                dilation=(draw(st.integers(1, 2)), draw(st.integers(1, 2))),
                padding=tuple(draw(st.integers(0, 2)) for _ in range(4)),
                hw=(draw(st.integers(5, 8)), draw(st.integers(5, 8))), bias=draw(st.booleans()))


@settings(max_examples=30, deadline=None)
@given(conv_configs())
def test_conv2d_random_configs(c):
    conv = nn.Conv2d(c["cin"], c["cout"], c["k"], stride=c["stride"], padding=c["padding"],
                     dilation=c["dilation"], groups=c["groups"], bias=c["bias"])
    x = rand(2, *c["hw"], c["cin"])
    want = R.conv2d(x, conv.weight.value, conv.bias.value if c["bias"] else None, conv.stride,
                    conv.padding, conv.dilation, c["groups"])
    close(apply(conv, x), want)


@settings(max_examples=30, deadline=None)
@given(conv_configs(), st.integers(0, 2), st.integers(0, 2))
def test_conv_transpose2d_random_configs(c, oph, opw):
    # torch's rule: output padding must be smaller than the stride or the dilation
    op = (min(oph, max(c["stride"][0], c["dilation"][0]) - 1), min(opw, max(c["stride"][1], c["dilation"][1]) - 1))
    t, b, l_, r = c["padding"]
    conv = nn.ConvTranspose2d(c["cin"], c["cout"], c["k"], stride=c["stride"], padding=(t, b, l_, r),
                              output_padding=op, groups=c["groups"], bias=c["bias"], dilation=c["dilation"])
    x = rand(1, *c["hw"], c["cin"])
    want = R.conv_transpose2d(x, conv.weight.value, conv.bias.value if c["bias"] else None, conv.stride,
                              conv.padding, op, conv.dilation, c["groups"])
    if min(want.shape) <= 0:
        return
    close(apply(conv, x), want)


def test_float16_layers_follow_float32():
    """Half-precision parameters are the float32 draws rounded; the graph stays close to float64."""
    layers = lambda dt: nn.Sequential(nn.Linear(16, 32, dtype=dt), nn.GELU(), nn.LayerNorm(32, dtype=dt),  # noqa: E731
                                      nn.Linear(32, 8, dtype=dt))
    nn.manual_seed(7)
    half = layers("float16")
    x = rand(4, 16)
    y = apply(half, x.astype(np.float16))
    sd = {k: v.astype(np.float64) for k, v in half.state_dict().items()}
    h = R.ACTIVATIONS["GELU"](R.linear(x.astype(np.float16), sd["0.weight"], sd["0.bias"]))
    h = R.layernorm(h, sd["2.weight"], sd["2.bias"], 1e-5)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float64), R.linear(h, sd["3.weight"], sd["3.bias"]), atol=2e-2, rtol=2e-2)
