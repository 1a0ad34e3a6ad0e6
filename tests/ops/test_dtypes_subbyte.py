"""Sub-byte storage (int4, uint4, int2, uint2, float4_e2m1fn; one element per byte, ml_dtypes'
layout): casts in the CPU build and in the oracle against ml_dtypes' astype (onnx's reference for
Cast), bit for bit; and bitcast between same-width types. float8 e8m0: ONNX Cast's round_mode and
saturate against onnx.numpy_helper.to_float8e8m0, decoding of all 256 patterns against ml_dtypes.

Patterns: every value of each type and the float32 numbers around them (midpoints: ties to even
for float4; integer + 0.5 and the range edges for the integers), NaN, infinities, signed zeros,
huge values, and int32 values past each range (integer casts wrap). Exact comparison of the stored
bytes, so a sign-extended or unmasked int4 byte would fail.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import aitgen as ag
from aitgen import ops
from aitgen.errors import DTypeError

SUB = ["int4", "uint4", "int2", "uint2", "float4_e2m1fn"]


def _floats() -> np.ndarray:
    v = np.arange(-10, 17, dtype=np.float32)
    # e8m0: powers of two, the mantissa bits nearest's rule reads, subnormals, the top exponent
    p2 = np.ldexp(np.float32(1), np.arange(-149, 128)).astype(np.float32)
    e8 = [p2, p2 * np.float32(1.5), p2 * np.float32(1.25), p2 * np.float32(1.75), np.nextafter(p2, np.float32(0))]
    fp4 = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    fp4 = np.unique(fp4)
    mid = (fp4[:-1] + fp4[1:]) / 2
    vals = [v, v + np.float32(0.5), v - np.float32(0.5), v * np.float32(0.99), fp4, mid,
            np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf)),
            np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1e30, -1e30, 1e-30, 6.5, -7.0, 3.4e38], np.float32)]
    vals += e8
    return np.concatenate(vals).astype(np.float32)


def _ints() -> np.ndarray:
    return np.array([-300, -17, -16, -9, -8, -3, -2, -1, 0, 1, 2, 3, 4, 7, 8, 15, 16, 17, 255, 256, 1 << 30],
                    np.int32)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    x = ag.Tensor([len(_floats())], dtype="float32", name="x")
    h = ag.Tensor([len(_floats())], dtype="float16", name="h")
    i = ag.Tensor([len(_ints())], dtype="int32", name="i")
    outs = {}
    for name in SUB:
        outs[f"f32_{name}"] = ops.cast(x, name)
        outs[f"f16_{name}"] = ops.cast(h, name)
        outs[f"i32_{name}"] = ops.cast(i, name)
        p = ag.Tensor([16], dtype=name, name=f"p_{name}")
        outs[f"{name}_f32"] = ops.cast(p, "float32")
        outs[f"{name}_i32"] = ops.cast(p, "int32") if name != "float4_e2m1fn" else ops.cast(p, "float16")
        outs[f"{name}_add"] = ops.cast(ops.add(ops.cast(p, "float32"), 1.0), name)  # computes, then rounds
    for mode in ("up", "down", "nearest"):
        for sat in (True, False):
            outs[f"e8m0_{mode}_{int(sat)}"] = ops.cast(x, "float8_e8m0fnu", saturate=sat, round_mode=mode)
    outs["e8m0_back"] = ops.cast(ag.Tensor([256], dtype="float8_e8m0fnu", name="e8"), "float32")
    b = ag.Tensor([6], dtype="float32", name="b")
    outs["bits"] = ops.bitcast(b, "int32")
    outs["bits_back"] = ops.bitcast(outs["bits"], "float32")
    outs["u8"] = ops.bitcast(ag.Tensor([4], dtype="int8", name="s8"), "uint8")
    outs["scalar_bits"] = ops.bitcast(ag.Tensor([], dtype="float64", name="d0"), "int64")  # 0-d stays 0-d
    model = ag.compile_model(outs, target="cpu", workdir=str(tmp_path_factory.mktemp("subbyte")))
    feeds = {"x": _floats(), "h": _floats().astype(np.float16), "i": _ints(),
             "b": np.array([1.0, -2.5, np.inf, np.nan, -0.0, 1e-40], np.float32),
             "s8": np.array([-1, -128, 127, 0], np.int8),
             "e8": np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu), "d0": np.array(-2.5)}
    for name in SUB:  # every byte pattern the type has (one element per byte, high bits zero)
        feeds[f"p_{name}"] = np.arange(16, dtype=np.uint8).astype(np.uint8).view(getattr(ml_dtypes, name)) \
            if name in ("int4", "uint4", "float4_e2m1fn") else \
            np.tile(np.arange(4, dtype=np.uint8), 4).view(getattr(ml_dtypes, name))
    yield model, feeds, outs
    model.close()


def _want(key: str, feeds: dict) -> np.ndarray:
    """ml_dtypes' astype: what onnx's reference Cast computes."""
    src, _, dst = key.partition("_")
    if key == "e8m0_back":
        return feeds["e8"].astype(np.float32)
    if src == "e8m0":
        from onnx import numpy_helper
        mode, sat = dst.split("_")
        return numpy_helper.to_float8e8m0(feeds["x"], bool(int(sat)), mode)
    if key == "bits":
        return feeds["b"].view(np.int32)
    if key == "bits_back":
        return feeds["b"]
    if key == "scalar_bits":
        return feeds["d0"].reshape(()).view(np.int64)
    if key == "u8":
        return feeds["s8"].view(np.uint8)
    if src in ("f32", "f16", "i32"):
        x = {"f32": feeds["x"], "f16": feeds["h"], "i32": feeds["i"]}[src]
        return x.astype(getattr(ml_dtypes, dst))
    name, op = key.rsplit("_", 1)
    p = feeds[f"p_{name}"]
    if op == "add":
        return (p.astype(np.float32) + np.float32(1.0)).astype(p.dtype)
    return p.astype({"f32": np.float32, "i32": np.int32, "f16": np.float16}[op if name != "float4_e2m1fn"
                                                                            or op == "f32" else "f16"])


@pytest.mark.parametrize("engine", ["cpu", "oracle"])
def test_casts_match_ml_dtypes_bit_for_bit(built, engine):
    model, feeds, outs = built
    got = model.run(feeds) if engine == "cpu" else ag.reference.run(outs, feeds)
    for key in outs:
        want = _want(key, feeds)
        g = got[key]
        assert g.dtype == want.dtype, f"{engine} {key}: dtype {g.dtype} vs {want.dtype}"
        assert g.shape == want.shape
        # the stored bytes: NaN patterns and signed zeros included
        np.testing.assert_array_equal(np.ascontiguousarray(g).view(np.uint8),
                                      np.ascontiguousarray(want).view(np.uint8), err_msg=f"{engine} {key}")


def test_int4_storage_is_masked_not_sign_extended(built):
    model, feeds, _ = built
    got = model.run(feeds)["i32_int4"]
    raw = got.view(np.uint8)
    assert raw.max() <= 15 and (got.astype(np.int32) == -1).any()  # -1 is stored as 0x0f


@pytest.mark.parametrize("src,dst,match", [
    ("float16", "int16", "float16 is not supported"),
    ("int32", "int64", "differ in width"),
    ("int8", "bool", "bool is not supported"),
    ("int4", "uint4", "int4 is not supported"),
])
def test_bitcast_refusals_are_typed(src, dst, match):
    with pytest.raises(DTypeError, match=match):
        ops.bitcast(ag.Tensor([3], dtype=src, name="x"), dst)


def test_constants_of_the_new_types_round_trip_through_weights_and_load(tmp_path):
    """safetensors has no sub-byte types: their constants are stored as bytes (U8) and come back
    as themselves, in the build and after Model.load in a fresh object."""
    outs, feeds = {}, {}
    for name in SUB + ["float8_e8m0fnu"]:
        t = getattr(ml_dtypes, name)
        x = ag.Tensor([3], dtype=name, name=f"x_{name}")
        c = ag.ir.tensor.constant(np.array([-1, 1, 2, 3, 0.5], np.float32).astype(t))
        outs[name] = ops.concat([c, x], 0)  # a constant the passes cannot fold away
        feeds[f"x_{name}"] = np.array([1, 0, 1], np.float32).astype(t)
    model = ag.compile_model(outs, target="cpu", workdir=str(tmp_path / "w"))
    ref = ag.reference.run(outs, feeds)
    for got in (model.run(feeds), ag.Model.load(str(tmp_path / "w")).run(feeds)):
        for k in outs:
            assert got[k].dtype == ref[k].dtype
            np.testing.assert_array_equal(got[k].view(np.uint8), ref[k].view(np.uint8), err_msg=k)
    model.close()
