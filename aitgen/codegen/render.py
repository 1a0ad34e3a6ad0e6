"""The one jinja2 Environment that renders every template under backends/."""
from __future__ import annotations

import functools
from pathlib import Path

import jinja2

from .._paths import backends_dir


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    # StrictUndefined: a parameter Python forgot is an error at render time, not an empty string
    # that surfaces as a confusing compiler error.
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(backends_dir())),
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True, autoescape=False)


def render(template: str, **params) -> str:
    return environment().get_template(template).render(**params)


def template_path(template: str) -> Path:
    return backends_dir() / template
