"""Compile translation units in parallel through ninja and link them into one shared library.

Objects are cached by content: the key is a sha256 of the source text and name, the compiler (its
name, the resolved binary's name, full ``--version`` output) and the flags. Each cache entry is ONE file, a JSON header
line then the object bytes, written to a temp file and renamed into place, so a reader sees a whole
entry or none; the header holds the object's sha256, checked on every hit, so a truncated or corrupt
entry is a miss that gets rebuilt and is never linked. The header also lists the headers the object
was compiled from (the compiler's -MMD depfile) with their hashes: editing a runtime header that a
kernel includes invalidates that kernel's object, as ccache's direct mode does.

Keys and entries name no absolute path of this machine, so a cache filled here serves another
machine whose checkout and toolchain sit elsewhere (the GPU machine gets objects prebuilt on a CPU
machine): each include dir of the flags counts as the token $INC<i> (its position), in the key and
in the recorded headers; a header is then checked under the other machine's i-th include dir.

A workdir may come from someone else: where the build writes a file or a folder, a symlink is
replaced, never written through. ninja runs in its own session and dies with the thread that
started it, stopping its compile jobs, so a killed or interrupted build leaves no compiler running.
"""
from __future__ import annotations

import ctypes
import fcntl
import functools
import hashlib
import json
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from aitgen.codegen import locate
from aitgen.codegen import pch as pch_mod
from aitgen.codegen.deps import (file_digest, include_roots, parse_depfile, portable_dep, portable_flags,
                                  resolve_dep, tool_key)
from aitgen.errors import BuildError, UsageError

__all__ = ["Source", "BuildResult", "ObjectCache", "build", "default_cache_dir", "atomic_write", "new_temp",
           "replace_symlink"]

_CACHE_FORMAT = "aitgen-obj-v2"       # bump when the entry layout or key recipe changes
_STATUS = "[aitgen-build "            # NINJA_STATUS prefix: tells our status lines from compiler output
_NAME_OK = re.compile(r"[A-Za-z0-9_.+\-/]+")
_ERROR_LINES = 20


@dataclass(frozen=True)
class Source:
    name: str   # relative path under <workdir>/src, e.g. "gemm_3fa2.cpp"; the suffix picks the language
    text: str


@dataclass
class BuildResult:
    out_so: Path
    cache_hits: int
    cache_misses: int
    seconds: float
    commands: list[str] = field(default_factory=list)   # compiles that ran (the misses), then the link
    compiled: list[str] = field(default_factory=list)   # source names compiled now
    cached: list[str] = field(default_factory=list)     # source names taken from the cache
    log: str = ""                                       # ninja's output: compiler warnings land here


