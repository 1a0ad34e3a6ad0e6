"""Zoo tests marked slow (full-size models through the numpy oracle, ~40 s together) run only
when asked for: `pytest -m slow`, or AITGEN_RUN_SLOW=1 with any selection."""
from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config, items):
    if "slow" in (config.getoption("markexpr") or "") or os.environ.get("AITGEN_RUN_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow or AITGEN_RUN_SLOW=1")
    for item in items:
        if "slow" in item.keywords and "tests/models/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(skip)
