"""The torch importer's contract: names of inputs, outputs and parameters, dynamic-dim bounds, and
typed errors naming the node, the ATen op and the module it came from."""
from __future__ import annotations

import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.export")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.export import Dim  # noqa: E402

import aitgen as ag  # noqa: E402
from aitgen.errors import DTypeError, ImportError_, ShapeError, UnsupportedOpError  # noqa: E402
from aitgen.frontend.torch import (  # noqa: E402
    DEFAULT_DIM_BOUND,
    from_exported_program,
    import_module,
)

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore::FutureWarning")]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return torch.cumsum(self.fc(x), -1)


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = Block()

    def forward(self, x):
        return self.body(x)


def test_unsupported_op_names_node_op_and_module():
    with pytest.raises(UnsupportedOpError) as e:
        import_module(Outer(), (torch.randn(2, 4),))
    msg = str(e.value)
    assert "torch node 'cumsum'" in msg and "aten.cumsum.default" in msg and "body" in msg, msg


def test_max_pool_indices_unused_fine_used_unsupported():
    class Used(nn.Module):
        def forward(self, x):
            v, i = F.max_pool2d(x, 2, return_indices=True)
            return v + i.float()

    class Unused(nn.Module):
        def forward(self, x):
            return F.max_pool2d(x, 2, return_indices=True)[0]

    x = torch.randn(1, 2, 4, 4)
    _, outs = import_module(Unused(), (x,))
    np.testing.assert_array_equal(ag.reference.run(outs, {"x": x.numpy()})["output"], F.max_pool2d(x, 2).numpy())
    with pytest.raises(UnsupportedOpError, match="indices of max_pool2d_with_indices"):
        import_module(Used(), (x,))


def test_data_dependent_shape_is_unsupported():
    class NonZero(nn.Module):
        def forward(self, x):
            return x.nonzero()

    with pytest.raises(UnsupportedOpError, match="nonzero"):
        import_module(NonZero(), (torch.randn(5),))


def test_float64_imports_and_bad_arguments_are_typed_errors():
    x = torch.randn(3, dtype=torch.float64)
    inputs, outputs = import_module(nn.ReLU(), (x,))  # float64 is an IR dtype (issue 15)
    (y,) = ag.reference.run(outputs, {n: x.numpy() for n in inputs}).values()
    np.testing.assert_array_equal(y, torch.relu(x).numpy())
    with pytest.raises(DTypeError, match="complex64"):
        import_module(nn.Identity(), (torch.randn(3, dtype=torch.complex64),))
    with pytest.raises(ImportError_, match="ExportedProgram"):
        from_exported_program(nn.ReLU())
    with pytest.raises(ImportError_, match="nn.Module"):
        import_module(lambda x: x, (torch.randn(3),))


def test_missing_torch_is_an_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    with pytest.raises(ImportError_, match="pip install"):
        from_exported_program(object())


def test_names_of_inputs_outputs_and_parameters():
    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 2)

        def forward(self, tokens, scale):
            y = self.proj(tokens)
            return {"logits": y * scale, "probs": y.softmax(-1)}

    inputs, outputs = import_module(Heads(), (torch.randn(3, 4), torch.randn(1)))
    assert list(inputs) == ["tokens", "scale"] and inputs["tokens"].name == "tokens"
    assert list(outputs) == ["logits", "probs"]
    consts = {t.name: t for t in ag.Graph.from_outputs(outputs).constants if t.name}
    assert consts["proj.weight"].shape == (2, 4) and consts["proj.bias"].shape == (2,)

    _, outs = import_module(nn.Linear(4, 2), (torch.randn(3, 4),), output_names=["y"])
    assert list(outs) == ["y"]


def test_input_returned_as_output_gets_its_own_buffer(tmp_path):
    class Both(nn.Module):
        def forward(self, x):
            return x, x * 2

    _, outs = import_module(Both(), (torch.randn(2, 3),))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = ag.reference.run(outs, {"x": x})
    np.testing.assert_array_equal(got["output_0"], x)
    np.testing.assert_array_equal(got["output_1"], 2 * x)


