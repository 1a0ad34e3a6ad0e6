"""Model.load on tampered workdirs: nothing outside the workdir is opened or run, and every
malformed artefact (model.json, the library, the weights) is a ModelError naming the file, raised
before the library runs or reads anything; the C container refuses a FIFO or a short weights file
by itself too. One small model is built once; each test tampers with a copy of its workdir."""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import struct
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import ModelError, RuntimeInputError, RuntimeInputTypeError


def _graph():
    n = ag.IntVar("n", 1, 8)
    x = ag.Tensor([n, 4], name="x")
    w = ag.constant(np.linspace(-1, 1, 4, dtype=np.float32), name="w")
    b = ag.constant(np.arange(4, dtype=np.float32), name="b")
    return {"y": ops.relu(x * w + b)}


FEEDS = {"x": np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    work = tmp_path_factory.mktemp("loader") / "m"
    ag.compile_model(_graph(), target="cpu", workdir=work, load=False)
    return work


@pytest.fixture
def work(built, tmp_path) -> Path:
    """A copy of the built workdir (model.json, library, weights) to tamper with."""
    dst = tmp_path / "w"
    dst.mkdir()
    meta = json.loads((built / "model.json").read_text())
    for name in ("model.json", "weights.safetensors", meta["library"]):
        shutil.copy2(built / name, dst / name)
    return dst


def _meta(work: Path) -> dict:
    return json.loads((work / "model.json").read_text())


def _write_meta(work: Path, meta) -> None:
    (work / "model.json").write_text(json.dumps(meta))


def _library(work: Path) -> Path:
    return work / _meta(work)["library"]


def _resign(work: Path) -> None:
    """Record the library's current hash, as a writer who controls the workdir would."""
    meta = _meta(work)
    meta["library_sha256"] = hashlib.sha256((work / meta["library"]).read_bytes()).hexdigest()
    _write_meta(work, meta)


def _oracle_check(model) -> None:
    ref = ag.reference.run(_graph(), FEEDS)
    np.testing.assert_allclose(model.run(FEEDS)["y"], ref["y"], rtol=1e-6, atol=1e-6)


def test_a_valid_workdir_loads_and_runs(work):
    with ag.Model.load(work) as m:
        _oracle_check(m)


def test_load_dot_from_inside_the_workdir(work, monkeypatch):
    monkeypatch.chdir(work)
    with ag.Model.load(".") as m:   # dlopen searched the system path for "./"-less names before
        _oracle_check(m)
    monkeypatch.chdir(work.parent)
    with ag.Model.load(work.name) as m:
        _oracle_check(m)


# -- the library ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def evil_library(tmp_path_factory) -> tuple[Path, Path]:
    """A shared library whose constructor writes a canary file: it must never be loaded."""
    d = tmp_path_factory.mktemp("evil")
    canary = d / "CANARY"
    src = d / "evil.c"
    src.write_text('#include <stdio.h>\n__attribute__((constructor)) static void pwn(void) {\n'
                   f'  FILE* f = fopen("{canary}", "w"); if (f) fclose(f);\n}}\n')
    so = d / "evil.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    return so, canary


def _point_library_at(work: Path, name: str, so: Path) -> None:
    meta = _meta(work)
    meta["library"] = name
    meta["library_sha256"] = hashlib.sha256(so.read_bytes()).hexdigest()
    _write_meta(work, meta)


@pytest.mark.parametrize("how", ["relative", "absolute", "dot-slash", "symlink", "subdir"])
def test_library_outside_the_workdir_is_never_opened(work, evil_library, how):
    so, canary = evil_library
    if how == "relative":
        name = os.path.relpath(so, work)
    elif how == "absolute":
        name = str(so)
    elif how == "dot-slash":
        name = "./" + _library(work).name
    elif how == "symlink":   # the right form of name, but a link to a file elsewhere
        name = "model_0123456789abcdef.so"
        (work / name).symlink_to(so)
    else:
        (work / "sub").mkdir()
        shutil.copy2(so, work / "sub" / "model_0123456789abcdef.so")
        name = "sub/model_0123456789abcdef.so"
    _point_library_at(work, name, so)
    with pytest.raises(ModelError, match="model.json|symbolic link"):
        ag.Model.load(work)
    assert not canary.exists(), "a library outside the workdir was loaded"


@pytest.mark.parametrize("size", [0, 1024, 4096, 65536])
def test_truncated_library_is_a_model_error(work, size):
    lib = _library(work)
    with open(lib, "r+b") as f:   # cut in place: before the hash check, dlopen died of SIGBUS
        f.truncate(size)
    with pytest.raises(ModelError, match=f"{lib.name}.*library_sha256"):
        ag.Model.load(work)


@pytest.mark.parametrize("content", [b"", b"\x7fELF" + b"\0" * 60, os.urandom(5000)], ids=["empty", "elf", "random"])
def test_garbage_library_with_matching_hash_is_a_model_error(work, content):
    _library(work).write_bytes(content)
    _resign(work)   # the hash matches: dlopen itself refuses the file
    with pytest.raises(ModelError, match="cannot load"):
        ag.Model.load(work)


def test_missing_library_and_library_not_a_file(work):
    lib = _library(work)
    lib.unlink()
    with pytest.raises(ModelError, match=f"{lib.name} is missing"):
        ag.Model.load(work)
    lib.mkdir()
    with pytest.raises(ModelError, match="not a regular file"):
        ag.Model.load(work)


# -- model.json -------------------------------------------------------------------------------

def _drop(key):
    return lambda m: {k: v for k, v in m.items() if k != key}


META_CASES = {
    "list": lambda m: [m],
    "string": lambda m: "model",
    "format missing": _drop("format"),
    "format 1": lambda m: {**m, "format": 1},
    "format text": lambda m: {**m, "format": "2"},
    "format true": lambda m: {**m, "format": True},
    "library missing": _drop("library"),
    "library number": lambda m: {**m, "library": 7},
    "library null": lambda m: {**m, "library": None},
    "library other form": lambda m: {**m, "library": "libc.so.6"},
    "hash missing": _drop("library_sha256"),
    "hash short": lambda m: {**m, "library_sha256": "ab"},
    "build id missing": _drop("build_id"),
    "build id upper": lambda m: {**m, "build_id": m["build_id"].upper()},
    "target missing": _drop("target"),
    "target list": lambda m: {**m, "target": ["cpu"]},
    "inputs list": lambda m: {**m, "inputs": []},
    "input entry text": lambda m: {**m, "inputs": {"x": "x"}},
    "input dtype": lambda m: {**m, "inputs": {"x": {**m["inputs"]["x"], "dtype": "float128"}}},
    "input max_shape": lambda m: {**m, "inputs": {"x": {**m["inputs"]["x"], "max_shape": [8, -4]}}},
    "constants missing": _drop("constants"),
    "constant nbytes": lambda m: {**m, "constants": {**m["constants"], "w": {**m["constants"]["w"], "nbytes": 8}}},
    "constant offset": lambda m: {**m, "constants": {**m["constants"], "w": {**m["constants"]["w"], "offset": -16}}},
    "constant shape": lambda m: {**m, "constants": {**m["constants"], "w": {**m["constants"]["w"], "shape": "4"}}},
    "cuda_graph text": lambda m: {**m, "cuda_graph": "yes"},
}


@pytest.mark.parametrize("case", list(META_CASES))
def test_malformed_model_json_is_a_model_error(work, case):
    _write_meta(work, META_CASES[case](_meta(work)))
    with pytest.raises(ModelError, match="model.json"):
        ag.Model.load(work)


@pytest.mark.parametrize("raw", [b"{", b"", b"\xff\xfe{}", b"[" * 100000, b'{"format": NaN}', b"null"],
                         ids=["cut", "empty", "not utf-8", "deep", "nan", "null"])
def test_unparsable_model_json_is_a_model_error(work, raw):
    (work / "model.json").write_bytes(raw)
    with pytest.raises(ModelError, match="model.json"):
        ag.Model.load(work)


def test_model_json_that_is_not_a_plain_file(work, tmp_path):
    meta = work / "model.json"
    outside = tmp_path / "elsewhere.json"
    shutil.move(meta, outside)
    meta.symlink_to(outside)
    with pytest.raises(ModelError, match="symbolic link"):
        ag.Model.load(work)
    meta.unlink()
    with pytest.raises(ModelError, match="no built model .no model.json"):
        ag.Model.load(work)
    os.mkfifo(meta)
    with pytest.raises(ModelError, match="not a regular file"):
        ag.Model.load(work)


def test_lock_file_that_is_not_a_file(work, tmp_path):
    lock = work / ".aitgen.lock"
    lock.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ModelError, match="lock"):
        ag.Model.load(work)
    assert not (tmp_path / "elsewhere").exists()
    lock.unlink()
    lock.mkdir()
    with pytest.raises(ModelError, match="lock"):
        ag.Model.load(work)


