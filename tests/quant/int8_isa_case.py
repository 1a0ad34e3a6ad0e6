"""Run by test_int8_models.py in a subprocess under ONEDNN_MAX_CPU_ISA: a conv + two GEMMs (int8
and uint8 activations) built int8, one run against the quantised graph's oracle; prints JSON."""
import json
import sys

import numpy as np

import aitgen as ag
from aitgen import nn, ops
from aitgen.compiler import compile_options
from aitgen.passes import optimize

nn.manual_seed(0)
x = ag.Tensor([2, 8, 8, 16], dtype="float32", name="x")
c = ops.relu(nn.Conv2d(16, 32, 3, padding=1)(x))
y = nn.Linear(64, 8)(ops.relu(nn.Linear(32, 64)(c)))
rng = np.random.default_rng(0)
feeds = [{"x": rng.standard_normal((2, 8, 8, 16)).astype(np.float32)} for _ in range(3)]
m = ag.compile_model({"y": y}, target="cpu", workdir=sys.argv[1], precision="int8", calibration=feeds)
g = optimize({"y": y}, compile_options("cpu", precision="int8", calibration=tuple(feeds)))
test = {"x": rng.standard_normal((2, 8, 8, 16)).astype(np.float32)}
got, want = m.run(test)["y"], ag.reference.run(g, test)["y"]
report = json.loads(open(sys.argv[1] + "/report.json").read())
print(json.dumps({"err": float(np.abs(got - want).max()), "scale": float(np.abs(want).max()),
                  "prims": [[p["primitive"], p["impl"]] for p in report["onednn_primitives"]],
                  "requantised": sum(getattr(op.attrs, "out_act", None) is not None for op in g.ops),
                  "wmax": [int(np.abs(t.value).max()) for t in g.constants if t.dtype.value == "int8"]}))
