"""The typed IR: dtypes, symbolic dims, tensors, ops, graphs."""
from .dims import Dim, DimExpr, FloorDiv, IntImm, IntVar, as_dim, as_shape, prod, shape_str
from .dtype import DType, as_dtype
from .graph import Graph, normalize_outputs, topo_order
from .op import NoAttrs, Op, OpKind
from .tensor import Role, Tensor, constant
from .verify import verify

__all__ = ["Dim", "DimExpr", "FloorDiv", "IntImm", "IntVar", "as_dim", "as_shape", "prod", "shape_str",
           "DType", "as_dtype", "Graph", "normalize_outputs", "topo_order", "NoAttrs", "Op", "OpKind",
           "Role", "Tensor", "constant", "verify"]
