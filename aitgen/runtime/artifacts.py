"""What Model.load checks in a workdir before the library in it runs or reads anything.

Trust: loading a library runs its code, so whoever can write a workdir can run code as the user
who loads it; no check here changes that. What the checks give: a workdir cannot point the loader
at a file outside it (the library is a plain file name of one form, a regular file in the
workdir), and a malformed, truncated or mismatched artefact is a ModelError naming the file and
the fault, raised before the library (which trusts its weights file) is opened or reads it.
`library_sha256` is an integrity check (a .so cut short kills the process with SIGBUS inside
dlopen), not an authenticity check: whoever writes the library can write its hash too.

model.json (format 2, written by aitgen.compiler) and weights.safetensors are described in
README.md ("Security model").
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import math
import os
import re
import stat
import struct
from pathlib import Path
from typing import Any, Iterator

from ..errors import ModelError
from ..ir.dtype import DType

FORMAT = 2
TARGETS = ("cpu", "cuda", "rocm")
# Targets whose model memory is a GPU's (device_archs required; CUDA/HIP graphs; several streams).
GPU_TARGETS = ("cuda", "rocm")
MODEL_JSON = "model.json"
WEIGHTS = "weights.safetensors"
_LIBRARY = re.compile(r"model_[0-9a-f]{16}\.so")
_MOCK_LIBRARY = re.compile(r"mock_[0-9a-f]{16}\.so")
# The mock GPU runtime of a build's mock variant, per target (codegen/mock_build.py RUNTIMES).
MOCK_RUNTIMES = {"cuda": "libaitgen_mock_cudart.so", "rocm": "libaitgen_mock_hiprt.so"}
_SHA256 = re.compile(r"[0-9a-f]{64}")
_BUILD_ID = re.compile(r"[0-9a-f]{32}")
# Far above any real model's; a bound keeps a hostile file from costing gigabytes of memory.
MAX_JSON_BYTES = 256 << 20
MAX_HEADER_BYTES = 100 << 20  # the limit of the safetensors library itself
SAFETENSORS_DTYPE = {DType.float32: "F32", DType.float16: "F16", DType.bfloat16: "BF16", DType.int8: "I8",
                     DType.int32: "I32", DType.int64: "I64", DType.bool: "BOOL", DType.float64: "F64",
                     DType.int16: "I16", DType.uint8: "U8", DType.uint16: "U16", DType.uint32: "U32",
                     DType.uint64: "U64", DType.float8_e4m3fn: "F8_E4M3", DType.float8_e5m2: "F8_E5M2",
                     # safetensors has no names for the fnuz forms; ours are read only by us
                     DType.float8_e4m3fnuz: "F8_E4M3FNUZ", DType.float8_e5m2fnuz: "F8_E5M2FNUZ",
                     # one element per byte (unpacked): safetensors has no such types, so their
                     # bytes (compiler.write_weights)
                     DType.int4: "U8", DType.uint4: "U8", DType.int2: "U8", DType.uint2: "U8",
                     DType.float4_e2m1fn: "U8",
                     DType.float8_e8m0fnu: "F8_E8M0"}


@dataclasses.dataclass(frozen=True)
class ConstantMeta:
    name: str
    dtype: DType
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@dataclasses.dataclass(frozen=True)
class TensorMeta:
    name: str
    dtype: DType
    min_shape: tuple[int, ...]
    max_shape: tuple[int, ...]
    dims: tuple[str, ...] = ()  # each dim as text (an IntVar's name, "2*seq"), for messages only


@dataclasses.dataclass(frozen=True)
class Artifacts:
    workdir: Path   # absolute
    meta: dict      # model.json, checked
    library: Path   # absolute, inside workdir, hash checked
    inputs: dict[str, TensorMeta]
    outputs: dict[str, TensorMeta]
    constants: dict[str, ConstantMeta]
    # compute capability ("9.0") -> the arch whose code runs there, as the build's backend.yaml said:
    # the loader checks the GPU against it without asking the compiler.
    device_archs: dict[str, str] = dataclasses.field(default_factory=dict)
    # kernel function -> the ops it runs (model.json's kernel_ops): names for kernel_report's warnings.
    kernel_ops: dict[str, list[str]] = dataclasses.field(default_factory=dict)


def resolve_workdir(workdir: Any) -> Path:
    """The workdir as an absolute path (dlopen searches the system path for a relative name)."""
    text = os.fspath(workdir) if isinstance(workdir, (str, os.PathLike)) else None
    if not isinstance(text, str):
        raise ModelError(f"a workdir is a str path, got {type(workdir).__name__}")
    if not text or "\0" in text:
        raise ModelError(f"workdir {text[:200]!r}: " + ("empty" if not text else "contains a NUL character"))
    path = Path(os.path.abspath(text))
    try:
        if not path.is_dir():
            raise ModelError(f"{path} " + ("is not a directory (a workdir holds a built model)" if path.exists()
                                           else "does not exist (no built model there)"))
        if not os.path.lexists(path / MODEL_JSON):
            raise ModelError(f"{path} holds no built model (no {MODEL_JSON})")
    except OSError as e:   # a name too long, a permission denied on the way
        raise ModelError(f"cannot use {str(path)[:200]} as a workdir: {e.strerror}") from None
    return path


def read_artifacts(workdir: Path) -> Artifacts:
    """model.json, the library's hash and the weights header, all checked against each other."""
    meta = _read_json(workdir / MODEL_JSON, "the model description")
    where = str(workdir / MODEL_JSON)
    if not isinstance(meta, dict):
        raise ModelError(f"{where}: expected a JSON object, got {type(meta).__name__}")
    fmt = meta.get("format")
    if type(fmt) is not int or fmt != FORMAT:
        raise ModelError(f"{where}: format {fmt!r}, this aitgen reads format {FORMAT}: built by another aitgen "
                         "version; rebuild")
    if meta.get("target") not in TARGETS:
        raise ModelError(f"{where}: 'target' is {str(meta.get('target'))[:40]!r}; this aitgen loads {list(TARGETS)}")
    for key, kind in (("name", str), ("library", str), ("library_sha256", str), ("build_id", str),
                      ("inputs", dict), ("outputs", dict), ("constants", dict)):
        _get(meta, key, kind, where)
    if not isinstance(meta.get("cuda_graph", False), bool):
        raise ModelError(f"{where}: 'cuda_graph' must be true or false")
    if not isinstance(meta.get("arch"), (str, type(None))):
        raise ModelError(f"{where}: 'arch' must be a string or null")
    if not _BUILD_ID.fullmatch(meta["build_id"]):
        raise ModelError(f"{where}: 'build_id' must be 32 lowercase hex digits")
    inputs = {n: _tensor(n, v, f"{where}: input '{n}'") for n, v in _items(meta["inputs"], where, "inputs")}
    outputs = {n: _tensor(n, v, f"{where}: output '{n}'") for n, v in _items(meta["outputs"], where, "outputs")}
    constants = {n: _constant(n, v, f"{where}: constant '{n}'") for n, v in _items(meta["constants"], where,
                                                                                      "constants")}
    archs = meta.get("device_archs", {})
    if not (isinstance(archs, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in archs.items())):
        raise ModelError(f"{where}: 'device_archs' must map compute capabilities (ROCm: gfx ISAs) to arch names "
                         "(strings)")
    if meta["target"] in GPU_TARGETS and not archs:
        raise ModelError(f"{where}: a {meta['target']} build lists no 'device_archs' (built by an older aitgen); "
                         "rebuild")
    kernel_ops = meta.get("kernel_ops", {})
    if not (isinstance(kernel_ops, dict)
            and all(isinstance(v, list) and all(isinstance(o, str) for o in v) for v in kernel_ops.values())):
        raise ModelError(f"{where}: 'kernel_ops' must map kernel names to lists of op names (strings)")
    library = _check_library(workdir, meta["library"], meta["library_sha256"], where)
    _check_weights(workdir / WEIGHTS, meta["build_id"], constants)
    return Artifacts(workdir, meta, library, inputs, outputs, constants, dict(archs), kernel_ops)


