"""Kernel facts read from the device code inside a CUDA build, for the mock device.

A kernel launch hands the CUDA runtime an array of pointers to its parameters and nothing else: how
many parameters there are and how large each is lives only in the device code, in the
`.nv.info.<kernel>` section of the cubin (EIATTR_KPARAM_INFO records). The mock device needs that
to read the arguments of each launch (and find the device pointers among them), and a kernel's
limits (`__launch_bounds__`, static shared memory, registers) to check its launch configuration.

Layout, as the CUDA toolchain writes it (read from the files themselves; nothing here executes):
a host library's `.nv_fatbin` section holds fatbin containers (magic 0xBA55ED50, a 16-byte
header), each a list of entries (kind 2 = cubin, a 64-byte header with the payload size and
flags); the cubin payload is an ELF64 file. Compressed entries (flag bit 0x2000) are skipped and
counted: backend.yaml builds with --no-compress so that none are.
"""
from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50
_ENTRY_CUBIN = 2
_FLAG_COMPRESSED = 0x2000
# .nv.info attribute formats and the attributes read here.
_FMT_NVAL, _FMT_BVAL, _FMT_HVAL, _FMT_SVAL = 1, 2, 3, 4
_KPARAM_INFO = 0x17
_MAX_THREADS = 0x05
_REQNTID = 0x10
_CBANK_PARAM_SIZE = 0x19


class CubinError(ValueError):
    """The device code is not laid out as expected (a truncated or foreign file)."""


@dataclasses.dataclass
class KernelInfo:
    name: str                      # the mangled device name, as __cudaRegisterFunction gives it
    params: list[tuple[int, int]]  # (offset, size) of each parameter, in ordinal order
    param_bytes: int = 0
    max_threads: int = 0           # from __launch_bounds__ / maxntid (0: none declared)
    static_smem: int = 0           # bytes of __shared__ declared in the kernel
    registers: int = 0


def _sections(elf: bytes) -> dict[str, tuple[int, int, int, int]]:
    """name -> (type, offset, size, info) of every section of an ELF64 little-endian file."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise CubinError("not an ELF64 little-endian file")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    if shentsize < 64 or shoff + shnum * shentsize > len(elf) or shstrndx >= shnum:
        raise CubinError("section table out of range")
    heads = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    strtab = heads[shstrndx]
    names = elf[strtab[4]:strtab[4] + strtab[5]]
    out = {}
    for h in heads:
        name_off, sh_type, _flags, _addr, off, size, _link, info = h[:8]
        end = names.find(b"\0", name_off)
        out[names[name_off:end].decode("latin-1")] = (sh_type, off, size, info)
    return out


def _attributes(blob: bytes):
    """(attribute, payload) of each .nv.info record."""
    pos = 0
    while pos + 2 <= len(blob):
        fmt, attr = blob[pos], blob[pos + 1]
        pos += 2
        if fmt == _FMT_SVAL:
            size, = struct.unpack_from("<H", blob, pos)
            yield attr, blob[pos + 2:pos + 2 + size]
            pos += 2 + size
        elif fmt in (_FMT_HVAL, _FMT_NVAL):
            yield attr, blob[pos:pos + 2]
            pos += 2
        elif fmt == _FMT_BVAL:
            yield attr, blob[pos:pos + 1]
            pos += 1
        else:  # padding at the end of a section (zeros)
            return


def kernels_of_cubin(elf: bytes) -> list[KernelInfo]:
    secs = _sections(elf)
    out = []
    for name, (_t, off, size, _i) in secs.items():
        if not name.startswith(".nv.info."):
            continue
        fn = name[len(".nv.info."):]
        k = KernelInfo(fn, [])
        params: dict[int, tuple[int, int]] = {}
        for attr, data in _attributes(elf[off:off + size]):
            if attr == _KPARAM_INFO and len(data) >= 12:
                _index, ordinal, poff, flags = struct.unpack_from("<IHHI", data)
                params[ordinal] = (poff, (flags >> 18) & 0x3FFF)
            elif attr == _CBANK_PARAM_SIZE:
                k.param_bytes, = struct.unpack_from("<H", data)
            elif attr in (_MAX_THREADS, _REQNTID) and len(data) >= 12:
                x, y, z = struct.unpack_from("<III", data)
                k.max_threads = max(1, x) * max(1, y) * max(1, z)
        k.params = [params[i] for i in sorted(params)]
        if not k.param_bytes and k.params:
            k.param_bytes = max(o + s for o, s in k.params)
        shared = secs.get(".nv.shared." + fn)
        k.static_smem = shared[2] if shared else 0
        text = secs.get(".text." + fn)
        k.registers = (text[3] >> 24) if text else 0
        out.append(k)
    return out


def cubins(fatbin: bytes) -> tuple[list[bytes], int]:
    """The uncompressed cubins in a fatbin section, and how many compressed ones were skipped."""
    found, skipped, pos = [], 0, 0
    while pos + 16 <= len(fatbin):
        magic, _ver, hsize, fsize = struct.unpack_from("<IHHQ", fatbin, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned; padding between them
            continue
        e, end = pos + hsize, min(pos + hsize + fsize, len(fatbin))
        while e + 16 <= end:
            kind, _v, ehsize, psize = struct.unpack_from("<HHIQ", fatbin, e)
            flags = struct.unpack_from("<Q", fatbin, e + 40)[0] if ehsize >= 48 else 0
            payload = fatbin[e + ehsize:e + ehsize + psize]
            if kind == _ENTRY_CUBIN:
                if flags & _FLAG_COMPRESSED:
                    skipped += 1
                elif payload[:4] == b"\x7fELF":
                    found.append(payload)
            if ehsize == 0:
                break
            e += ehsize + psize
        pos = end
    return found, skipped


def library_kernels(path: Path) -> tuple[dict[str, KernelInfo], int]:
    """Every kernel of a host library's device code, by mangled name; and the compressed cubins
    that could not be read (their kernels are then unknown to the mock: it says so per launch)."""
    data = Path(path).read_bytes()
    sec = _sections(data).get(".nv_fatbin")
    if sec is None:
        return {}, 0
    blobs, skipped = cubins(data[sec[1]:sec[1] + sec[2]])
    out: dict[str, KernelInfo] = {}
    for blob in blobs:
        for k in kernels_of_cubin(blob):
            out[k.name] = k
    return out, skipped