def default_cache_dir() -> Path:
    """$AITGEN_CACHE_DIR, else ~/.cache/aitgen. The only place the build reads the environment."""
    env = os.environ.get("AITGEN_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "aitgen"


# ---------------------------------------------------------------------------------------------
# Object cache
# ---------------------------------------------------------------------------------------------

def new_temp(path: Path) -> tuple[int, Path]:
    """(open fd, name) of a new file beside ``path``, to fill and then rename over it. O_EXCL and
    O_NOFOLLOW: never an existing file or a symlink. Mode 0666 less the umask, as a plain create
    would give (mkstemp's 0600 would hide a built model's files from other users)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666), tmp
        except FileExistsError:
            continue


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all, replacing (never writing through) a symlink there."""
    # Temp file in the same directory, then rename: readers never see a partial file, and two
    # writers of the same entry leave one whole entry. No fsync: a torn entry after a power loss
    # fails its checksum and is rebuilt, which is cheaper than an fsync per object.
    fd, tmp = new_temp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def replace_symlink(path: Path) -> None:
    """Remove ``path`` if it is a symlink: the build then creates a real file or folder there."""
    if path.is_symlink():
        path.unlink()


def _real_dirs(root: Path, rel: PurePosixPath) -> None:
    """Make root/rel a real folder, replacing a symlink (or a file) at any level below root."""
    p = root
    for part in rel.parts:
        p = p / part
        if p.is_symlink() or (p.exists() and not p.is_dir()):
            p.unlink()
        p.mkdir(exist_ok=True)


class ObjectCache:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.dir = self.root / "objects" / _CACHE_FORMAT

    @staticmethod
    def key(source: Source, compiler: locate.Tool, flags: list[str]) -> str:
        h = hashlib.sha256()
        roots = include_roots(flags)
        # Length-prefixed parts, so no two different inputs concatenate to the same bytes. The name
        # is in the key because quoted includes resolve relative to it and it is baked into the object.
        for part in (_CACHE_FORMAT, tool_key(compiler), source.name, "\0".join(portable_flags(flags, roots)),
                     source.text):
            b = part.encode()
            h.update(len(b).to_bytes(8, "little") + b)
        return h.hexdigest()

    def path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.entry"

    def load(self, key: str, workdir: Path, roots: list[str] | None = None) -> bytes | None:
        """The cached object for ``key`` if the entry is whole and its headers are unchanged, else
        None. ``roots``: this build's include dirs, which the entry's $INC<i> headers resolve against."""
        try:
            blob = self.path(key).read_bytes()
        except OSError:
            return None
        head, sep, obj = blob.partition(b"\n")
        try:
            meta = json.loads(head) if sep else None
        except ValueError:
            meta = None
        if (not isinstance(meta, dict) or meta.get("format") != _CACHE_FORMAT or meta.get("size") != len(obj)
                or meta.get("sha256") != hashlib.sha256(obj).hexdigest()):
            return None      # truncated or corrupt: the caller recompiles and overwrites it
        for dep, digest in meta.get("deps", {}).items():
            path = resolve_dep(dep, roots or [])
            if path is None or file_digest(workdir / path) != digest:   # workdir / absolute == absolute
                return None
        return obj

    def store(self, key: str, obj: bytes, deps: dict[str, str]) -> None:
        meta = {"format": _CACHE_FORMAT, "size": len(obj), "sha256": hashlib.sha256(obj).hexdigest(), "deps": deps}
        atomic_write(self.path(key), json.dumps(meta, sort_keys=True).encode() + b"\n" + obj)


# ---------------------------------------------------------------------------------------------
# Ninja
# ---------------------------------------------------------------------------------------------

def _ninja_path(p: str) -> str:
    return p.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def _ninja_cmd(argv: list[str]) -> str:
    if any("\n" in a for a in argv):
        raise ValueError(f"a flag contains a newline: {argv!r}")
    return shlex.join(argv).replace("$", "$$")


def _excerpt(lines: list[str]) -> list[str]:
    """The first ~20 lines of compiler output, starting just before its first error if that is later."""
    first = next((i for i, ln in enumerate(lines) if re.search(r"\berror\b", ln, re.I)), 0)
    start = max(0, first - 2) if first >= _ERROR_LINES - 2 else 0
    return lines[start:start + _ERROR_LINES]


def _failures(lines: list[str]) -> list[tuple[str, str, list[str]]]:
    """(target, exit code, output lines) of each 'FAILED:' block in ninja's output."""
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"FAILED: (?:\[code=(-?\d+)\] )?(.+?)\s*$", lines[i])
        if not m:
            i += 1
            continue
        j = i + 2   # the line after FAILED is the command, which we know already
        body = []
        while j < len(lines) and not lines[j].startswith((_STATUS, "FAILED: ", "ninja: ")):
            body.append(lines[j])
            j += 1
        out.append((m.group(2), m.group(1) or "?", body))
        i = j
    return out


PR_SET_PDEATHSIG = 1
_prctl = None   # libc's prctl, looked up before any fork: a child of a threaded process must not dlopen


def _die_with_parent(parent: int) -> None:
    """In the child, between fork and exec: SIGTERM when the thread that started it dies (its
    process killed with SIGKILL); ninja stops its compile jobs on SIGTERM."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:   # the parent died before prctl took effect
        os._exit(1)


def _stop(proc: subprocess.Popen) -> None:
    """Stop ninja and its compiles. ninja leads its own process group, each compile job has its
    own; on SIGTERM ninja signals every job's group, waits for them and exits."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _run_ninja(workdir: Path, jobs: int, on_compiled, tool_env=()) -> tuple[int, list[str]]:
    global _prctl
    cmd = [str(locate.ninja()), "-f", "build.ninja", "-j", str(jobs)]
    # tool_env: what the compiler needs set (locate.Tool.env), for its compiles and the link.
    env = {**os.environ, **dict(tool_env), "NINJA_STATUS": _STATUS + "%f/%t] "}
    linux = sys.platform.startswith("linux")
    if linux and _prctl is None:
        _prctl = ctypes.CDLL(None, use_errno=True).prctl
    lines: list[str] = []
    # Its own session: a Ctrl-C on the terminal reaches only us, and we stop ninja (below).
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", start_new_session=True,
                            preexec_fn=functools.partial(_die_with_parent, os.getpid()) if linux else None)
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            lines.append(line)
            # Without a TTY ninja prints an edge's status line when the edge finishes.
            if line.startswith(_STATUS) and "] CC " in line:
                on_compiled()
        proc.wait()
    except BaseException:   # KeyboardInterrupt included: no compile may outlive the build
        _stop(proc)
        raise
    finally:
        proc.stdout.close()
    return proc.returncode, lines


