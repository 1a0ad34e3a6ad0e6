"""What an object or a precompiled header was made from: file digests, include dirs and depfiles.

Shared by the object cache (codegen/build.py) and the precompiled header (codegen/pch.py). Include
dirs are named by position ($INC<i>) so that cache entries name no path of this machine.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import stat
from pathlib import Path

__all__ = ["file_digest", "include_roots", "portable_flags", "portable_dep", "resolve_dep", "parse_depfile",
           "tool_key"]


def tool_key(compiler) -> str:
    """A compiler as cache keys see it (a locate.Tool): by name and version, not by where it is
    installed, so keys travel between machines."""
    version = compiler.version_text
    if os.environ.get("AITGEN_CACHE_TOOL_MATCH") == "release":
        # Opt-in, for objects prebuilt on one machine and linked on another (scripts/gpu_check.sh):
        # the toolchains' release line ("release 13.0") rather than the whole --version, whose patch
        # build differs between images of the same release. Objects of one nvcc release link
        # together; the default keeps the exact version.
        version = "\n".join(re.findall(r"release \d+\.\d+", version)) or version
    key = f"{compiler.path.name}\n{compiler.real_path.name}\n{version}"
    if compiler.env:   # hipcc's HIP_PLATFORM picks what it compiles for (absent: keys as before)
        key += "\nenv:" + "\0".join(f"{k}={v}" for k, v in compiler.env)
    return key


@functools.lru_cache(maxsize=65536)
def _digest(path: str, _ino: int, _mtime_ns: int, _size: int) -> str:
    # Memoised on the stat fields: hundreds of kernels include the same CUTLASS headers, and a hit
    # must re-check all of them, so each header is read once per change, not once per kernel.
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def file_digest(path: Path) -> str | None:
    try:
        st = path.stat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None   # a FIFO planted in a workdir would block the read forever
    return _digest(str(path), st.st_ino, st.st_mtime_ns, st.st_size)


_INCLUDE_FLAGS = ("-I", "-isystem", "-iquote", "-idirafter")


def include_roots(flags: list[str]) -> list[str]:
    """The include dirs of ``flags`` (-I<d>, -I <d>, -isystem <d>, ...), absolute, in order."""
    roots, prev = [], None
    for f in flags:
        d = None
        if prev is not None:
            d = f
        else:
            for opt in _INCLUDE_FLAGS:
                if f.startswith(opt) and len(f) > len(opt):
                    d = f[len(opt):]
        prev = f if f in _INCLUDE_FLAGS else None
        if d is not None and os.path.isabs(d):
            roots.append(os.path.normpath(d))
    return roots


def portable_flags(flags: list[str], roots: list[str]) -> list[str]:
    """``flags`` with each include dir written as its token $INC<i>."""
    index = {r: i for i, r in reversed(list(enumerate(roots)))}   # a repeated dir: its first position
    out = []
    for f in flags:
        for opt in ("",) + _INCLUDE_FLAGS:
            d = f[len(opt):]
            if f.startswith(opt) and d and os.path.isabs(d) and os.path.normpath(d) in index:
                f = f"{opt}$INC{index[os.path.normpath(d)]}"
                break
        out.append(f)
    return out


def portable_dep(dep: str, roots: list[str]) -> str | None:
    """A header's name in an entry: relative to the workdir as it was, $INC<i>/rel under an include
    dir, else None (an absolute path elsewhere: the entry would not travel, so it is not recorded
    as travelling; the caller keeps it absolute)."""
    if not os.path.isabs(dep):
        return dep
    norm = os.path.normpath(dep)
    for i, r in enumerate(roots):
        if norm.startswith(r + os.sep):
            return f"$INC{i}/{os.path.relpath(norm, r)}"
    return None


def resolve_dep(dep: str, roots: list[str]) -> str | None:
    """The path of an entry's header on this machine (None: an include dir this build lacks)."""
    m = re.match(r"\$INC(\d+)/(.+)", dep)
    if m is None:
        return dep
    i = int(m.group(1))
    return os.path.join(roots[i], m.group(2)) if i < len(roots) else None


def parse_depfile(text: str) -> list[str]:
    """Prerequisites of a make-style depfile (gcc/nvcc -MMD): 'obj: a.cpp b.h \\' with '\\ ' escapes."""
    text = text.replace("\\\r\n", " ").replace("\\\n", " ")
    deps: list[str] = []
    for line in text.splitlines():
        _, sep, rest = line.partition(": ")
        if not sep:
            continue
        for tok in re.findall(r"(?:\\.|[^\s\\])+", rest):
            deps.append(re.sub(r"\\(.)", r"\1", tok).replace("$$", "$"))
    return deps