def test_dim_bounds_default_override_and_unknown_name():
    class Mlp(nn.Module):
        def forward(self, x):
            return F.relu(x).sum(-1)

    x = torch.randn(3, 5)
    open_batch = {"x": {0: Dim("batch")}}  # no upper bound in torch
    inputs, _ = import_module(Mlp(), (x,), dynamic_shapes=open_batch)
    b = inputs["x"].shape[0]
    assert (b.name, b.lb, b.ub) == ("batch", 1, DEFAULT_DIM_BOUND)
    inputs, _ = import_module(Mlp(), (x,), dynamic_shapes=open_batch, default_dim_bound=8)
    assert inputs["x"].shape[0].ub == 8
    inputs, _ = import_module(Mlp(), (x,), dynamic_shapes=open_batch, dim_bounds={"batch": (2, 16)})
    assert (inputs["x"].shape[0].lb, inputs["x"].shape[0].ub) == (2, 16)
    with pytest.raises(ShapeError, match="seq"):
        import_module(Mlp(), (x,), dynamic_shapes=open_batch, dim_bounds={"seq": (1, 4)})


def test_derived_dims_become_expressions():
    class Pair(nn.Module):
        def forward(self, x):
            y = torch.cat([x, x], 0)          # 2*n rows
            return y[1:], x.reshape(-1)      # 2*n - 1 rows; n*4 elements

    n = Dim("n", min=2, max=10)
    inputs, outputs = import_module(Pair(), (torch.randn(3, 4),), dynamic_shapes={"x": {0: n}})
    nv = inputs["x"].shape[0]
    assert outputs["output_0"].shape[0] == 2 * nv - 1
    assert outputs["output_1"].shape[0] == 4 * nv
    x = np.random.default_rng(0).standard_normal((7, 4)).astype(np.float32)
    got = ag.reference.run(outputs, {"x": x})
    np.testing.assert_array_equal(got["output_0"], np.concatenate([x, x])[1:])


def test_undecomposed_program_attention_linear_matmul():
    """Without run_decompositions the program keeps scaled_dot_product_attention, linear and
    matmul; those map to aitgen's attention, gemm and bmm directly."""
    class Attn(nn.Module):
        def forward(self, q, k, v, keep):
            return (F.scaled_dot_product_attention(q, k, v, attn_mask=keep),
                    F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.25),
                    F.linear(q, k[0, 0]), q @ v.transpose(-1, -2))

    g = torch.Generator().manual_seed(0)
    args = (torch.randn(2, 2, 4, 8, generator=g), torch.randn(2, 2, 6, 8, generator=g),
            torch.randn(2, 2, 6, 8, generator=g), torch.randn(4, 6, generator=g) > 0)
    ep = torch.export.export(Attn(), args)
    inputs, outputs = from_exported_program(ep, decompose=False)
    assert ag.Graph.from_outputs(outputs).op_counts()["attention"] == 2
    got = ag.reference.run(outputs, {k: a.numpy() for k, a in zip(inputs, args)})
    for (k, v), w in zip(got.items(), Attn()(*args)):
        np.testing.assert_allclose(v, w.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)


def test_dynamic_image_size_and_derived_input_dim():
    """Dynamic H and W through strided convs and pooling (floor divisions of the IntVars); an input
    dim given as a derived Dim (2*h) has no input dim to bind h from, which is a clear error."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = nn.Conv2d(3, 8, 3, stride=2, padding=1)
            self.d = nn.Conv2d(8, 8, 3, padding=1)

        def forward(self, x):
            y = F.relu(self.c(x))
            return F.max_pool2d(y + self.d(y), 3, 2, 1)

    net = Net().eval()
    dyn = {"x": {2: Dim("h", min=8, max=40), 3: Dim("w", min=8, max=40)}}
    inputs, outputs = import_module(net, (torch.randn(2, 3, 17, 20),), dynamic_shapes=dyn)
    h, w = inputs["x"].shape[2:]
    assert (h.name, h.lb, h.ub, w.name) == ("h", 8, 40, "w")
    for shape in ((2, 3, 8, 33), (2, 3, 40, 9)):
        x = torch.randn(*shape)
        with torch.no_grad():
            want = net(x).numpy()
        got = ag.reference.run(outputs, {"x": x.numpy()})["output"]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(UnsupportedOpError, match="dim 2 is 2\\*h"):
        import_module(net, (torch.randn(2, 3, 16, 20),), dynamic_shapes={"x": {2: 2 * Dim("h", min=4, max=20)}})