# ---------------------------------------------------------------------------------------------
# build
# ---------------------------------------------------------------------------------------------

def build_jobs() -> int:
    """Parallel compile jobs when the caller gives none: AITGEN_BUILD_JOBS, else one per core. A
    CUTLASS sm_90a unit takes ~3-4 GB of memory, so a big machine running several builds at once
    (test workers each starting a build) caps them here rather than running out of memory."""
    raw = os.environ.get("AITGEN_BUILD_JOBS", "").strip()
    if raw:
        try:
            n = int(raw)
        except ValueError:
            n = 0
        if n < 1:
            raise UsageError(f"AITGEN_BUILD_JOBS must be a positive integer, got {raw!r}")
        return n
    return os.cpu_count() or 1


PROGRESS_INTERVAL = 5.0   # seconds between progress lines in a log


class _LogProgress:
    """Progress for a log (stderr not a terminal): a plain line when compiling starts, at most one
    every PROGRESS_INTERVAL seconds while objects finish, and one at the end. No carriage returns,
    so CI logs and `2> build.log` stay readable."""

    def __init__(self, total: int, cached: int, name: str, stream=None, interval: float | None = None):
        self.total, self.cached, self.name = total, cached, name
        self.stream = stream if stream is not None else sys.stderr
        self.interval = PROGRESS_INTERVAL if interval is None else interval
        self.compiled = 0
        self.printed = -1   # objects done at the last line: the closing line is not a repeat of it
        self.t0 = self.last = time.monotonic()
        if total > cached:
            self._line()

    def _line(self) -> None:
        done = self.cached + self.compiled
        self.printed = done
        try:
            print(f"build {self.name}: {done}/{self.total} objects ({self.cached} cached, {self.compiled} "
                  f"compiled), {time.monotonic() - self.t0:.1f} s", file=self.stream, flush=True)
        except (OSError, ValueError):   # a closed log must not fail the build
            pass

    def update(self, compiled: int) -> None:
        self.compiled = compiled
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            self._line()

    def close(self, ok: bool = True) -> None:
        if ok and self.printed != self.cached + self.compiled:   # a failed build ends with its error
            self._line()


class _BarProgress:
    def __init__(self, bar, cached: int):
        self.bar, self.cached = bar, cached

    def update(self, compiled: int) -> None:
        self.bar.update(1)
        self.bar.set_postfix_str(f"compiled {compiled}, cached {self.cached}")

    def close(self, ok: bool = True) -> None:
        self.bar.close()


def _progress_bar(total: int, cached: int, name: str):
    """A tqdm bar on a terminal; plain lines in a log (_LogProgress), or where tqdm is missing."""
    if sys.stderr.isatty():
        try:
            from tqdm import tqdm
        except ImportError:   # a bar is a nicety: never fail a build for it
            pass
        else:
            bar = tqdm(total=total, initial=cached, desc=f"build {name}", unit="obj", leave=False)
            bar.set_postfix_str(f"compiled 0, cached {cached}")
            return _BarProgress(bar, cached)
    return _LogProgress(total, cached, name)


def _check_names(sources: list[Source]) -> None:
    seen = set()
    for s in sources:
        p = PurePosixPath(s.name)
        if (not _NAME_OK.fullmatch(s.name) or p.is_absolute() or ".." in p.parts or not p.suffix):
            raise ValueError(f"bad source name {s.name!r}: want a relative path with a suffix, "
                             f"characters [A-Za-z0-9_.+-/], no '..'")
        if s.name in seen:
            raise ValueError(f"two sources named {s.name!r}")
        seen.add(s.name)


def _write_if_changed(path: Path, data: bytes) -> None:
    try:
        # Only a regular file is compared: a FIFO would block the read, a symlink must be replaced.
        if not path.is_symlink() and path.is_file() and path.read_bytes() == data:
            return
    except OSError:
        pass
    atomic_write(path, data)


