"""main: run one command and turn every way it can end into an exit status and at most one line
on stderr.

    0    done
    1    `aitgen debug` found a tensor that differs; or an unexpected exception (a bug, in aitgen
         or in the model's own code): one line naming it, and AITGEN_DEBUG=1 shows the traceback
    2    a user error: `aitgen: <ErrorType>: <message>`, the message's first line (with the
         compiler's first error for a BuildError), the rest under AITGEN_DEBUG=1
    130  interrupted (Ctrl-C), quietly
    141  stdout was closed early (`aitgen inspect ... | head`), quietly: 128 + SIGPIPE, what a shell
         reports for any program a closed pipe stops, so `set -o pipefail` scripts see it as usual

With AITGEN_DEBUG set (to anything but "" or "0") exceptions propagate with their tracebacks.
In process (tests, scripts), main returns the status; a usage error (argparse's own, or a
UsageError: a malformed option, a file that is not there) raises SystemExit(2) after printing
its line, as argparse does, the line being the exception's text.
"""
from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

from ..errors import AitgenError, BuildError, UsageError
from .parser import build_parser

EXIT_BUG, EXIT_USER, EXIT_INTERRUPT, EXIT_PIPE = 1, 2, 130, 141
_HINT = "AITGEN_DEBUG=1 shows"


class UsageExit(SystemExit):
    """SystemExit with status 2 whose text is the line printed (pytest.raises(match=...) reads it)."""

    def __init__(self, line: str):
        super().__init__(line)
        self.code = EXIT_USER


def debug_enabled() -> bool:
    return os.environ.get("AITGEN_DEBUG", "") not in ("", "0")


def error_line(e: BaseException) -> str:
    """`aitgen: <Type>: <first line>`, with a pointer to the rest when there is more."""
    text = str(e).strip()
    first, _, rest = text.partition("\n")
    if isinstance(e, BuildError):
        # The compiler's first error says what to fix; the command and the other lines can wait.
        output = getattr(e, "output", None) or []
        found = next((ln.strip() for ln in output if "error" in ln.lower()), None)
        if found:
            first = f"{first}: {found}"
        if rest:
            first += f" ({_HINT} the command and the compiler's output)"
    elif rest:
        n = rest.count("\n") + 1
        first += f" (+{n} line{'s' if n > 1 else ''}: {_HINT} them)"
    if not isinstance(e, AitgenError):
        first = (f"{first} (unexpected: a bug in aitgen or in the model's code; {_HINT} the traceback)"
                 if first else f"(unexpected: {_HINT} the traceback)")
    return f"aitgen: {type(e).__name__}: {first}" if first else f"aitgen: {type(e).__name__}"


def _quiet_stdout() -> None:
    """Point stdout at /dev/null: the interpreter flushes it on exit, and a closed pipe would
    then print 'Exception ignored ... BrokenPipeError'."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):   # a captured stdout (tests) has no descriptor
        pass


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):   # stderr closed too: the status is all that is left
        pass


def _run(argv: Optional[Sequence[str]]) -> int:
    args = build_parser().parse_args(argv)
    status = args.func(args)
    sys.stdout.flush()   # here, not at exit: a closed pipe must surface where main handles it
    return status


def main(argv: Optional[Sequence[str]] = None) -> int:
    if debug_enabled():
        return _run(argv)
    try:
        return _run(argv)
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_PIPE
    except KeyboardInterrupt:
        return EXIT_INTERRUPT
    except UsageError as e:
        line = error_line(e)
        _say(line)
        raise UsageExit(line) from None
    except AitgenError as e:
        _say(error_line(e))
        return EXIT_USER
    except Exception as e:  # noqa: BLE001 - the last resort: one line, never a traceback
        _say(error_line(e))
        return EXIT_BUG
