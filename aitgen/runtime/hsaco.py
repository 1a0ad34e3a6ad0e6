"""Kernel facts read from the device code inside a ROCm (HIP) build, for the mock device.

The HIP twin of cubin.py. A launch (`hipLaunchKernel`) hands the runtime an array of pointers to
the kernel's parameters and nothing else; how many there are and how large each is lives in the
AMDGPU code object's metadata, which the mock needs to read each launch's arguments, as it needs
the kernel's limits (its flat work-group size bound, static LDS) to check the launch configuration.

Layout, as clang's HIP toolchain writes it (read from the files; nothing here executes):
- the host library's `.hip_fatbin` section holds one clang offload bundle per translation unit
  (magic `__CLANG_OFFLOAD_BUNDLE__`, u64 entry count, then per entry u64 offset, u64 size, u64
  triple length and the triple, e.g. `hipv4-amdgcn-amd-amdhsa--gfx90a`; offsets from the bundle's
  start); the host entry is empty, each device entry an AMDGPU ELF64 code object;
- a code object's metadata is one ELF note (owner "AMDGPU", type NT_AMDGPU_METADATA = 32) holding a
  MessagePack map whose `amdhsa.kernels` lists each kernel: `.name` (the mangled name that
  `__hipRegisterFunction` passes), `.args` (`.offset`, `.size`, `.value_kind`; the `hidden_*`
  kinds are the implicit arguments the runtime appends, not parameters), `.max_flat_workgroup_size`,
  `.group_segment_fixed_size` (static LDS), `.vgpr_count`, `.wavefront_size`.
Compressed bundles (`CCOB`, ROCm 6.2 and newer) are skipped and counted, as cubin.py does.
"""
from __future__ import annotations

import struct
from pathlib import Path

import msgpack

from .cubin import CubinError, KernelInfo, _sections

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
COMPRESSED_MAGIC = b"CCOB"
NT_AMDGPU_METADATA = 32
_NOTE = 7  # SHT_NOTE


class CodeObjectError(CubinError):
    """The device code is not laid out as expected (a truncated or foreign file)."""


def bundles(fatbin: bytes) -> tuple[list[tuple[str, bytes]], int]:
    """(triple, code object) of every device entry of every bundle in a `.hip_fatbin` section, and
    how many compressed bundles were skipped."""
    found, skipped, pos = [], 0, 0
    while pos < len(fatbin):
        nxt = fatbin.find(BUNDLE_MAGIC, pos)
        comp = fatbin.find(COMPRESSED_MAGIC, pos)
        if comp != -1 and (nxt == -1 or comp < nxt) and comp % 8 == 0:
            skipped += 1
            pos = comp + len(COMPRESSED_MAGIC)
            continue
        if nxt == -1:
            break
        start, p = nxt, nxt + len(BUNDLE_MAGIC)
        if p + 8 > len(fatbin):
            raise CodeObjectError("offload bundle header out of range")
        n, = struct.unpack_from("<Q", fatbin, p)
        p += 8
        end = p
        for _ in range(n):
            if p + 24 > len(fatbin):
                raise CodeObjectError("offload bundle entry out of range")
            off, size, tlen = struct.unpack_from("<QQQ", fatbin, p)
            triple = fatbin[p + 24:p + 24 + tlen].decode("ascii", "replace")
            p += 24 + tlen
            if start + off + size > len(fatbin):
                raise CodeObjectError(f"offload bundle entry {triple!r} out of range")
            if size and not triple.startswith("host-"):
                found.append((triple, fatbin[start + off:start + off + size]))
            end = max(end, start + off + size)
        pos = max(end, p)
    return found, skipped


def arch_of(triple: str) -> str:
    """`hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-` -> `gfx90a`."""
    return triple.rsplit("-", 1)[-1].split(":", 1)[0]


def _notes(elf: bytes):
    """(owner, type, descriptor) of every note in the SHT_NOTE sections of an ELF64 file."""
    try:
        secs = _sections(elf)
    except CubinError as e:
        raise CodeObjectError(f"code object: {e}") from None
    for _name, (sh_type, off, size, _info) in secs.items():
        if sh_type != _NOTE:
            continue
        p, end = off, min(off + size, len(elf))
        while p + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", elf, p)
            p += 12
            owner = elf[p:p + namesz].rstrip(b"\0").decode("latin-1")
            p += (namesz + 3) & ~3
            desc = elf[p:p + descsz]
            p += (descsz + 3) & ~3
            yield owner, ntype, desc


def kernels_of_code_object(elf: bytes) -> list[KernelInfo]:
    for owner, ntype, desc in _notes(elf):
        if owner != "AMDGPU" or ntype != NT_AMDGPU_METADATA:
            continue
        try:
            meta = msgpack.unpackb(desc, raw=False, strict_map_key=False)
        except Exception as e:  # msgpack raises several types for malformed data
            raise CodeObjectError(f"AMDGPU metadata note is not MessagePack: {e}") from e
        out = []
        for k in meta.get("amdhsa.kernels", []):
            args = [a for a in k.get(".args", []) if not str(a.get(".value_kind", "")).startswith("hidden_")]
            params = [(int(a[".offset"]), int(a[".size"])) for a in args]
            out.append(KernelInfo(name=str(k[".name"]), params=params,
                                  param_bytes=max((o + s for o, s in params), default=0),
                                  max_threads=int(k.get(".max_flat_workgroup_size", 0)),
                                  static_smem=int(k.get(".group_segment_fixed_size", 0)),
                                  registers=int(k.get(".vgpr_count", 0))))
        return out
    raise CodeObjectError("code object has no AMDGPU metadata note")


def library_kernels(path: Path, arch: str | None = None) -> tuple[dict[str, KernelInfo], int]:
    """Every kernel of a HIP host library's device code for `arch` (all archs when None), by
    mangled name; and the compressed bundles that could not be read."""
    data = Path(path).read_bytes()
    sec = _sections(data).get(".hip_fatbin")
    if sec is None:
        return {}, 0
    objs, skipped = bundles(data[sec[1]:sec[1] + sec[2]])
    out: dict[str, KernelInfo] = {}
    for triple, elf in objs:
        if arch is None or arch_of(triple) == arch:
            for k in kernels_of_code_object(elf):
                out[k.name] = k
    return out, skipped
