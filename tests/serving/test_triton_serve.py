"""`aitgen serve DIR --engine triton`: Triton Inference Server through PyTriton, one server for the
module, started through the command in its own process on free 127.0.0.1 ports, two model instances
on a two-runtime container and Triton's dynamic batcher. The same load as the Ray test: 240
concurrent requests of mixed batch sizes, every answer against the numpy oracle; bad requests get
v2 error answers while the server keeps serving; SIGTERM stops it with exit code 0.

Needs the `triton` extra in an environment with numpy<2 (aitgen/serving/triton.py says why); where
numpy 2 is installed the module skips with that reason.

Status codes are Triton's: what Triton itself checks (datatype, declared dims, batch size, input
names) is 400; a bound of a dim declared -1 is checked by aitgen inside the model, and PyTriton
returns every error of the model as 500, with aitgen's message at the end of the error text."""
from __future__ import annotations

import json
import socket

import pytest

pytest.importorskip("pytriton", reason='nvidia-pytriton is not installed: pip install -e ".[triton]"')

from aitgen.serving.errors import EngineUnavailableError  # noqa: E402
from aitgen.serving.triton import check_environment  # noqa: E402
from serving_cases import (B_MAX, S_MAX, check_against_oracle, decode_v2, feeds_for, flood, free_port,  # noqa: E402
                           good_request, http, post_json, running_server, v2_request, with_input)

try:
    check_environment()
except EngineUnavailableError as e:
    pytest.skip(str(e), allow_module_level=True)

pytestmark = pytest.mark.serve
NAME = "mlp"


@pytest.fixture(scope="module")
def triton_server(served_model, tmp_path_factory):
    _, workdir = served_model
    port, grpc = free_port(), free_port()
    log = tmp_path_factory.mktemp("triton_serve") / "serve.log"
    args = [str(workdir), "--engine", "triton", "--name", NAME, "--http-port", str(port), "--grpc-port", str(grpc),
            "--max-batch", str(B_MAX), "--instances", "2", "--batch-wait-ms", "2"]
    with running_server(args, log) as server:
        server.url, server.grpc_port = f"http://127.0.0.1:{port}", grpc
        server.infer = f"{server.url}/v2/models/{NAME}/infer"
        yield server


def test_model_config_batches_along_the_leading_dim(triton_server):
    status, body = http("GET", f"{triton_server.url}/v2/models/{NAME}/config")
    config = json.loads(body)
    assert status == 200 and config["max_batch_size"] == B_MAX
    assert "dynamic_batching" in config and config["instance_group"][0]["count"] == 2
    # dims without the batch dim Triton stacks along; -1: bound per call, checked by aitgen
    assert {i["name"]: [int(d) for d in i["dims"]] for i in config["input"]} == {"x": [-1, 16], "bias": [8],
                                                                                 "ids": [4]}


def test_concurrent_mixed_batches_match_oracle(triton_server, served_model):
    outputs, _ = served_model
    counts = flood(triton_server.infer, outputs, n=240, workers=16, bad_every=12, bad_status=(400, 500))
    assert (counts["good"], counts["bad"]) == (220, 20)


def test_bad_requests_get_v2_errors_and_the_server_keeps_serving(triton_server, served_model):
    outputs, _ = served_model
    _, doc = good_request()
    cases = [
        ("wrong datatype", with_input(doc, "x", datatype="FP64"), 400, "data-type is 'FP64'"),
        ("missing input", {"inputs": doc["inputs"][:2]}, 400, "missing required input(s) ['ids']"),
        ("wrong static dim", with_input(doc, "bias", shape=[2, 7], data=[0.0] * 14), 400, "unexpected shape"),
        ("batch past max_batch", v2_request(feeds_for(2, B_MAX + 1, 3)), 400, f"batch-size must be <= {B_MAX}"),
        ("seq past its bound", v2_request(feeds_for(3, 2, S_MAX + 1)), 500,
         f"dim 1 ('seq') is {S_MAX + 1}, outside its bounds [1, {S_MAX}]"),
    ]
    for what, body, status, needle in cases:
        got, text = http("POST", triton_server.infer, json.dumps(body).encode())
        assert got == status, (what, got, text)
        assert needle in json.loads(text)["error"], (what, text)
    got, text = http("POST", triton_server.infer, b'{"inputs": [')   # Triton answers its JSON errors 500
    assert got in (400, 500) and "error" in json.loads(text)
    assert http("POST", f"{triton_server.url}/v2/models/other/infer", b'{"inputs": []}')[0] in (400, 404)
    feeds, doc = good_request(seed=9, batch=5, seq=7)
    status, answer = post_json(triton_server.infer, doc)
    assert status == 200
    check_against_oracle(outputs, feeds, decode_v2(answer))


def test_grpc_port_listens(triton_server):
    with socket.create_connection(("127.0.0.1", triton_server.grpc_port), timeout=5):
        pass


def test_sigterm_stops_cleanly(triton_server):
    port = int(triton_server.url.rsplit(":", 1)[1])
    assert triton_server.terminate() == 0, triton_server.text()[-3000:]
    assert "aitgen serve: stopped" in triton_server.text()
    with socket.socket() as s:
        s.settimeout(2)
        assert s.connect_ex(("127.0.0.1", port)) != 0
