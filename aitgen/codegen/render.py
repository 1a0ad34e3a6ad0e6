"""The one jinja2 Environment that renders every template under backends/."""
from __future__ import annotations

import functools
from pathlib import Path

import jinja2

from .._paths import backends_dir
from .cstring import c_string_literal


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    # StrictUndefined: a parameter Python forgot is an error at render time, not an empty string
    # that surfaces as a confusing compiler error.
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(backends_dir())),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True, autoescape=False)
    # `{{ name | cstr }}`: how every user-given string (tensor, dim, model and op names) enters a
    # source, in code or in a comment; see cstring.py.
    env.filters["cstr"] = c_string_literal
    return env


def render(template: str, **params) -> str:
    return environment().get_template(template).render(**params)


def template_path(template: str) -> Path:
    return backends_dir() / template
