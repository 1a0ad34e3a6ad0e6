"""A backend's build settings, read from backends/<name>/backend.yaml."""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Optional, Union

import yaml

from .._paths import backends_dir
from ..errors import TargetError
from . import locate
from .pch import Prelude


@dataclasses.dataclass(frozen=True)
class BackendConfig:
    name: str
    compiler: str
    cxxflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    includes: tuple[str, ...]       # relative to backends/
    static_sources: tuple[str, ...]  # relative to backends/, compiled into every model
    uses_onednn: bool = False
    uses_cutlass: bool = False
    # Composable Kernel headers (locate.ck()) as -isystem dirs, and their pin in the flags.
    uses_ck: bool = False
    # Each build also links a mock-device variant (aitgen/codegen/mock_build.py).
    mock_device: bool = False
    # Suffix of every generated translation unit (kernels and the run sequence): it picks the
    # language nvcc/g++ compile it as, and the templates `model<suffix>.j2` / `copy<suffix>.j2`.
    source_suffix: str = ".cpp"
    archs: tuple[tuple[str, tuple[str, ...]], ...] = ()   # arch -> its compile flags, in yaml order
    default_arch: Optional[str] = None
    arch_aliases: tuple[tuple[str, str], ...] = ()
    capabilities: tuple[tuple[str, str], ...] = ()         # "9.0" -> "sm_90a"; ROCm: "gfx90a" -> "gfx90a"
    # Archs listed only when the compiler accepts their flags (a probe at resolve_arch): hipcc before
    # clang 17 refuses gfx942.
    probe_archs: tuple[str, ...] = ()
    # Byte alignment of every arena tensor's base: the strictest any of the backend's kernels asks.
    alignment: int = 64
    # Precisions convert_precision applies as its mixed policy by default (Capabilities.mixed_precision).
    mixed_precision: tuple[str, ...] = ()
    # Headers (as included) that kernels share, precompiled once per build cache (codegen/pch.py).
    prelude: tuple[str, ...] = ()

    def prelude_spec(self) -> Optional[Prelude]:
        return Prelude(self.prelude) if self.prelude else None

    @property
    def arch_names(self) -> list[str]:
        return [a for a, _ in self.archs]

    def tool(self) -> locate.Tool:
        """The compiler, found and versioned by locate (hipcc: its search path and HIP_PLATFORM)."""
        if self.compiler == "hipcc":
            return locate.hipcc()
        return locate.tool(self.compiler)

    def resolve_arch(self, arch: Optional[str],
                     capability: Callable[[], Optional[Union[tuple[int, int], str]]]) -> Optional[str]:
        """The arch a build uses: `arch` as asked (aliases resolved), else the present GPU's (by
        `capability()`, called only then: a (major, minor) compute capability, or a gfx name on
        ROCm), else default_arch. None for a backend without archs."""
        if not self.archs:
            if arch is not None:
                raise TargetError(f"target '{self.name}' takes no arch (got {arch!r})")
            return None
        if arch is None:
            cc = capability()
            if cc is not None:
                key = cc if isinstance(cc, str) else f"{cc[0]}.{cc[1]}"
                found = dict(self.capabilities).get(key)
                if found is None:
                    raise TargetError(f"the GPU present is {key}, which target '{self.name}' "
                                     f"does not build for (it builds {self.arch_names}); pass arch= explicitly")
                return self._probed(found)
            return self.default_arch
        arch = dict(self.arch_aliases).get(arch, arch)
        if arch not in self.arch_names:
            raise TargetError(f"unknown arch {arch!r} for target '{self.name}'; expected one of {self.arch_names}")
        return self._probed(arch)

    def _probed(self, arch: str) -> str:
        if arch in self.probe_archs:
            tool = self.tool()
            if not locate.accepts_arch(tool, list(dict(self.archs)[arch])):
                raise TargetError(f"arch {arch!r} of target '{self.name}' needs a newer compiler: {tool.path} "
                                  f"({tool.version}) refuses {' '.join(dict(self.archs)[arch])} (gfx942 needs "
                                  f"clang >= 17, ROCm 6); build for one of "
                                  f"{[a for a in self.arch_names if a not in self.probe_archs]}")
        return arch

    def compile_flags(self, arch: Optional[str] = None) -> list[str]:
        flags = list(self.cxxflags)
        if arch is not None:
            flags += list(dict(self.archs)[arch])
        flags += [f"-I{backends_dir() / inc}" for inc in self.includes]
        if self.uses_onednn:
            flags += locate.onednn().compile_flags
        if self.uses_cutlass:
            # -isystem: CUTLASS's own warnings stay quiet, and its hundreds of headers stay out of
            # the depfiles (the pinned version is checked by locate.cutlass() instead).
            for d in locate.cutlass().include_dirs:
                flags += ["-isystem", str(d)]   # nvcc wants the dir as its own argument
            # The pin in the flags, so in every object's cache key: the headers are not hashed, and
            # the cache key names include dirs by position, not path (codegen/build.py).
            flags += [f"-DAITGEN_CUTLASS_PIN={locate.pin('cutlass').version}"]
        if self.uses_ck:
            ck = locate.ck()
            for d in ck.include_dirs:
                flags += ["-isystem", str(d)]
            # As for CUTLASS: headers are not hashed, so which CK compiled an object is in its flags.
            flags += [f"-DAITGEN_CK_PIN={ck.version}"]
        return flags

    def link_flags(self) -> list[str]:
        flags = list(self.ldflags)
        if self.uses_onednn:
            flags += locate.onednn().link_flags
        return flags

    def template(self, stem: str) -> str:
        """The per-backend template of a generated source: template('model') -> 'cuda/templates/model.cu.j2'."""
        return f"{self.name}/templates/{stem}{self.source_suffix}.j2"


