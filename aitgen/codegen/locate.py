"""The one place that finds third-party toolchains and headers: g++, nvcc, ninja, oneDNN, CUTLASS.

Libraries come from PyPI at the versions pinned in ``3rdparty/*.txt``. Everything else in aitgen
asks this module, so a moved install or a new pin is a change here only. Environment variables
(``CUDA_HOME``) are read here because this module is an edge; nothing below it reads any.
"""
from __future__ import annotations

import functools
import importlib.metadata as md
import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from aitgen.errors import ToolchainError

__all__ = ["ToolchainError", "Pin", "Tool", "OneDNN", "Cutlass",
           "pin", "tool", "cxx", "nvcc", "ninja", "onednn", "cutlass"]


# ---------------------------------------------------------------------------------------------
# Pins
# ---------------------------------------------------------------------------------------------

# A wheel install has no 3rdparty/ directory beside the package, so these copies stand in for the
# files there. tests/codegen/test_build.py checks that they equal the files, so they cannot drift.
FALLBACK_PINS = {
    "cutlass": "nvidia-cutlass==4.2.0.0",
    "onednn": "onednn-devel-cpu-gomp==2023.2.0",
}
THIRD_PARTY_DIR = Path(__file__).resolve().parents[2] / "3rdparty"


@dataclass(frozen=True)
class Pin:
    dist: str        # PyPI distribution name
    version: str     # exact version (the pins are all ==)
    source: str      # the pin file it came from, or "built-in fallback"

    @property
    def requirement(self) -> str:
        return f"{self.dist}=={self.version}"

    @property
    def pip_command(self) -> str:
        return f"pip install '{self.requirement}'"


def _parse_pin(text: str) -> tuple[str, str] | None:
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            dist, version = (s.strip() for s in line.split("==", 1))
            return dist, version
    return None


def pin(name: str) -> Pin:
    """The pinned requirement of ``name`` ("cutlass" or "onednn"): from 3rdparty/<name>.txt in a
    source checkout or editable install, else from FALLBACK_PINS (a wheel install)."""
    if name not in FALLBACK_PINS:
        raise KeyError(f"no pin named {name!r}; known: {sorted(FALLBACK_PINS)}")
    fallback = _parse_pin(FALLBACK_PINS[name])
    path = THIRD_PARTY_DIR / f"{name}.txt"
    try:
        parsed = _parse_pin(path.read_text())
    except OSError:
        parsed = None
    # Accept the file only when it names the same distribution: a stray 3rdparty/ directory next to
    # site-packages must not redirect us to some other package.
    if parsed is not None and parsed[0] == fallback[0]:
        return Pin(parsed[0], parsed[1], str(path))
    return Pin(fallback[0], fallback[1], "built-in fallback")


# ---------------------------------------------------------------------------------------------
# Executables
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Tool:
    path: Path           # absolute, as found: run by this name (clang++ and ccache dispatch on argv[0])
    real_path: Path      # symlinks resolved: the binary that actually runs, for cache keys
    version: str         # one readable line, e.g. "g++ (Debian 12.2.0-14+deb12u1) 12.2.0"
    version_text: str    # the whole --version output; goes into object-cache keys

    @property
    def fingerprint(self) -> str:
        return f"{self.path}\n{self.real_path}\n{self.version_text}"


@functools.lru_cache(maxsize=None)
def _probe(path: str, real: str, _mtime_ns: int, _size: int) -> Tool:
    # Keyed on mtime and size as well as path so an upgraded compiler in place gets a new version.
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"cannot run '{path} --version': {exc}") from exc
    text = (proc.stdout or proc.stderr).strip()
    if proc.returncode != 0 or not text:
        raise ToolchainError(f"'{path} --version' failed (exit {proc.returncode}): {proc.stderr.strip()}")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # nvcc puts its release on a later line; g++ and clang on the first.
    line = next((ln for ln in lines if "release" in ln), lines[0])
    return Tool(Path(path), Path(real), line.strip(), text)


def tool(name_or_path: str | os.PathLike) -> Tool:
    """A compiler found on PATH or at a path, with its version. Raises ToolchainError if absent."""
    found = shutil.which(str(name_or_path))
    if found is None:
        raise ToolchainError(f"compiler {str(name_or_path)!r} not found (not on PATH and not an executable path)")
    found = os.path.abspath(found)
    real = os.path.realpath(found)
    st = os.stat(real)
    return _probe(found, real, st.st_mtime_ns, st.st_size)


def cxx(name: str = "g++") -> Tool:
    """The host C++ compiler (g++ by default; the CPU backend's flags are written for it)."""
    try:
        return tool(name)
    except ToolchainError as exc:
        raise ToolchainError(f"{exc}; install it with 'apt-get install g++'") from None


