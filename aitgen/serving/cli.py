"""`aitgen serve`: a built model behind Triton (PyTriton) or Ray Serve, KServe v2 on 127.0.0.1.

    aitgen serve build/mlp --engine ray --http-port 8000 [--replicas 2] [--max-batch 16] [--batch-wait-ms 5]
    aitgen serve build/mlp --engine triton --name mlp --http-port 8000 [--grpc-port 8001] [--max-batch 16]
                           [--instances 2] [--batch-wait-ms 0]

Wired into aitgen/cli.py with `from .serving.cli import add_parser; add_parser(sub)`. Importing this
module imports neither engine: `aitgen --help` must stay fast and work without the serve extras.
The command prints one line `aitgen serve: ready ...` once the model answers, runs until SIGINT or
SIGTERM, then stops the server and exits 0 (1: the server died; 2: it could not start).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from typing import Optional, Sequence

ENGINES = ("triton", "ray")
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_DEFAULT_MAX_BATCH = 8


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _port(text: str) -> int:
    value = _positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a port is at most 65535, got {value}")
    return value


def _millis(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected milliseconds, got {text!r}") from None
    if not 0 <= value <= 60_000:
        raise argparse.ArgumentTypeError(f"expected 0..60000 ms, got {value}")
    return value


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add the `serve` subcommand; its func(args) returns the exit code."""
    p = subparsers.add_parser(
        "serve", help="serve a built model over KServe v2 (Triton or Ray Serve), on 127.0.0.1",
        description="Serve a built workdir over the KServe v2 protocol (JSON over HTTP; Triton adds gRPC) on "
                    "127.0.0.1 until SIGINT/SIGTERM. Engines come with extras: pip install -e \".[serve]\" "
                    "(Ray Serve), pip install -e \".[triton]\" (PyTriton, in a numpy<2 virtualenv).")
    p.add_argument("workdir", help="a built model's workdir (holds model.json)")
    p.add_argument("--engine", choices=ENGINES, required=True)
    p.add_argument("--name", help="model name in the URL /v2/models/NAME (default: the name in model.json)")
    p.add_argument("--http-port", type=_port, default=8000, help="HTTP port on 127.0.0.1 (default 8000)")
    p.add_argument("--grpc-port", type=_port, help="triton: gRPC port (default: http port + 1)")
    p.add_argument("--max-batch", type=_positive, default=_DEFAULT_MAX_BATCH,
                   help="most rows per model call when requests are stacked along the model's leading dynamic "
                        f"dim (default {_DEFAULT_MAX_BATCH}; 1 turns batching off)")
    p.add_argument("--batch-wait-ms", type=_millis, default=None,
                   help="how long to wait to fill a batch (default: ray 5, triton 0)")
    p.add_argument("--instances", type=_positive, default=1,
                   help="triton: model instances, each on one of the container's runtimes (default 1)")
    p.add_argument("--replicas", type=_positive, default=1, help="ray: replicas of the deployment (default 1)")
    p.add_argument("--ray-address", help="ray: join this cluster instead of starting a local Ray "
                                         "(default: $RAY_ADDRESS, else local)")
    p.add_argument("--num-cpus", type=float, help="ray: CPUs the local Ray may use (default: all)")
    p.set_defaults(func=run)


def _check_args(args: argparse.Namespace) -> Optional[str]:
    if args.engine == "ray":
        bad = [f for f, v in (("--grpc-port", args.grpc_port), ("--instances", args.instances != 1 or None)) if v]
        if bad:
            return f"{bad[0]} applies to --engine triton"
    else:
        bad = [f for f, v in (("--replicas", args.replicas != 1 or None), ("--ray-address", args.ray_address),
                              ("--num-cpus", args.num_cpus)) if v]
        if bad:
            return f"{bad[0]} applies to --engine ray"
        if args.grpc_port is not None and args.grpc_port == args.http_port:
            return "--grpc-port must differ from --http-port"
    meta_path = os.path.join(args.workdir, "model.json")
    if not os.path.isfile(meta_path):
        return f"{args.workdir} holds no built model (no model.json)"
    # Before any engine starts: the name becomes a URL segment and Triton's repository folder.
    from .errors import ServingError
    from .protocol import serving_name
    try:
        if args.name is not None:
            serving_name(args.name, given=True)
        else:
            with open(meta_path, encoding="utf-8") as f:
                serving_name(json.load(f).get("name"))
    except ServingError as e:
        return str(e)
    except (OSError, ValueError, AttributeError) as e:
        return f"{meta_path} is unreadable ({type(e).__name__}: {e}); rebuild the model"
    return None


def run(args: argparse.Namespace) -> int:
    problem = _check_args(args)
    if problem:
        print(f"aitgen: UsageError: {problem}", file=sys.stderr)   # the CLI's one-line form
        return 2
    stop = threading.Event()
    # Handlers before the engine starts: a SIGTERM during a slow start still ends it cleanly.
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in _SIGNALS}
    try:
        return _serve(args, stop)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _serve(args: argparse.Namespace, stop: threading.Event) -> int:
    from ..errors import AitgenError
    try:
        if args.engine == "triton":
            from . import triton
            server = triton.start(args.workdir, http_port=args.http_port, grpc_port=args.grpc_port, name=args.name,
                                  max_batch=args.max_batch, instances=args.instances,
                                  batch_wait_ms=0.0 if args.batch_wait_ms is None else args.batch_wait_ms)
            where = f"{server.url} (gRPC {server.grpc_url})"
        else:
            try:
                from . import ray as ray_engine
            except ImportError as e:
                raise _missing("ray[serve]", "serve", e) from None
            server = ray_engine.start(args.workdir, http_port=args.http_port, name=args.name,
                                      address=args.ray_address, num_cpus=args.num_cpus, replicas=args.replicas,
                                      max_batch=args.max_batch,
                                      batch_wait_ms=5.0 if args.batch_wait_ms is None else args.batch_wait_ms)
            where = server.url
    except ImportError as e:
        print(f"aitgen: EngineUnavailableError: {_missing('nvidia-pytriton', 'triton', e)}", file=sys.stderr)
        return 2
    except (AitgenError, OSError, RuntimeError, ValueError) as e:
        print(f"aitgen: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    # ray.init replaces the SIGTERM handler with its own (sys.exit): take it back.
    for s in _SIGNALS:
        signal.signal(s, lambda *_: stop.set())
    print(f"aitgen serve: ready {where}/v2/models/{server.name} ({args.engine})", flush=True)
    code = 0
    try:
        while not stop.wait(0.5):
            if args.engine == "triton" and not server.is_alive():
                print("aitgen serve: tritonserver exited", file=sys.stderr)
                code = 1
                break
    finally:
        server.stop()
    print("aitgen serve: stopped", flush=True)
    return code


def _missing(package: str, extra: str, err: ImportError) -> Exception:
    from .errors import EngineUnavailableError
    return EngineUnavailableError(f"this engine needs {package}: pip install -e \".[{extra}]\" ({err})")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`python -m aitgen.serving.cli serve DIR ...`, for tests and until aitgen/cli.py wires it in."""
    parser = argparse.ArgumentParser(prog="aitgen")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
