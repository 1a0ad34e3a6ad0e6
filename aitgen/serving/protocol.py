"""KServe v2 inference protocol, JSON form: the one request/response format of both engines.

    POST /v2/models/NAME/infer
    {"id": "7", "inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 3], "data": [1, 2, 3, 4, 5, 6]}],
     "outputs": [{"name": "y"}]}                       # "outputs" optional: a subset, by name
    -> 200 {"model_name": "NAME", "model_version": "1", "id": "7",
            "outputs": [{"name": "y", "datatype": "FP32", "shape": [2, 4], "data": [...]}]}
    -> 400 {"error": "input 'x': dim 0 ('batch') is 40, outside its bounds [1, 16]"}

`data` is row-major, flat (the v2 spelling) or nested to the declared shape. Triton speaks exactly
this (and also the binary-tensor extension and gRPC); the Ray engine answers it through
`handle_request` below, so a client written for one talks to the other.

Everything here is plain numpy and json: the decoding and the checks run (and are tested) without
any engine installed, and reject a bad request before it can reach a batch.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any, Optional

import numpy as np

from ..errors import RuntimeInputError
from ..ir.dtype import DType
from .errors import BadRequestError, ServingError

# v2 datatype names (Triton's BF16 included) for the dtypes a built model can take.
DATATYPES = {DType.float32: "FP32", DType.float16: "FP16", DType.bfloat16: "BF16", DType.int8: "INT8",
             DType.int32: "INT32", DType.int64: "INT64", DType.bool: "BOOL", DType.float64: "FP64",
             DType.int16: "INT16", DType.uint8: "UINT8", DType.uint16: "UINT16", DType.uint32: "UINT32",
             DType.uint64: "UINT64"}
# numpy kinds a JSON array of each family may arrive as: integers are never silently truncated from
# floats, booleans are never read as numbers.
_KINDS = {"f": "iuf", "i": "iu", "b": "b"}
# A JSON body larger than this is refused before parsing: json.loads of a few hundred MB would take
# the replica's memory and seconds of CPU for one request.
MAX_BODY_BYTES = 64 << 20
MAX_RANK = 8


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: DType
    min_shape: tuple[int, ...]
    max_shape: tuple[int, ...]
    dims: tuple[str, ...]   # each dim as text: an IntVar's name, or the static size

    @property
    def datatype(self) -> str:
        return DATATYPES[self.dtype]

    @property
    def v2_shape(self) -> list[int]:
        """The shape as v2 metadata states it: -1 for a dim bound per call."""
        return [hi if lo == hi else -1 for lo, hi in zip(self.min_shape, self.max_shape)]


@dataclasses.dataclass(frozen=True)
class ModelSignature:
    """What a server needs to know of a built model, read from its model.json (already checked by
    the loader), so protocol and batching code runs without a library loaded."""
    name: str
    target: str
    inputs: dict[str, TensorInfo]
    outputs: dict[str, TensorInfo]

    @classmethod
    def from_meta(cls, meta: dict, name: Optional[str] = None) -> "ModelSignature":
        def infos(section: dict) -> dict[str, TensorInfo]:
            for n, t in section.items():
                if DType(t["dtype"]) not in DATATYPES:  # float8: KServe v2 names no such datatype
                    raise ServingError(f"tensor '{n}' is {t['dtype']}, which has no KServe v2 datatype; "
                                       "cast it inside the model to serve it")
            return {n: TensorInfo(n, DType(t["dtype"]), tuple(t["min_shape"]), tuple(t["max_shape"]),
                                  tuple(str(d) for d in t.get("shape", t["max_shape"])))
                    for n, t in section.items()}
        return cls(serving_name(meta["name"] if name is None else name, given=name is not None), meta["target"],
                   infos(meta["inputs"]), infos(meta["outputs"]))

    def metadata(self) -> dict:
        """The v2 model metadata answer (GET /v2/models/NAME)."""
        def row(t: TensorInfo) -> dict:
            return {"name": t.name, "datatype": t.datatype, "shape": t.v2_shape}
        return {"name": self.name, "versions": ["1"], "platform": f"aitgen_{self.target}",
                "inputs": [row(t) for t in self.inputs.values()], "outputs": [row(t) for t in self.outputs.values()]}


# A served model's name becomes a URL segment (/v2/models/NAME) and, under Triton, a folder of its
# model repository: a name from model.json is the model file's, hostile until checked ("../x" would
# write outside the repository). Triton's own rule for repository names, and no leading dot.
_SERVING_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def serving_name(name: object, given: bool = False) -> str:
    """`name` if it can be a URL segment and a folder name, else a ServingError saying what to do."""
    if isinstance(name, str) and _SERVING_NAME.fullmatch(name):
        return name
    fix = "pick another --name" if given else "serve it under a name of your own with --name NAME"
    raise ServingError(f"model name {name!r} cannot be served: a name is 1-64 of A-Z a-z 0-9 _ . - and does not "
                       f"start with '.' or '-'; {fix}")


@dataclasses.dataclass
class InferRequest:
    feeds: dict[str, np.ndarray]            # checked against the signature: names, dtypes, ranks, bounds
    request_id: Optional[str] = None
    outputs: Optional[tuple[str, ...]] = None   # None: every output


def parse_request(body: bytes, sig: ModelSignature) -> InferRequest:
    """A v2 JSON inference request -> checked numpy feeds; BadRequestError (a RuntimeInputError)
    naming what is wrong otherwise."""
    if len(body) > MAX_BODY_BYTES:
        raise BadRequestError(f"request body of {len(body)} bytes exceeds the limit of {MAX_BODY_BYTES}")
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequestError(f"malformed JSON: {e}") from None
    except RecursionError:
        raise BadRequestError("malformed JSON: nested too deeply") from None
    if not isinstance(doc, dict):
        raise BadRequestError(f"the request must be a JSON object, got {type(doc).__name__}")
    entries = doc.get("inputs")
    if not isinstance(entries, list):
        raise BadRequestError("the request needs \"inputs\": a list of {name, datatype, shape, data}")
    rid = doc.get("id")
    if rid is not None and not isinstance(rid, str):
        raise BadRequestError("\"id\" must be a string")
    feeds: dict[str, np.ndarray] = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise BadRequestError("each input must be an object with a string \"name\"")
        name = entry["name"]
        info = sig.inputs.get(name)
        if info is None:
            raise BadRequestError(f"unknown input '{name}'; the inputs are {list(sig.inputs)}")
        if name in feeds:
            raise BadRequestError(f"input '{name}' given twice")
        feeds[name] = decode_tensor(entry, info)
    missing = [n for n in sig.inputs if n not in feeds]
    if missing:
        raise BadRequestError(f"missing input '{missing[0]}'")
    check_dims_agree(sig, feeds)
    return InferRequest(feeds, rid, _requested_outputs(doc.get("outputs"), sig))


def check_dims_agree(sig: ModelSignature, feeds: dict[str, np.ndarray]) -> None:
    """A dim named in several inputs (`batch` in x and in bias) has one value per call. The model
    checks it too, but only here does it keep a request out of a batch that it would spoil."""
    seen: dict[str, tuple[str, int]] = {}
    for name, info in sig.inputs.items():
        for axis, (dim, lo, hi) in enumerate(zip(info.dims, info.min_shape, info.max_shape)):
            if lo == hi or not dim.isidentifier():   # a static dim, or an expression such as 2*seq
                continue
            n = int(feeds[name].shape[axis])
            first = seen.setdefault(dim, (name, n))
            if first[1] != n:
                raise BadRequestError(f"input '{name}': dim {axis} ({dim!r}) is {n}, but input '{first[0]}' gives "
                                      f"{dim!r} = {first[1]}")


def _requested_outputs(spec: Any, sig: ModelSignature) -> Optional[tuple[str, ...]]:
    if spec is None:
        return None
    if not isinstance(spec, list) or not all(isinstance(o, dict) and isinstance(o.get("name"), str) for o in spec):
        raise BadRequestError("\"outputs\" must be a list of objects with a string \"name\"")
    names = tuple(o["name"] for o in spec)
    for n in names:
        if n not in sig.outputs:
            raise BadRequestError(f"unknown output '{n}'; the outputs are {list(sig.outputs)}")
    return names


def decode_tensor(entry: dict, info: TensorInfo) -> np.ndarray:
    """One v2 input tensor -> an array of the model's dtype, its shape checked against the bounds."""
    name = info.name
    if entry.get("datatype") != info.datatype:
        raise BadRequestError(f"input '{name}': datatype {entry.get('datatype')!r}, expected {info.datatype!r}")
    params = entry.get("parameters")
    if isinstance(params, dict) and "binary_data_size" in params:
        raise BadRequestError(f"input '{name}': binary tensor data is not accepted here; send JSON \"data\"")
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                               for d in shape) or len(shape) > MAX_RANK:
        raise BadRequestError(f"input '{name}': \"shape\" must be a list of at most {MAX_RANK} non-negative ints")
    check_shape(info, tuple(shape))
    data = entry.get("data")
    if not isinstance(data, list):
        raise BadRequestError(f"input '{name}': \"data\" must be a JSON array (flat row-major, or nested)")
    try:
        arr = np.array(data)
    except (ValueError, OverflowError):   # ragged nesting, a mix numpy refuses
        raise BadRequestError(f"input '{name}': \"data\" is ragged or mixes types") from None
    count = math.prod(shape)
    if arr.ndim > 1 and arr.shape != tuple(shape):
        raise BadRequestError(f"input '{name}': nested \"data\" of shape {list(arr.shape)}, declared {shape}")
    if arr.size != count:
        raise BadRequestError(f"input '{name}': \"data\" holds {arr.size} values, shape {shape} needs {count}")
    if count == 0:
        return np.zeros(shape, info.dtype.np)
    kinds = _KINDS["b" if info.dtype is DType.bool else "f" if info.dtype.is_float else "i"]
    if arr.dtype.kind not in kinds:
        what = {"b": "booleans", "i": "integers", "u": "integers", "f": "numbers"}.get(arr.dtype.kind,
                                                                                    "values of mixed or other types")
        raise BadRequestError(f"input '{name}': \"data\" holds {what}, not fit for {info.datatype}")
    if info.dtype.is_int:
        lim = np.iinfo(info.dtype.np)
        if arr.min() < lim.min or arr.max() > lim.max:
            raise BadRequestError(f"input '{name}': a value outside the range of {info.datatype}")
    with np.errstate(over="ignore"):   # a float64 beyond float16's range becomes inf, as a cast in numpy would
        return arr.astype(info.dtype.np).reshape(shape)