def check_library_tables(art: Artifacts, inputs: dict, outputs: dict, constants: dict) -> None:
    """The library's own tables (name -> (DType, max_shape) for inputs/outputs, name -> (DType,
    nbytes) for constants) agree with model.json: the two were written by one build."""
    lib = art.library.name
    for what, mine, theirs in (("inputs", art.inputs, inputs), ("outputs", art.outputs, outputs)):
        want = [(n, t.dtype, t.max_shape) for n, t in mine.items()]
        if want != [(n, *v) for n, v in theirs.items()]:
            raise ModelError(f"{lib} and model.json disagree on the {what} (names, dtypes or largest shapes); "
                             "the workdir mixes two builds: rebuild")
    want_c = {n: (c.dtype, c.nbytes) for n, c in art.constants.items()}
    if want_c != constants:
        diff = sorted(set(want_c).symmetric_difference(constants)) or \
            sorted(n for n in want_c if want_c[n] != constants[n])
        raise ModelError(f"{lib} and model.json disagree on the constants (first: '{diff[0]}'); the workdir mixes "
                         "two builds: rebuild")


# -- files --------------------------------------------------------------------------------------

@contextlib.contextmanager
def _open_regular(path: Path, what: str) -> Iterator[tuple[Any, int]]:
    """(binary file, size) of a regular file that is not a symbolic link; ModelError otherwise.
    O_NONBLOCK: opening a FIFO must not wait for a writer before it is refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ModelError(f"{path} is missing ({what})") from None
    except OSError as e:
        why = "a symbolic link; the loader reads only files in the workdir" if e.errno == errno.ELOOP else e.strerror
        raise ModelError(f"cannot open {path} ({what}): {why}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ModelError(f"{path} ({what}) is not a regular file")
    with os.fdopen(fd, "rb", buffering=0) as f:
        yield f, st.st_size


def _read_exact(f, n: int, path: Path) -> bytes:
    chunks, left = [], n
    while left > 0:
        try:
            chunk = f.read(min(left, 1 << 24))
        except OSError as e:
            raise ModelError(f"cannot read {path}: {e.strerror}") from None
        if not chunk:
            raise ModelError(f"{path} is truncated")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _parse_json(raw: bytes, where: str) -> Any:
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise ModelError(f"{where}: not UTF-8 text") from None
    except (ValueError, RecursionError) as e:
        raise ModelError(f"{where}: invalid JSON ({str(e)[:120]})") from None


def _no_constant(token: str):
    raise ValueError(f"{token} is not a number JSON allows")


def _read_json(path: Path, what: str) -> Any:
    with _open_regular(path, what) as (f, size):
        if size > MAX_JSON_BYTES:
            raise ModelError(f"{path}: {size} bytes, more than the {MAX_JSON_BYTES} a model.json may hold")
        raw = _read_exact(f, size, path)
    return _parse_json(raw, str(path))


def _check_library(workdir: Path, name: str, sha256: str, where: str) -> Path:
    if not _LIBRARY.fullmatch(name):
        raise ModelError(f"{where}: 'library' must be a file name of the form model_<16 hex digits>.so in the "
                         f"workdir, got {name[:80]!r}")
    if not _SHA256.fullmatch(sha256):
        raise ModelError(f"{where}: 'library_sha256' must be 64 lowercase hex digits")
    return _check_file(workdir, name, sha256, "the model library", "library_sha256")


def _check_file(workdir: Path, name: str, sha256: str, what: str, key: str) -> Path:
    """workdir/name, a regular file whose content hashes to sha256 (a name already checked)."""
    if not _SHA256.fullmatch(sha256):
        raise ModelError(f"{workdir / MODEL_JSON}: the hash of {what} must be 64 lowercase hex digits")
    path = workdir / name
    h = hashlib.sha256()
    with _open_regular(path, what) as (f, size):
        done = 0
        while done < size:
            chunk = _read_exact(f, min(size - done, 1 << 22), path)
            h.update(chunk)
            done += len(chunk)
    if h.hexdigest() != sha256:
        raise ModelError(f"{path} does not match model.json's {key} (truncated, damaged or replaced); rebuild")
    return path


def mock_files(art: Artifacts) -> tuple[Path, Path, list]:
    """(mock runtime, mock model library, node table) of a CUDA build's mock-device variant, each
    file checked against its hash in model.json as the library is."""
    where = str(art.workdir / MODEL_JSON)
    mock = art.meta.get("mock")
    if not isinstance(mock, dict):
        raise ModelError(f"{where}: this build has no mock-device variant (a {art.meta['target']} build, or one "
                         "made by an older aitgen); rebuild it for target='cuda'")
    for key in ("library", "library_sha256", "runtime", "runtime_sha256"):
        _get(mock, key, str, where)
    if not _MOCK_LIBRARY.fullmatch(mock["library"]) or mock["runtime"] != MOCK_RUNTIMES.get(art.meta["target"]):
        raise ModelError(f"{where}: 'mock' names files of unexpected form ({mock['library'][:80]!r}, "
                         f"{mock['runtime'][:80]!r})")
    nodes = mock.get("nodes")
    if not (isinstance(nodes, list) and all(isinstance(r, list) and all(
            isinstance(o, list) and len(o) == 3 and all(type(x) is int for x in o) for o in r) for r in nodes)):
        raise ModelError(f"{where}: 'mock.nodes' must be a list of lists of [extent, align, write] integers")
    runtime = _check_file(art.workdir, mock["runtime"], mock["runtime_sha256"], "the mock CUDA runtime",
                          "mock.runtime_sha256")
    library = _check_file(art.workdir, mock["library"], mock["library_sha256"], "the mock-device library",
                          "mock.library_sha256")
    return runtime, library, nodes


def _check_weights(path: Path, build_id: str, constants: dict[str, ConstantMeta]) -> None:
    with _open_regular(path, "the weights") as (f, size):
        if size < 8:
            raise ModelError(f"{path}: {size} bytes, too short for a safetensors header")
        (n,) = struct.unpack("<Q", _read_exact(f, 8, path))
        if n > MAX_HEADER_BYTES or 8 + n > size:
            raise ModelError(f"{path}: header length {n} does not fit the file ({size} bytes)")
        header = _parse_json(_read_exact(f, n, path), f"{path} header")
    if not isinstance(header, dict):
        raise ModelError(f"{path}: the header is not a JSON object")
    data_bytes = size - 8 - n
    info = header.pop("__metadata__", None)
    theirs = info.get("aitgen_build_id") if isinstance(info, dict) else None
    if theirs != build_id:
        raise ModelError(f"{path} belongs to another build (its aitgen_build_id is {str(theirs)[:40]!r}, "
                         f"model.json's build_id is {build_id!r}); rebuild")
    extra = sorted(set(header) - set(constants))
    missing = sorted(set(constants) - set(header))
    if extra or missing:
        which = f"'{extra[0]}' is not a constant of this build" if extra else f"constant '{missing[0]}' is missing"
        raise ModelError(f"{path}: {which}")
    for name, c in constants.items():
        e = header[name]
        where = f"{path}: constant '{name}'"
        if not isinstance(e, dict):
            raise ModelError(f"{where}: not a JSON object")
        if e.get("dtype") != SAFETENSORS_DTYPE[c.dtype]:
            raise ModelError(f"{where}: dtype {str(e.get('dtype'))[:20]!r}, model.json says {c.dtype} "
                             f"({SAFETENSORS_DTYPE[c.dtype]})")
        if not _int_list(e.get("shape")) or tuple(e["shape"]) != c.shape:
            raise ModelError(f"{where}: shape {str(e.get('shape'))[:60]}, model.json says {list(c.shape)}")
        offsets = e.get("data_offsets")
        if not _int_list(offsets) or offsets != [c.offset, c.offset + c.nbytes]:
            raise ModelError(f"{where}: data_offsets {str(offsets)[:60]}, model.json says "
                             f"{[c.offset, c.offset + c.nbytes]}")
        if c.offset + c.nbytes > data_bytes:
            raise ModelError(f"{where}: bytes [{c.offset}, {c.offset + c.nbytes}) lie past the end of the data "
                             f"({data_bytes} bytes): the file is truncated")


# -- model.json fields --------------------------------------------------------------------------

def _get(obj: dict, key: str, kind: type, where: str) -> Any:
    if key not in obj:
        raise ModelError(f"{where}: missing key '{key}'")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ModelError(f"{where}: '{key}' must be {_KIND_NAMES[kind]}, got {type(value).__name__}")
    return value


_KIND_NAMES = {str: "a string", dict: "an object", list: "a list", int: "an integer"}


def _items(obj: dict, where: str, what: str):
    for name, value in obj.items():
        if not isinstance(value, dict):
            raise ModelError(f"{where}: {what} '{name}' must be an object, got {type(value).__name__}")
        yield name, value


def _int_list(v: Any, lo: int = 0) -> bool:
    return isinstance(v, list) and all(type(x) is int and x >= lo for x in v)


def _dtype(v: dict, where: str) -> DType:
    name = _get(v, "dtype", str, where)
    if name not in DType.__members__:
        raise ModelError(f"{where}: unknown dtype {name[:20]!r}")
    return DType[name]


def _tensor(name: str, v: dict, where: str) -> TensorMeta:
    dtype = _dtype(v, where)
    top = _get(v, "max_shape", list, where)
    if not _int_list(top) or len(top) > 8:
        raise ModelError(f"{where}: 'max_shape' must be at most 8 non-negative integers")
    # Optional: the library's own input check knows the lower bounds; with them here a call is
    # refused before its inputs are copied, like one above max_shape.
    low = v.get("min_shape", [0] * len(top))
    if not _int_list(low) or len(low) != len(top) or any(a > b for a, b in zip(low, top)):
        raise ModelError(f"{where}: 'min_shape' must be {len(top)} integers, each at most its max_shape")
    dims = v.get("shape", [])
    if not (isinstance(dims, list) and len(dims) == len(top) and all(isinstance(d, str) for d in dims)):
        dims = [""] * len(top)  # only messages use them: a bad entry costs the names, not the load
    return TensorMeta(name, dtype, tuple(low), tuple(top), tuple(dims))


def _constant(name: str, v: dict, where: str) -> ConstantMeta:
    dtype = _dtype(v, where)
    shape = _get(v, "shape", list, where)
    if not _int_list(shape):
        raise ModelError(f"{where}: 'shape' must be a list of non-negative integers")
    offset, nbytes = _get(v, "offset", int, where), _get(v, "nbytes", int, where)
    if offset < 0 or nbytes != math.prod(shape) * dtype.itemsize:
        raise ModelError(f"{where}: offset {offset} and nbytes {nbytes} do not fit shape {shape} of {dtype}")
    return ConstantMeta(name, dtype, tuple(shape), offset, nbytes)
