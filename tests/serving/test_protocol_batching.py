"""The engine-free half of serving: KServe v2 decoding and its checks, the batch policy, run_many
against single runs and the oracle, and the `serve` subcommand's argument errors. Needs no extra:
these run in the default suite."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import aitgen as ag
from aitgen.serving import batching, protocol
from aitgen.serving.cli import add_parser, main
from aitgen.serving.errors import BadRequestError
from serving_cases import B_MAX, bad_requests, check_against_oracle, feeds_for, good_request, v2_request

pytestmark = pytest.mark.serve


@pytest.fixture(scope="module")
def loaded(served_model):
    outputs, workdir = served_model
    with ag.Model.load(workdir) as model:
        yield outputs, model, protocol.ModelSignature.from_meta(model.meta)


def test_parse_flat_and_nested_data(loaded):
    _, model, sig = loaded
    feeds, doc = good_request(batch=3, seq=4)
    req = protocol.parse_request(json.dumps({**doc, "id": "a"}).encode(), sig)
    assert req.request_id == "a" and req.outputs is None
    for name, a in feeds.items():
        assert req.feeds[name].dtype == a.dtype and np.array_equal(req.feeds[name], a)
    nested = {"inputs": [{**e, "data": feeds[e["name"]].tolist()} for e in doc["inputs"]]}
    again = protocol.parse_request(json.dumps(nested).encode(), sig)
    assert all(np.array_equal(again.feeds[n], a) for n, a in feeds.items())


@pytest.mark.parametrize("case", bad_requests(), ids=lambda c: c[0])
def test_bad_requests_name_the_fault(loaded, case):
    _, _, sig = loaded
    what, body, _, needle = case
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(BadRequestError) as err:
        protocol.parse_request(raw, sig)
    assert needle in str(err.value)
    assert protocol.status_of(err.value) == 400


def test_response_round_trips_and_selects_outputs(loaded):
    outputs, model, sig = loaded
    feeds, doc = good_request(batch=2, seq=2)
    req = protocol.parse_request(json.dumps({**doc, "outputs": [{"name": "i2"}]}).encode(), sig)
    answer = json.loads(protocol.encode_response(sig, model.run(req.feeds), req))
    assert [o["name"] for o in answer["outputs"]] == ["i2"] and answer["outputs"][0]["datatype"] == "INT32"
    assert answer["outputs"][0]["data"] == (feeds["ids"] * 2).ravel().tolist()
    assert sig.metadata()["outputs"][0] == {"name": "y", "datatype": "FP32", "shape": [-1, -1, 8]}


def test_policy(loaded):
    _, _, sig = loaded
    pol = batching.policy(sig, 64)
    assert pol.batch_dim == "batch" and pol.max_rows == B_MAX   # capped by the dim's bound
    assert batching.policy(sig, 4).max_rows == 4
    assert not batching.policy(sig, 1).batchable
    flat = protocol.ModelSignature.from_meta({"name": "m", "target": "cpu", "inputs": {
        "x": {"dtype": "float32", "shape": ["n", "4"], "min_shape": [1, 4], "max_shape": [8, 4]}}, "outputs": {
        "s": {"dtype": "float32", "shape": ["4"], "min_shape": [4], "max_shape": [4]}}})
    assert not batching.policy(flat, 8).batchable and "does not lead" in batching.policy(flat, 8).reason


def test_run_many_stacks_requests_and_matches_single_runs_and_the_oracle(loaded):
    outputs, model, sig = loaded
    pol = batching.policy(sig, B_MAX)
    items = [feeds_for(i, b, s) for i, (b, s) in enumerate([(1, 2), (3, 2), (2, 5), (4, 2), (9, 2), (6, 2), (1, 5)])]
    calls = []

    def run(feeds):
        calls.append(next(iter(feeds.values())).shape[0])
        return model.run(feeds)

    shared: list[int] = []
    results = batching.run_many(run, items, pol, shared)
    # seq 2 (rows 1, 3, 4, 9, 6): 1+3+4 = 8, +9 = 17 > 16, so [1, 3, 4] then [9, 6]; seq 5: [2, 1]
    assert sorted(calls) == sorted([8, 15, 3]), calls
    assert shared == [3, 3, 2, 3, 2, 2, 2]
    for feeds, got in zip(items, results):
        single = model.run(feeds)
        for name in single:
            np.testing.assert_allclose(got[name], single[name], rtol=1e-5, atol=1e-5)
        check_against_oracle(outputs, feeds, got)


def test_run_many_isolates_a_failing_request(loaded):
    _, model, sig = loaded
    pol = batching.policy(sig, B_MAX)
    items = [feeds_for(i, 2, 3) for i in range(4)]
    poisoned = items[2]["x"]

    def run(feeds):
        if any(np.array_equal(feeds["x"][k:k + 2], poisoned) for k in range(0, feeds["x"].shape[0], 2)):
            raise ag.errors.RuntimeInputError("poisoned")
        return model.run(feeds)

    results = batching.run_many(run, items, pol)
    assert isinstance(results[2], ag.errors.RuntimeInputError)
    for i in (0, 1, 3):
        np.testing.assert_allclose(results[i]["y"], model.run(items[i])["y"], rtol=1e-5, atol=1e-5)


def test_unbatchable_policy_runs_one_by_one(loaded):
    _, model, sig = loaded
    calls = []
    items = [feeds_for(i, 2, 2) for i in range(3)]
    batching.run_many(lambda f: calls.append(1) or model.run(f), items, batching.policy(sig, 1))
    assert len(calls) == 3


# -- the `serve` subcommand -----------------------------------------------------------------------------

def test_cli_imports_no_engine():
    code = ("import sys, argparse; from aitgen.serving.cli import add_parser; "
            "p = argparse.ArgumentParser(); add_parser(p.add_subparsers()); "
            "print(sorted(m for m in ('ray', 'pytriton', 'tritonclient', 'starlette') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("extra, message", [
    (["--engine", "ray", "--grpc-port", "9001"], "--grpc-port applies to --engine triton"),
    (["--engine", "triton", "--replicas", "2"], "--replicas applies to --engine ray"),
    (["--engine", "triton", "--http-port", "9000", "--grpc-port", "9000"], "must differ"),
])
def test_cli_refuses_options_of_the_other_engine(served_model, capsys, extra, message):
    _, workdir = served_model
    assert main(["serve", str(workdir), *extra]) == 2
    assert message in capsys.readouterr().err


def test_cli_refuses_a_folder_without_a_model(tmp_path, capsys):
    assert main(["serve", str(tmp_path), "--engine", "ray"]) == 2
    assert "holds no built model" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--max-batch", "0"], ["--http-port", "70000"], ["--batch-wait-ms", "-1"]])
def test_cli_argument_checks(served_model, argv):
    import argparse
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", str(served_model[1]), "--engine", "ray", *argv])


def test_cli_triton_says_why_it_cannot_start_here(served_model, capsys):
    """Where the Triton engine cannot run (no pytriton, or numpy 2), the command says so and
    starts nothing."""
    from aitgen.serving.errors import EngineUnavailableError
    from aitgen.serving.triton import check_environment
    try:
        check_environment()
    except EngineUnavailableError as e:
        reason = str(e)
    else:
        pytest.skip("the Triton engine can run here (tests/serving/test_triton_serve.py covers it)")
    assert main(["serve", str(served_model[1]), "--engine", "triton", "--http-port", "9"]) == 2
    assert reason in capsys.readouterr().err


def test_v2_request_helper_matches_protocol_datatypes():
    doc = v2_request(feeds_for(0, 1, 1))
    assert [e["datatype"] for e in doc["inputs"]] == ["FP32", "FP32", "INT32"]


@pytest.mark.parametrize("name", ["../evil", "a/b", ".hidden", "-x", "", "x" * 65, "na\u00efve", "a b", None])
def test_hostile_model_names_are_refused(name):
    # A served name is a URL segment and, under Triton, a model-repository folder: "../evil" from
    # a model file (or --name) must never reach the file system.
    from aitgen.serving.errors import ServingError
    meta = {"name": name, "target": "cpu", "inputs": {}, "outputs": {}}
    with pytest.raises(ServingError, match="cannot be served"):
        protocol.ModelSignature.from_meta(meta)
    if name is not None:   # the same name given as --name: refused, saying to pick another
        with pytest.raises(ServingError, match="--name"):
            protocol.ModelSignature.from_meta({**meta, "name": "fine"}, name=name)
    for good in ("bert_base", "m-1.2", "A0"):
        assert protocol.ModelSignature.from_meta({**meta, "name": good}).name == good


def test_cli_refuses_a_hostile_name_before_starting_an_engine(served_model, tmp_path, capsys):
    _, workdir = served_model
    assert main(["serve", str(workdir), "--engine", "ray", "--name", "../evil"]) == 2
    err = capsys.readouterr().err
    assert "cannot be served" in err and len(err.strip().splitlines()) == 1
