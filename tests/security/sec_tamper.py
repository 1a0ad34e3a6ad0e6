"""Tampered workdirs: a built model's files changed the ways an attacker (or a disk) would. Loading
must give a typed ModelError — or, for a harmless change, a model that still answers like the
oracle — and must never read or run anything outside the workdir (a canary library outside it
writes a file from its constructor if it is ever loaded)."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import time
from pathlib import Path

import numpy as np

import aitgen as ag
from aitgen.errors import AitgenError

import sec_model

EVIL_SRC = r'''
#include <cstdio>
__attribute__((constructor)) static void evil() {
  if (FILE* f = std::fopen(CANARY, "w")) { std::fputs("ran", f); std::fclose(f); }
}
'''


def _evil_library(root: Path, canary: Path) -> Path:
    src, lib = root / "evil.cpp", root / "x" / "evil.so"
    lib.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(EVIL_SRC)
    subprocess.run(["g++", "-shared", "-fPIC", f'-DCANARY="{canary}"', str(src), "-o", str(lib)], check=True)
    return lib


def _json_edit(fn):
    def tamper(d: Path):
        meta = json.loads((d / "model.json").read_text())
        out = fn(meta)
        (d / "model.json").write_text(out if isinstance(out, str) else json.dumps(meta if out is None else out))
    return tamper


def _lib(d: Path) -> Path:
    return next(d.glob("model_*.so"))


def _truncate(name_fn, size):
    def tamper(d: Path):
        p = name_fn(d)
        data = p.read_bytes()
        p.write_bytes(data[:size if size >= 0 else len(data) + size])
    return tamper


def _replace(name_fn, what):
    def tamper(d: Path):
        p = name_fn(d)
        p.unlink()
        if what == "fifo":
            os.mkfifo(p)
        elif what == "dir":
            p.mkdir()
        elif what == "symlink":
            p.symlink_to("/etc/passwd")
        elif what == "empty":
            p.write_bytes(b"")
        elif what == "garbage":
            p.write_bytes(os.urandom(4096))
    return tamper


def _weights_header(fn):
    """Rewrite the safetensors header through fn(header dict) keeping the data section."""
    def tamper(d: Path):
        raw = (d / "weights.safetensors").read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + n])
        new = fn(header)
        body = (new if isinstance(new, bytes) else json.dumps(header if new is None else new).encode())
        body = body.ljust(n) if len(body) <= n else body
        (d / "weights.safetensors").write_bytes(struct.pack("<Q", len(body)) + body + raw[8 + n:])
    return tamper


def _first_const(h):
    return next(k for k in h if k != "__metadata__")


def tampers(evil: Path) -> dict:
    W = lambda d: d / "weights.safetensors"  # noqa: E731
    return {
        "json_invalid": _json_edit(lambda m: "{not json"), "json_list": _json_edit(lambda m: [1, 2]),
        "json_empty": _json_edit(lambda m: ""), "json_null": _json_edit(lambda m: "null"),
        "json_missing_library": _json_edit(lambda m: {k: v for k, v in m.items() if k != "library"}),
        "json_missing_constants": _json_edit(lambda m: {k: v for k, v in m.items() if k != "constants"}),
        "json_library_int": _json_edit(lambda m: {**m, "library": 5}),
        "json_library_relative_escape": _json_edit(lambda m: {**m, "library": os.path.relpath(evil, "/tmp/x/y")}),
        "json_library_dotdot": _json_edit(lambda m: {**m, "library": "../x/evil.so"}),
        "json_library_absolute": _json_edit(lambda m: {**m, "library": str(evil)}),
        "json_library_other_name": _json_edit(lambda m: {**m, "library": "libc.so.6"}),
        "json_library_nul": _json_edit(lambda m: {**m, "library": m["library"] + "\u0000x"}),
        "json_target_bogus": _json_edit(lambda m: {**m, "target": "tpu"}),
        "json_build_id_other": _json_edit(lambda m: {**m, "build_id": "0" * 32}),
        "json_sha_other": _json_edit(lambda m: {**m, "library_sha256": "0" * 64}),
        "json_const_shape": _json_edit(lambda m: m["constants"][next(iter(m["constants"]))].update(shape=[3, 3])),
        "json_const_dtype": _json_edit(lambda m: m["constants"][next(iter(m["constants"]))].update(dtype="int8")),
        "json_const_offset": _json_edit(lambda m: m["constants"][next(iter(m["constants"]))].update(offset=1 << 40)),
        "json_const_extra": _json_edit(lambda m: m["constants"].update(zz={"dtype": "float32", "shape": [1],
                                                                          "offset": 0, "nbytes": 4})),
        "json_inputs_garbage": _json_edit(lambda m: {**m, "inputs": "x"}),
        "json_format_old": _json_edit(lambda m: {**m, "format": 1}),
        "json_huge_numbers": _json_edit(lambda m: m["constants"][next(iter(m["constants"]))].update(nbytes=10**30)),
        "lib_trunc_1k": _truncate(_lib, 1024), "lib_trunc_64k": _truncate(_lib, 65536),
        "lib_trunc_half": _truncate(_lib, -20000), "lib_empty": _replace(_lib, "empty"),
        "lib_garbage": _replace(_lib, "garbage"), "lib_fifo": _replace(_lib, "fifo"), "lib_dir": _replace(_lib, "dir"),
        "lib_symlink": _replace(_lib, "symlink"), "lib_missing": lambda d: _lib(d).unlink(),
        "w_trunc_8": _truncate(W, 8), "w_trunc_tail": _truncate(W, -5), "w_empty": _replace(W, "empty"),
        "w_fifo": _replace(W, "fifo"), "w_dir": _replace(W, "dir"), "w_symlink": _replace(W, "symlink"),
        "w_garbage": _replace(W, "garbage"), "w_missing": lambda d: W(d).unlink(),
        "w_header_huge": lambda d: W(d).write_bytes(struct.pack("<Q", 1 << 62) + W(d).read_bytes()[8:]),
        "w_header_not_json": _weights_header(lambda h: b"\xff" * 40),
        "w_header_list": _weights_header(lambda h: [1]),
        "w_header_offsets_lie": _weights_header(lambda h: h[_first_const(h)].update(data_offsets=[0, 1 << 40])),
        "w_header_dtype_lie": _weights_header(lambda h: h[_first_const(h)].update(dtype="I8")),
        "w_header_shape_lie": _weights_header(lambda h: h[_first_const(h)].update(shape=[1, 1, 1])),
        "w_header_missing": _weights_header(lambda h: {k: v for k, v in h.items() if k != _first_const(h)}),
        "w_header_build_id": _weights_header(lambda h: h.update(__metadata__={"aitgen_build_id": "1" * 32})),
        "w_other_build": None,  # filled in by attack(): weights of another build of the same graph
    }


def attack(workdir: str, num_runtimes_cases: bool = True) -> dict:
    t0 = time.perf_counter()
    root = Path(workdir)
    canary = root / "CANARY"
    evil = _evil_library(root, canary)
    outs, _ = sec_model.build(0)
    ag.compile_model(outs, target="cpu", workdir=str(root / "good"), load=False)
    outs2, _ = sec_model.build(1)
    ag.compile_model(outs2, target="cpu", workdir=str(root / "other"), load=False)
    feeds = sec_model.feeds(np.random.default_rng(0), 3)
    want = sec_model.oracle(feeds, sec_model.weights(0))
    results, defects = {}, []
    for name, tamper in tampers(evil).items():
        d = root / f"t_{name}"
        shutil.copytree(root / "good", d, symlinks=True)
        if tamper is None:
            shutil.copy(root / "other" / "weights.safetensors", d / "weights.safetensors")
        else:
            tamper(d)
        try:
            with ag.Model.load(str(d)) as m:
                ok = sec_model.close(m.run(feeds), want)
            results[name] = "loaded_right" if ok else "loaded_WRONG"
            if not ok:
                defects.append(f"{name}: loaded and computed a wrong answer")
        except AitgenError as e:
            results[name] = type(e).__name__
            if not isinstance(e, ag.errors.ModelError):
                defects.append(f"{name}: {type(e).__name__} rather than ModelError: {e}")
        except Exception as e:  # noqa: BLE001 - the defect being counted
            results[name] = f"untyped {type(e).__name__}"
            defects.append(f"{name}: untyped {type(e).__name__}: {e}")
    # Loading from inside the workdir by a relative path, and bad num_runtimes.
    cwd = os.getcwd()
    try:
        os.chdir(root / "good")
        with ag.Model.load(".") as m:
            results["load_dot"] = "loaded_right" if sec_model.close(m.run(feeds), want) else "loaded_WRONG"
    except Exception as e:  # noqa: BLE001
        results["load_dot"] = f"{type(e).__name__}"
        defects.append(f"load_dot: {type(e).__name__}: {e}")
    finally:
        os.chdir(cwd)
    for n in (0, -1, 2**32 + 1, 2**31, True, "2", 1.5, None):
        try:
            ag.Model.load(str(root / "good"), num_runtimes=n).close()
            defects.append(f"num_runtimes={n!r} was accepted")
        except AitgenError:
            results[f"num_runtimes={n!r}"] = "typed"
        except Exception as e:  # noqa: BLE001
            defects.append(f"num_runtimes={n!r}: untyped {type(e).__name__}: {e}")
    for bad in (root / "nope", root / "good" / "model.json", Path("/proc/self")):
        try:
            ag.Model.load(str(bad))
            defects.append(f"loading {bad} was accepted")
        except ag.errors.ModelError:
            results[f"load {bad.name}"] = "ModelError"
        except Exception as e:  # noqa: BLE001
            defects.append(f"loading {bad}: {type(e).__name__}: {e}")
    if canary.exists():
        defects.append("the canary library outside the workdir was loaded (its constructor ran)")
    return {"tampers": len(results), "outcomes": results, "defects": len(defects), "first_defects": defects[:30],
            "seconds": round(time.perf_counter() - t0, 2)}
