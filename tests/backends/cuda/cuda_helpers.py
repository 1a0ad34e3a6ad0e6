"""Helpers shared by the CUDA tests (imported by name: pytest puts this folder on sys.path)."""
from __future__ import annotations

import numpy as np

import aitgen as ag
from aitgen import ops


def copies(ub: int = 8):
    """A graph whose run sequence is device-to-device copies only: an input and a constant returned
    as outputs, and a reshape of the input that needs a buffer of its own. Three calls, one kernel."""
    x = ag.Tensor([ag.IntVar("b", 1, ub), 4], name="x")
    c = ag.constant(np.arange(4, dtype=np.float32), name="c")
    return {"y": x, "c": c, "flat": ops.reshape(x, [-1])}


def towers(seed: int, n_towers: int = 3, depth: int = 3, width: int = 32, batch: int = 8):
    """Independent towers of element-wise ops, reductions and float32 GEMMs (SIMT kernels: cheap
    to build) over one input x [b <= batch, width], joined at the end."""
    rng = np.random.default_rng(seed)
    x = ag.Tensor([ag.IntVar("b", 1, batch), width], dtype="float32", name="x")
    outs = []
    for t in range(n_towers):
        h = x
        for k in range(depth):
            choice = rng.integers(0, 3)
            if choice == 0:
                w = rng.standard_normal((width, width)).astype(np.float32) / np.sqrt(width)
                h = ops.relu(ops.matmul(h, ag.constant(w)))
            elif choice == 1:
                h = ops.tanh(h) * float(rng.uniform(0.5, 2))
            else:
                h = h - ops.reduce_mean(h, axes=-1, keepdims=True)
        outs.append(h)
    y = outs[0]
    for o in outs[1:]:
        y = y + o
    return {"y": y, "t0": outs[0]}
