"""Typed errors of the serving layer (kept here, beside the code that raises them, so the serving
extra stays an add-on: aitgen/errors.py needs no change for it)."""
from __future__ import annotations

from ..errors import AitgenError, RuntimeInputError


class ServingError(AitgenError, RuntimeError):
    """A server that cannot start or serve: a port in use, an engine that cannot run in this
    environment, a model the engine cannot express. The message says which and how to fix it."""


class EngineUnavailableError(ServingError):
    """The engine's package (ray[serve], nvidia-pytriton) is missing or unusable here; the message
    names the pip command or the environment change that fixes it."""


class BadRequestError(RuntimeInputError):
    """A request the server rejects before running the model: malformed JSON, a body that is not a
    KServe v2 inference request, data that does not fit its declared shape or datatype. Servers answer
    it with HTTP 400 and {"error": message}; a RuntimeInputError from the model itself is answered
    the same way."""