def build(sources: list[Source], out_so: Path, *, compiler: locate.Tool | str, flags: list[str],
          link_flags: list[str], workdir: Path, cache_dir: Path | None = None, jobs: int | None = None,
          progress: bool = True, prelude: pch_mod.Prelude | None = None) -> BuildResult:
    """Compile every source to an object (cached or through ninja, in parallel) and link ``out_so``.

    ``flags`` go to every compile (give -fPIC, or -Xcompiler=-fPIC for nvcc); ``link_flags`` follow
    the objects on the link line (libraries, -fopenmp). Commands run in ``workdir`` with paths
    relative to it. Builds in one workdir take turns (a file lock); the cache is shared safely.
    Raises BuildError naming the failing source, with the command and the compiler's first errors.
    ``progress``: a bar on stderr when it is a terminal, else a plain line every PROGRESS_INTERVAL
    seconds while compiling and one at the end. ``prelude``: a pch.Prelude, headers that most
    sources include, precompiled once (g++) for the sources that include them.
    """
    t0 = time.perf_counter()
    sources = list(sources)
    _check_names(sources)
    tool = compiler if isinstance(compiler, locate.Tool) else locate.tool(compiler)
    flags, link_flags = [str(f) for f in flags], [str(f) for f in link_flags]
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    out_so = Path(out_so).resolve()
    out_so.parent.mkdir(parents=True, exist_ok=True)
    cache = ObjectCache(cache_dir if cache_dir is not None else default_cache_dir())
    # Two builds in one workdir (test workers, two shells) would overwrite each other's build.ninja
    # and objects: the second waits for the first. Closing the file releases the lock.
    lock_path = workdir / ".build.lock"
    replace_symlink(lock_path)   # a link cannot be a lock anyone holds: nothing waits on it
    lock = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        res = _build_locked(sources, out_so, tool, flags, link_flags, workdir, cache, jobs, progress, prelude)
    finally:
        os.close(lock)
    res.seconds = time.perf_counter() - t0
    return res


def _build_locked(sources, out_so, tool, flags, link_flags, workdir, cache, jobs, progress, prelude) -> BuildResult:
    cc = str(tool.path)

    objects, hits, misses, compile_cmds = {}, [], [], {}
    for s in sources:
        src = workdir / "src" / s.name
        obj_rel = f"obj/{s.name}.o"           # keeps the suffix: a.cpp and a.cu do not collide
        objects[s.name] = obj_rel
        _real_dirs(workdir, PurePosixPath("src", s.name).parent)
        _real_dirs(workdir, PurePosixPath(obj_rel).parent)
        _write_if_changed(src, s.text.encode())
        key = ObjectCache.key(s, tool, flags)
        cached = cache.load(key, workdir, include_roots(flags))
        if cached is not None:
            _write_if_changed(workdir / obj_rel, cached)
            hits.append(s.name)
        else:
            misses.append((s, key))
            compile_cmds[s.name] = [cc, *flags, "-MMD", "-MF", obj_rel + ".d", "-c", f"src/{s.name}", "-o", obj_rel]

    # The kernels' common headers, precompiled (codegen/pch.py): same objects, a third of the time.
    pch_deps: dict[str, dict[str, str]] = {}
    users = [s for s, _ in misses if prelude is not None and prelude.applies(s.text)]
    if len(users) >= pch_mod.MIN_KERNELS:
        pch = pch_mod.ensure(prelude, tool, flags, cache.root)
        for s in users if pch is not None else ():
            cmd = compile_cmds[s.name]
            compile_cmds[s.name] = [cmd[0], "-include", str(pch.header), "-Winvalid-pch", *cmd[1:]]
            pch_deps[s.name] = pch.deps

    # Link to a temp name and rename: a process that has the old library loaded keeps its inode.
    # Relative to the workdir: its path, which may hold any character, stays out of build.ninja.
    tmp_so = out_so.with_name(f".{out_so.name}.{secrets.token_hex(6)}.tmp")
    tmp_rel = os.path.relpath(tmp_so, workdir)
    link_cmd = [cc, "-shared", *objects.values(), "-o", tmp_rel, *link_flags]

    # Every edge depends on 'always', a phony with no inputs, so ninja runs exactly the compiles we
    # decided are misses (never trusting a stale object in the workdir) and always relinks.
    lines = ["# generated by aitgen.codegen.build; rewritten on every build", "rule run",
             "  command = $cmd", "  description = $desc", "build always: phony"]
    for s, _ in misses:
        lines += [f"build {_ninja_path(objects[s.name])}: run src/{_ninja_path(s.name)} | always",
                  f"  cmd = {_ninja_cmd(compile_cmds[s.name])}", f"  desc = CC {s.name}"]
    lines += [f"build {_ninja_path(tmp_rel)}: run {' '.join(_ninja_path(o) for o in objects.values())} | always",
              f"  cmd = {_ninja_cmd(link_cmd)}", f"  desc = LINK {out_so.name}",
              f"default {_ninja_path(tmp_rel)}", ""]
    atomic_write(workdir / "build.ninja", "\n".join(lines).encode())
    for s, _ in misses:
        # A stale object must not survive a failed compile and look built; and the compiler opens
        # its outputs without O_NOFOLLOW, so no symlink may wait there.
        (workdir / objects[s.name]).unlink(missing_ok=True)
        (workdir / (objects[s.name] + ".d")).unlink(missing_ok=True)
    for log in (".ninja_log", ".ninja_deps", ".ninja_log.recompact", ".ninja_deps.recompact"):
        replace_symlink(workdir / log)   # ninja appends to these through any symlink

    bar = _progress_bar(len(sources), len(hits), out_so.name) if progress else None
    done = [0]

    def on_compiled():
        done[0] += 1
        if bar is not None:
            bar.update(done[0])

    ok = False
    try:
        rc, out = _run_ninja(workdir, max(1, jobs or build_jobs()), on_compiled, tool.env)
        ok = rc == 0
    except BaseException:
        tmp_so.unlink(missing_ok=True)
        raise
    finally:
        if bar is not None:
            bar.close(ok)
    if rc != 0:
        tmp_so.unlink(missing_ok=True)
        # Keep what did compile: one broken kernel should not cost the next build all the others.
        failed = {target for target, _, _ in _failures(out)}
        for s, key in misses:
            if objects[s.name] not in failed and (workdir / objects[s.name]).exists():
                _store(cache, key, workdir, objects[s.name], f"src/{s.name}", include_roots(flags),
                       pch_deps.get(s.name))
        _raise_failure(out, rc, workdir, {objects[s.name]: s.name for s, _ in misses}, compile_cmds,
                       tmp_rel, link_cmd, out_so)
    os.replace(tmp_so, out_so)

    for s, key in misses:
        _store(cache, key, workdir, objects[s.name], f"src/{s.name}", include_roots(flags), pch_deps.get(s.name))
    return BuildResult(out_so=out_so, cache_hits=len(hits), cache_misses=len(misses),
                       seconds=0.0,
                       commands=[shlex.join(compile_cmds[s.name]) for s, _ in misses] + [shlex.join(link_cmd)],
                       compiled=[s.name for s, _ in misses], cached=hits, log="\n".join(out))


