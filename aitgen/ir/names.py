"""What a user-given name may be: any Unicode text but NUL.

Names travel into generated C++ as string literals (codegen/cstring.py) and back through the C API
as NUL-terminated UTF-8, so a NUL would cut a name short there (two inputs "a\\x00one" and
"a\\x00two" would become one), and a lone surrogate has no UTF-8 form at all. Everything else,
quotes, backslashes, newlines, '%' and emoji included, is escaped where it is used.
"""
from __future__ import annotations

from typing import Any, Optional

from ..errors import InvalidNameError


def check_name(name: Any, what: str) -> str:
    """`name` if it is a str that C and UTF-8 can carry, else InvalidNameError naming `what`."""
    if not isinstance(name, str):
        raise InvalidNameError(f"{what}: a name must be a str, got {type(name).__name__} {name!r}")
    if "\0" in name:
        raise InvalidNameError(f"{what} {name!r} contains a NUL character, which a C string cannot hold")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidNameError(f"{what} {name!r} is not valid Unicode text (it holds a lone surrogate), "
                               "so it has no UTF-8 form") from None
    return name


def check_optional_name(name: Any, what: str) -> Optional[str]:
    return None if name is None else check_name(name, what)
