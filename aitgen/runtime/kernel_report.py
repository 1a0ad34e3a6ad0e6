"""Which oneDNN implementation each GEMM/conv kernel of a CPU library got, and which are oneDNN's
reference kernels.

oneDNN picks an implementation per primitive when it is created, and when none of its jit kernels
takes the problem (a layout, a data type, a post-op, an ISA they lack) it falls back, silently, to
its reference kernel: correct, and one to three orders of magnitude slower (a ViT patch conv was
304 of 412 ms that way). The kernels create their primitives at their first run with each shape,
so the library records what it created (backends/cpu/src/onednn_kernels.cpp, exported as
ait_onednn_impls / ait_onednn_generation) and Model polls it after every run: a reference kernel
is a ReferenceKernelWarning naming the ops, the first time a Model sees it. compile_model runs a
CPU build once at its inputs' smallest shapes (aitgen/compiler.py, check_kernels) and writes what
this gives into report.json. Libraries of other backends export neither symbol; the watch is then
empty.
"""
from __future__ import annotations

import ctypes
import dataclasses
import re
import warnings
from typing import Mapping, Optional, Sequence

from ..errors import ReferenceKernelWarning

# oneDNN's names are "<kind>:<isa>[:<detail>]", composites joined by "+": "brgconv:avx512_core",
# "conv:any+jit:avx512_core" (a deconvolution run as a convolution), "gemm:jit:f32", "x64:gemm:jit".
# Its reference kernels are "ref:any", "ref_int8:any", "ref_fused...", and gemm-based kernels whose
# GEMM is the reference one say "gemm:ref". Any part starting with "ref" is one.
_PARTS = re.compile(r"[:+]")


def is_reference(impl: str) -> bool:
    return any(part.startswith("ref") for part in _PARTS.split(impl))


@dataclasses.dataclass(frozen=True)
class ImplRecord:
    kernel: str       # the kernel function ("k_<hash>"; "k_<hash>/i" for member i of a grouped kernel)
    primitive: str    # "matmul", "convolution", "deconvolution"
    impl: str         # oneDNN's implementation name
    shape: str        # the first shape it ran at: src:weights:dst dims in oneDNN's order (NCHW for convs)
    shapes: int       # how many shapes of this kernel got this implementation
    ops: tuple[str, ...] = ()   # the graph ops that run this kernel (model.json's kernel_ops)

    @property
    def reference(self) -> bool:
        return is_reference(self.impl)

    def as_dict(self) -> dict:
        return {"kernel": self.kernel, "ops": list(self.ops), "primitive": self.primitive, "impl": self.impl,
                "shape": self.shape, "shapes": self.shapes}


def parse(text: str, kernel_ops: Optional[Mapping[str, Sequence[str]]] = None) -> list[ImplRecord]:
    """ait_onednn_impls' text (one tab-separated record per line) as records; ops from kernel_ops."""
    kernel_ops = kernel_ops or {}
    out = []
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != 5 or not fields[4].isdigit():
            continue  # a line cut short by a buffer that grew between two calls
        kernel, primitive, impl, shape, shapes = fields
        base, _, member = kernel.partition("/")
        ops = tuple(kernel_ops.get(base, ()))
        if member:
            ops = tuple(f"{o} (member {member})" for o in ops)
        out.append(ImplRecord(kernel, primitive, impl, shape, int(shapes), ops))
    return out


def summary(records: Sequence[ImplRecord]) -> dict:
    """report.json's (and Model.kernel_report's) form: onednn_impls {kernel: implementation; several
    joined by " | " when its shapes got different ones}, reference_kernels [record dicts], and
    onednn_primitives [record dicts], every record."""
    impls: dict[str, list[str]] = {}
    for r in records:
        impls.setdefault(r.kernel, []).append(r.impl)
    return {"onednn_impls": {k: " | ".join(sorted(set(v))) for k, v in sorted(impls.items())},
            "reference_kernels": [r.as_dict() for r in records if r.reference],
            "onednn_primitives": [r.as_dict() for r in records]}


def message(r: ImplRecord) -> str:
    ops = ", ".join(r.ops) if r.ops else "ops unknown: no kernel_ops in model.json"
    return (f"oneDNN runs its reference implementation '{r.impl}' for the {r.primitive} of kernel {r.kernel} "
            f"(op {ops}; first shape src:weights:dst {r.shape}): expect it one to three orders of magnitude "
            "slower than a jit kernel. Model.kernel_report() lists every implementation.")


class ImplWatch:
    """A library's records, read when its generation counter moved; warns once per reference record."""

    def __init__(self, lib: ctypes.CDLL, kernel_ops: Mapping[str, Sequence[str]]):
        self._impls = getattr(lib, "ait_onednn_impls", None)
        self._gen = getattr(lib, "ait_onednn_generation", None)
        self.available = self._impls is not None and self._gen is not None
        if self.available:
            self._impls.argtypes = [ctypes.c_char_p, ctypes.c_int64]
            self._impls.restype = ctypes.c_int64
            self._gen.argtypes = []
            self._gen.restype = ctypes.c_int64
        self._kernel_ops = kernel_ops
        self._last = 0
        self._warned: set[tuple[str, str, str]] = set()

    def records(self) -> list[ImplRecord]:
        if not self.available:
            return []
        need = self._impls(None, 0)
        while True:
            buf = ctypes.create_string_buffer(need + 1)
            got = self._impls(buf, need + 1)
            if got <= need:  # else a primitive was created meanwhile: read again, larger
                return parse(buf.value.decode(errors="replace"), self._kernel_ops)
            need = got

    def poll(self) -> None:
        """After a run: a ReferenceKernelWarning for every reference record not warned about yet."""
        if not self.available:
            return
        gen = self._gen()
        if gen == self._last:
            return
        self._last = gen
        for r in self.records():
            key = (r.kernel, r.primitive, r.impl)
            if r.reference and key not in self._warned:
                self._warned.add(key)
                warnings.warn(message(r), ReferenceKernelWarning, stacklevel=3)
