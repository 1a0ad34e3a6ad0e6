"""What every backend's lowerings share: the geometry and the math, decided once in Python.

- access.py: how operands are read over an output's index space (dense, broadcast, strided
  views) and the loop dims they all walk alike;
- expr.py: a fused expression DAG as C++, one inline function per node, which the CPU and GPU
  templates all call (element-wise groups, GEMM/conv epilogues, norm prologues);
- prologue.py: a row op's prologue (layernorm, rmsnorm, softmax);
- reduce.py: the loop shape of a reduction;
- attention.py: an attention op's run-time arguments (merged batch, strides, offsets, flags);
- copy.py: the geometry of the byte-exact copies (permute, expand, slice, concat, split, pad,
  gather); each backend supplies the kernel.

Nothing here registers a lowering or imports a backend's package.
"""
