"""Walking an ONNX graph: inputs and dims, initializers, node conversion, import-time folding.

Every ONNX value name maps to one of
  - a Tensor (computed at run time, or a constant the graph reads),
  - an ndarray (known while importing: an initializer, a Constant node, a folded node),
  - an object ndarray of Dims (a shape value that depends on dynamic dims: Shape of a tensor whose
    batch is an IntVar, and what Gather/Concat/Mul/... make of it; see _symbolic.py).
Import-time values become graph constants only when something that runs reads them, so Shape ->
Gather -> Unsqueeze -> Concat -> Reshape leaves one reshape with a symbolic target shape.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np

from ...errors import AitgenError, ImportError_, InvalidNameError, ShapeError, UnknownDimError, UnsupportedOpError
from ...ir.dims import Dim, IntImm, IntVar
from ...ir.dtype import as_dtype
from ...ir.tensor import Tensor, constant
from ._proto import elem_dtype, onnx_module
from ._symbolic import fold_symbolic, normalize_symbolic
from .registry import Folded, NodeContext, converter_for, min_opset_of, op_key

# Opsets 13-21 are the promise. The model-level floor is low on purpose: each converter registers
# the opset its semantics start at (onnx_op(min_opset=...)), and variants where an op changed
# (Squeeze/Unsqueeze/Split axes, Slice/Pad/Clip inputs, Reduce* axes), so an older model imports
# exactly the ops whose semantics we follow and names the first one we do not.
MIN_OPSET = 1
DEFAULT_DIM_BOUND = 64

# Converters that must see their node even when every input is known (nothing to fold: they have
# effects on shapes or produce random numbers).
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
            "Bernoulli",
            # subgraphs read values of the enclosing graph, so "every input known" says nothing
            "If", "Loop", "Scan"}


def read_model(model):
    """A ModelProto from a path, bytes or a ModelProto; ImportError_ for anything unreadable."""
    onnx = onnx_module()
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        data, where = bytes(model), "bytes"
    elif isinstance(model, (str, os.PathLike)):
        p = Path(model)
        if not p.is_file():
            raise ImportError_(f"ONNX model file '{p}' does not exist")
        data, where = p.read_bytes(), f"'{p}'"
    else:
        raise ImportError_(f"an ONNX model must be a path, bytes or onnx.ModelProto, got {type(model).__name__}")
    m = onnx.ModelProto()
    try:
        m.ParseFromString(data)
    except Exception as e:  # protobuf's DecodeError and friends
        raise ImportError_(f"{where} is not a valid ONNX model: {e}") from None
    if not m.HasField("graph"):
        raise ImportError_(f"{where} is not a valid ONNX model: it has no graph")
    if isinstance(model, (str, os.PathLike)):  # weights saved beside the model (models over 2 GB)
        from onnx.external_data_helper import (
            load_external_data_for_model,
            uses_external_data,
        )
        if any(uses_external_data(t) for t in m.graph.initializer):
            try:
                load_external_data_for_model(m, str(Path(model).parent))
            except Exception as e:
                raise ImportError_(f"{where}: external weights cannot be read: {e}") from None
    return m


class _Missing:
    """An output a converter did not produce; reading it is an unsupported-op error."""

    def __init__(self, label: str, k: int):
        self.label, self.k = label, k


class Loader:
    def __init__(self, model, dim_bounds: Optional[Mapping[str, tuple[int, int]]] = None,
                 default_dim_bound: int = DEFAULT_DIM_BOUND,
                 input_dtypes: Optional[Mapping[str, Any]] = None,
                 constant_inputs: Optional[Mapping[str, Any]] = None, fold_qdq: bool = False):
        self.onnx = onnx_module()
        from onnx import numpy_helper
        self.numpy_helper = numpy_helper
        self.model = model
        self.dim_bounds = dict(dim_bounds or {})
        self.default_dim_bound = int(default_dim_bound)
        self.input_dtypes = dict(input_dtypes or {})
        self.constant_inputs = {k: np.asarray(v) for k, v in (constant_inputs or {}).items()}
        self.values: dict[str, Any] = {}
        self.vars: dict[str, IntVar] = {}
        self._const_cache: dict[str, Tensor] = {}
        self._folding = False
        self.fold_qdq = fold_qdq        # qdq_fold.py
        self._producers: dict = {}      # output name -> node of the top-level graph (qdq_fold.py)
        self._depth = 0                 # subgraphs being converted
        self.opset = self._default_opset()

    # -- model-level ----------------------------------------------------------------------------
    def _default_opset(self) -> Optional[int]:
        """The ai.onnx opset, or None for a model that imports only other domains (ai.onnx.ml,
        ai.onnx.preview.training): such a model is valid ONNX, and its nodes are refused one by
        one as unsupported in convert(); a default-domain node in it is malformed."""
        self.domains: dict[str, int] = {}
        for o in self.model.opset_import:
            self.domains.setdefault("" if o.domain == "ai.onnx" else o.domain, int(o.version))
        v = self.domains.get("")
        if v is not None and v < MIN_OPSET:
            raise UnsupportedOpError(f"the model uses ai.onnx opset {v}; aitgen imports opsets "
                                     f"{MIN_OPSET} and later")
        return v

    def dim(self, d, where: str) -> Dim:
        if d.HasField("dim_value"):
            if d.dim_value < 0:
                raise ImportError_(f"{where}: negative size {d.dim_value}")
            return IntImm(int(d.dim_value))
        name = d.dim_param or where.replace("'", "").replace(" ", "_")
        v = self.vars.get(name)
        if v is None:
            lb, ub = self.dim_bounds.get(name, (1, self.default_dim_bound))
            try:
                v = IntVar(name, int(lb), int(ub))
            except InvalidNameError:  # a dim_param with a NUL: the name is at fault, not the bounds
                raise
            except AitgenError as e:
                raise ImportError_(f"{where}: bounds for dim '{name}': {e}") from None
            self.vars[name] = v
        return v

    def graph_input(self, vi) -> Tensor:
        what = f"input '{vi.name}'"
        if not vi.type.HasField("tensor_type"):
            raise UnsupportedOpError(f"{what}: only tensor inputs are supported "
                                     f"(got {vi.type.WhichOneof('value')})")
        tt = vi.type.tensor_type
        if vi.name in self.input_dtypes:
            dt = as_dtype(self.input_dtypes[vi.name])
        else:
            dt = elem_dtype(tt.elem_type, what)
        if not tt.HasField("shape"):
            raise ImportError_(f"{what} has no shape (rank unknown)")
        shape = [self.dim(d, f"{vi.name} dim {i}") for i, d in enumerate(tt.shape.dim)]
        return Tensor(shape, dt, name=vi.name)

    def load(self) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        g = self.model.graph
        # Domains first: an ai.onnx.ml model is refused by naming its first ml node, not by the
        # string or double input that comes with such models.
        for idx, node in enumerate(g.node):
            self._check_domain(node, idx)
        for init in g.initializer:
            if not init.name:
                raise ImportError_("an initializer has no name")
            try:
                self.values[init.name] = self.numpy_helper.to_array(init)
            except Exception as e:
                raise ImportError_(f"initializer '{init.name}' cannot be read: {e}") from None
        for sp in g.sparse_initializer:
            raise UnsupportedOpError(f"sparse initializer '{sp.values.name}' is not supported")
        inputs: dict[str, Tensor] = {}
        for vi in g.input:
            if vi.name in self.values:  # an initializer listed as an input: a constant here
                continue
            if vi.name in self.constant_inputs:  # frozen by the caller: known while importing
                self.values[vi.name] = self.constant_inputs.pop(vi.name)
                continue
            if not vi.name or vi.name in inputs:
                raise ImportError_(f"graph input name '{vi.name}' is empty or repeated")
            inputs[vi.name] = self.values[vi.name] = self.graph_input(vi)
        if self.constant_inputs:
            raise ImportError_(f"constant_inputs names {sorted(self.constant_inputs)}, which are not graph "
                               f"inputs; the inputs are {[vi.name for vi in g.input]}")
        # A misspelt name would otherwise be ignored and its dim built with the default bounds.
        unknown = sorted(set(self.dim_bounds) - set(self.vars))
        if unknown:
            known = sorted(self.vars)
            raise UnknownDimError(f"dim_bounds names {unknown}, which are not symbolic dims of this model's "
                                  f"inputs (its symbolic dims: {known})", unknown, known)
        self._producers = {o: node for node in g.node for o in node.output if o}
        for idx, node in self._sorted_nodes(g):
            self.convert(node, idx)
        outputs: dict[str, Tensor] = {}
        for vi in g.output:
            if vi.name not in self.values:
                raise ImportError_(f"graph output '{vi.name}' is produced by no node")
            outputs[vi.name] = self._materialise(vi.name, f"graph output '{vi.name}'", cache=True)
        return inputs, outputs

    def _sorted_nodes(self, g) -> list:
        """Nodes in an order where each reads only values defined before it (ONNX requires
        topological order, but a sort costs little and names the dangling value when there is one)."""
        defined = set(self.values) | {""}
        producers: dict[str, int] = {}
        for i, n in enumerate(g.node):
            for o in n.output:
                if o and (o in producers or o in defined):
                    raise ImportError_(f"value '{o}' is defined twice (node '{n.name or n.op_type}')")
                if o:
                    producers[o] = i
        for i, n in enumerate(g.node):
            for name in n.input:
                if name not in defined and name not in producers:
                    raise ImportError_(f"node '{n.name or n.op_type + '_' + str(i)}' ({n.op_type}) reads "
                                       f"'{name}', which no input, initializer or node defines")
        order, done, state = [], set(), {}
        for start in range(len(g.node)):
            stack = [(start, False)]
            while stack:
                i, expanded = stack.pop()
                if i in done:
                    continue
                if expanded:
                    done.add(i)
                    order.append((i, g.node[i]))
                    continue
                if state.get(i) == "open":
                    raise ImportError_(f"the graph has a cycle through node '{g.node[i].name or g.node[i].op_type}'")
                state[i] = "open"
                stack.append((i, True))
                for name in g.node[i].input:
                    j = producers.get(name)
                    if j is not None and j not in done:
                        if state.get(j) == "open":
                            raise ImportError_(f"the graph has a cycle through value '{name}'")
                        stack.append((j, False))
        return order

    def inline(self, g, ctx: NodeContext, inputs=None) -> list:
        """Convert a subgraph (an If branch, a modifier graph) in the enclosing scope; its outputs'
        values. `inputs` bind its formal inputs, shadowing outer names of the same spelling only
        while it converts."""
        inputs = list(inputs or [])
        if len(inputs) != len(g.input):
            raise ImportError_(f"{ctx.label}: the subgraph takes {len(g.input)} inputs, given {len(inputs)}")
        # A subgraph is a scope: its inputs, initializers and node outputs may reuse names of the
        # outer graph or of a sibling subgraph (FlexAttention's two modifiers, If's branches), so
        # they live only while it converts, and an outer constant cached under a name it shadows
        # is not taken for its own.
        shadow = {vi.name for vi in g.input} | {i.name for i in g.initializer}
        before, cache = dict(self.values), self._const_cache
        self._const_cache = {n: t for n, t in cache.items() if n not in shadow}
        for vi, t in zip(g.input, inputs):
            self.values[vi.name] = t
        self._depth += 1
        try:
            return self._inline_body(g, ctx)
        finally:
            self._depth -= 1
            inner = self._const_cache
            self.values.clear()
            self.values.update(before)
            # outer constants the subgraph materialised stay cached: one tensor per initializer
            cache.update({n: t for n, t in inner.items() if n in before and n not in shadow})
            self._const_cache = cache

    def _inline_body(self, g, ctx: NodeContext) -> list:
        for init in g.initializer:
            try:
                self.values[init.name] = self.numpy_helper.to_array(init)
            except Exception as e:
                raise ImportError_(f"{ctx.label}: subgraph initializer '{init.name}' cannot be read: {e}") from None
        for idx, node in self._sorted_nodes(g):
            self.convert(node, idx)
        out = []
        for vi in g.output:
            if vi.name not in self.values:
                raise ImportError_(f"{ctx.label}: subgraph output '{vi.name}' is produced by no node")
            v = self.value_of(vi.name, ctx)
            out.append(Folded(v) if isinstance(v, np.ndarray) else v)
        return out

    def call(self, g, ctx: NodeContext, bindings: list) -> list:
        """Convert a loop body once, its formal inputs bound to `bindings` (Tensors or import-time
        values): an unrolled Loop/Scan converts the same body once per iteration, so the names the
        body defines (and constants cached under them) are dropped again afterwards."""
        if len(g.input) != len(bindings):
            raise ImportError_(f"{ctx.label}: the body takes {len(g.input)} inputs, the node gives it {len(bindings)}")
        saved = self.values, self._const_cache
        self.values, self._const_cache = dict(self.values), dict(self._const_cache)
        try:
            return self.inline(g, ctx, [v.value if isinstance(v, Folded) else v for v in bindings])
        finally:
            self.values, self._const_cache = saved

    def scope_tensors(self) -> list[Tensor]:
        return [v for v in self.values.values() if isinstance(v, Tensor)] + list(self._const_cache.values())

    def qdq_producer(self, name: str):
        """The top-level node producing `name`; None inside a subgraph, whose names may shadow it."""
        return None if self._depth else self._producers.get(name)

    # -- values ----------------------------------------------------------------------------------
    def value_of(self, name: str, ctx: NodeContext) -> Any:
        v = self.values.get(name)
        if isinstance(v, _Missing):
            raise UnsupportedOpError(f"{ctx.label} reads '{name}', output {v.k} of {v.label}, "
                                     "which aitgen does not compute")
        return v

    def tensor_of(self, name: str, ctx: NodeContext) -> Tensor:
        self.value_of(name, ctx)
        return self._materialise(name, f"{ctx.label}: input '{name}'", cache=not self._folding)

    def _materialise(self, name: str, what: str, cache: bool) -> Tensor:
        v = self.values[name]
        if isinstance(v, Tensor):
            return v
        if isinstance(v, _Missing):
            raise UnsupportedOpError(f"{what} is output {v.k} of {v.label}, which aitgen does not compute")
        if v.dtype == object:
            raise UnsupportedOpError(f"{what} holds a shape value that depends on dynamic dims "
                                     f"[{', '.join(map(str, v.reshape(-1)))}]; aitgen keeps such values "
                                     "at import time and cannot compute them in the graph")
        if cache and name in self._const_cache:
            return self._const_cache[name]
        try:
            # float64 is named: constant() narrows an untyped float64 array to float32
            t = constant(v, dtype="float64" if v.dtype == np.float64 else None, name=name)
        except AitgenError:
            raise UnsupportedOpError(f"{what}: constant of numpy dtype {v.dtype} has no aitgen dtype") from None
        if cache:
            self._const_cache[name] = t
        return t

    def attr_value(self, a) -> Any:
        onnx = self.onnx
        AT = onnx.AttributeProto
        if a.type == AT.UNDEFINED:
            raise ImportError_("has no type")
        try:
            v = onnx.helper.get_attribute_value(a)
        except Exception as e:
            raise ImportError_(f"cannot be read: {e}") from None
        if a.type == AT.STRING:
            return v.decode("utf-8", "replace")
        if a.type == AT.STRINGS:
            return [s.decode("utf-8", "replace") for s in v]
        if a.type == AT.TENSOR:
            try:
                return self.numpy_helper.to_array(v)
            except Exception as e:
                raise ImportError_(f"tensor cannot be read: {e}") from None
        if a.type == AT.INTS:
            return [int(x) for x in v]
        if a.type == AT.FLOATS:
            return [float(x) for x in v]
        if a.type == AT.INT:
            return int(v)
        if a.type == AT.FLOAT:
            return float(v)
        return v

    # -- nodes -----------------------------------------------------------------------------------
    def convert(self, node, idx: int) -> None:
        self._check_domain(node, idx)
        domain = "" if node.domain == "ai.onnx" else node.domain
        opset = self.domains[domain] if domain else self.opset
        ctx = NodeContext(node, idx, opset, list(node.input), self)
        key = op_key(domain, node.op_type)
        fn = converter_for(key, opset)
        if fn is None:
            lo = min_opset_of(key)
            why = f"supported from opset {lo}" if lo is not None else "no converter for this op type"
            raise UnsupportedOpError(f"{ctx.label}: {why}")
        vals = [self.value_of(n, ctx) for n in node.input if n]
        runtime = any(isinstance(v, Tensor) and not v.is_constant for v in vals)
        symbolic = any(isinstance(v, np.ndarray) and v.dtype == object for v in vals)
        try:
            res = None
            if not runtime and symbolic:
                res = fold_symbolic(ctx)
            if res is None and not runtime and not symbolic and node.op_type not in _NO_FOLD:
                res = self._fold(ctx, fn)
            if res is None:
                res = _as_list(fn(ctx), ctx)
        except UnsupportedOpError as e:
            raise e if ctx.label in str(e) else UnsupportedOpError(f"{ctx.label}: {e}") from None
        except ImportError_ as e:
            raise e if ctx.label in str(e) else ImportError_(f"{ctx.label}: {e}") from None
        except ShapeError as e:
            # Two sizes bound during the run (ops/dynamic.py) may be equal while the graph cannot
            # say so at import time: aitgen's limit, not the model's fault.
            if _reads_produced(ctx):
                raise UnsupportedOpError(f"{ctx.label}: sizes bound during the run that the graph cannot "
                                         f"match at import time: {e}") from None
            raise ImportError_(f"{ctx.label}: {type(e).__name__}: {e}") from None
        except AitgenError as e:  # a shape or dtype error from an op builder: the model is wrong
            raise ImportError_(f"{ctx.label}: {type(e).__name__}: {e}") from None
        except Exception as e:  # never let a bare KeyError/IndexError/... escape load
            raise ImportError_(f"{ctx.label}: cannot convert ({type(e).__name__}: {e})") from None
        self._store(ctx, res)

    def _check_domain(self, node, idx: int) -> None:
        """A node outside the default domain is unsupported (named with its domain and that
        domain's opset); a node whose domain the model does not import is malformed."""
        domain = "" if node.domain == "ai.onnx" else node.domain
        name = node.name or f"{node.op_type}_{idx}"
        version = self.domains.get(domain)
        if version is None:
            which = f"domain '{domain}'" if domain else "the default domain (ai.onnx)"
            raise ImportError_(f"node '{name}' ({node.op_type}) is in {which}, for which the model "
                               f"imports no opset (it imports {self._imports()})")
        if domain and min_opset_of(op_key(domain, node.op_type)) is None:
            raise UnsupportedOpError(f"node '{name}' ({domain}.{node.op_type}, {domain} opset {version}): "
                                     f"no converter for this op type of domain '{domain}' (aitgen converts "
                                     "default-domain (ai.onnx) ops and the few others supported_ops() lists)")

    def _imports(self) -> str:
        return ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in self.domains.items()) or "none"

    def _fold(self, ctx: NodeContext, fn) -> list:
        """Every input known: run the converter on fresh constants and evaluate it with the oracle."""
        from ... import reference
        self._folding = True
        try:
            res = _as_list(fn(ctx), ctx)
        finally:
            self._folding = False
        live = {f"o{i}": r for i, r in enumerate(res) if isinstance(r, Tensor) and not r.is_constant}
        values = reference.run(live, {}) if live else {}
        return [Folded(values[f"o{i}"] if f"o{i}" in live else r.value) if isinstance(r, Tensor) else r
                for i, r in enumerate(res)]

    def _store(self, ctx: NodeContext, res: list) -> None:
        if len(res) > ctx.num_outputs:
            raise ImportError_(f"{ctx.label}: converter gave {len(res)} results for "
                               f"{ctx.num_outputs} outputs")
        for k, name in enumerate(ctx.node.output):
            if not name:
                continue
            r = res[k] if k < len(res) else None
            if r is None:
                self.values[name] = _Missing(ctx.label, k)
            elif isinstance(r, Folded):
                v = r.value
                self.values[name] = normalize_symbolic(v) if v.dtype == object else v
            elif isinstance(r, Tensor):
                if r.is_constant:
                    self.values[name] = r.value
                else:
                    if r.name is None and r.producer is not None:
                        r.name = name
                    self.values[name] = r
            else:
                raise ImportError_(f"{ctx.label}: converter returned a {type(r).__name__}")


def _as_list(res, ctx: NodeContext) -> list:
    if isinstance(res, (Tensor, Folded)) or res is None:
        return [res]
    return list(res)


def _reads_produced(ctx) -> bool:
    """Whether a node reads a tensor with a size bound during the run."""
    for i in range(ctx.num_inputs):
        try:
            v = ctx.value(i)
        except AitgenError:
            continue
        if isinstance(v, Tensor) and any(getattr(x, "produced", False) for d in v.shape for x in d.vars()):
            return True
    return False


def load_model(model, *, dim_bounds=None, default_dim_bound: int = DEFAULT_DIM_BOUND,
               input_dtypes=None, constant_inputs=None,
               fold_qdq: bool = False) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    m = read_model(model)
    try:
        return Loader(m, dim_bounds, default_dim_bound, input_dtypes, constant_inputs, fold_qdq).load()
    except AitgenError:
        raise
    except RecursionError as e:
        raise ImportError_(f"the model is too deeply nested to import: {e}") from None
    except Exception as e:  # a malformed proto field the checks above did not foresee
        raise ImportError_(f"malformed model: {type(e).__name__}: {e}") from None
