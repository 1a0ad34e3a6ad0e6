"""Run one attack in a child process: a crash (signal), a hang (timeout) or an untyped exception there
fails the calling test with what happened, instead of killing the test worker."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_isolated(module: str, func: str, timeout: float, **kwargs) -> dict:
    """Call tests/security/<module>.py:<func>(**kwargs) in a fresh interpreter; its JSON result."""
    code = ("import json, sys; sys.path.insert(0, %r); import %s as m; r = m.%s(**json.loads(sys.argv[1])); "
            "sys.stdout.write('\\n@@RESULT@@' + json.dumps(r))") % (str(HERE), module, func)
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    try:
        p = subprocess.run([sys.executable, "-c", code, json.dumps(kwargs)], capture_output=True, text=True,
                           timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        tail = (e.stdout or b"")[-2000:] if isinstance(e.stdout, bytes) else (e.stdout or "")[-2000:]
        raise AssertionError(f"{module}.{func} hung: no result within {timeout:.0f} s\n{tail}") from None
    if p.returncode != 0 or "@@RESULT@@" not in p.stdout:
        raise AssertionError(f"{module}.{func} died with status {p.returncode} (a negative status is a signal)\n"
                             f"stdout tail: {p.stdout[-2000:]}\nstderr tail: {p.stderr[-3000:]}")
    return json.loads(p.stdout.rsplit("@@RESULT@@", 1)[1])


def record(name: str, figures: dict) -> None:
    """Print the figures (pytest -s shows them) and, where AITGEN_SECURITY_FIGURES names a folder, write
    them there as <name>.json for the closing note."""
    print(f"\n{name}: {json.dumps(figures)}")
    out = os.environ.get("AITGEN_SECURITY_FIGURES")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{name}.json").write_text(json.dumps(figures, indent=1))
