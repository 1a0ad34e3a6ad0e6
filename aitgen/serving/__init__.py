"""Serving a built model through existing engines, for users who outgrow one process.

    aitgen serve DIR --engine ray --http-port 8000          # Ray Serve:   pip install -e ".[serve]"
    aitgen serve DIR --engine triton --http-port 8000       # PyTriton:    pip install -e ".[triton]"

Both speak KServe v2 JSON on 127.0.0.1 (protocol.py). Modules: protocol (request/response codec,
checks), batching (which requests share a model call), ray (Ray Serve deployment), triton (PyTriton),
cli (the `serve` subcommand). Nothing here imports an engine until it is used; see docs/serving.md.
"""
