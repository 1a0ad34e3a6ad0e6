"""Helpers shared by the op tests: random inputs, one-output oracle runs, padding forms."""
import numpy as np

import aitgen as ag


def rand(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def run1(y, feeds):
    (out,) = ag.reference.run([y], feeds).values()
    return out


def pad4(p):
    """An int, (ph, pw) or (top, bottom, left, right) padding as the 4-tuple."""
    if isinstance(p, int):
        return (p, p, p, p)
    return (p[0], p[0], p[1], p[1]) if len(p) == 2 else tuple(p)
