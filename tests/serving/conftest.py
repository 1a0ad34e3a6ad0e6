"""Fixtures of the serving tests; the helpers live in serving_cases.py."""
from __future__ import annotations

import pytest

import aitgen as ag
from serving_cases import build_graph


@pytest.fixture(scope="session")
def served_model(tmp_path_factory):
    """(graph outputs for the oracle, workdir) of the test model, built without loading it here."""
    outputs = build_graph()
    workdir = tmp_path_factory.mktemp("serving") / "mlp"
    ag.compile_model(outputs, target="cpu", workdir=workdir, load=False)
    return outputs, workdir
