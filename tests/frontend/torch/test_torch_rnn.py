"""torch nn.LSTM / nn.GRU / nn.RNN through torch.export (issue 15, item 3).

run_decompositions() unrolls aten.lstm / aten.gru over the (static) sequence into addmm, sigmoid,
tanh, split and cat, which the importer already converts; these tests hold that path to torch's
numbers: one and two layers, bidirectional, batch_first, initial states passed in, a dynamic
batch, and dropout in eval mode. The oracle runs every config; ONE CPU build runs LSTM, GRU and
the dynamic-batch LSTM at two batch sizes. Tolerance: rtol 1e-4 / atol 1e-5 (float32 both sides,
<= 6 steps, the GEMMs' summation order differs).
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch.export import needs torch")
pytest.importorskip("torch.export", reason="torch.export import needs torch >= 2.1")

import aitgen as ag  # noqa: E402
from aitgen.frontend.torch import import_module  # noqa: E402

TOL = dict(rtol=1e-4, atol=1e-5)


class _WithState(torch.nn.Module):
    """An RNN module called with explicit initial states (h0, or (h0, c0) for an LSTM)."""

    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x, h0, c0=None):
        return self.rnn(x, h0 if c0 is None else (h0, c0))


def _config(kind, layers, bidi, batch_first, state, seed):
    torch.manual_seed(seed)
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn": torch.nn.RNN}[kind]
    rnn = cls(6, 5, num_layers=layers, bidirectional=bidi, batch_first=batch_first,
              dropout=0.3 if layers > 1 else 0.0).eval()  # dropout is inactive in eval mode
    batch, seq = 3, 4
    x = torch.randn((batch, seq, 6) if batch_first else (seq, batch, 6))
    if not state:
        return rnn, (x,)
    hs = torch.randn(layers * (2 if bidi else 1), batch, 5)
    args = (x, hs) if kind != "lstm" else (x, hs, torch.randn_like(hs))
    return _WithState(rnn), args


CONFIGS = [
    ("lstm", 1, False, False, False),
    ("lstm", 2, True, True, False),
    ("lstm", 2, False, False, True),
    ("gru", 1, True, False, True),
    ("gru", 2, True, True, False),
    ("rnn", 2, True, False, True),
]


def _flat(out):
    if isinstance(out, (tuple, list)):
        return [a for o in out for a in _flat(o)]
    return [out.detach().numpy()]


def _check(outs, got: dict, want: list, what: str):
    assert len(outs) == len(want), f"{what}: {len(outs)} outputs for torch's {len(want)}"
    for name, w in zip(outs, want):
        np.testing.assert_allclose(got[name], w, err_msg=f"{what}: {name}", **TOL)


@pytest.mark.parametrize("kind,layers,bidi,batch_first,state", CONFIGS)
def test_oracle_matches_torch(kind, layers, bidi, batch_first, state):
    m, args = _config(kind, layers, bidi, batch_first, state, seed=1)
    ins, outs = import_module(m, args)
    feeds = dict(zip(ins, (a.numpy() for a in args)))
    want = _flat(m(*args))
    _check(outs, ag.reference.run(outs, feeds), want, f"{kind} layers={layers} bidi={bidi} bf={batch_first}")


def test_cpu_build_matches_torch_with_a_dynamic_batch(tmp_path):
    merged, feeds, wants = {}, {}, {}
    for tag, cfg in (("lstm", ("lstm", 2, True, True, True)), ("gru", ("gru", 1, True, False, False))):
        m, args = _config(*cfg, seed=2)
        ins, outs = import_module(m, args)
        for (k, t), a in zip(ins.items(), args):
            t.name = f"{tag}_{k}"
            feeds[t.name] = a.numpy()
        for k, t in outs.items():
            merged[f"{tag}_{k}"] = t
        wants[tag] = (list(outs), _flat(m(*args)))
    # a dynamic batch: torch.export's Dim becomes an IntVar, the unrolled steps stay batch-generic
    lstm = torch.nn.LSTM(6, 5, batch_first=True).eval()
    batch = torch.export.Dim("batch", min=1, max=8)
    ins, outs = import_module(lstm, (torch.randn(2, 4, 6),), dynamic_shapes={"input": {0: batch}})
    (x_t,) = ins.values()
    x_t.name = "dyn_x"
    for k, t in outs.items():
        merged[f"dyn_{k}"] = t
    model = ag.compile_model(merged, target="cpu", workdir=tmp_path / "rnn")
    for b in (3, 7):
        x = torch.randn(b, 4, 6)
        got = model.run({**feeds, "dyn_x": x.numpy()})
        _check([f"dyn_{k}" for k in outs], got, _flat(lstm(x)), f"dynamic LSTM, batch {b}")
        for tag, (names, want) in wants.items():
            _check([f"{tag}_{k}" for k in names], got, want, f"CPU build {tag}")
    model.close()
