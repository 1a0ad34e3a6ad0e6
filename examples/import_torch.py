"""Import torch models through torch.export, compile them for the CPU, and check them against torch.

    python examples/import_torch.py                 # a small CNN and a transformer encoder
    python examples/import_torch.py --model cnn

Each model is exported with a dynamic batch (and sequence length) as torch.export.Dims, built
once, and run at two sizes; printed: the max error against torch's own output, the kernel count,
and how many permutes the NCHW -> NHWC conversion left in the built graph.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.export import Dim

import aitgen as ag
from aitgen.compiler import compile_options
from aitgen.frontend.torch import import_module


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=4), nn.BatchNorm2d(16), nn.ReLU(),
                                   nn.Conv2d(16, 16, 1))
        self.head = nn.Linear(16, classes)

    def forward(self, image):
        x = self.stem(image)
        x = torch.relu(x + self.block(x))                      # residual in NHWC, no permutes
        x = nn.functional.max_pool2d(x, 2)
        return self.head(nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))


def models():
    batch, seq = Dim("batch", min=1, max=8), Dim("seq", min=1, max=64)
    layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    return {
        "cnn": (SmallCNN(), lambda b, s: (torch.randn(b, 3, 32, 32),), {"image": {0: batch}}),
        "transformer": (encoder, lambda b, s: (torch.randn(b, s, 64),), {"src": {0: batch, 1: seq}}),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["cnn", "transformer", "all"], default="all")
    ap.add_argument("--workdir", default=None, help="build folder (default: a temporary one)")
    args = ap.parse_args()
    torch.manual_seed(0)
    for name, (module, make, dynamic) in models().items():
        if args.model not in ("all", name):
            continue
        module.eval()
        inputs, outputs = import_module(module, make(2, 16), dynamic_shapes=dynamic)
        workdir = Path(args.workdir or tempfile.mkdtemp(prefix=f"aitgen_torch_{name}_")) / name
        model = ag.compile_model(outputs, target="cpu", workdir=workdir)
        report = json.loads((workdir / "report.json").read_text())
        permutes = ag.passes.optimize(outputs, compile_options("cpu")).op_counts().get("permute", 0)
        print(f"{name}: inputs {inputs}, {report['num_kernels']} kernels, {permutes} permute(s) after the passes")
        for b, s in ((3, 9), (8, 64)):  # one build, two shapes
            example = make(b, s)
            with torch.no_grad():
                want = module(*example).numpy()
            got = model.run({k: x.numpy() for k, x in zip(inputs, example)})["output"]
            print(f"  batch {b}, seq {s}: output {list(got.shape)}, max |aitgen - torch| = "
                  f"{float(np.max(np.abs(got - want))):.2e}")


if __name__ == "__main__":
    main()
