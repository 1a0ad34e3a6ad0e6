"""Model zoo: standard topologies written with `aitgen.nn`, as graphs ready to compile.

    inputs, outputs = aitgen.models.get("bert_base", batch=1, seq=128)
    module, inputs, outputs = aitgen.models.build("resnet50", layers=(1, 1, 1, 1), width=8)

Every model file defines a `create(**config) -> (module, inputs)` factory and a
`forward(module, inputs) -> dict[str, Tensor]`; this file adds what all models share: the seed,
parameter names, and the registry. `batch` and `seq` take an int or an `aitgen.IntVar`.
"""
from __future__ import annotations

import importlib
from typing import Any

from ..ir.tensor import Tensor

# name -> module file. Files are imported on first use: building the zoo's registry must not
# depend on every nn layer being importable.
_MODELS = {
    "resnet50": "resnet",
    "bert_base": "bert",
    "vit_b16": "vit",
    "gpt2": "gpt2",
    "mobilenet_v2": "mobilenet",
}

__all__ = ["get", "build", "list_models"]


def list_models() -> list[str]:
    return sorted(_MODELS)


def _impl(name: str):
    try:
        file = _MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model '{name}'; the zoo has {list_models()}") from None
    return importlib.import_module(f"{__name__}.{file}")


def build(name: str, seed: int = 0, **config: Any) -> tuple[Any, dict[str, Tensor], dict[str, Tensor]]:
    """Build model `name`: (module, inputs name -> Tensor, outputs name -> Tensor).

    Parameters are drawn from nn's generator after `nn.manual_seed(seed)`, so two builds with the
    same seed and config hold identical constants. Unknown config keys raise TypeError.
    """
    from ..frontend import nn

    impl = _impl(name)
    nn.manual_seed(seed)
    module, inputs = impl.create(**config)
    # Names before forward: ops built from named parameters can then be traced back to them.
    module.assign_names()
    outputs = impl.forward(module, inputs)
    return module, inputs, outputs


def get(name: str, seed: int = 0, **config: Any) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """(inputs, outputs) of model `name`; see `build`."""
    _, inputs, outputs = build(name, seed=seed, **config)
    return inputs, outputs
