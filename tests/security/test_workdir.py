"""Hostile workdirs for compile_model (issue 10, item 5, workdir part).

A workdir that is a file, lies under /proc, /sys or /dev (not /dev/shm), is empty, None or not a path, or holds a
NUL is refused with WorkdirError before any work. Inside a workdir, a symlink where the build writes
a file or a folder is replaced, never written through: a build must not touch anything outside its
workdir. Numbers are compared with the numpy oracle at rtol = atol = 1e-4.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

import aitgen as ag
import aitgen.compiler
from aitgen import ops
from aitgen.errors import WorkdirError

TOL = dict(rtol=1e-4, atol=1e-4)
FEEDS = {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5}


def _outputs():
    b = ag.IntVar("batch", 1, 4)
    x = ag.Tensor([b, 3], "float32", name="x")
    w = ag.constant(np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(2, 3), name="w")
    return {"y": ops.relu(ops.linear(x, w)) + 0.5}


def _assert_oracle(model) -> None:
    np.testing.assert_allclose(model.run(FEEDS)["y"], ag.reference.run(_outputs(), FEEDS)["y"], **TOL)


def _bad_workdirs(tmp_path: Path) -> dict[str, object]:
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    to_proc = tmp_path / "to_proc"
    to_proc.symlink_to("/proc/self")
    return {"a file": a_file, "under a file": a_file / "sub", "empty": "", "None": None,
            "/proc": "/proc/self/aitgen_w", "/sys": "/sys/aitgen_w", "/dev": "/dev/aitgen_w",
            "symlink into /proc": to_proc / "w", "/proc itself": "/proc", "NUL": str(tmp_path / "a\x00b"),
            "not a path": 42, "bytes": b"build/w"}


BAD = ["a file", "under a file", "empty", "None", "/proc", "/sys", "/dev", "symlink into /proc", "/proc itself",
       "NUL", "not a path", "bytes"]


@pytest.mark.parametrize("case", BAD)
def test_a_bad_workdir_is_refused_before_any_work(tmp_path, monkeypatch, case):
    def no_work(*a, **k):
        raise AssertionError("the pass pipeline ran before the workdir was checked")

    monkeypatch.setattr(aitgen.compiler, "run_passes", no_work)
    workdir = _bad_workdirs(tmp_path)[case]
    with pytest.raises(WorkdirError, match="workdir") as err:
        ag.compile_model(_outputs(), target="cpu", workdir=workdir)
    assert "\n" not in str(err.value)
    assert not Path("/dev/aitgen_w").exists()


def test_symlinks_in_the_workdir_are_replaced_not_written_through(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    work = tmp_path / "w"
    (work / "obj").mkdir(parents=True)
    targets = {}
    for rel in ("model.json", "weights.safetensors", "report.json", "graph.json", ".aitgen.lock",
                "obj/build.ninja", "obj/.build.lock", "obj/.ninja_log", "obj/.ninja_deps"):
        target = outside / rel.replace("/", "_")
        target.write_text("precious")
        (work / rel).symlink_to(target)
        targets[rel] = target
    outside_src = outside / "src"
    outside_src.mkdir()
    (work / "obj" / "src").symlink_to(outside_src)
    # A folder where an old library would be: not ours to remove, and not an error.
    (work / "model_0123456789abcdef.so").mkdir()

    with ag.compile_model(_outputs(), target="cpu", workdir=work, jobs=1) as m:
        _assert_oracle(m)
    for rel, target in targets.items():
        assert target.read_text() == "precious", f"the build wrote through the symlink {rel}"
    assert list(outside_src.iterdir()) == [], "the build wrote sources through a symlinked folder"
    for rel in ("model.json", "weights.safetensors", "report.json", "graph.json"):
        assert (work / rel).is_file() and not (work / rel).is_symlink(), rel
    assert (work / "obj" / "src").is_dir() and not (work / "obj" / "src").is_symlink()
    with ag.Model.load(work) as m:
        _assert_oracle(m)


def test_a_symlinked_obj_folder_is_replaced(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    work = tmp_path / "w"
    work.mkdir()
    (work / "obj").symlink_to(outside)
    with ag.compile_model(_outputs(), target="cpu", workdir=work, jobs=1) as m:
        _assert_oracle(m)
    assert list(outside.iterdir()) == [], "the build wrote into a folder outside its workdir"
    assert (work / "obj").is_dir() and not (work / "obj").is_symlink()


def test_cli_compile_into_a_bad_workdir_prints_one_line(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(textwrap.dedent("""
        import aitgen as ag
        from aitgen import ops

        def build():
            x = ag.Tensor([2, 3], "float32", name="x")
            return {"y": ops.relu(x)}
    """))
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    proc = subprocess.run([sys.executable, "-m", "aitgen.cli", "compile", f"{module}:build", "--target", "cpu",
                           "--workdir", str(a_file)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aitgen: WorkdirError: ") and str(a_file) in lines[0], lines


@pytest.mark.skipif(not Path("/dev/shm").is_dir() or not os.access("/dev/shm", os.W_OK),
                    reason="no writable /dev/shm here")
def test_dev_shm_is_a_fine_workdir():
    work = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="aitgen_w"))
    try:
        with ag.compile_model(_outputs(), target="cpu", workdir=work / "m") as model:
            _assert_oracle(model)
    finally:
        shutil.rmtree(work, ignore_errors=True)
