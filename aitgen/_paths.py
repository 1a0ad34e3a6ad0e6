"""Where the package finds backends/ (templates and static runtimes): the one place that knows.

An editable install reads the repository's backends/; a wheel ships the same tree as the package
data of `aitgen_backends` (setup.py maps it).
"""
from __future__ import annotations

import functools
from pathlib import Path


@functools.lru_cache(maxsize=1)
def backends_dir() -> Path:
    repo = Path(__file__).resolve().parent.parent / "backends"
    if (repo / "common").is_dir():
        return repo
    import importlib.util
    spec = importlib.util.find_spec("aitgen_backends")  # a namespace package: no __init__.py
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("aitgen's backends/ folder is missing (neither the repository's nor the wheel's)")
    return Path(list(spec.submodule_search_locations)[0])
