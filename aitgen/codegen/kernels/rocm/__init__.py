"""ROCm lowering functions (`@lowering("rocm", OpKind.X, ...)`), one module per op family, named as
in aitgen/ops and backends/rocm/templates; importing this package registers them (codegen/lower.py
BACKENDS imports it when the target is ROCm). Each family adds its module to the imports below: the
own kernels (element-wise, reductions, softmax, norms, pooling, gather, views, attention) share their
CUDA sources through the dialect header, GEMM/conv go through Composable Kernel. An op whose family
is not imported has no ROCm kernel, and lower_graph names it (UnsupportedOpError). Without any, a
graph of reshapes and outputs that are inputs still builds: those are copies (copy.hip.j2).
"""
