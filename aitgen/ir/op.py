"""Ops: a kind from one enum, typed attributes (a frozen dataclass per kind), inputs and outputs."""
from __future__ import annotations

import dataclasses
import enum
from typing import Any, Optional

from .opdef import OpDef, get_opdef
from .tensor import Tensor


class OpKind(enum.Enum):
    # element-wise unary
    RELU = "relu"
    CLAMP = "clamp"
    GELU = "gelu"
    SILU = "silu"
    SIGMOID = "sigmoid"
    TANH = "tanh"
    HARDSWISH = "hardswish"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    RECIPROCAL = "reciprocal"
    ABS = "abs"
    NEG = "neg"
    ERF = "erf"
    CAST = "cast"
    LOGICAL_NOT = "logical_not"
    SIN = "sin"
    COS = "cos"
    TAN = "tan"
    ASIN = "asin"
    ACOS = "acos"
    ATAN = "atan"
    SINH = "sinh"
    COSH = "cosh"
    ASINH = "asinh"
    ACOSH = "acosh"
    ATANH = "atanh"
    EXPM1 = "expm1"
    LOG1P = "log1p"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"  # half to even
    SIGN = "sign"
    ISNAN = "isnan"
    ISINF = "isinf"
    BITWISE_NOT = "bitwise_not"
    # element-wise binary (numpy broadcasting)
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    POW = "pow"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    EQUAL = "equal"
    NOT_EQUAL = "not_equal"
    LESS = "less"
    LESS_EQUAL = "less_equal"
    GREATER = "greater"
    GREATER_EQUAL = "greater_equal"
    LOGICAL_AND = "logical_and"
    LOGICAL_OR = "logical_or"
    MOD = "mod"    # floor modulo: the sign of the divisor (Python %, numpy.mod)
    FMOD = "fmod"  # C fmod: the sign of the dividend
    BITWISE_AND = "bitwise_and"
    BITWISE_OR = "bitwise_or"
    BITWISE_XOR = "bitwise_xor"
    # integers; as ONNX BitShift (opset 28): a count < 0 or >= the width gives 0 (-1 for a negative
    # value shifted right); right shifts of signed values are arithmetic
    SHIFT_LEFT = "shift_left"
    SHIFT_RIGHT = "shift_right"
    # element-wise ternary
    WHERE = "where"
    # matmul family
    GEMM = "gemm"
    BMM = "bmm"
    # int8 post-training quantisation (ops/qlinear.py, passes/quantize_int8.py): a float32
    # activation quantised per tensor, int8 weights per output channel, int32 accumulation
    QGEMM = "qgemm"
    QCONV2D = "qconv2d"
    # convolution and pooling (NHWC activations, OHWI weights)
    CONV2D = "conv2d"
    CONV_TRANSPOSE2D = "conv_transpose2d"
    MAX_POOL2D = "max_pool2d"
    AVG_POOL2D = "avg_pool2d"
    GLOBAL_AVG_POOL = "global_avg_pool"
    ROI_ALIGN = "roi_align"  # ONNX RoiAlign over NCHW (ops/roi_align.py)
    # normalisation, softmax, reductions
    BATCHNORM = "batchnorm"
    LAYERNORM = "layernorm"
    GROUPNORM = "groupnorm"
    RMSNORM = "rmsnorm"
    SOFTMAX = "softmax"
    REDUCE_SUM = "reduce_sum"
    REDUCE_MEAN = "reduce_mean"
    REDUCE_MAX = "reduce_max"
    REDUCE_MIN = "reduce_min"
    REDUCE_VAR = "reduce_var"
    REDUCE_PROD = "reduce_prod"
    ARGMAX = "argmax"
    ARGMIN = "argmin"
    CUMSUM = "cumsum"
    CUMPROD = "cumprod"
    TOPK = "top_k"
    DET = "det"  # determinants of the trailing square matrices (ops/linalg.py)
    # data-dependent sizes: the kernel binds produced IntVars during the run (aitgen/ops/dynamic.py)
    BIND_DIMS = "bind_dims"
    NONZERO = "nonzero"
    NMS = "non_max_suppression"
    UNIQUE = "unique"
    # views and memory ops
    RESHAPE = "reshape"
    PERMUTE = "permute"
    CONCAT = "concat"
    SPLIT = "split"
    SLICE = "slice"
    PAD = "pad"
    EXPAND = "expand"
    GATHER = "gather"
    SCATTER_ND = "scatter_nd"  # ONNX ScatterND with run-time indices (ops/scatter.py)
    # control flow: a host-side loop over a compiled body graph (aitgen/ops/loop.py)
    LOOP = "loop"
    # attention
    ATTENTION = "attention"
    LINEAR_ATTENTION = "linear_attention"  # ONNX LinearAttention's recurrence (ops/linear_attention.py)
    # fused: a DAG of element-wise ops evaluated in one pass over memory (aitgen/ops/fused.py)
    FUSED_ELEMENTWISE = "fused_elementwise"
    # horizontal: independent ops of one kind run as one kernel (aitgen/ops/grouped.py)
    GROUPED = "grouped"


@dataclasses.dataclass(frozen=True)
class NoAttrs:
    """Attributes of ops that have none."""


class Op:
    """One node of the graph. Inputs and outputs are Tensors; attrs is the kind's dataclass."""

    def __init__(self, kind: OpKind, inputs: list[Tensor], outputs: list[Tensor], attrs: Any,
                 name: Optional[str] = None):
        self.kind = kind
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.attrs = attrs
        self.name = name

    @property
    def opdef(self) -> OpDef:
        return get_opdef(self.kind)

    def replace_input(self, old: Tensor, new: Tensor) -> None:
        """Point every use of `old` among this op's inputs at `new`, keeping user lists right."""
        hit = False
        for i, t in enumerate(self.inputs):
            if t is old:
                self.inputs[i] = new
                hit = True
        if hit:
            old.users = [u for u in old.users if u is not self]
            if not any(u is self for u in new.users):
                new.users.append(self)

    def __repr__(self) -> str:
        nm = f" '{self.name}'" if self.name else ""
        return f"Op{nm}({self.kind.value}, {len(self.inputs)} in, {len(self.outputs)} out)"

    __hash__ = object.__hash__
