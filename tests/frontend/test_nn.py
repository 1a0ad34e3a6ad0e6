"""nn.Module machinery: registration, traversal, state_dict, seeding, containers, naming."""
from __future__ import annotations

import numpy as np
import pytest

import aitgen as ag
from aitgen import nn
from aitgen.errors import ShapeError, StateDictError, UnsupportedOpError


@pytest.fixture(autouse=True)
def _seed():
    nn.manual_seed(0)


class Block(nn.Module):
    """Own parameter registered after a child: torch yields own parameters first."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.scale = nn.Parameter(np.ones(4, np.float32))

    def forward(self, x):
        return self.fc(x) * self.scale


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.shared = self.blocks[0]       # the same module under a second name
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight  # GPT-2 style tied weights


# -- registration and traversal ----------------------------------------------------------------

def test_named_parameters_order_and_dedup():
    m = Tied()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["emb.weight",
                     "blocks.0.scale", "blocks.0.fc.weight", "blocks.0.fc.bias",
                     "blocks.1.scale", "blocks.1.fc.weight", "blocks.1.fc.bias"]
    assert len(list(m.parameters())) == 7
    all_names = [n for n, _ in m.named_parameters(remove_duplicate=False)]
    assert "shared.fc.weight" in all_names and "head.weight" in all_names
    assert [n for n, _ in m.named_parameters(prefix="model")][0] == "model.emb.weight"
    assert m.num_parameters() == 40 + 2 * (4 + 16 + 4)


def test_named_modules_and_children():
    m = Tied()
    mods = [n for n, _ in m.named_modules()]
    assert mods == ["", "emb", "blocks", "blocks.0", "blocks.0.fc", "blocks.1", "blocks.1.fc", "head"]
    assert [type(c).__name__ for c in m.children()] == ["Embedding", "ModuleList", "Block", "Linear"]
    assert len(list(m.modules())) == len(mods)


def test_named_parameters_order_matches_torch():
    torch = pytest.importorskip("torch")
    ours = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4, 2))
    theirs = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                 torch.nn.Flatten(), torch.nn.Linear(4, 2))
    want = [k for k in theirs.state_dict() if not k.endswith("num_batches_tracked")]
    assert list(ours.state_dict()) == want


def test_setattr_registration_rules():
    m = Block()
    m.fc = None  # dropping a child keeps its slot empty and out of the traversal
    assert [n for n, _ in m.named_parameters()] == ["scale"]
    m.scale = 3.0  # a plain value replaces the parameter
    assert list(m.named_parameters()) == []
    m.extra = nn.Parameter(np.zeros(2))
    del m.extra
    assert list(m.named_parameters()) == []

    class Forgot(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(2, 2)

    with pytest.raises(AttributeError, match="Module.__init__"):
        Forgot()


def test_parameter_is_a_copied_constant():
    src = np.arange(6, dtype=np.float64).reshape(2, 3)
    p = nn.Parameter(src, name="p")
    assert isinstance(p, ag.Tensor) and p.is_constant
    assert p.dtype == ag.DType.float32 and [d.value for d in p.shape] == [2, 3]
    src[0, 0] = 100
    assert p.value[0, 0] == 0
    assert nn.Parameter(np.zeros(3, np.int64)).dtype == ag.DType.int64
    assert nn.Parameter(np.zeros(3), dtype="float16").value.dtype == np.float16
    assert "p" in repr(p)


# -- seeding and initialisation ----------------------------------------------------------------

def _build():
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Linear(8, 4), nn.Embedding(5, 4),
                         nn.LayerNorm(4), nn.GroupNorm(2, 8), nn.RMSNorm(4), nn.MultiheadAttention(8, 2))


def _same(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_manual_seed_is_deterministic():
    nn.manual_seed(123)
    a = _build().state_dict()
    nn.manual_seed(123)
    b = _build().state_dict()
    nn.manual_seed(124)
    c = _build().state_dict()
    assert _same(a, b)
    assert not any(np.array_equal(a[k], c[k]) for k in ["0.weight", "2.weight", "3.weight"])


def test_construction_order_determines_values():
    nn.manual_seed(5)
    a1, b1 = nn.Linear(4, 4), nn.Linear(4, 4)
    nn.manual_seed(5)
    b2 = nn.Linear(4, 4)
    assert np.array_equal(a1.weight.value, b2.weight.value)
    assert not np.array_equal(b1.weight.value, b2.weight.value)


def test_init_distributions():
    lin = nn.Linear(64, 256)
    bound = 1 / np.sqrt(64)
    for p in (lin.weight.value, lin.bias.value):
        assert p.min() >= -bound and p.max() <= bound and p.max() > 0.8 * bound
    conv = nn.Conv2d(8, 16, 3, groups=2)
    cb = 1 / np.sqrt(4 * 9)
    assert conv.weight.value.shape == (16, 3, 3, 4) and np.abs(conv.weight.value).max() <= cb
    tconv = nn.ConvTranspose2d(8, 6, 2, groups=2)
    assert tconv.weight.value.shape == (8, 2, 2, 3) and np.abs(tconv.weight.value).max() <= 1 / np.sqrt(12)
    emb = nn.Embedding(1000, 64).weight.value
    assert abs(emb.mean()) < 0.02 and abs(emb.std() - 1) < 0.02
    bn = nn.BatchNorm2d(256)
    # Norm parameters must not be the trivial ones/zeros, or the norm math goes untested.
    for name, lo, hi in [("weight", 0.5, 1.5), ("bias", -0.1, 0.1), ("running_mean", -0.1, 0.1),
                         ("running_var", 0.5, 1.5)]:
        v = getattr(bn, name).value
        assert v.min() >= lo and v.max() <= hi and v.std() > 0.2 * (hi - lo) / np.sqrt(12)
    for layer in (nn.LayerNorm(32), nn.GroupNorm(4, 32), nn.RMSNorm(32)):
        assert not np.allclose(layer.weight.value, 1.0)


def test_dtype_of_parameters():
    for dt in ("float16", "bfloat16"):
        m = nn.Sequential(nn.Linear(4, 4, dtype=dt), nn.LayerNorm(4, dtype=dt), nn.Embedding(3, 4, dtype=dt))
        assert {p.dtype for p in m.parameters()} == {ag.ir.as_dtype(dt)}
    nn.manual_seed(1)
    w32 = nn.Linear(4, 4).weight.value
    nn.manual_seed(1)
    w16 = nn.Linear(4, 4, dtype="float16").weight.value
    assert np.array_equal(w32.astype(np.float16), w16)  # the same draws, rounded


# -- state_dict ------------------------------------------------------------------------------

def test_state_dict_round_trip():
    nn.manual_seed(1)
    a = _build()
    nn.manual_seed(2)
    b = _build()
    sd = a.state_dict()
    assert not _same(sd, b.state_dict())
    res = b.load_state_dict(sd)
    assert res.missing_keys == [] and res.unexpected_keys == []
    assert _same(b.state_dict(), sd)
    sd["2.weight"][:] = 7  # copies both ways: neither module sees later edits
    assert not np.any(a.state_dict()["2.weight"] == 7) and not np.any(b.state_dict()["2.weight"] == 7)


def test_state_dict_with_tied_weights():
    m = Tied()
    sd = m.state_dict()
    assert np.array_equal(sd["head.weight"], sd["emb.weight"])
    sd = {k: v + 1 for k, v in sd.items()}
    m.load_state_dict(sd)
    assert m.head.weight is m.emb.weight


def test_load_state_dict_shape_error_names_parameter():
    m = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    before = m.state_dict()
    sd = dict(before)
    sd["0.bias"] = np.zeros(3, np.float32) + 5
    sd["1.weight"] = np.zeros((3, 2), np.float32)
    with pytest.raises(ShapeError) as ei:
        m.load_state_dict(sd)
    msg = str(ei.value)
    assert "1.weight" in msg and "[2, 3]" in msg and "[3, 2]" in msg
    assert _same(m.state_dict(), before)  # nothing written by a failed load


def test_load_state_dict_missing_and_unexpected():
    m = nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3))
    sd = m.state_dict()
    del sd["1.bias"]
    sd["2.weight"] = np.zeros(3, np.float32)
    with pytest.raises(StateDictError) as ei:
        m.load_state_dict(sd)
    assert "1.bias" in str(ei.value) and "2.weight" in str(ei.value)
    assert ei.value.missing_keys == ["1.bias"] and ei.value.unexpected_keys == ["2.weight"]
    sd["0.weight"] = np.full((3, 4), 0.25)
    res = m.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["1.bias"] and res.unexpected_keys == ["2.weight"]
    assert m[0].weight.value.dtype == np.float32 and np.all(m[0].weight.value == 0.25)


def test_load_state_dict_converts_dtypes():
    m = nn.Linear(3, 2, dtype="float16")
    m.load_state_dict({"weight": np.ones((2, 3), np.float64), "bias": [1, 2]})
    assert m.weight.value.dtype == np.float16 and m.bias.value.dtype == np.float16
    assert m.bias.value.tolist() == [1.0, 2.0]


def test_load_torch_state_dict_directly():
    torch = pytest.importorskip("torch")
    t = torch.nn.Linear(3, 2)
    m = nn.Linear(3, 2)
    m.load_state_dict(t.state_dict())
    assert np.array_equal(m.weight.value, t.weight.detach().numpy())


def test_loaded_values_reach_the_graph():
    m = nn.Linear(2, 2, bias=False)
    x = ag.Tensor([1, 2], name="x")
    y = m(x)
    m.load_state_dict({"weight": np.eye(2)})
    out = ag.reference.run({"y": y}, {"x": np.array([[3, 4]], np.float32)})["y"]
    assert np.allclose(out, [[3, 4]])


# -- naming ------------------------------------------------------------------------------------

def test_assign_names():
    m = Tied().assign_names()
    assert m.blocks[1].fc.weight.name == "blocks.1.fc.weight"
    assert m.head.weight.name == "emb.weight"  # a tied parameter keeps its first name
    m.assign_names("model")
    assert m.blocks[0].scale.name == "model.blocks.0.scale"
    y = m.blocks[1].fc(ag.Tensor([2, 4], name="x"))
    assert y.producer.name == "model.blocks.1.fc"


def test_named_graph_verifies():
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                      nn.Flatten(), nn.Linear(4, 2)).assign_names("net")
    x = ag.Tensor([ag.IntVar("batch", 1, 8), 8, 8, 3], name="x")
    g = ag.Graph.from_outputs({"y": m(x)})
    ag.verify(g)
    assert [t.name for t in g.constants] == [n for n, _ in m.named_parameters(prefix="net")]
    assert "net.1.running_var" in str(g) and g.ops[0].name == "net.0"


def test_shape_errors_name_the_layer():
    lin = nn.Linear(4, 3)
    lin.assign_names("proj")
    with pytest.raises(ShapeError, match="Linear 'proj'.*5.*expected 4"):
        lin(ag.Tensor([2, 5], name="x"))
    with pytest.raises(ShapeError, match="Conv2d"):
        nn.Conv2d(3, 4, 3)(ag.Tensor([1, 8, 8, 4], name="img"))
    with pytest.raises(ShapeError, match="LayerNorm"):
        nn.LayerNorm(4)(ag.Tensor([2, 5], name="x"))


# -- containers and trivial layers -----------------------------------------------------------

def test_sequential_indexing():
    a, b, c = nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)
    s = nn.Sequential(a, b, c)
    assert len(s) == 3 and s[0] is a and s[-1] is c and list(s) == [a, b, c]
    assert [n for n, _ in s.named_children()] == ["0", "1", "2"]
    tail = s[1:]
    assert isinstance(tail, nn.Sequential) and list(tail) == [b, c]
    assert [n for n, _ in tail.named_children()] == ["1", "2"]
    with pytest.raises(IndexError):
        s[3]
    d = nn.Identity()
    s[1] = d
    assert s[1] is d and [n for n, _ in s.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    del s[1]
    assert list(s) == [a, c] and [n for n, _ in s.named_children()] == ["0", "1"]
    s.append(nn.Sigmoid())
    assert len(s) == 3
    from collections import OrderedDict
    named = nn.Sequential(OrderedDict([("fc", nn.Linear(2, 2)), ("act", nn.Tanh())]))
    assert [n for n, _ in named.named_parameters()] == ["fc.weight", "fc.bias"]
    with pytest.raises(TypeError):
        nn.Sequential(nn.ReLU(), "relu")


def test_module_list_and_dict():
    ml = nn.ModuleList([nn.Linear(2, 2)])
    ml.append(nn.Linear(2, 3)).extend([nn.ReLU()])
    ml.insert(0, nn.Tanh())
    assert [type(m).__name__ for m in ml] == ["Tanh", "Linear", "Linear", "ReLU"]
    assert [n for n, _ in ml.named_parameters()] == ["1.weight", "1.bias", "2.weight", "2.bias"]
    assert ml[-1] is ml[3] and len(ml[1:3]) == 2
    md = nn.ModuleDict({"a": nn.Linear(2, 2), "b": nn.ReLU()})
    assert "a" in md and md.keys() == ["a", "b"]
    assert [n for n, _ in md.named_parameters()] == ["a.weight", "a.bias"]


def test_sequential_builds_a_graph():
    s = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Dropout(0.2), nn.Linear(5, 2))
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    out = ag.reference.run(s(ag.Tensor([4, 3], name="x")), {"x": x})
    sd = s.state_dict()
    h = np.maximum(x @ sd["0.weight"].T + sd["0.bias"], 0)
    assert np.allclose(list(out.values())[0], h @ sd["3.weight"].T + sd["3.bias"], atol=1e-5)


def test_dropout_and_identity_are_identity():
    x = ag.Tensor([2, 3], name="x")
    assert nn.Dropout(0.5)(x) is x and nn.Dropout(p=1.0)(x) is x and nn.Identity(7, k=1)(x) is x
    with pytest.raises(ValueError):
        nn.Dropout(1.5)


def test_adaptive_avg_pool_only_global():
    assert nn.AdaptiveAvgPool2d((1, 1)).output_size == (1, 1)
    for bad in (2, (7, 7), (1, 2), None):
        with pytest.raises(UnsupportedOpError):
            nn.AdaptiveAvgPool2d(bad)


def test_constructor_argument_checks():
    with pytest.raises(ValueError):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError):
        nn.MultiheadAttention(10, 3)
    with pytest.raises(ValueError):
        nn.GroupNorm(3, 8)
    with pytest.raises(ValueError):
        nn.GELU("fast")
    with pytest.raises(ValueError):
        nn.Linear(0, 3)


def test_repr_is_a_tree():
    text = repr(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.MultiheadAttention(8, 2)))
    assert text.splitlines()[0] == "Sequential("
    assert "(0): Conv2d(3, 8, kernel_size=(3, 3)" in text
    assert "    (q_proj): Linear(in_features=8, out_features=8, bias=True)" in text
    assert text.endswith(")")