def nvcc(path: str | None = None) -> Tool:
    """nvcc from an explicit path, PATH, $CUDA_HOME/bin or /usr/local/cuda/bin, in that order."""
    candidates = [path] if path else [
        "nvcc",
        *([os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")] if os.environ.get("CUDA_HOME") else []),
        "/usr/local/cuda/bin/nvcc",
    ]
    for cand in candidates:
        if shutil.which(cand):
            return tool(cand)
    raise ToolchainError(f"nvcc not found (tried {', '.join(candidates)}); install the CUDA toolkit or set CUDA_HOME")


def ninja() -> Path:
    """The ninja binary of the PyPI `ninja` package (whose console script may be off PATH), else PATH's."""
    try:
        import ninja as _ninja  # the package, not this function
        cand = Path(_ninja.BIN_DIR) / "ninja"
        if _ninja.BIN_DIR and os.access(cand, os.X_OK):
            return cand
    except ImportError:
        pass
    found = shutil.which("ninja")
    if found:
        return Path(found)
    raise ToolchainError("ninja not found; install it with 'pip install ninja'")


# ---------------------------------------------------------------------------------------------
# Libraries from PyPI
# ---------------------------------------------------------------------------------------------

def _distribution(p: Pin, what: str) -> md.Distribution:
    try:
        dist = md.distribution(p.dist)
    except md.PackageNotFoundError:
        raise ToolchainError(f"{what} needs {p.requirement} (pin from {p.source}), which is not installed; "
                             f"fix: {p.pip_command}") from None
    # A different version means a different API (oneDNN 3.2 vs 3.x) or template set (CUTLASS):
    # fail here with the fix rather than in a page of compiler errors later.
    if dist.version != p.version:
        raise ToolchainError(f"{what} needs {p.requirement} (pin from {p.source}) but {p.dist} "
                             f"{dist.version} is installed; fix: {p.pip_command}")
    return dist


def _dist_file(dist: md.Distribution, suffix: str) -> Path | None:
    """An installed file of ``dist`` whose RECORD path ends with ``suffix``. RECORD paths of data
    files are relative to site-packages ('../../../include/dnnl.hpp'), so resolve them."""
    for f in dist.files or ():
        if str(f).replace("\\", "/").endswith(suffix):
            path = Path(dist.locate_file(f)).resolve()
            if path.exists():
                return path
    return None


@dataclass(frozen=True)
class OneDNN:
    include_dir: Path
    lib_dir: Path
    version: str

    @property
    def compile_flags(self) -> list[str]:
        return [f"-I{self.include_dir}"]

    @property
    def link_flags(self) -> list[str]:
        # rpath: libdnnl.so sits in <prefix>/lib, which the dynamic loader does not search.
        return [f"-L{self.lib_dir}", f"-Wl,-rpath,{self.lib_dir}", "-ldnnl"]


@functools.lru_cache(maxsize=None)
def onednn() -> OneDNN:
    """Headers and library of PyPI oneDNN (include/ and lib/ at the install prefix, e.g. the venv root)."""
    p = pin("onednn")
    dist = _distribution(p, "the CPU backend (oneDNN)")
    header = _dist_file(dist, "include/oneapi/dnnl/dnnl.hpp")
    # Without RECORD (some repackagers drop it) the prefix layout still holds.
    if header is None and (Path(sys.prefix) / "include/oneapi/dnnl/dnnl.hpp").exists():
        header = Path(sys.prefix) / "include/oneapi/dnnl/dnnl.hpp"
    if header is None:
        raise ToolchainError(f"{p.dist} is installed but oneapi/dnnl/dnnl.hpp is missing; fix: "
                             f"pip install --force-reinstall '{p.requirement}'")
    include_dir = header.parents[2]
    lib = None
    # The shared library ships in the runtime wheel that the -devel wheel depends on.
    for name in (p.dist.replace("-devel", ""), p.dist):
        try:
            lib = _dist_file(md.distribution(name), "libdnnl.so")
        except md.PackageNotFoundError:
            continue
        if lib is not None:
            break
    if lib is None and (include_dir.parent / "lib" / "libdnnl.so").exists():
        lib = include_dir.parent / "lib" / "libdnnl.so"
    if lib is None:
        raise ToolchainError(f"oneDNN headers found in {include_dir} but libdnnl.so is missing; fix: "
                             f"pip install --force-reinstall '{p.requirement}'")
    return OneDNN(include_dir, lib.parent, dist.version)


@dataclass(frozen=True)
class Cutlass:
    include_dirs: tuple[Path, ...]   # cutlass/ and cute/ headers, then tools/util (host helpers)
    version: str

    @property
    def compile_flags(self) -> list[str]:
        return [f"-I{d}" for d in self.include_dirs]


@functools.lru_cache(maxsize=None)
def cutlass() -> Cutlass:
    """Include dirs of the CUTLASS headers that PyPI nvidia-cutlass ships inside cutlass_library."""
    p = pin("cutlass")
    dist = _distribution(p, "the CUDA backend (CUTLASS)")
    header = _dist_file(dist, "cutlass_library/source/include/cutlass/cutlass.h")
    if header is None:
        # find_spec does not import cutlass_library (its import wants cuda-python and friends).
        spec = importlib.util.find_spec("cutlass_library")
        if spec and spec.origin:
            cand = Path(spec.origin).parent / "source/include/cutlass/cutlass.h"
            header = cand if cand.exists() else None
    if header is None:
        raise ToolchainError(f"{p.dist} is installed but cutlass/cutlass.h is missing; fix: "
                             f"pip install --force-reinstall --no-deps '{p.requirement}'")
    source = header.parents[2]   # .../cutlass_library/source
    dirs = [source / "include", source / "tools/util/include"]
    return Cutlass(tuple(d for d in dirs if d.is_dir()), dist.version)
