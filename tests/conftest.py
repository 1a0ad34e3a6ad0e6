"""Shared test options: --update-golden rewrites golden files instead of comparing with them."""
from __future__ import annotations

import pathlib

import pytest

GOLDEN_DIR = pathlib.Path(__file__).parent / "golden"


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", help="rewrite tests/golden/* from the current output")


@pytest.fixture
def golden(request):
    """golden(name, text): compare text with tests/golden/<name> (or write it with --update-golden)."""
    def check(name: str, text: str) -> None:
        path = GOLDEN_DIR / name
        if request.config.getoption("--update-golden"):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        assert path.exists(), f"golden file {path} missing; run pytest --update-golden"
        assert text == path.read_text(), f"output differs from golden {path}; run pytest --update-golden if intended"
    return check
