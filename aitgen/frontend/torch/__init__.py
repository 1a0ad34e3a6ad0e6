"""torch.export importer: an ExportedProgram (core ATen ops) -> (inputs, outputs) dicts of Tensors.

    import torch, aitgen as ag
    from aitgen.frontend.torch import import_module
    batch = torch.export.Dim("batch", min=1, max=32)
    inputs, outputs = import_module(model.eval(), (torch.randn(2, 3, 224, 224),),
                                    dynamic_shapes={"x": {0: batch}})
    m = ag.compile_model(outputs, target="cpu", workdir="build/model")

`from_exported_program(ep)` imports a program you exported yourself; it runs
`ep.run_decompositions()` first (pass decompose=False if you already did). Parameters, buffers
and lifted constants become constants named as in the module's state_dict; user inputs become
graph inputs named as in forward's signature; outputs are named by forward's return value: a
dict's keys, else `output` for one tensor and `output_0`, `output_1`, ... (nested: `output_0_1`).

Dynamic sizes (torch.export.Dim) become IntVars named after the Dim, with torch's bounds; a Dim
with no upper bound gets `dim_bounds[name]`, else (lower, default_dim_bound), default 64: memory is
planned for the upper bounds, so keep them as tight as the use allows. Sizes derived from them
(2*s0, s0 - 1, conv output sizes) become Dim expressions.

Layout: torch is NCHW, the IR NHWC. The importer tracks each tensor's stored axis order, so a CNN
gets one permute at its input and conv weights are transposed to OHWI at import time (see
_value.py). Ops aitgen cannot express raise UnsupportedOpError naming the fx node, the ATen op
and the module it came from; `supported_ops()` lists the converters. torch is optional
(pip install 'aitgen[torch]'); it is imported only when an import runs.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ...errors import ImportError_
from ...ir.tensor import Tensor

DEFAULT_DIM_BOUND = 64

__all__ = ["from_exported_program", "import_module", "supported_ops", "DEFAULT_DIM_BOUND"]


def _torch():
    try:
        import torch
        import torch.export  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError_("importing torch models needs torch (pip install 'aitgen[torch]')") from e
    return torch


def from_exported_program(ep, *, dim_bounds: Optional[Mapping[str, tuple[int, int]]] = None,
                          default_dim_bound: int = DEFAULT_DIM_BOUND, decompose: bool = True,
                          output_names: Optional[Sequence[str]] = None
                          ) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Import a torch.export.ExportedProgram into aitgen Tensors: (inputs, outputs), name -> Tensor.

    dim_bounds: name -> (lb, ub) for dynamic dims (the Dim's name; overrides torch's range).
    decompose: run ep.run_decompositions() first (core ATen ops are what the converters cover).
    output_names: names for the user outputs in order, instead of the derived ones.
    """
    torch = _torch()
    if not isinstance(ep, torch.export.ExportedProgram):
        raise ImportError_(f"from_exported_program needs a torch.export.ExportedProgram, got {type(ep).__name__}")
    from ._importer import Importer

    if decompose:
        ep = ep.run_decompositions()
    return Importer(ep, dim_bounds, default_dim_bound, output_names).run()


def import_module(module, example_args: Sequence[Any], dynamic_shapes=None, *, example_kwargs=None,
                  dim_bounds: Optional[Mapping[str, tuple[int, int]]] = None,
                  default_dim_bound: int = DEFAULT_DIM_BOUND, output_names: Optional[Sequence[str]] = None,
                  strict: bool = False) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """torch.export.export(module, example_args, dynamic_shapes=...), then from_exported_program.

    The module is put in eval mode (an inference import: dropout off, batch norm on running stats).
    """
    torch = _torch()
    if not isinstance(module, torch.nn.Module):
        raise ImportError_(f"import_module needs a torch.nn.Module, got {type(module).__name__}")
    module = module.eval()
    with torch.no_grad():
        ep = torch.export.export(module, tuple(example_args), kwargs=example_kwargs,
                                 dynamic_shapes=dynamic_shapes, strict=strict)
    return from_exported_program(ep, dim_bounds=dim_bounds, default_dim_bound=default_dim_bound,
                                 output_names=output_names)


def supported_ops() -> list[str]:
    """The ATen overloads ("convolution.default", "add.Tensor", ...) that have a converter."""
    _torch()
    from ._importer import CONVERTERS  # importing the importer registers every converter
    return sorted(CONVERTERS)
