"""The one place that finds third-party toolchains and headers: g++, nvcc, hipcc, ninja, oneDNN, CUTLASS,
Composable Kernel.

Libraries come from PyPI at the versions pinned in ``3rdparty/*.txt``. Everything else in aitgen
asks this module, so a moved install or a new pin is a change here only. Environment variables
(``CUDA_HOME``, ``ROCM_PATH``, ``AITGEN_CK_HOME``) are read here because this module is an edge;
nothing below it reads any.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata as md
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from aitgen.errors import ToolchainError

__all__ = ["ToolchainError", "Pin", "Tool", "OneDNN", "Cutlass",
           "pin", "tool", "cxx", "nvcc", "ninja", "onednn", "cutlass", "hipcc", "accepts_arch", "CK", "ck",
           "HIP_ENV"]


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
    # Variables the compiler needs in its environment (hipcc: HIP_PLATFORM=amd), set by the build
    # for every compile and link, and part of the object-cache key.
    env: tuple[tuple[str, str], ...] = ()

    @property
    def fingerprint(self) -> str:
        return f"{self.path}\n{self.real_path}\n{self.version_text}"


@functools.lru_cache(maxsize=None)
def _probe(path: str, real: str, _mtime_ns: int, _size: int, env: tuple[tuple[str, str], ...] = ()) -> Tool:
    # Keyed on mtime and size as well as path so an upgraded compiler in place gets a new version.
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60,
                              env={**os.environ, **dict(env)} if env else None)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"cannot run '{path} --version': {exc}") from exc
    text = (proc.stdout or proc.stderr).strip()
    if proc.returncode != 0 or not text:
        raise ToolchainError(f"'{path} --version' failed (exit {proc.returncode}): {proc.stderr.strip()}")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # nvcc puts its release on a later line; g++ and clang on the first.
    line = next((ln for ln in lines if "release" in ln), lines[0])
    return Tool(Path(path), Path(real), line.strip(), text, env)


def tool(name_or_path: str | os.PathLike, env: dict[str, str] | None = None) -> Tool:
    """A compiler found on PATH or at a path, with its version (asked with `env` added to the
    environment, as its compiles will run). Raises ToolchainError if absent."""
    found = shutil.which(str(name_or_path))
    if found is None:
        raise ToolchainError(f"compiler {str(name_or_path)!r} not found (not on PATH and not an executable path)")
    found = os.path.abspath(found)
    real = os.path.realpath(found)
    st = os.stat(real)
    return _probe(found, real, st.st_mtime_ns, st.st_size, tuple(sorted((env or {}).items())))


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


# Debian's hipcc picks the NVIDIA platform whenever nvcc is installed too (and then runs nvcc):
# every hipcc call of ours names the AMD platform, so no user has to.
HIP_ENV = {"HIP_PLATFORM": "amd"}
HIP_INSTALL = "apt-get install -y --no-install-recommends hipcc libamdhip64-dev (Debian 12: HIP 5.2), or ROCm"


def hipcc(path: str | None = None) -> Tool:
    """hipcc from an explicit path, PATH, $ROCM_PATH/bin or /opt/rocm/bin, in that order; its
    version (and every compile) under HIP_PLATFORM=amd. `hipcc --version` prints a traceback
    without a GPU driver (rocm_agent_enumerator) but exits 0 with the HIP and clang versions on
    stdout, which is what the cache key takes: the key does not depend on a GPU being present."""
    rocm = os.environ.get("ROCM_PATH")
    candidates = [path] if path else [
        "hipcc", *([os.path.join(rocm, "bin", "hipcc")] if rocm else []), "/opt/rocm/bin/hipcc"]
    for cand in candidates:
        if shutil.which(cand):
            found = tool(cand, HIP_ENV)
            # clang's "InstalledDir: /usr/bin" is where this machine keeps it, which cache keys never
            # name (codegen/build.py): the HIP and clang versions identify the compiler.
            text = "\n".join(ln for ln in found.version_text.splitlines() if not ln.startswith("InstalledDir:"))
            return dataclasses.replace(found, version_text=text)
    raise ToolchainError(f"hipcc not found (tried {', '.join(candidates)}); install it with '{HIP_INSTALL}' "
                         "or set ROCM_PATH")


@functools.lru_cache(maxsize=None)
def _accepts(compiler: Tool, flags: tuple[str, ...]) -> bool:
    with tempfile.TemporaryDirectory(prefix="aitgen-probe-") as d:
        src = Path(d) / "probe.hip"
        src.write_text("__attribute__((used)) static int aitgen_probe;\n")
        try:
            proc = subprocess.run([str(compiler.path), *flags, "-fsyntax-only", str(src)], capture_output=True,
                                  timeout=120, env={**os.environ, **dict(compiler.env)})
        except (OSError, subprocess.TimeoutExpired):
            return False
    return proc.returncode == 0


def accepts_arch(compiler: Tool, flags: list[str]) -> bool:
    """Whether `compiler` takes an arch's flags (hipcc refuses --offload-arch=gfx942 before clang
    17): a syntax-only compile of an empty file, about 0.2 s when refused, once per process."""
    return _accepts(compiler, tuple(flags))


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


# ---------------------------------------------------------------------------------------------
# Composable Kernel (headers only; no PyPI package builds with HIP 5.2)
# ---------------------------------------------------------------------------------------------

# The commit this project's CK templates are written against (AITemplate's pin; the newest CK known
# to compile with Debian's HIP 5.2). A checkout with a PIN.md names its own commit.
CK_COMMIT = "b076a02ad25892192be9fefb08a53e89fa48160c"
CK_HOWTO = (f"set AITGEN_CK_HOME to a Composable Kernel checkout at commit {CK_COMMIT[:7]} "
            f"(git clone https://github.com/ROCm/composable_kernel && git -C composable_kernel checkout "
            f"{CK_COMMIT[:7]}), or install ROCm's composablekernel-dev")
PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class CK:
    include_dirs: tuple[Path, ...]   # ck/ headers, then ck/library/ headers where they sit apart
    version: str                     # a commit (PIN.md), else a digest of ck/ck.hpp: goes into the flags
    origin: str                      # which rule found it (AITGEN_CK_HOME, ROCM_PATH, ...)


def ck_candidates() -> list[tuple[str, Path]]:
    """(rule, folder) in the documented order: AITGEN_CK_HOME, ROCm's own include dir
    ($ROCM_PATH/include, /opt/rocm/include, holding ck/), then shared/3rdparty/composable_kernel
    beside the checkout or any folder above it (../shared/... from the project root)."""
    out: list[tuple[str, Path]] = []
    rocm = os.environ.get("ROCM_PATH")
    for root in ([Path(rocm)] if rocm else []) + [Path("/opt/rocm")]:
        out.append((f"ROCm ({root})", root / "include"))
    for parent in (PROJECT_ROOT, *PROJECT_ROOT.parents):
        out.append(("shared/3rdparty", parent / "shared" / "3rdparty" / "composable_kernel"))
    return out


def _ck_at(folder: Path, origin: str) -> CK | None:
    """CK under `folder`: a checkout (include/ck/ck.hpp, library/include/) or an include dir (ck/ck.hpp)."""
    for inc in (folder / "include", folder):
        if (inc / "ck" / "ck.hpp").is_file():
            lib = inc.parent / "library" / "include"
            dirs = (inc, lib) if inc != folder and (lib / "ck" / "library").is_dir() else (inc,)
            return CK(dirs, _ck_version(folder, inc), origin)
    return None


def _ck_version(folder: Path, inc: Path) -> str:
    try:
        text = (folder / "PIN.md").read_text()
    except OSError:
        text = ""
    m = re.search(r"commit ([0-9a-f]{7,40})", text)
    if m:
        return m.group(1)[:12]
    return "ckhpp-" + hashlib.sha256((inc / "ck" / "ck.hpp").read_bytes()).hexdigest()[:12]


@functools.lru_cache(maxsize=None)
def _ck(home: str | None, rocm: str | None) -> CK:
    if home:
        found = _ck_at(Path(home), "AITGEN_CK_HOME")
        if found is None:   # asked for explicitly: never fall through to another CK silently
            raise ToolchainError(f"AITGEN_CK_HOME={home} holds no Composable Kernel headers "
                                 f"(neither include/ck/ck.hpp nor ck/ck.hpp); {CK_HOWTO}")
        return found
    tried = []
    for origin, folder in ck_candidates():
        found = _ck_at(folder, origin)
        if found is not None:
            return found
        tried.append(str(folder))
    raise ToolchainError(f"Composable Kernel headers not found (AITGEN_CK_HOME unset; tried {', '.join(tried)}); "
                         f"{CK_HOWTO}")


def ck() -> CK:
    """Composable Kernel's include dirs, in the documented order (ck_candidates); ToolchainError
    saying how to get it when none holds it."""
    return _ck(os.environ.get("AITGEN_CK_HOME") or None, os.environ.get("ROCM_PATH") or None)
