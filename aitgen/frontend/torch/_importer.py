"""Walking an ExportedProgram's graph: inputs, constants, one converter per node, outputs.

Every fx node maps to what the converters work with: a Value (a tensor, see _value.py), a Dim (a
SymInt such as `sym_size(x, 0)` or `s0 * 2`), a tuple (a multi-output op, read by getitem nodes),
or None (assertions). After each converter the result's shape and dtype are checked against the
node's own FakeTensor (`node.meta["val"]`), so a converter that misreads an op fails at that node,
naming it, instead of producing a wrong number later.
"""
from __future__ import annotations

import operator
import re
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import torch
from torch.export.graph_signature import InputKind, OutputKind, TensorArgument
from torch.utils import _pytree as pytree

from ...errors import AitgenError, DTypeError, ShapeError, UnsupportedOpError
from ...ir.dims import Dim, IntImm, IntVar
from ...ir.dtype import DType
from ...ir.graph import topo_order
from ...ir.tensor import Tensor, constant
from ._symbolic import SymbolTable
from ._value import Layouts, Perm, Value
from . import ops_elementwise, ops_nn, ops_reduce, ops_tensor  # noqa: F401 - importing them registers
from ._dtype import ir_dtype, to_numpy
from .registry import CONVERTERS, Args, Unavailable, bind, overload_name

# Nodes with no result that matters for inference: runtime asserts torch inserts on sizes and metadata.
_IGNORED = {"_assert_tensor_metadata.default", "_assert_scalar.default", "sym_constrain_range_for_size.default",
            "sym_constrain_range.default", "_assert_async.msg", "_assert_async.default"}


class Ctx:
    """What a converter sees of the node it converts."""

    def __init__(self, imp: "Importer", node: torch.fx.Node, raw: Args):
        self.imp, self.node, self.raw = imp, node, raw
        self.label = imp.label(node)

    # -- operands --------------------------------------------------------------------------------
    def tensor(self, v) -> Tensor:
        """An operand in torch's axis order."""
        if isinstance(v, Value):
            return self.imp.layouts.torch_order(v)
        if isinstance(v, Tensor):
            return v
        raise UnsupportedOpError(f"{self.label}: expected a tensor operand, got {type(v).__name__}")

    def layout(self, v: Value, perm: Perm) -> Tensor:
        """An operand stored with IR axis i = torch axis perm[i]."""
        return self.imp.layouts.get(v, perm)

    def dim(self, x) -> Dim:
        return self.imp.sym.dim(x)

    def dims(self, xs) -> list[Dim]:
        return [self.dim(x) for x in xs]

    def fake(self, arg: str):
        """The FakeTensor (or Python value) torch traced for argument `arg`."""
        x = self.raw[arg]
        return x.meta.get("val") if isinstance(x, torch.fx.Node) else x

    def out_fake(self, i: int = 0):
        val = self.node.meta.get("val")
        return val[i] if isinstance(val, (tuple, list)) else val

    def out_dtype(self, i: int = 0) -> DType:
        return ir_dtype(self.out_fake(i).dtype, self.label)

    def const(self, value, dtype: DType) -> Tensor:
        return constant(np.asarray(value, dtype=dtype.np), dtype=dtype)

    def fail(self, why: str):
        raise UnsupportedOpError(f"{self.label}: {why}")


