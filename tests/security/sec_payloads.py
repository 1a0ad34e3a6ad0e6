"""Hostile names: every one must either be refused with a typed error (NUL) or work end to end, and
none may run the command it carries (the canary file must never appear)."""
from __future__ import annotations


def injection(canary: str) -> str:
    """Breaks out of a C string inside snprintf and runs a shell command, if pasted raw."""
    return f'b", 0); }} popen("touch {canary}", "r"); if (0) {{ std::snprintf(err, errlen, "'


def comment_breakout(canary: str) -> str:
    """Ends a // comment (newline) and defines a constructor that runs a command, if pasted raw."""
    return (f'm\n#include <cstdlib>\nstatic int ait_x = std::system("touch {canary}");\n//')


def names(canary: str) -> list[str]:
    """Names that must work (they hold no NUL)."""
    return [injection(canary), comment_breakout(canary), "%n%n%n%n%s%s%s", "%x%x%x%x", 'q"uote', "back\\slash",
            "trail\\", "new\nline", "cr\rreturn", "tab\there", "emoji😀🚀", "汉字名", "../../etc/passwd", "/abs/p",
            "*/ /* ", "??=??/??'", "\u202eltr", "x", "X", "int", "a" * 300, " lead space"]


def refused() -> list[str]:
    """Names that must be refused with InvalidNameError."""
    return ["a\x00one", "nul\x00", "\x00"]
