"""Static analyses of a model graph that need no build: how much arithmetic it asks for.

    from aitgen.analysis import count_flops
    count_flops(outputs)["flops"]          # 2 per multiply-add of the GEMMs, convs and attention
"""
from .flops import count_flops, count_flops_after_passes

__all__ = ["count_flops", "count_flops_after_passes"]