@pytest.mark.parametrize("what", ["missing", "file", "int", "none", "bytes", "empty", "nul", "too long"])
def test_workdir_that_is_not_a_directory(tmp_path, what):
    arg = {"missing": tmp_path / "nope", "file": tmp_path / "f", "int": 42, "none": None, "bytes": b"/tmp",
           "empty": "", "nul": "a\0b", "too long": "x" * 5000}[what]
    (tmp_path / "f").write_text("x")
    with pytest.raises(ModelError):
        ag.Model.load(arg)


def test_tables_of_library_and_model_json_must_agree(work):
    meta = _meta(work)
    meta["inputs"] = {"q": meta["inputs"]["x"]}
    _write_meta(work, meta)
    with pytest.raises(ModelError, match="disagree on the inputs"):
        ag.Model.load(work)


def test_constant_table_of_the_library_must_agree(work):
    """model.json and the weights agree with each other, but name a constant the library lacks
    (a name of the same length keeps the header length the library checks)."""
    meta = _meta(work)
    meta["constants"]["q"] = meta["constants"].pop("w")
    _write_meta(work, meta)
    n, header, data = _header(work)
    header["q"] = header.pop("w")
    _write_header(work, header, data, n)
    with pytest.raises(ModelError, match="disagree on the constants .first: 'q'"):
        ag.Model.load(work)


