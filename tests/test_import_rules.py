"""Import rules between aitgen's packages (issue 11), read from the source with `ast`.

The graph: one node per module under aitgen/ (aitgen/x/__init__.py is the node aitgen.x, and
aitgen/__init__.py, the public facade, is the node `aitgen`). Every import statement is an edge,
at module level or inside a function, class or try block alike: a lazy import is still a
dependency, it only moves the moment it is paid. Relative imports are resolved against the
importing module's package. `from X import name` is an edge to X.name when that is a module, else
to X, so `from .. import ops` is an edge to aitgen.ops and `from ..codegen import lower` one to
aitgen.codegen.lower.

Not counted:
- the implicit parent packages: importing aitgen.x.y runs aitgen/__init__ and aitgen/x/__init__
  first, but the rules are about what a module names, and counting those would put every module
  in a circle with the facade (which imports everything, eagerly today);
- imports under `if TYPE_CHECKING:`, for circles only: they never run, and two classes that name
  each other in annotations (a Tensor's producer is an Op, an Op's inputs are Tensors) make no
  load-order circle. They still count for the layering rules;
- dynamic imports (importlib.import_module), which cannot be resolved from the text.

A package is aitgen.<first component>; a top-level module (aitgen.cli, aitgen.reference) is a
package of its own. The rules: the edges in FORBIDDEN; no circle between packages; no circle
between the modules of one package.

KNOWN is a ratchet: the violations that existed when the test was written, each with who removes
it. The test fails on a violation not in KNOWN, and on a KNOWN entry that no longer occurs: when
you fix one, delete its line.
"""
from __future__ import annotations

import ast
import dataclasses
import pathlib
import sys
from collections import defaultdict

ROOT = pathlib.Path(__file__).resolve().parents[1] / "aitgen"

# importer package -> packages it must not import (aitgen_backends: the template and C++ tree;
# aitgen._paths is the one module that finds it, so importing it reaches into a backend too)
FORBIDDEN = {
    "aitgen.passes": ("aitgen.codegen", "aitgen.profiler", "aitgen_backends", "aitgen._paths"),
    "aitgen.ir": ("aitgen.ops",),
    "aitgen.runtime": ("aitgen.passes", "aitgen.codegen", "aitgen.compiler", "aitgen.frontend",
                       "aitgen.models", "aitgen.profiler"),
    "aitgen.profiler": ("aitgen.codegen",),
    "aitgen.reference": ("aitgen.passes", "aitgen.codegen"),
}

# codegen/kernels: a backend's package (cpu, cuda, rocm) imports its own modules and the shared
# packages (common: every backend's geometry and expression rendering; gpu: our own kernels of the
# GPU backends, one source for CUDA and ROCm), never another backend's; gpu imports only common,
# common nothing of the others.
KERNELS = "aitgen.codegen.kernels"


def _kernel_package(module: str):
    parts = module.split(".")
    return parts[3] if _under(module, KERNELS) and len(parts) > 3 else None


def _kernels_may_import(src_pkg: str, dst_pkg: str) -> bool:
    return src_pkg == dst_pkg or dst_pkg == "common" or (dst_pkg == "gpu" and src_pkg != "common")


# Keys as the test prints them: "A -> B" (a forbidden edge, module to module), "package circle:
# P" (package P is in a circle with other packages), "circle in P: M" (module M is in a circle
# with other modules of package P).
KNOWN: set[str] = set()  # empty: every rule holds; a new violation is fixed, not listed


@dataclasses.dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    where: str           # path:line of the first import that makes it
    typing_only: bool    # every import making it sits under `if TYPE_CHECKING:`


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
            or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """(node, typing_only) for every import statement in the tree, however deeply nested."""
    def walk(node, typing_only):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, typing_only
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), True)
                for stmt in child.orelse:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), typing_only)
            else:
                yield from walk(child, typing_only)
    yield from walk(tree, False)


def build_graph() -> tuple[set[str], dict[tuple[str, str], Edge]]:
    paths = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}
    modules = set(paths)

    def known(name: str):
        """The module `name` names: itself, else its longest prefix that is a module (a name
        imported from a package), or aitgen_backends for anything inside the backend tree."""
        if name.split(".")[0] == "aitgen_backends":
            return "aitgen_backends"
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[tuple[str, str], Edge] = {}
    for mod, path in paths.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node, typing_only in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [known(a.name) for a in node.names]
            else:
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(base + ([node.module] if node.module else []))
                else:
                    base = node.module
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else known(base)
                           for a in node.names]
            for dst in targets:
                if dst is None or dst == mod:
                    continue
                where = f"{path.relative_to(ROOT.parent)}:{node.lineno}"
                old = edges.get((mod, dst))
                if old is None:
                    edges[(mod, dst)] = Edge(mod, dst, where, typing_only)
                elif old.typing_only and not typing_only:
                    edges[(mod, dst)] = Edge(mod, dst, where, False)
    return modules, edges


