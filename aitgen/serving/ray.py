"""Ray Serve engine: a built model as a Ray Serve application speaking KServe v2 JSON.

    from aitgen.serving.ray import deployment
    from ray import serve
    serve.run(deployment("build/mlp", max_batch=16, replicas=2), route_prefix="/")
    # POST http://127.0.0.1:8000/v2/models/<name>/infer

Each replica loads the workdir once and answers the v2 routes (health, metadata, infer). Infer
requests are decoded and checked in the replica's event loop (a bad one is a 400 at once and never
joins a batch), then go through `@serve.batch`, which hands lists of requests to
batching.run_many in a worker thread (model.run drops the GIL, so the loop keeps taking requests).

On a cluster the same application runs with `serve run aitgen.serving.ray:build_app workdir=DIR`
(docs/serving.md); the workdir must be readable at the same path on every node that hosts a replica.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import threading
from pathlib import Path
from typing import Any, Optional

# Ray's usage reporting phones home; off unless the user asked for it. Before `import ray`, which
# reads it when the cluster starts.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402
from ray import serve  # noqa: E402
from starlette.requests import Request  # noqa: E402  (ray[serve] depends on starlette)
from starlette.responses import Response  # noqa: E402

from ..runtime import artifacts  # noqa: E402
from . import batching, protocol  # noqa: E402
from .errors import BadRequestError, ServingError  # noqa: E402

_JSON = "application/json"
# Response header: how many requests shared this answer's model call (1: it ran alone). For tuning
# --max-batch and --batch-wait-ms against a real load.
BATCH_HEADER = "x-aitgen-batch-requests"
_MODEL_ROUTE = re.compile(r"/v2/models/([^/]+)(?:/versions/([^/]+))?(/ready|/infer)?/?")


@dataclasses.dataclass
class _Item:
    req: protocol.InferRequest
    weight: int   # rows this request adds to a batch, capped at max_batch (ray refuses a larger item)


def _rows(items: list) -> int:
    return sum(it.weight for it in items)


def _json(doc: Any, status: int = 200) -> Response:
    return Response(json.dumps(doc).encode(), status_code=status, media_type=_JSON)


def _error(message: str, status: int) -> Response:
    return Response(protocol.error_body(message), status_code=status, media_type=_JSON)


@serve.deployment(max_ongoing_requests=256)
class AitgenModel:
    """One replica: the model loaded once, the v2 routes, @serve.batch in front of model.run."""

    def __init__(self, workdir: str, name: Optional[str], max_batch: int, batch_wait_ms: float):
        from ..runtime.model import Model   # in the replica's process
        self._model = Model.load(workdir, num_runtimes=1)
        self._sig = protocol.ModelSignature.from_meta(self._model.meta, name)
        self._policy = batching.policy(self._sig, max_batch)
        self._max_batch = self._policy.max_rows if self._policy.batchable else 1
        self._infer.set_max_batch_size(self._max_batch)
        self._infer.set_batch_wait_timeout_s(batch_wait_ms / 1000.0)

    async def __call__(self, request: Request) -> Response:
        path, method = request.url.path, request.method
        if path in ("/v2/health/ready", "/v2/health/live"):
            return Response(b"", status_code=200)
        if path in ("/v2", "/v2/"):
            return _json({"name": "aitgen", "version": _version(), "extensions": []})
        m = _MODEL_ROUTE.fullmatch(path)
        if m is None:
            return _error(f"no route {path}; try POST /v2/models/{self._sig.name}/infer", 404)
        name, version, tail = m.groups()
        if name != self._sig.name or version not in (None, "1"):
            return _error(f"unknown model '{name}'" + (f" version {version}" if version else "") +
                          f"; this server has '{self._sig.name}' version 1", 404)
        if tail == "/infer":
            if method != "POST":
                return _error("infer takes POST", 405)
            return await self._handle_infer(request)
        if method != "GET":
            return _error(f"{path} takes GET", 405)
        return Response(b"", status_code=200) if tail == "/ready" else _json(self._sig.metadata())

    async def _handle_infer(self, request: Request) -> Response:
        try:
            req = protocol.parse_request(await _body(request), self._sig)
        except BadRequestError as e:
            return _error(str(e), 400)
        weight = min(batching.rows_of(req.feeds, self._policy), self._max_batch)
        outcome, shared = await self._infer(_Item(req, weight))
        if isinstance(outcome, Exception):
            return _error(str(outcome) or type(outcome).__name__, protocol.status_of(outcome))
        return Response(protocol.encode_response(self._sig, outcome, req), media_type=_JSON,
                        headers={BATCH_HEADER: str(shared)})

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.005, batch_size_fn=_rows)
    async def _infer(self, items: list[_Item]) -> list[tuple[batching.Outcome, int]]:
        loop = asyncio.get_running_loop()
        shared: list[int] = []
        outcomes = await loop.run_in_executor(None, batching.run_many, self._model.run,
                                              [it.req.feeds for it in items], self._policy, shared)
        return list(zip(outcomes, shared))


async def _body(request: Request) -> bytes:
    """The body, refused past protocol.MAX_BODY_BYTES without reading it all."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > protocol.MAX_BODY_BYTES:
        raise BadRequestError(f"request body of {declared} bytes exceeds the limit of {protocol.MAX_BODY_BYTES}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > protocol.MAX_BODY_BYTES:
            raise BadRequestError(f"request body exceeds the limit of {protocol.MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _version() -> str:
    from importlib import metadata
    try:
        return metadata.version("aitgen")
    except metadata.PackageNotFoundError:
        return "unknown"


def model_name(workdir: str) -> str:
    """The name in the workdir's model.json (checked as the loader checks it)."""
    return artifacts.read_artifacts(artifacts.resolve_workdir(workdir)).meta["name"]


def deployment(workdir: str, *, name: Optional[str] = None, replicas: int = 1, max_batch: int = 8,
               batch_wait_ms: float = 5.0, autoscaling_config: Optional[dict] = None,
               ray_actor_options: Optional[dict] = None, **options: Any) -> serve.Application:
    """A Ray Serve application serving the model built in `workdir` as `name` (default: its
    model.json name) over KServe v2 JSON.

    max_batch: most rows (along the model's leading dynamic dim) in one model call; 1 runs requests
    one by one. batch_wait_ms: how long a replica waits to fill a batch. replicas, or
    autoscaling_config (a Ray Serve dict: min_replicas, max_replicas, target_ongoing_requests, ...),
    ray_actor_options (num_cpus, runtime_env, ...) and any other Ray deployment option
    (max_ongoing_requests, ...) pass through to `Deployment.options`."""
    path = str(Path(workdir).resolve())
    if not Path(path, artifacts.MODEL_JSON).is_file():
        raise ServingError(f"{path} holds no built model (no {artifacts.MODEL_JSON}); build one with "
                           "aitgen compile or ag.compile_model")
    name = name or model_name(path)
    if not isinstance(max_batch, int) or max_batch < 1:
        raise ServingError(f"max_batch must be an int >= 1, got {max_batch!r}")
    if not batch_wait_ms >= 0:
        raise ServingError(f"batch_wait_ms must be >= 0, got {batch_wait_ms!r}")
    opts = deployment_options(name, replicas=replicas, max_batch=max_batch, autoscaling_config=autoscaling_config,
                              ray_actor_options=ray_actor_options, **options)
    return AitgenModel.options(**opts).bind(path, name, max_batch, float(batch_wait_ms))


def deployment_options(name: str, *, replicas: int = 1, max_batch: int = 8, autoscaling_config: Optional[dict] = None,
                       ray_actor_options: Optional[dict] = None, **options: Any) -> dict[str, Any]:
    """The keyword arguments `deployment` hands to `Deployment.options`."""
    opts: dict[str, Any] = {"name": f"aitgen_{name}", **options}
    if autoscaling_config is not None:
        opts["autoscaling_config"] = autoscaling_config   # Ray refuses num_replicas beside it
    else:
        opts["num_replicas"] = replicas
    if ray_actor_options is not None:
        opts["ray_actor_options"] = ray_actor_options
    # Ray's default of 5 requests in flight per replica would cap every batch at 5 requests.
    opts.setdefault("max_ongoing_requests", max(256, 4 * max_batch))
    return opts


def build_app(args: dict) -> serve.Application:
    """Application builder for `serve run aitgen.serving.ray:build_app workdir=DIR [name=N]
    [max_batch=8] [batch_wait_ms=5] [replicas=1]`: Ray hands the key=value pairs over as strings."""
    args = dict(args)
    try:
        workdir = args.pop("workdir")
    except KeyError:
        raise ServingError("build_app needs workdir=DIR") from None
    kw: dict[str, Any] = {"name": args.pop("name", None)}
    for key, conv in (("max_batch", int), ("replicas", int), ("batch_wait_ms", float)):
        if key in args:
            try:
                kw[key] = conv(args.pop(key))
            except ValueError:
                raise ServingError(f"build_app: {key} must be a number") from None
    if args:
        raise ServingError(f"build_app: unknown arguments {sorted(args)}")
    return deployment(workdir, **kw)


@dataclasses.dataclass
class RayServer:
    """A running application (from `start`); `stop` removes it, and the local Ray it started."""
    url: str
    name: str
    app_name: str
    owns_ray: bool

    def stop(self, timeout_s: float = 10.0) -> None:
        """Graceful where Ray still answers, bounded where it does not: a SIGINT/SIGTERM sent to
        the whole process group (Ctrl+C, `timeout`, systemd) has already killed the local raylet,
        and serve.shutdown would then wait 30 s on a controller that cannot reply."""
        graceful = threading.Thread(target=serve.shutdown if self.owns_ray else lambda: serve.delete(self.app_name),
                                    name="aitgen-serve-stop", daemon=True)
        graceful.start()
        graceful.join(timeout_s)
        if self.owns_ray and ray.is_initialized():
            ray.shutdown()   # ends the local Ray's processes whatever state they are in


def start(workdir: str, *, http_port: int = 8000, name: Optional[str] = None, address: Optional[str] = None,
          num_cpus: Optional[float] = None, **deployment_kw: Any) -> RayServer:
    """Serve `workdir` on http://127.0.0.1:http_port and return once every replica answers.

    Without `address` (and without RAY_ADDRESS) a local Ray starts in this process, every service on
    127.0.0.1 and no dashboard, and `stop` ends it; with one, the application joins that cluster."""
    app = deployment(workdir, name=name, **deployment_kw)
    name = name or model_name(workdir)
    address = address or os.environ.get("RAY_ADDRESS")
    owns_ray = not ray.is_initialized() and not address
    if owns_ray:
        # address="local": a new Ray even where `ray start` left a cluster to auto-connect to.
        # 127.0.0.1 as the node address keeps Ray's own services off the network interfaces.
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
                 configure_logging=False, log_to_driver=False)
    elif not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": http_port})
        app_name = f"aitgen_{name}"
        serve.run(app, name=app_name, route_prefix="/", blocking=False)
    except BaseException:
        if owns_ray:
            ray.shutdown()
        raise
    return RayServer(f"http://127.0.0.1:{http_port}", name, app_name, owns_ray)