# -- the weights ------------------------------------------------------------------------------

def _header(work: Path) -> tuple[int, dict, bytes]:
    raw = (work / "weights.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return n, json.loads(raw[8:8 + n]), raw[8 + n:]


def _write_header(work: Path, header: dict, data: bytes, length: int) -> None:
    """A header of `length` bytes (padded with spaces, as safetensors does), so only its content lies."""
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= length
    (work / "weights.safetensors").write_bytes(struct.pack("<Q", length) + text.ljust(length) + data)


def _set(key, value):
    def mutate(h):
        h["w"][key] = value
    return mutate


HEADER_CASES = {
    "dtype": (_set("dtype", "F16"), "constant 'w': dtype"),
    "int dtype": (_set("dtype", "I32"), "constant 'w': dtype"),
    "shape": (_set("shape", [2, 2]), "constant 'w': shape"),
    "shape bools": (_set("shape", [True, 4]), "constant 'w': shape"),
    "offsets": (_set("data_offsets", [0, 16]), "constant 'w': data_offsets"),
    "offsets past end": (_set("data_offsets", [4096, 4112]), "constant 'w': data_offsets"),
    "entry not object": (lambda h: h.__setitem__("w", [1]), "constant 'w': not a JSON object"),
    "extra": (lambda h: h.__setitem__("z", {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}), "'z' is not"),
    "missing": (lambda h: h.pop("b"), "constant 'b' is missing"),
    "build id": (lambda h: h["__metadata__"].__setitem__("aitgen_build_id", "0" * 32), "another build"),
    "no metadata": (lambda h: h.pop("__metadata__"), "another build"),
}


@pytest.mark.parametrize("case", list(HEADER_CASES))
def test_lying_weights_header_is_a_model_error(work, case):
    mutate, match = HEADER_CASES[case]
    n, header, data = _header(work)
    mutate(header)
    _write_header(work, header, data, n + 64)
    with pytest.raises(ModelError, match=f"weights.safetensors.*{match}"):
        ag.Model.load(work)


@pytest.mark.parametrize("raw", [b"", b"\x01\x02", struct.pack("<Q", 2**63) + b"{}", struct.pack("<Q", 40) + b"{}",
                                 struct.pack("<Q", 2) + b"[]", struct.pack("<Q", 3) + b"{\xff}"],
                         ids=["empty", "short", "huge length", "length past end", "list", "not utf-8"])
def test_malformed_weights_file_is_a_model_error(work, raw):
    (work / "weights.safetensors").write_bytes(raw)
    with pytest.raises(ModelError, match="weights.safetensors"):
        ag.Model.load(work)


def test_truncated_weights_data_is_a_model_error(work):
    path = work / "weights.safetensors"
    path.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(ModelError, match="weights.safetensors: constant '.*past the end"):
        ag.Model.load(work)


def _unblock(fifo: Path) -> None:
    """Open the FIFO for writing, so a reader stuck in open() (the unfixed loader) gets EOF."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def _within(seconds: float, fn, fifo: Path):
    """fn() in a thread; fails (and frees the thread) if it hangs on the FIFO."""
    result: dict = {}

    def body():
        try:
            result["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            result["error"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        _unblock(fifo)
        t.join(5)
        pytest.fail("loading hung on a FIFO")
    return result


def test_weights_fifo_is_refused_not_waited_on(work):
    fifo = work / "weights.safetensors"
    fifo.unlink()
    os.mkfifo(fifo)
    result = _within(20, lambda: ag.Model.load(work), fifo)
    assert isinstance(result.get("error"), ModelError) and "not a regular file" in str(result["error"])


def test_weights_symlink_is_refused(work, tmp_path):
    path = work / "weights.safetensors"
    shutil.move(path, tmp_path / "real.safetensors")
    path.symlink_to(tmp_path / "real.safetensors")
    with pytest.raises(ModelError, match="weights.safetensors.*symbolic link"):
        ag.Model.load(work)


def _c_create(work: Path) -> tuple[int, str]:
    """ait_model_create called directly, as a C/C++ user would: (status, message)."""
    lib = ctypes.CDLL(str(_library(work)))
    lib.ait_model_create.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
    lib.ait_model_destroy.argtypes = [ctypes.c_void_p]
    lib.ait_last_error.restype = ctypes.c_char_p
    handle = ctypes.c_void_p()
    status = lib.ait_model_create(os.fsencode(work), 1, ctypes.byref(handle))
    if handle.value:
        lib.ait_model_destroy(handle)
    return status, lib.ait_last_error().decode()


def test_c_container_refuses_a_fifo_and_short_weights(work):
    path = work / "weights.safetensors"
    good = path.read_bytes()
    path.write_bytes(good[:-4])
    assert _c_create(work) == (2, f"{path} is truncated: {len(good) - 4} bytes, the constants need {len(good)}")
    path.unlink()
    os.mkfifo(path)
    result = _within(20, lambda: _c_create(work), path)
    assert result.get("value") == (2, f"{path} is not a regular file"), result
    path.unlink()
    path.write_bytes(good)
    assert _c_create(work)[0] == 0


# -- num_runtimes -----------------------------------------------------------------------------

@pytest.mark.parametrize("bad,error", [(2**32 + 1, RuntimeInputError), (0, RuntimeInputError),
                                       (-1, RuntimeInputError), (1025, RuntimeInputError),
                                       (True, RuntimeInputTypeError), (1.0, RuntimeInputTypeError),
                                       ("2", RuntimeInputTypeError), (None, RuntimeInputTypeError)])
def test_num_runtimes_is_range_checked(work, bad, error):
    with pytest.raises(error, match="num_runtimes"):
        ag.Model.load(work, num_runtimes=bad)


def test_num_runtimes_takes_numpy_ints(work):
    with ag.Model.load(work, num_runtimes=np.int64(3)) as m:
        _oracle_check(m)
