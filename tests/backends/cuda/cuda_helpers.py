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
