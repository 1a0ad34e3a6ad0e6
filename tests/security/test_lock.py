"""The workdir lock: builds exclude each other (threads too), a load inside this thread's own build
passes through, and a build nested in a build of the same workdir is refused instead of waiting on
itself."""
from __future__ import annotations

import threading

import pytest

from aitgen.errors import WorkdirError
from aitgen.runtime.lock import workdir_lock


def test_nested_exclusive_is_refused_and_shared_passes(tmp_path):
    with workdir_lock(tmp_path, exclusive=True):
        with workdir_lock(tmp_path, exclusive=False):
            pass
        with pytest.raises(WorkdirError, match="already being built by this thread"):
            with workdir_lock(tmp_path, exclusive=True):
                pass
    with workdir_lock(tmp_path, exclusive=True):  # released: free again
        pass


def test_other_threads_wait_then_time_out(tmp_path):
    seen = []

    def other(exclusive):
        try:
            with workdir_lock(tmp_path, exclusive=exclusive, timeout=0.2):
                seen.append("got")
        except WorkdirError as e:
            seen.append("locked" if "locked by another" in str(e) else str(e))

    with workdir_lock(tmp_path, exclusive=True):
        for ex in (True, False):
            t = threading.Thread(target=other, args=(ex,))
            t.start()
            t.join()
    assert seen == ["locked", "locked"]
    other(True)
    assert seen[-1] == "got"
