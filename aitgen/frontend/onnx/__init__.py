"""ONNX importer: an .onnx file or ModelProto -> (inputs, outputs) dicts of aitgen Tensors.

    inputs, outputs = aitgen.frontend.onnx.load("model.onnx", dim_bounds={"batch": (1, 32)})
    m = aitgen.compile_model(outputs, target="cpu", workdir="build/model")

Graph inputs become graph-input Tensors named as in ONNX (initializers that are also listed as
inputs are constants); initializers become constants. A symbolic dim (dim_param, or a dim with no
value) becomes one IntVar per name with bounds `dim_bounds[name]`, else (1, default_dim_bound),
default 64 (memory is planned for the upper bounds, so keep them as tight as the use allows).
Nodes whose inputs are all known while importing are evaluated then (Shape/Gather/Concat chains
on dynamic dims included), so they never reach the graph.

Converters live in ops_*.py, registered with `registry.onnx_op`; `onnx` is imported on first use
(pip install 'aitgen[onnx]').
"""
from __future__ import annotations

from typing import Mapping, Optional

from ...ir.tensor import Tensor

# Importing the converter modules registers them (registry: for converter authors).
from . import (  # noqa: F401
    ops_attention,
    ops_col2im,
    ops_control,
    ops_deform,
    ops_einsum,
    ops_elementwise,
    ops_index,
    ops_loop,
    ops_loss,
    ops_nn,
    ops_norm,
    ops_quant,
    ops_reduce,
    ops_resize,
    ops_rnn,
    ops_sample,
    ops_signal,
    ops_stateful,
    ops_text,
    ops_shape,
    registry,
)
from ._loader import DEFAULT_DIM_BOUND, MIN_OPSET, load_model  # noqa: F401
from ._proto import onnx_module  # noqa: F401
from .registry import CONVERTERS, NodeContext, onnx_op

__all__ = ["load", "CONVERTERS", "NodeContext", "onnx_op", "supported_ops", "DEFAULT_DIM_BOUND"]


def load(model, *, dim_bounds: Optional[Mapping[str, tuple[int, int]]] = None,
         default_dim_bound: int = DEFAULT_DIM_BOUND,
         input_dtypes: Optional[Mapping[str, object]] = None,
         constant_inputs: Optional[Mapping[str, object]] = None,
         fold_qdq: bool = False) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Import an ONNX model (a path, bytes or onnx.ModelProto) into aitgen Tensors.

    Returns (inputs, outputs): dicts ONNX name -> Tensor. `input_dtypes` overrides the element
    type of named inputs. `constant_inputs` freezes named graph inputs to the given arrays: they
    become import-time constants, which ops that still need a value while compiling (Slice starts,
    Pad pads, Resize scales fed as graph inputs) require; sizes that other values set (a Reshape
    target, Range, NonZero, TopK's K, reduce axes) are bound during the run (docs/onnx.md). Errors: UnsupportedOpError (naming node, op type and opset) for what
    aitgen cannot express; ImportError_ for a malformed model; UnknownDimError (a ShapeError) for a
    `dim_bounds` name that is not a symbolic dim of the model's inputs. `fold_qdq` (CPU builds):
    QuantizeLinear/DequantizeLinear pairs around MatMul/Gemm/Conv become int8 kernels where that
    is exact (qdq_fold.py says where); without it they import as float composites.
    """
    return load_model(model, dim_bounds=dim_bounds, default_dim_bound=default_dim_bound,
                      input_dtypes=input_dtypes, constant_inputs=constant_inputs, fold_qdq=fold_qdq)


def supported_ops() -> list[str]:
    """The ONNX op types that have a converter: default-domain ones bare, others as "domain.OpType"."""
    return sorted(CONVERTERS)