def _store(cache: ObjectCache, key: str, workdir: Path, obj_rel: str, src_rel: str, roots: list[str],
           pch_deps: dict[str, str] | None = None) -> None:
    try:
        # Headers folded into a PCH are missing from the depfile: the PCH recorded them.
        deps = dict(pch_deps or {})
        for dep in parse_depfile((workdir / (obj_rel + ".d")).read_text()):
            if dep == src_rel:
                continue   # its text is in the key already
            digest = file_digest(workdir / dep)
            if digest is not None:
                # relative deps stay relative (checked against the next workdir); headers under an
                # include dir are named by its token; anything else stays absolute
                deps[portable_dep(dep, roots) or dep] = digest
        cache.store(key, (workdir / obj_rel).read_bytes(), deps)
    except OSError:
        # A read-only or full cache must not fail a build that succeeded; the next build misses.
        pass


def _raise_failure(out, rc, workdir, obj_to_source, compile_cmds, tmp_so, link_cmd, out_so):
    failures = _failures(out)
    for target, code, body in failures:
        name = obj_to_source.get(target)
        if name is not None:
            cmd, what = shlex.join(compile_cmds[name]), f"compiling source '{name}'"
        elif target == tmp_so:
            cmd, what = shlex.join(link_cmd), f"linking {out_so}"
        else:
            continue
        excerpt = _excerpt(body) or ["(the compiler printed nothing)"]
        more = f" ({len(failures) - 1} more failed)" if len(failures) > 1 else ""
        err = BuildError(f"{what} failed (exit {code}){more}\n  command (in {workdir}):\n    {cmd}\n"
                         + "\n".join("  " + ln for ln in excerpt))
        err.command, err.source, err.workdir, err.output = cmd, name, workdir, excerpt
        raise err
    # ninja itself failed (bad manifest, missing input): show its own words.
    tail = [ln for ln in out if not ln.startswith(_STATUS)][-_ERROR_LINES:]
    err = BuildError(f"ninja failed (exit {rc}) in {workdir}:\n" + "\n".join("  " + ln for ln in tail))
    err.command, err.source, err.workdir, err.output = "ninja -f build.ninja", None, workdir, tail
    raise err
