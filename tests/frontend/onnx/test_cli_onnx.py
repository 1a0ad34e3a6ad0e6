"""`aitgen compile model.onnx` and `aitgen run DIR --input name=file.npy`, end to end, against
onnxruntime (rtol 1e-4, atol 1e-5: float32 through a different GEMM and libm)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from onnx_cases import TensorProto, helper, numpy_helper, onnx, ort_run

from aitgen.cli import main

RTOL, ATOL = 1e-4, 1e-5


def _model(path):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")
    shape = numpy_helper.from_array(np.array([0, -1, 4], np.int64), "shape")
    nodes = [
        helper.make_node("MatMul", ["input.1", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["h"]),
        helper.make_node("Tanh", ["h"], ["t"]),
        helper.make_node("Reshape", ["t", "shape"], ["/layer/out:0"]),
        helper.make_node("Less", ["t", "b"], ["mask"]),
    ]
    x = helper.make_tensor_value_info("input.1", TensorProto.FLOAT, ["batch", 8])
    outs = [helper.make_empty_tensor_value_info(n) for n in ("/layer/out:0", "mask")]
    m = helper.make_model(helper.make_graph(nodes, "mlp", [x], outs, [w, b, shape]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = min(m.ir_version, 10)
    m = onnx.shape_inference.infer_shapes(m)
    onnx.save(m, path)
    return m


def test_compile_and_run_onnx(tmp_path, capsys):
    model_path = str(tmp_path / "mlp.onnx")
    m = _model(model_path)
    workdir = str(tmp_path / "build")
    assert main(["compile", model_path, "--target", "cpu", "--workdir", workdir, "--dim", "batch=1:6"]) == 0
    text = capsys.readouterr().out
    # the library names the input as a C identifier; run accepts the ONNX name
    assert re.search(r"input +input[._]1: float32 max shape \[6, 8\]", text), text

    x = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out_dir = tmp_path / "out"
    # run in a fresh process: the build directory alone is enough to load the model
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "aitgen", "run", workdir, "--input", f"input.1={tmp_path / 'x.npy'}",
                        "--output-dir", str(out_dir)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "/layer/out:0: float32 [5, 4, 4]" in r.stdout and "mask: bool [5, 16]" in r.stdout, r.stdout
    want = ort_run(m, {"input.1": x})
    got_y = np.load(out_dir / "_layer_out_0.npy")
    np.testing.assert_allclose(got_y, want["/layer/out:0"], rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(np.load(out_dir / "mask.npy"), want["mask"])


def test_cli_errors(tmp_path, capsys):
    model_path = str(tmp_path / "mlp.onnx")
    _model(model_path)
    with pytest.raises(SystemExit, match="NAME=LB:UB"):
        main(["compile", model_path, "--workdir", str(tmp_path / "b"), "--dim", "batch=1-6"])
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08garbage")
    assert main(["compile", str(bad), "--target", "cpu", "--workdir", str(tmp_path / "b")]) == 2
    assert "ImportError_" in capsys.readouterr().err