class Importer:
    def __init__(self, ep, dim_bounds: Optional[Mapping[str, tuple[int, int]]], default_dim_bound: int,
                 output_names: Optional[Sequence[str]]):
        self.ep = ep
        self.sym = SymbolTable(ep.range_constraints, dim_bounds, default_dim_bound)
        self.layouts = Layouts()
        self.env: dict[torch.fx.Node, Any] = {}
        self.output_names = output_names
        self._debug_names = _debug_names(ep)

    def label(self, node: torch.fx.Node) -> str:
        where = ""
        stack = node.meta.get("nn_module_stack")
        if stack:
            path, cls = list(stack.values())[-1]
            cls = getattr(cls, "__name__", str(cls).rsplit(".", 1)[-1])
            where = f" in {path or '<root>'} ({cls})"
        return f"torch node '{node.name}' ({node.target}){where}"

    # -- inputs --------------------------------------------------------------------------------
    def _placeholders(self) -> dict[str, Tensor]:
        sig = self.ep.graph_signature
        state = {**dict(self.ep.state_dict), **dict(getattr(self.ep, "constants", {}) or {})}
        nodes = {n.name: n for n in self.ep.graph.nodes if n.op == "placeholder"}
        inputs: dict[str, Tensor] = {}
        for spec in sig.input_specs:
            if not isinstance(spec.arg, TensorArgument):
                if spec.kind == InputKind.USER_INPUT and type(spec.arg).__name__ == "ConstantArgument":
                    continue  # a Python constant baked into the program
                raise UnsupportedOpError(f"torch input '{getattr(spec.arg, 'name', spec.arg)}' of kind "
                                         f"{spec.kind.name} ({type(spec.arg).__name__}) is not supported; "
                                         "only tensor inputs are")
            node = nodes[spec.arg.name]
            if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                if spec.target not in state:
                    raise UnsupportedOpError(f"torch {spec.kind.name.lower()} '{spec.target}' has no value "
                                             "in the exported program")
                val = state[spec.target]
                dt = ir_dtype(val.dtype, f"torch {spec.kind.name.lower()} '{spec.target}'")
                t = constant(to_numpy(val), dtype=dt)
                self.layouts.param_of[id(t)] = spec.target
                self.env[node] = Value(t)
            elif spec.kind == InputKind.USER_INPUT:
                fake = node.meta["val"]
                dims = []
                for axis, d in enumerate(fake.shape):
                    expr = getattr(getattr(d, "node", None), "expr", None)
                    for sym in sorted(getattr(expr, "free_symbols", ()), key=str):
                        self.sym.declare(sym, self._dim_name(spec.arg.name, axis, expr))
                    dims.append(self.sym.dim(d))
                t = Tensor(dims, ir_dtype(fake.dtype, f"torch input '{spec.arg.name}'"), name=spec.arg.name)
                inputs[spec.arg.name] = t
                self.env[node] = Value(t)
            else:
                raise UnsupportedOpError(f"torch input '{spec.arg.name}' of kind {spec.kind.name} is not "
                                         "supported (inference graphs take tensors, parameters and buffers)")
        self._check_bindable(inputs)
        unused = self.sym.unused_bounds()
        if unused:
            known = sorted(v.name for v in self.sym.vars.values())
            raise ShapeError(f"dim_bounds names {unused}, which are not dynamic dims of this program "
                             f"(its dynamic dims: {known})")
        return inputs

    def _check_bindable(self, inputs: dict[str, Tensor]) -> None:
        """A compiled model learns each dynamic size from an input dim that is exactly that size."""
        bare = {id(d) for t in inputs.values() for d in t.shape if isinstance(d, IntVar)}
        for name, t in inputs.items():
            for axis, d in enumerate(t.shape):
                missing = [v.name for v in d.vars() if id(v) not in bare]
                if missing:
                    raise UnsupportedOpError(
                        f"torch input '{name}' dim {axis} is {d}: aitgen binds a dynamic size only from "
                        f"an input dim that is exactly that size, and no input dim is {missing[0]} "
                        "(export with a Dim for this dim itself, not a derived one)")

    def _dim_name(self, inp: str, axis: int, expr) -> str:
        """The Dim's name for the symbol of input `inp`'s axis: "batch", or "h" for a size 2*h."""
        debug = self._debug_names.get((inp, axis))
        if debug is not None:
            idents = set(re.findall(r"[A-Za-z_]\w*", debug))
            if len(idents) == 1 and len(expr.free_symbols) == 1:
                return idents.pop()
        return f"{inp}_{axis}"

    # -- nodes ---------------------------------------------------------------------------------
    def _resolve(self, x, node: torch.fx.Node):
        if isinstance(x, torch.fx.Node):
            v = self.env[x]
            if isinstance(v, Unavailable):
                raise UnsupportedOpError(f"{self.label(node)} reads {v.what}, which aitgen does not compute")
            return v
        if isinstance(x, (list, tuple)):
            return type(x)(self._resolve(i, node) for i in x)
        return x

    def _convert(self, node: torch.fx.Node) -> None:
        target, val = node.target, node.meta.get("val")
        if target is operator.getitem:
            src = self.env[node.args[0]]
            if not isinstance(src, (tuple, list)):
                raise UnsupportedOpError(f"{self.label(node)}: indexing a {type(src).__name__}")
            self.env[node] = src[node.args[1]]
            return
        if isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool) and not isinstance(val, torch.Tensor):
            self.env[node] = self.sym.dim(val)  # sym_size, s0 * 2, ...: torch already worked it out
            return
        if not isinstance(target, torch._ops.OpOverload):
            if isinstance(val, (torch.SymFloat, torch.SymBool, float, bool)):
                self.env[node] = Unavailable(f"the symbolic scalar '{node.name}'")
                return
            raise UnsupportedOpError(f"{self.label(node)}: a call of {target!r} is not an ATen op; "
                                     "export with torch.export and run_decompositions()")
        name = overload_name(target)
        if name in _IGNORED:
            self.env[node] = None
            return
        conv = CONVERTERS.get(name) if target.namespace == "aten" else None
        if conv is None:
            raise UnsupportedOpError(f"{self.label(node)}: aten op '{target.namespace}.{name}' is not "
                                     "supported by aitgen's torch importer")
        raw = bind(target, node.args, node.kwargs)
        args = Args({k: self._resolve(v, node) for k, v in raw.items()})
        cx = Ctx(self, node, raw)
        try:
            out = conv(cx, args)
        except AitgenError as e:
            if "torch node '" in str(e):
                raise
            raise type(e)(f"{cx.label}: {e}") from None
        self.env[node] = self._wrap(node, out)

    def _wrap(self, node: torch.fx.Node, out):
        val = node.meta.get("val")
        if isinstance(out, (tuple, list)):
            vals = val if isinstance(val, (tuple, list)) else [None] * len(out)
            return tuple(self._check(node, o, v) for o, v in zip(out, vals))
        return self._check(node, out, val)

    def _check(self, node, out, fake):
        if isinstance(out, Unavailable) or out is None:
            return out
        v = out if isinstance(out, Value) else Value(out)
        if v.t.producer is not None and v.t.producer.name is None:
            v.t.producer.name = node.name
        if not isinstance(fake, torch.Tensor):
            return v
        if ir_dtype(fake.dtype, self.label(node)) != v.dtype:
            raise DTypeError(f"{self.label(node)}: the import gives {v.dtype}, torch says {fake.dtype}")
        got, want = v.shape, tuple(fake.shape)
        if len(got) != len(want) or not all(self._same_dim(g, w) for g, w in zip(got, want)):
            raise ShapeError(f"{self.label(node)}: the import gives shape [{', '.join(map(str, got))}], "
                             f"torch says {list(want)}")
        return v

    def _same_dim(self, got: Dim, want) -> bool:
        expr = getattr(getattr(want, "node", None), "expr", None)
        if expr is None:
            return got.is_static and got.value == int(want)
        if getattr(expr, "is_Integer", False):
            return got.is_static and got.value == int(expr)
        for subs, env in self._samples():
            rep = {s: subs[str(s)] for s in expr.free_symbols if str(s) in subs}
            try:
                if int(expr.xreplace(rep)) != got.evaluate(env):
                    return False
            except (TypeError, ValueError, ShapeError):
                return False
        self.sym.record(expr, got)
        return True

    def _samples(self):
        if getattr(self, "_sample_cache", None) is None:
            self._sample_cache = self.sym.sample_envs()
        return self._sample_cache

    # -- outputs -------------------------------------------------------------------------------
    def run(self) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        inputs = self._placeholders()
        out_node = None
        for node in self.ep.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                out_node = node
                break
            if node.op != "call_function":
                raise UnsupportedOpError(f"{self.label(node)}: fx '{node.op}' nodes (control flow, submodules) "
                                         "are not supported")
            self._convert(node)
        specs = self.ep.graph_signature.output_specs
        results = list(out_node.args[0]) if out_node is not None else []
        user = []
        for spec, res in zip(specs, results):
            if spec.kind != OutputKind.USER_OUTPUT:
                raise UnsupportedOpError(f"torch output '{getattr(spec.arg, 'name', '?')}' is a "
                                         f"{spec.kind.name}: a program that mutates its inputs or buffers "
                                         "is not an inference graph aitgen can import")
            user.append(res)
        names = self._output_names(len(user))
        outputs: dict[str, Tensor] = {}
        for name, res in zip(names, user):
            if not isinstance(res, torch.fx.Node):
                continue  # a Python constant among the outputs
            v = self._resolve(res, out_node)
            if not isinstance(v, Value):
                continue  # a SymInt output: not a tensor the model computes
            t = self.layouts.torch_order(v)
            if t.is_input or any(t is o for o in outputs.values()):
                from ... import ops
                t = ops.reshape(t, list(t.shape))  # an output needs its own buffer; passes keep this copy
            outputs[name] = t
        self._name_constants(outputs)
        return inputs, outputs

    def _output_names(self, n: int) -> list[str]:
        if self.output_names is not None:
            names = [str(x) for x in self.output_names]
            if len(names) != n:
                raise ShapeError(f"output_names has {len(names)} names for {n} outputs")
            return names
        spec = getattr(getattr(self.ep, "call_spec", None), "out_spec", None)
        names = [f"output_{i}" for i in range(n)]
        if spec is None:
            return names
        try:
            tree = pytree.tree_unflatten(list(range(n)), spec)
        except Exception:  # noqa: BLE001 - an unusual output container: keep positional names
            return names
        if isinstance(tree, int):
            return ["output"]
        top_dict = isinstance(tree, dict)

        def walk(obj, path):
            if isinstance(obj, int) and not isinstance(obj, bool):
                names[obj] = "_".join(path) if top_dict else "output_" + "_".join(path)
            elif isinstance(obj, dict):
                for k, x in obj.items():
                    walk(x, path + [str(k)])
            elif isinstance(obj, (list, tuple)):
                fields = getattr(obj, "_fields", None)
                for i, x in enumerate(obj):
                    walk(x, path + [fields[i] if fields else str(i)])
        walk(tree, [])
        return names if len(set(names)) == n else [f"output_{i}" for i in range(n)]

    def _name_constants(self, outputs: dict[str, Tensor]) -> None:
        """Parameters keep torch's names; a copy in another layout (OHWI conv weights) takes the name
        too when the original is not read, else `<name>.<axes>`."""
        if not outputs:
            return
        _, tensors = topo_order(outputs.values())  # the tensors themselves (a Graph would copy them)
        consts = [t for t in tensors if t.is_constant]
        by_param: dict[str, list[tuple[Tensor, Optional[str]]]] = {}
        for t in consts:
            if id(t) in self.layouts.param_of:
                by_param.setdefault(self.layouts.param_of[id(t)], []).append((t, None))
            elif id(t) in self.layouts.derived:
                src, tag = self.layouts.derived[id(t)]
                by_param.setdefault(src, []).append((t, tag))
        for src, ts in by_param.items():
            for t, tag in ts:
                t.name = src if len(ts) == 1 or tag is None else f"{src}.{tag}"


def _debug_names(ep) -> dict[tuple[str, int], str]:
    """(input name, axis) -> the torch.export.Dim's name, where the program's shape env kept it."""
    out: dict[tuple[str, int], str] = {}
    for node in ep.graph.nodes:
        if node.op != "placeholder":
            continue
        fake = node.meta.get("val")
        for d in getattr(fake, "shape", ()):
            env = getattr(getattr(d, "node", None), "shape_env", None)
            table = getattr(env, "source_name_to_debug_name", None) if env is not None else None
            if table:
                for src, name in table.items():
                    # "L['x'].size()[0]" (or "L['args'][0]..."): the simple form is all we rely on
                    if src.startswith("L['") and "'].size()[" in src:
                        inp, _, rest = src[3:].partition("'].size()[")
                        if rest.endswith("]") and rest[:-1].isdigit():
                            out.setdefault((inp, int(rest[:-1])), name)
                return out
    return out