def package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def strongly_connected(nodes, succ) -> list[list[str]]:
    """Components of more than one node (Tarjan, iterative: the codegen graph is deep)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(succ.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def violations() -> dict[str, str]:
    """Every violation: key (as in KNOWN) -> an explanation naming the imports at fault."""
    modules, edges = build_graph()
    found: dict[str, str] = {}
    for e in edges.values():
        for src_pkg, banned in FORBIDDEN.items():
            if _under(e.src, src_pkg) and any(_under(e.dst, b) for b in banned):
                found[f"{e.src} -> {e.dst}"] = f"{src_pkg} must not import {e.dst} ({e.where})"
        a, b = _kernel_package(e.src), _kernel_package(e.dst)
        if a and b and not _kernels_may_import(a, b):
            found[f"{e.src} -> {e.dst}"] = (f"{KERNELS}.{a} must not import {KERNELS}.{b}: a backend's lowerings share "
                                            f"only kernels.common and kernels.gpu ({e.where})")

    runtime = [e for e in edges.values() if not e.typing_only]
    pkg_succ, pkg_why = defaultdict(set), defaultdict(list)
    for e in runtime:
        a, b = package_of(e.src), package_of(e.dst)
        if a != b and b in {package_of(m) for m in modules}:
            pkg_succ[a].add(b)
            pkg_why[(a, b)].append(e)
    for comp in strongly_connected({package_of(m) for m in modules}, pkg_succ):
        why = "".join(f"\n        {a} -> {b}: {e.src} -> {e.dst} ({e.where})"
                      for a in comp for b in sorted(pkg_succ[a]) if b in comp for e in pkg_why[(a, b)][:1])
        for p in comp:
            found[f"package circle: {p}"] = f"circle between {', '.join(comp)}, e.g.:{why}"

    mod_succ = defaultdict(set)
    for e in runtime:
        if package_of(e.src) == package_of(e.dst) and e.dst in modules:
            mod_succ[e.src].add(e.dst)
    for comp in strongly_connected(modules, mod_succ):
        why = "".join(f"\n        {e.src} -> {e.dst} ({e.where})" for e in runtime
                      if e.src in comp and e.dst in comp)
        for m in comp:
            found[f"circle in {package_of(m)}: {m}"] = f"circle of {len(comp)} modules:{why}"
    return found


def test_import_rules():
    found = violations()
    new = sorted(set(found) - KNOWN)
    gone = sorted(KNOWN - set(found))
    lines = []
    if new:
        lines.append(f"{len(new)} import-rule violation(s) not in KNOWN (remove the import, or move "
                     "the shared piece into a module both sides may import):")
        by_why = defaultdict(list)  # a circle's members share one explanation: print it once
        for k in new:
            by_why[found[k]].append(k)
        for why, keys in by_why.items():
            lines += [f"  {k}" for k in keys] + [f"      {why}"]
    if gone:
        lines.append(f"{len(gone)} KNOWN entr(y/ies) no longer occur: delete them from KNOWN in "
                     f"{pathlib.Path(__file__).name}:")
        lines += [f"  {k}" for k in gone]
    assert not lines, "\n".join(lines)


def test_the_graph_sees_lazy_relative_and_typing_imports(tmp_path, monkeypatch):
    """The parser itself: a function-level relative import is an edge; a TYPE_CHECKING one is an
    edge for the layering rules but not for circles."""
    pkg = tmp_path / "aitgen"
    for rel, text in {
        "__init__.py": "from . import ir\n",
        "ir/__init__.py": "",
        "ir/tensor.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .op import Op\n"
                        "def f():\n    from .. import ops\n",
        "ir/op.py": "from .tensor import Tensor\n",
        "ops/__init__.py": "from ..ir.tensor import Tensor\n",
    }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", pkg)
    _, edges = build_graph()
    assert edges[("aitgen.ir.tensor", "aitgen.ops")].typing_only is False
    assert edges[("aitgen.ir.tensor", "aitgen.ir.op")].typing_only is True
    assert ("aitgen", "aitgen.ir") in edges and ("aitgen.ir.op", "aitgen") not in edges
    found = violations()
    assert "aitgen.ir.tensor -> aitgen.ops" in found
    assert {"package circle: aitgen.ir", "package circle: aitgen.ops"} <= set(found)
    assert not any(k.startswith("circle in aitgen.ir") for k in found)


def test_backend_kernel_packages_share_only_common_and_gpu(tmp_path, monkeypatch):
    """A backend's lowerings may import kernels.common and kernels.gpu (the GPU backends' shared
    own kernels), never another backend's package; kernels.gpu never imports a backend."""
    pkg = tmp_path / "aitgen"
    for rel, text in {
        "__init__.py": "",
        "codegen/__init__.py": "",
        "codegen/kernels/__init__.py": "",
        "codegen/kernels/common/__init__.py": "",
        "codegen/kernels/gpu/__init__.py": "from ..common import x\n",
        "codegen/kernels/gpu/bad.py": "from ..cuda import y\n",
        "codegen/kernels/cpu/__init__.py": "",
        "codegen/kernels/cuda/__init__.py": "from .. import gpu\nfrom ..common import x\n",
        "codegen/kernels/rocm/__init__.py": "from .. import gpu\nfrom ..cuda import y\n",
    }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", pkg)
    found = {k for k in violations() if "->" in k}
    assert found == {"aitgen.codegen.kernels.rocm -> aitgen.codegen.kernels.cuda",
                     "aitgen.codegen.kernels.gpu.bad -> aitgen.codegen.kernels.cuda"}, found


if __name__ == "__main__":  # print the current violations, e.g. to refresh KNOWN
    by_why = defaultdict(list)
    for key, why in sorted(violations().items()):
        by_why[why].append(key)
    for why, keys in by_why.items():
        print("\n".join(keys) + f"\n    {why}")
