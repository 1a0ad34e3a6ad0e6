# examples/tour.py: a model written in Python, built for the CPU, run, and checked against the oracle
import numpy as np, aitgen as ag
from aitgen import nn, ops

batch = ag.IntVar("batch", 1, 64)                                 # a symbolic dim, bounds 1..64
x = ag.Tensor([batch, 768], dtype="float32", name="x")            # a graph input
y = ops.gelu(nn.Linear(768, 3072)(x))                             # weights: seeded numpy arrays
m = ag.compile_model({"y": y}, target="cpu", workdir="build/mlp") # one .so + weights in build/mlp
feeds = {"x": np.ones((8, 768), np.float32)}
out = m.run(feeds)["y"]                                           # (8, 3072) float32
ref = ag.reference.run({"y": y}, feeds)["y"]                      # the numpy oracle
print(out.shape, "max |aitgen - oracle| =", float(np.abs(out - ref).max()))
m2 = ag.Model.load("build/mlp")                                   # later, in another process
