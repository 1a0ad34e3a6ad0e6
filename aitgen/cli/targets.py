"""Which --target and --arch values exist, read from backends/ (a backend is a folder with a
backend.yaml), so --help and the errors list what this installation can build and nothing else."""
from __future__ import annotations

from typing import Optional

from ..errors import UsageError


def targets() -> tuple[list[str], list[str]]:
    """(targets this installation builds, targets whose folder exists but holds no backend yet)."""
    from .._paths import backends_dir

    try:
        root = backends_dir()
    except FileNotFoundError:
        return [], []
    ready, planned = [], []
    for d in sorted(root.iterdir()):
        # common/ and gpu/ are shared by the backends (C API and container; the GPU backends' own kernels)
        if not d.is_dir() or d.name in ("common", "gpu") or d.name.startswith((".", "_")):
            continue
        (ready if (d / "backend.yaml").is_file() else planned).append(d.name)
    return ready, planned


def _listing(ready: list[str]) -> str:
    return ", ".join(["auto", *ready])


def describe() -> str:
    """'auto, cpu, cuda (rocm: not built yet)' for --help."""
    ready, planned = targets()
    return _listing(ready) + (f" ({', '.join(planned)}: not built yet)" if planned else "")


def check_target(name: str) -> str:
    """argparse `type` of --target: the name, or UsageError listing the targets there are."""
    ready, planned = targets()
    if name == "auto" or name in ready:
        return name
    if name in planned:
        raise UsageError(f"target '{name}' is not built yet (backends/{name} holds no backend.yaml); "
                         f"the targets are: {_listing(ready)}")
    later = f" ({', '.join(planned)}: not built yet)" if planned else ""
    raise UsageError(f"unknown target '{name}'; the targets are: {_listing(ready)}{later}")


def resolve(target: str, arch: Optional[str]) -> tuple[str, Optional[str]]:
    """(backend name, arch) a build with these options uses, checked before any work is done;
    UsageError naming the archs that exist where `arch` is not one of them."""
    from ..codegen.backend import load_backend
    from ..compiler import pick_target
    from ..runtime.device import cuda_capability

    name = pick_target(target)
    backend = load_backend(name)
    if arch is not None:
        owners = [t for t in targets()[0] if t != name and _knows(t, arch)]
        if not backend.archs:
            why = f"--target {target} picked {name} (no GPU answers)" if target == "auto" else f"target {name}"
            fix = f": pass --target {owners[0]} to build for it (no GPU is needed)" if owners else ""
            raise UsageError(f"{why} takes no --arch, got --arch {arch}{fix}")
        resolved = dict(backend.arch_aliases).get(arch, arch)
        if resolved not in backend.arch_names:
            aliases = ", ".join(f"{a} = {b}" for a, b in backend.arch_aliases)
            raise UsageError(f"unknown arch '{arch}' for target {name}; the archs are: {', '.join(backend.arch_names)}"
                             + (f" (aliases: {aliases})" if aliases else ""))
        return name, resolved
    try:
        return name, backend.resolve_arch(None, cuda_capability)
    except ValueError as e:   # a GPU present that the backend builds no arch for
        raise UsageError(str(e).replace("pass arch= explicitly", "pass --arch")) from None


def _knows(target: str, arch: str) -> bool:
    from ..codegen.backend import load_backend

    b = load_backend(target)
    return arch in b.arch_names or arch in dict(b.arch_aliases)
