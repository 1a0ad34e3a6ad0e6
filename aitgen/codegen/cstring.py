"""The one way user text enters generated source: as a complete C/C++ string literal.

The literal uses printable ASCII only, so no byte of it can end a comment line, splice a line
(a trailing backslash), close the literal early or form a trigraph. Quote, backslash and '?' are
backslash-escaped; every other byte of the UTF-8 form that is not printable ASCII is a 3-digit
octal escape. Octal, not hex: a hex escape swallows every hex digit after it ("\\xe9" + "a" is one
escape), while an octal escape stops after three digits. The C side gets the UTF-8 bytes back
exactly, which the runtime decodes as UTF-8.

The literal is data, never a format: templates pass it to snprintf as a "%s" argument.
"""
from __future__ import annotations

from ..ir.names import check_name

_BACKSLASHED = {ord('"'), ord("\\"), ord("?")}


def c_string_literal(s: str) -> str:
    """'a"b\\n' -> '"a\\"b\\012"'. InvalidNameError for a non-str, a NUL or a lone surrogate."""
    data = check_name(s, "text for generated code").encode("utf-8")
    out = ['"']
    for b in data:
        if b in _BACKSLASHED:
            out.append("\\" + chr(b))
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append(f"\\{b:03o}")
    out.append('"')
    return "".join(out)
