"""One advisory lock per workdir, so a build and a load never see each other's half-written files.

A build holds it exclusively from writing the weights until the Model it returns has read them; a
load holds it shared while it checks and reads the artefacts. flock locks belong to an open file, so
two threads of one process exclude each other like two processes do; only a load from the thread
that already holds the exclusive lock (compile_model loading what it just built) is let through.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
import time
from pathlib import Path
from typing import Iterator

from ..errors import WorkdirError

LOCK_NAME = ".aitgen.lock"
_held = threading.local()  # resolved workdir paths this thread holds exclusively


def _held_here() -> set[str]:
    if not hasattr(_held, "paths"):
        _held.paths = set()
    return _held.paths


@contextlib.contextmanager
def workdir_lock(workdir: Path, *, exclusive: bool, timeout: float = 600.0) -> Iterator[None]:
    """Hold the workdir's lock for the block. Raises WorkdirError when it is not free within
    `timeout` seconds. A shared request on a read-only workdir without a lock file goes unlocked:
    nobody can be building there."""
    key = str(Path(workdir).resolve())
    if key in _held_here():
        if exclusive:  # a build into the workdir this thread is building would wait on itself
            raise WorkdirError(f"workdir {key} is already being built by this thread (a build inside a "
                               "build of the same workdir); use another workdir")
        yield
        return
    path = Path(key) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        if not exclusive and e.errno in (errno.EACCES, errno.EROFS, errno.ENOENT):
            yield
            return
        raise WorkdirError(f"cannot create the lock file {path}: {e.strerror}") from None
    try:
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise WorkdirError(f"workdir {key} is locked by another build or load for more than "
                                       f"{timeout:.0f} s ({path})") from None
                time.sleep(0.02)
        if exclusive:
            _held_here().add(key)
        try:
            yield
        finally:
            if exclusive:
                _held_here().discard(key)
    finally:
        os.close(fd)  # closing the only descriptor of this open file releases the flock
