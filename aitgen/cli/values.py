"""Values of the command line's options: --config, --dim, --input, --out, --target, --arch.

Every malformed value is a UsageError whose message shows the form wanted."""
from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from typing import Optional, Sequence

from ..errors import OutputDirError, UsageError

# NAME=LB:UB is the one documented form for a dynamic dim, in --dim and --config alike; LB..UB is
# what --config took before and stays accepted.
_BOUNDS = re.compile(r"\s*(\d+)\s*(?::|\.\.)\s*(\d+)\s*")
_SYSTEM_TREES = (Path("/proc"), Path("/sys"), Path("/dev"))


def parse_bounds(text: str, what: str) -> Optional[tuple[int, int]]:
    """(lb, ub) for 'LB:UB' (or 'LB..UB'), None for text of another form; UsageError for bounds
    no dim can have. `what` names the option in the message (e.g. "--dim batch")."""
    m = _BOUNDS.fullmatch(text)
    if not m:
        return None
    lb, ub = int(m.group(1)), int(m.group(2))
    if lb < 1:
        raise UsageError(f"{what}={text}: the lower bound must be at least 1, got {lb} (e.g. {what}=1:{max(ub, 1)})")
    if lb > ub:
        raise UsageError(f"{what}={text}: the lower bound {lb} is above the upper bound {ub} "
                         f"(write {what}={ub}:{lb})")
    return lb, ub


def parse_config(items: Optional[Sequence[str]]) -> dict:
    """KEY=VALUE pairs for a zoo model: Python literals (2, 0.5, (1, 1, 1, 1), 'float16'), a bare
    word as a string, or LB:UB for a dynamic dim (an IntVar named KEY with those bounds)."""
    config = {}
    for item in items or ():
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise UsageError(f"--config wants KEY=VALUE (e.g. layers=2, or seq=1:128 for a dynamic dim), got {item!r}")
        bounds = parse_bounds(text, f"--config {key}")
        if bounds is not None:
            from ..ir.dims import IntVar
            config[key] = IntVar(key, *bounds)
            continue
        try:
            config[key] = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            config[key] = text
    return config


def parse_dims(items: Optional[Sequence[str]]) -> dict:
    """NAME=LB:UB pairs: bounds for an imported model's symbolic dims."""
    dims = {}
    for item in items or ():
        name, sep, text = item.partition("=")
        name = name.strip()
        bounds = parse_bounds(text, f"--dim {name}") if sep and name else None
        if bounds is None:
            raise UsageError(f"--dim wants NAME=LB:UB (e.g. batch=1:32), got {item!r}")
        dims[name] = bounds
    return dims


def parse_inputs(items: Sequence[str]) -> dict:
    """NAME=FILE.npy pairs -> name -> array."""
    import numpy as np

    feeds = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise UsageError(f"--input wants NAME=FILE.npy, got {item!r}")
        if not os.path.isfile(path):
            raise UsageError(f"--input {name}: no such file: {path}")
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:
            raise UsageError(f"--input {name}: cannot read {path} as .npy ({e}); save it with numpy.save") from None
    return feeds


def parse_calibration(paths: Optional[Sequence[str]]) -> Optional[list]:
    """--calibration FILE.npz ...: one feed per file (numpy.savez of name -> array, as Model.run
    takes them), read without pickles; None when the option is absent."""
    import numpy as np

    if not paths:
        return None
    feeds = []
    for path in paths:
        if not os.path.isfile(path):
            raise UsageError(f"--calibration: no such file: {path}")
        hint = "save each feed with numpy.savez(path, **inputs)"
        try:
            z = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:
            raise UsageError(f"--calibration: cannot read {path} as .npz ({e}); {hint}") from None
        if not isinstance(z, np.lib.npyio.NpzFile):   # a .npy: one array, no input names
            raise UsageError(f"--calibration: cannot read {path} as .npz (it holds one unnamed array); {hint}")
        with z:
            try:
                feeds.append({name: z[name] for name in z.files})
            except (OSError, ValueError, EOFError) as e:   # e.g. an object array: pickles are not read
                raise UsageError(f"--calibration: cannot read {path} ({e}); {hint}") from None
    return feeds


def output_dir(path: str) -> Path:
    """The folder `aitgen run --out` writes into, created; OutputDirError where it cannot be.
    Checked before the model runs, so a long run is not lost to a typo."""
    if not path:
        raise OutputDirError("--out is empty: name a folder to write the outputs into")
    out = Path(os.path.abspath(path))
    real = out.resolve()
    shm = Path("/dev/shm")
    for tree in _SYSTEM_TREES:
        if (real == tree or tree in real.parents) and not (real == shm or shm in real.parents):
            raise OutputDirError(f"--out {out} lies under {tree}, a kernel file system: write the outputs elsewhere")
    if out.exists() and not out.is_dir():
        raise OutputDirError(f"--out {out} is a file, not a folder: name a folder (it is created if missing)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputDirError(f"--out {out}: cannot create the folder ({e.strerror}); name a writable one") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise OutputDirError(f"--out {out}: the folder is not writable; name a writable one")
    return out


def output_files(names: Sequence[str]) -> dict[str, str]:
    """Output name -> a file name (<name>.npy) unique among `names`. ONNX names may hold '/' or
    ':'; the file keeps the safe characters, and a name whose safe form another output already
    has (a/b and a_b) gets a short hash of its full name appended. A name that is safe as it is
    always keeps it, whatever the order of the outputs."""
    import hashlib

    def safe(name: str) -> str:
        s = re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "_"
        return s if s not in (".", "..") else s.replace(".", "_")

    def hashed(name: str, stem: str) -> str:
        return f"{stem[:180]}_{hashlib.sha256(name.encode()).hexdigest()[:8]}"

    files: dict[str, str] = {}
    taken: set[str] = set()
    for name in names:   # names that need no change first: theirs by right
        if safe(name) == name and len(name) <= 200:
            files[name] = name + ".npy"
            taken.add(name)
    for name in names:
        if name in files:
            continue
        stem = safe(name)
        if stem in taken or len(stem) > 200:
            stem = hashed(name, stem)
        taken.add(stem)
        files[name] = stem + ".npy"
    return files


def threads_option(args) -> dict:
    """Model keyword arguments for --threads (absent: none, so OpenMP's default)."""
    n = getattr(args, "threads", None)
    if n is None:
        return {}
    if n < 1:
        raise UsageError(f"--threads must be at least 1, got {n}")
    return {"num_threads": n}
