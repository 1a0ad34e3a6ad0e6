"""A precompiled header for the headers every kernel of a backend includes (g++ only).

A CPU kernel is a few dozen lines, but it includes aitgen/cpu_kernel.h (the vector maths, the
storage types) and aitgen/bad_input.hpp (<string>, <stdexcept>): g++ 12 at -O3 spends ~0.4 s of a
kernel's ~0.5 s parsing them. A build compiles tens to hundreds of kernels, the test suite thousands,
so the backend names those headers (backend.yaml `prelude`) and the build compiles them once into a
.gch, then passes ``-include <prelude.h>`` to every kernel that includes them: g++ loads the .gch
beside it instead of parsing (0.49 -> 0.20 s a kernel).

The object is byte-identical either way (tests/codegen/test_pch.py checks a model's kernels), so an
object's cache key does not depend on the PCH: an object compiled with it serves a build without it.
What the key cannot see is the headers folded into the .gch, which the kernel's own depfile then no
longer lists; their digests are added to the object's cache entry instead (``Pch.deps``).

The .gch lives in the build cache, keyed by the compiler, the flags, the prelude and the digest of
every header it includes (from ``g++ -MM``, ~40 ms), so an edited header gives a new one. It is
made in a temp folder and renamed into place: concurrent builds each use a whole one. Anything that
goes wrong (no g++, a failed compile, a full disk) leaves the build without a PCH, never broken: g++
parses the header beside a .gch it cannot use (-Winvalid-pch says so in the build log).
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from aitgen.codegen import locate
from aitgen.codegen.deps import file_digest, include_roots, parse_depfile, portable_dep, portable_flags, tool_key

__all__ = ["Prelude", "Pch", "ensure", "MIN_KERNELS"]

_FORMAT = "aitgen-pch-v1"
HEADER = "aitgen_prelude.h"
MIN_KERNELS = 3   # building the .gch costs ~2 kernels' compile time: below this it cannot pay


@dataclass(frozen=True)
class Prelude:
    """Headers to precompile, in include order. A source uses the PCH when it includes the last one
    (the backend's kernel header): the others are self-contained and harmless to add before it."""
    headers: tuple[str, ...]

    @property
    def text(self) -> str:
        return "".join(f'#include "{h}"\n' for h in self.headers)

    def applies(self, source_text: str) -> bool:
        return f'#include "{self.headers[-1]}"' in source_text


@dataclass(frozen=True)
class Pch:
    header: Path              # give as `-include <header>`; g++ finds <header>.gch beside it
    deps: dict[str, str]      # headers inside the .gch: portable name -> sha256, for object entries


def is_gcc(tool: locate.Tool) -> bool:
    # clang reads .gch files of its own format through -include-pch; nvcc and hipcc have none here.
    return "Free Software Foundation" in tool.version_text and "clang" not in tool.version_text.lower()


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def _valid(folder: Path) -> bool:
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError):
        return False
    return (isinstance(meta, dict) and meta.get("format") == _FORMAT
            and file_digest(folder / (HEADER + ".gch")) == meta.get("sha256"))


def ensure(prelude: Prelude, tool: locate.Tool, flags: list[str], cache_root: Path) -> Pch | None:
    """The PCH of ``prelude`` for these flags, built into ``cache_root``/pch if missing; None when
    the compiler is not g++ or anything fails (the build then parses the headers as before)."""
    if not is_gcc(tool):
        return None
    base = Path(cache_root) / "pch" / _FORMAT
    try:
        base.mkdir(parents=True, exist_ok=True)
        tmp = base / f".tmp-{secrets.token_hex(6)}"
        tmp.mkdir()
    except OSError:
        return None
    try:
        return _ensure_in(prelude, tool, flags, base, tmp)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _ensure_in(prelude: Prelude, tool: locate.Tool, flags: list[str], base: Path, tmp: Path) -> Pch | None:
    roots = include_roots(flags)
    header = tmp / HEADER
    header.write_text(prelude.text)
    cc = [str(tool.path), *flags, "-x", "c++-header"]
    # The headers it pulls in, hashed: they are part of the key, so an edit makes a new .gch.
    proc = _run([*cc, "-MM", "-MF", "deps.d", HEADER], tmp)
    if proc.returncode != 0:
        return None
    deps = {}
    for dep in parse_depfile((tmp / "deps.d").read_text()):
        if dep == HEADER:
            continue
        path = dep if os.path.isabs(dep) else str(tmp / dep)
        digest = file_digest(Path(path))
        if digest is None:
            return None
        deps[portable_dep(path, roots) or path] = digest
    h = hashlib.sha256()
    for part in (_FORMAT, tool_key(tool), "\0".join(portable_flags(flags, roots)), prelude.text,
                 json.dumps(deps, sort_keys=True)):
        b = part.encode()
        h.update(len(b).to_bytes(8, "little") + b)
    final = base / h.hexdigest()
    if not _valid(final):
        if final.exists():   # torn or tampered: set it aside, then take its place
            trash = base / f".old-{secrets.token_hex(6)}"
            os.replace(final, trash)
            shutil.rmtree(trash, ignore_errors=True)
        proc = _run([*cc, HEADER, "-o", HEADER + ".gch"], tmp)
        if proc.returncode != 0:
            return None
        gch = tmp / (HEADER + ".gch")
        meta = {"format": _FORMAT, "sha256": file_digest(gch), "deps": deps}
        (tmp / "meta.json").write_text(json.dumps(meta, sort_keys=True))
        (tmp / "deps.d").unlink()
        try:
            os.rename(tmp, final)   # a folder rename is atomic: readers see all of it or none
        except OSError:
            pass                    # another build put one there first: use that
        if not _valid(final):
            return None
    return Pch(header=final / HEADER, deps=deps)
