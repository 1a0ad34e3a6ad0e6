"""`aitgen serve DIR --engine ray`: one server for the module (Ray starts slowly), started through
the command in its own process on a free 127.0.0.1 port. 240 concurrent requests of mixed batch
sizes from 16 threads, every answer checked against the numpy oracle; bad requests answered 400
with aitgen's message while the server keeps serving; SIGTERM stops it with exit code 0.

Run with: python -m pytest -q -m serve tests/serving -p no:xdist   (one Ray at a time on 2 cores)"""
from __future__ import annotations

import json
import socket

import pytest

pytest.importorskip("ray.serve", reason='ray[serve] is not installed: pip install -e ".[serve]"')

from serving_cases import (B_MAX, bad_requests, check_against_oracle, decode_v2, flood, free_port, good_request,  # noqa: E402,E501
                           http, post_json, running_server)

pytestmark = pytest.mark.serve
NAME = "mlp"


@pytest.fixture(scope="module")
def ray_server(served_model, tmp_path_factory):
    _, workdir = served_model
    port = free_port()
    log = tmp_path_factory.mktemp("ray_serve") / "serve.log"
    args = [str(workdir), "--engine", "ray", "--name", NAME, "--http-port", str(port), "--num-cpus", "2",
            "--max-batch", str(B_MAX), "--batch-wait-ms", "5"]
    with running_server(args, log) as server:
        server.url = f"http://127.0.0.1:{port}"
        server.infer = f"{server.url}/v2/models/{NAME}/infer"
        yield server


def test_deployment_passes_options_through(served_model):
    """The Python API without a running Ray: Ray validates the options when they are applied."""
    from ray import serve

    from aitgen.serving.errors import ServingError
    from aitgen.serving.ray import AitgenModel, build_app, deployment, deployment_options
    _, workdir = served_model
    opts = deployment_options("mlp", max_batch=16, autoscaling_config={"min_replicas": 1, "max_replicas": 3},
                              ray_actor_options={"num_cpus": 0.5})
    assert "num_replicas" not in opts
    d = AitgenModel.options(**opts)
    assert d.name == "aitgen_mlp" and d.ray_actor_options["num_cpus"] == 0.5 and d.max_ongoing_requests == 256
    assert AitgenModel.options(**deployment_options("mlp", replicas=3)).num_replicas == 3
    assert isinstance(deployment(str(workdir), name="mlp", replicas=2), serve.Application)
    assert isinstance(build_app({"workdir": str(workdir), "max_batch": "4", "replicas": "2"}), serve.Application)
    with pytest.raises(ServingError, match="unknown arguments"):
        build_app({"workdir": str(workdir), "bogus": "1"})
    with pytest.raises(ServingError, match="holds no built model"):
        deployment(str(workdir.parent / "nothing-here"))


def test_concurrent_mixed_batches_match_oracle(ray_server, served_model):
    outputs, _ = served_model
    counts = flood(ray_server.infer, outputs, n=240, workers=16, bad_every=12)
    assert (counts["good"], counts["bad"]) == (220, 20)
    # 16 clients against one replica: requests of one signature must have shared model calls
    assert counts["most_shared"] > 1, counts


def test_bad_requests_get_400_and_the_server_keeps_serving(ray_server, served_model):
    outputs, _ = served_model
    for what, body, status, needle in bad_requests():
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        got, text = http("POST", ray_server.infer, raw)
        assert got == status, (what, got, text)
        assert needle in json.loads(text)["error"], (what, text)
    assert http("POST", f"{ray_server.url}/v2/models/other/infer", b"{}")[0] == 404
    assert http("GET", ray_server.infer)[0] == 405
    # Still serving, and right: a good request after all of them, with an output subset.
    feeds, doc = good_request(seed=9, batch=5, seq=7)
    status, answer = post_json(ray_server.infer, {**doc, "outputs": [{"name": "m"}, {"name": "i2"}]})
    assert status == 200 and [o["name"] for o in answer["outputs"]] == ["m", "i2"]
    full = post_json(ray_server.infer, doc)[1]
    check_against_oracle(outputs, feeds, decode_v2(full))


def test_health_and_metadata(ray_server):
    assert http("GET", f"{ray_server.url}/v2/health/ready")[0] == 200
    assert http("GET", f"{ray_server.url}/v2/health/live")[0] == 200
    assert http("GET", f"{ray_server.url}/v2/models/{NAME}/ready")[0] == 200
    status, body = http("GET", f"{ray_server.url}/v2/models/{NAME}")
    meta = json.loads(body)
    assert status == 200 and meta["name"] == NAME and meta["platform"] == "aitgen_cpu"
    assert {i["name"]: i["shape"] for i in meta["inputs"]} == {"x": [-1, -1, 16], "bias": [-1, 8], "ids": [-1, 4]}


def test_sigterm_stops_cleanly(ray_server):
    """Last in the module: the server exits 0 on SIGTERM and the port is closed after."""
    port = int(ray_server.url.rsplit(":", 1)[1])
    assert ray_server.terminate() == 0, ray_server.text()[-3000:]
    assert "aitgen serve: stopped" in ray_server.text()
    with socket.socket() as s:
        s.settimeout(2)
        assert s.connect_ex(("127.0.0.1", port)) != 0
