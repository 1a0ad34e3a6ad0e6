"""Per-op-family torch modules (torch_cases.py) through torch.export -> aitgen: the oracle and one
CPU build of all families together equal torch's own outputs (float32: rtol 1e-4, atol 1e-5;
integer and bool outputs exactly)."""
from __future__ import annotations

import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.export")

from torch_cases import CASES  # noqa: E402

import aitgen as ag  # noqa: E402
from aitgen.frontend.torch import import_module, supported_ops  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore::FutureWarning")]
RTOL, ATOL = 1e-4, 1e-5


@functools.cache
def imported(case: str):
    """(inputs, outputs, feeds, torch's outputs by output name) of one case, exported once."""
    cls, make_args = CASES[case]
    module = cls().eval()
    args = make_args()
    inputs, outputs = import_module(module, args)
    with torch.no_grad():
        want = module(*args)
    assert len(outputs) == len(want)
    feeds = {name: a.numpy() for name, a in zip(inputs, args)}
    return inputs, outputs, feeds, {k: w.numpy() for k, w in zip(outputs, want)}


def close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=what)


@pytest.mark.parametrize("case", sorted(CASES))
def test_oracle_equals_torch(case):
    _, outputs, feeds, want = imported(case)
    got = ag.reference.run(outputs, feeds)
    for k in want:
        close(got[k], want[k], f"{case}:{k} ({outputs[k].producer.name if outputs[k].producer else ''})")


def test_all_cases_in_one_cpu_build(tmp_path):
    merged, feeds, want = {}, {}, {}
    for case in sorted(CASES):
        inputs, outputs, f, w = imported(case)
        for name, t in inputs.items():  # inputs of different cases may share a name; the build needs one each
            t.name = f"{case}_{name}"
            feeds[t.name] = f[name]
        for k, t in outputs.items():
            merged[f"{case}_{k}"], want[f"{case}_{k}"] = t, w[k]
    try:
        model = ag.compile_model(merged, target="cpu", workdir=tmp_path / "ops")
        got = model.run(feeds)
    finally:
        for case in CASES:  # the cached imports keep their own names for the other tests
            for name, t in imported(case)[0].items():
                t.name = name
    assert set(got) == set(want)
    for k in want:
        close(got[k], want[k], k)


def test_convnet_keeps_nhwc_inside():
    """Layout tracking: one permute into NHWC at the input; norms, activations, the broadcast
    parameter, pooling and concat all work in NHWC; torch's order comes back only where asked."""
    _, outputs, _, _ = imported("convs")
    conv_out = outputs["output_4"]  # d = dw(z): conv -> bn -> relu -> scale -> conv, all NHWC
    kinds = []
    t = conv_out
    while t.producer is not None:
        kinds.append(t.producer.kind.value)
        t = t.producer.inputs[0]
    assert kinds.count("permute") == 2, kinds  # NCHW -> NHWC at x, NHWC -> NCHW for the output
    assert kinds[0] == "permute" and kinds[-1] == "permute"
    consts = {c.name: c for c in ag.Graph.from_outputs(outputs).constants if c.name}
    assert consts["c1.weight"].shape[1:] == (3, 3, 3)  # OHWI, named after the parameter
    assert consts["dw.weight"].value.shape == (8, 3, 3, 1)


def test_supported_ops_lists_core_aten():
    names = supported_ops()
    for op in ("convolution.default", "addmm.default", "native_layer_norm.default", "_softmax.default",
               "max_pool2d_with_indices.default", "_native_batch_norm_legit_no_training.default",
               "view.default", "embedding.default", "where.self", "arange.start_step"):
        assert op in names
    assert len(names) >= 150
