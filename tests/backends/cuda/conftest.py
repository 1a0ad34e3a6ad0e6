"""CUDA test tiers.

- Compile-only tests (default tier, and `cuda_compile` for zoo-sized builds) need nvcc and the
  pinned CUTLASS, not a GPU; the `cuda_toolchain` fixture (tests/conftest.py) skips them, naming what is missing.
- `gpu` tests need a device and its driver: skipped here before any fixture runs, so no build is
  spent on a machine that cannot run it. They build for the present GPU's arch (`gpu_arch`).
"""
from __future__ import annotations

import pytest

from aitgen.runtime import device


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is not None and not device.cuda_available():
        pytest.skip(f"gpu: {device._probe()[1]}")


@pytest.fixture(scope="session")
def gpu_arch():
    """The arch a build for the present GPU uses (sm_80 for any 8.x, sm_90a for 9.0)."""
    from aitgen.codegen.backend import load_backend
    return load_backend("cuda").resolve_arch(None, device.cuda_capability)
