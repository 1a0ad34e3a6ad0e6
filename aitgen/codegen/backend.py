"""A backend's build settings, read from backends/<name>/backend.yaml."""
from __future__ import annotations

import dataclasses
import functools

import yaml

from .._paths import backends_dir
from . import locate


@dataclasses.dataclass(frozen=True)
class BackendConfig:
    name: str
    compiler: str
    cxxflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    includes: tuple[str, ...]       # relative to backends/
    static_sources: tuple[str, ...]  # relative to backends/, compiled into every model
    uses_onednn: bool = False

    def compile_flags(self) -> list[str]:
        flags = list(self.cxxflags) + [f"-I{backends_dir() / inc}" for inc in self.includes]
        if self.uses_onednn:
            flags += locate.onednn().compile_flags
        return flags

    def link_flags(self) -> list[str]:
        flags = list(self.ldflags)
        if self.uses_onednn:
            flags += locate.onednn().link_flags
        return flags


@functools.lru_cache(maxsize=None)
def load_backend(name: str) -> BackendConfig:
    path = backends_dir() / name / "backend.yaml"
    if not path.exists():
        raise ValueError(f"unknown target '{name}' (no {path})")
    raw = yaml.safe_load(path.read_text())
    return BackendConfig(name=name, compiler=raw["compiler"], cxxflags=tuple(raw.get("cxxflags", [])),
                         ldflags=tuple(raw.get("ldflags", [])), includes=tuple(raw.get("includes", [])),
                         static_sources=tuple(raw.get("static_sources", [])),
                         uses_onednn=bool(raw.get("uses_onednn", False)))