def _pairs(raw: dict, key: str, convert=lambda v: v) -> tuple:
    return tuple((str(k), convert(v)) for k, v in (raw.get(key) or {}).items())


@functools.lru_cache(maxsize=None)
def load_backend(name: str) -> BackendConfig:
    path = backends_dir() / name / "backend.yaml"
    if not path.exists():
        known = sorted(d.name for d in backends_dir().iterdir() if (d / "backend.yaml").is_file())
        raise TargetError(f"unknown target '{name}' (no {path}); the targets are {known}")
    raw = yaml.safe_load(path.read_text())
    return BackendConfig(name=name, compiler=raw["compiler"], cxxflags=tuple(raw.get("cxxflags", [])),
                         ldflags=tuple(raw.get("ldflags", [])), includes=tuple(raw.get("includes", [])),
                         static_sources=tuple(raw.get("static_sources", [])),
                         uses_onednn=bool(raw.get("uses_onednn", False)),
                         uses_cutlass=bool(raw.get("uses_cutlass", False)),
                         uses_ck=bool(raw.get("uses_ck", False)),
                         probe_archs=tuple(str(a) for a in raw.get("probe_archs", [])),
                         mock_device=bool(raw.get("mock_device", False)),
                         source_suffix=raw.get("source_suffix", ".cpp"),
                         archs=_pairs(raw, "archs", lambda v: tuple(str(f) for f in v)),
                         default_arch=raw.get("default_arch"),
                         arch_aliases=_pairs(raw, "arch_aliases", str),
                         capabilities=_pairs(raw, "capabilities", str),
                         alignment=_alignment(raw.get("alignment", 64), path),
                         mixed_precision=tuple(str(p) for p in raw.get("mixed_precision", [])),
                         prelude=tuple(str(h) for h in raw.get("prelude", [])))


def _alignment(value, path) -> int:
    if not isinstance(value, int) or value < 16 or value & (value - 1):
        raise ValueError(f"{path}: alignment must be a power of two >= 16, got {value!r}")
    return value