def check_shape(info: TensorInfo, shape: tuple[int, ...]) -> None:
    """Rank and per-dim bounds, worded as Model.run words them."""
    if len(shape) != len(info.max_shape):
        raise BadRequestError(f"input '{info.name}': rank {len(shape)} (shape {list(shape)}), expected rank "
                              f"{len(info.max_shape)}")
    for axis, (n, lo, hi) in enumerate(zip(shape, info.min_shape, info.max_shape)):
        if not lo <= n <= hi:
            if lo == hi:
                raise BadRequestError(f"input '{info.name}': dim {axis} is {n}, expected {hi}")
            raise BadRequestError(f"input '{info.name}': dim {axis} ({info.dims[axis]!r}) is {n}, outside its "
                                  f"bounds [{lo}, {hi}]")


def encode_tensor(name: str, arr: np.ndarray, dtype: DType) -> dict:
    flat = arr.astype(np.float32) if dtype is DType.bfloat16 else arr   # tolist of ml_dtypes gives objects
    return {"name": name, "datatype": DATATYPES[dtype], "shape": list(arr.shape), "data": flat.ravel().tolist()}


def encode_response(sig: ModelSignature, outputs: dict[str, np.ndarray], req: InferRequest) -> bytes:
    names = req.outputs if req.outputs is not None else tuple(sig.outputs)
    doc: dict[str, Any] = {"model_name": sig.name, "model_version": "1"}
    if req.request_id is not None:
        doc["id"] = req.request_id
    doc["outputs"] = [encode_tensor(n, np.asarray(outputs[n]), sig.outputs[n].dtype) for n in names]
    # NaN and Infinity go out as JSON's common extension tokens (Python's and Triton's json agree).
    return json.dumps(doc, separators=(",", ":")).encode()


def error_body(message: str) -> bytes:
    return json.dumps({"error": message}).encode()


def status_of(exc: BaseException) -> int:
    """HTTP status for an error: the caller's fault (bad input) is 400, anything else 500."""
    return 400 if isinstance(exc, RuntimeInputError) else 500
