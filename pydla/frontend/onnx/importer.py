"""ONNX → IR: walk the graph once, infer every tensor's type, fold constants as we go.

Each ONNX node goes through its registered importer, which emits canonical IR nodes
(``ImportContext.emit``). A node whose inputs are all constant is evaluated at once with
the CPU kernels, so shape plumbing (Shape, Gather, Concat, Range, …) never reaches the
loadable.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu.backend import bind_layer
from pydla.dtypes import DType
from pydla.engine.memory import default_memory_limit, format_bytes, tensor_bytes
from pydla.errors import (
    ModelImportError,
    NotConstantError,
    PydlaError,
    ResourceLimitError,
    ShapeError,
)
from pydla.frontend.onnx.registry import find_importer
from pydla.ir import Graph, Node, Value

MIN_OPSET = 7
MAX_OPSET = onnx.defs.onnx_opset_version()
# Constant subgraphs producing more than this are kept as layers instead of being folded.
FOLD_LIMIT_BYTES = 1 << 28
# Shapes that ONNX inference leaves open are learned by running the kernel on zeros,
# as long as the inputs stay this small.
EVAL_INFER_LIMIT = 1 << 24

TensorType = tuple[tuple[int, ...], DType]


def tensor_to_array(t: onnx.TensorProto) -> tuple[np.ndarray, DType]:
    """A TensorProto as (storage array, DType); bfloat16 becomes uint16 bit patterns."""
    try:
        dtype = DType(t.data_type)
    except ValueError:
        name = onnx.TensorProto.DataType.Name(t.data_type)
        raise ModelImportError(f"tensor {t.name!r} has unsupported type {name}") from None
    arr = numpy_helper.to_array(t)
    if dtype is DType.BFLOAT16:
        arr = np.asarray(arr).view(np.uint16)
    return np.asarray(arr, dtype=dtype.np, order="C"), dtype


def _decode_attr(a: onnx.AttributeProto) -> Any:
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8")
    if isinstance(v, onnx.TensorProto):
        return tensor_to_array(v)[0]
    if isinstance(v, list):
        out = [x.decode("utf-8") if isinstance(x, bytes) else x for x in v]
        return [tensor_to_array(x)[0] if isinstance(x, onnx.TensorProto) else x for x in out]
    return v


class LazyAttrs(Mapping[str, Any]):
    """A node's attributes, each decoded when an importer first reads it: a tree ensemble
    carries ten attributes of millions of numbers (decoding them all into Python lists took
    12 s of a 25 s build), which its importer reads from the proto as arrays."""

    def __init__(self, proto: onnx.NodeProto) -> None:
        self._protos = {a.name: a for a in proto.attribute}
        self._decoded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._decoded:
            self._decoded[name] = _decode_attr(self._protos[name])
        return self._decoded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._protos)

    def __len__(self) -> int:
        return len(self._protos)


class OnnxNode:
    """One ONNX node as importers see it: resolved inputs and decoded attributes."""

    def __init__(self, proto: onnx.NodeProto, inputs: list[Value | None], opset: int,
                 name: str) -> None:
        self.proto = proto
        self.op_type = proto.op_type
        self.name = name
        self.inputs = inputs
        self.output_names = list(proto.output)
        self.opset = opset
        self.attrs: Mapping[str, Any] = LazyAttrs(proto)
        self.graph_attrs = {a.name: a.g for a in proto.attribute
                            if a.type == onnx.AttributeProto.GRAPH}
        self._types: list[tuple[tuple[int | None, ...] | None, DType | None]] | None = None

    def input(self, i: int) -> Value | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def attrs_with_defaults(self) -> dict[str, Any]:
        """Attributes with ONNX schema defaults filled in (the canonical attribute set)."""
        out: dict[str, Any] = {}
        try:
            schema = onnx.defs.get_schema(self.op_type, self.opset, "")
        except onnx.defs.SchemaError:
            schema = None
        if schema is not None:
            for name, a in schema.attributes.items():
                if a.default_value is not None and a.default_value.type != 0:
                    out[name] = _decode_attr(a.default_value)
        out.update(self.attrs)
        return out


class ImportContext:
    def __init__(self, graph: Graph, opset: int) -> None:
        self.graph = graph
        self.opset = opset
        self.scopes: list[dict[str, Value]] = [{}]
        self.node: OnnxNode | None = None
        # Values created while importing the current node (renamed after its ONNX outputs).
        self.fresh: set[int] = set()
        # Constants the import computes add up: each is under FOLD_LIMIT_BYTES, their sum
        # must stay under the build's memory limit (import_model's memory_limit).
        self.memory_limit = default_memory_limit()
        self.computed_bytes = 0

    # -- names and scopes -------------------------------------------------------------
    def lookup(self, name: str) -> Value | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def bind(self, name: str, value: Value) -> None:
        self.scopes[-1][name] = value

    def error(self, reason: str,
              cls: type[ModelImportError] = ModelImportError) -> ModelImportError:
        n = self.node
        return cls(reason, n.name if n else None, n.op_type if n else None)

    # -- values ------------------------------------------------------------------------
    def check_constant_size(self, shape: Sequence[int], dtype: DType, what: str) -> None:
        """Refuse, before computing it, a constant an op importer would generate (Range,
        EyeLike, windows…) beyond the size the importer folds (FOLD_LIMIT_BYTES)."""
        nbytes = tensor_bytes(tuple(shape), dtype.itemsize)
        if nbytes > FOLD_LIMIT_BYTES:
            raise ResourceLimitError(
                f"{self._where()}{what} would be a build-time constant {list(shape)} of "
                f"{format_bytes(nbytes)}, more than the {format_bytes(FOLD_LIMIT_BYTES)} the "
                "importer computes")
        self._reserve(nbytes)

    def _where(self) -> str:
        return f"node {self.node.name!r} ({self.node.op_type}): " if self.node else ""

    def _reserve(self, nbytes: int) -> None:
        """Count a constant about to be computed against the memory limit."""
        self.computed_bytes += nbytes
        if self.computed_bytes > self.memory_limit:
            raise ResourceLimitError(
                f"{self._where()}the constants computed at build time would reach "
                f"{format_bytes(self.computed_bytes)}, more than the build memory limit of "
                f"{format_bytes(self.memory_limit)} (--buildMemoryLimit raises it)")

    def const(self, array: np.ndarray, dtype: DType | None = None, name: str = "const") -> Value:
        arr = np.asarray(array)
        dt = dtype if dtype is not None else DType.from_numpy(arr.dtype)
        # asarray, not ascontiguousarray: the latter turns 0-d scalars into shape (1,).
        arr = np.asarray(arr, dtype=dt.np, order="C")
        v = Value(self.graph.unique_name(name), tuple(arr.shape), dt, const=arr)
        self.fresh.add(id(v))
        return v

    def const_value(self, v: Value | None, what: str) -> np.ndarray:
        """The data of a parameter input that must be known at build time."""
        if v is None:
            raise self.error(f"{what} is missing")
        if v.const is None:
            n = self.node
            raise NotConstantError(f"{what} ({v.name!r}) must be a build-time constant for a "
                                   "fixed-shape loadable", n.name if n else None,
                                   n.op_type if n else None, v.name)
        return v.const

    # -- emitting ----------------------------------------------------------------------
    def emit(self, op: str, inputs: Sequence[Value | None], attrs: Mapping[str, Any] | None = None,
             *, out_types: Sequence[TensorType] | None = None, num_outputs: int | None = None,
             name: str | None = None, fold: bool = True) -> list[Value]:
        """Add one canonical node (or fold it into constants) and return its outputs.

        ``out_types`` defaults to the current ONNX node's inferred output types. ``fold``
        False keeps a node of constants for a pass to match (fold_constants folds it later
        if none does).
        """
        node = self.node
        attrs = _json_attrs(dict(attrs or {}), self)
        inputs = list(inputs)
        if out_types is None:
            out_types = self._node_types(inputs, op, attrs, num_outputs)
        if fold and all(v is None or v.is_const for v in inputs):
            folded = self._fold(op, inputs, attrs, out_types)
            if folded is not None:
                return folded
        base = name or (node.name if node else op)
        outs = [Value(self.graph.unique_name(f"{base}_out{i}" if len(out_types) > 1 else base),
                      tuple(shape), dtype) for i, (shape, dtype) in enumerate(out_types)]
        self.graph.add_node(Node(op, self.graph.unique_node_name(base), inputs, outs, attrs,
                                 fused_from=[node.name] if node else []))
        self.fresh.update(id(v) for v in outs)
        return outs

    def _spec(self, op: str, inputs: Sequence[Value | None], attrs: Mapping[str, Any],
              out_types: Sequence[TensorType]) -> LayerSpec:
        name = self.node.name if self.node else op
        return LayerSpec(name, op, attrs,
                         tuple(None if v is None else TensorSpec(v.shape, v.dtype) for v in inputs),
                         tuple(TensorSpec(tuple(s), d) for s, d in out_types))

    def _run(self, op: str, arrays: Sequence[np.ndarray | None], inputs: Sequence[Value | None],
             attrs: Mapping[str, Any], out_types: Sequence[TensorType]) -> list[np.ndarray]:
        run = bind_layer(self._spec(op, inputs, attrs, out_types))
        outs = [np.empty(tuple(s), d.np) for s, d in out_types]
        run(arrays, outs)
        return outs

    def _fold(self, op: str, inputs: Sequence[Value | None], attrs: Mapping[str, Any],
              out_types: Sequence[TensorType]) -> list[Value] | None:
        # Python ints: numpy's int64 product wraps around for hostile shapes (2**32 x 2**32).
        size = sum(tensor_bytes(tuple(s), d.itemsize) for s, d in out_types)
        if size > FOLD_LIMIT_BYTES:
            return None
        self._reserve(size)
        try:
            arrays = self._run(op, [None if v is None else v.const for v in inputs], inputs, attrs,
                               out_types)
        except PydlaError as e:
            raise self.error(f"cannot evaluate constant {op}: {e}") from e
        except Exception as e:  # noqa: BLE001  (a bad constant input is the model's fault)
            raise self.error(f"cannot evaluate constant {op}: {type(e).__name__}: {e}") from e
        base = self.node.name if self.node else op
        outs = [Value(self.graph.unique_name(base), tuple(s), d, const=a)
                for a, (s, d) in zip(arrays, out_types)]
        self.fresh.update(id(v) for v in outs)
        return outs

    def _node_types(self, inputs: Sequence[Value | None], op: str, attrs: Mapping[str, Any],
                    num_outputs: int | None) -> list[TensorType]:
        node = self.node
        if node is None:
            raise ModelImportError(f"{op}: output types are required outside a node")
        inferred = infer_onnx_types(node)
        n = num_outputs if num_outputs is not None else len(inferred)
        inferred = inferred[:n]
        if len(inferred) == n and all(s is not None and d is not None and None not in s
                                      for s, d in inferred):
            return [(tuple(s), d) for s, d in inferred]  # type: ignore[misc]
        # Learn what ONNX could not infer by running the kernel on zeros.
        total = sum(tensor_bytes(v.shape, v.dtype.itemsize) for v in inputs if v is not None)
        if total > EVAL_INFER_LIMIT:
            raise self.error(f"cannot infer output shapes (ONNX inference gave {inferred})",
                             ShapeError)
        arrays = [None if v is None else (v.const if v.is_const else np.zeros(v.shape, v.dtype.np))
                  for v in inputs]
        try:
            outs = _eval_unknown(op, arrays, inputs, attrs, node.name, n)
        except Exception as e:  # noqa: BLE001
            raise self.error(f"cannot infer output shapes: {type(e).__name__}: {e}",
                             ShapeError) from e
        return [(tuple(a.shape), _dtype_of(a, d)) for a, (_, d) in
                zip(outs, inferred + [(None, None)] * (n - len(inferred)))]


def _dtype_of(a: np.ndarray, hint: DType | None) -> DType:
    return hint if hint is not None else DType.from_numpy(a.dtype)


def _eval_unknown(op: str, arrays: Sequence[np.ndarray | None], inputs: Sequence[Value | None],
                  attrs: Mapping[str, Any], name: str, n: int) -> list[np.ndarray]:
    """Run a reference kernel whose output shapes are unknown (shape discovery only)."""
    from pydla.backends.cpu.registry import KERNELS

    spec = LayerSpec(name, op, attrs,
                     tuple(None if v is None else TensorSpec(v.shape, v.dtype) for v in inputs),
                     tuple(TensorSpec((), DType.FLOAT32) for _ in range(n)))
    binder = KERNELS[op]
    fn = getattr(binder, "reference_fn", None)
    if fn is None:
        raise ShapeError(f"{op} has no reference kernel for shape discovery", name, op)
    return [np.asarray(a) for a in fn(spec, arrays)]


def _json_attrs(attrs: dict[str, Any], ctx: ImportContext) -> dict[str, Any]:
    """Canonical attributes are JSON values (they are stored in the loadable as such)."""

    def conv(v: Any) -> Any:
        if isinstance(v, (bool, str)) or v is None:
            return v
        if isinstance(v, (int, np.integer)):
            return int(v)
        if isinstance(v, (float, np.floating)):
            return float(v)
        if isinstance(v, (list, tuple)):
            return [conv(x) for x in v]
        if isinstance(v, np.ndarray) and v.ndim == 0:
            return conv(v.item())
        raise ctx.error(f"attribute value of type {type(v).__name__} cannot be stored")

    return {k: conv(v) for k, v in attrs.items()}


def _type_proto(v: Value) -> onnx.TypeProto:
    return helper.make_tensor_type_proto(int(v.dtype), list(v.shape))


def infer_onnx_types(node: OnnxNode) -> list[tuple[tuple[int | None, ...] | None, DType | None]]:
    """ONNX's own per-node type inference, fed with the constant inputs' data."""
    if node._types is not None:
        return node._types
    proto = node.proto
    types: dict[str, onnx.TypeProto] = {}
    data: dict[str, onnx.TensorProto] = {}
    for name, v in zip(proto.input, node.inputs):
        if v is None or not name:
            continue
        types[name] = _type_proto(v)
        if v.is_const and v.size <= 1 << 16 and v.dtype is not DType.BFLOAT16:
            data[name] = numpy_helper.from_array(v.const, name)
    result: list[tuple[tuple[int | None, ...] | None, DType | None]] = []
    try:
        schema = onnx.defs.get_schema(proto.op_type, node.opset, proto.domain or "")
        out = onnx.shape_inference.infer_node_outputs(
            schema, proto, types, data, opset_imports=[helper.make_opsetid("", node.opset)])
        for name in proto.output:
            tp = out.get(name)
            if tp is None or not tp.HasField("tensor_type"):
                result.append((None, None))
                continue
            tt = tp.tensor_type
            try:
                dtype: DType | None = DType(tt.elem_type) if tt.elem_type else None
            except ValueError:
                dtype = None
            shape = None
            if tt.HasField("shape"):
                shape = tuple(d.dim_value if d.HasField("dim_value") else None
                              for d in tt.shape.dim)
            result.append((shape, dtype))
    except Exception:  # noqa: BLE001  (inference is best effort; the kernel is the fallback)
        result = [(None, None) for _ in proto.output]
    node._types = result
    return result


def _value_shape(vi: onnx.ValueInfoProto) -> tuple[list[int | str | None], DType]:
    tt = vi.type.tensor_type
    try:
        dtype = DType(tt.elem_type)
    except ValueError:
        name = onnx.TensorProto.DataType.Name(tt.elem_type) if tt.elem_type in \
            onnx.TensorProto.DataType.values() else str(tt.elem_type)
        raise ModelImportError(f"input {vi.name!r} has element type {name}, which pydla does "
                               "not support") from None
    dims: list[int | str | None] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(d.dim_value)
        elif d.HasField("dim_value") and d.dim_value == 0:
            dims.append(0)
        else:
            dims.append(d.dim_param or None)
    return dims, dtype


def model_opset(model: onnx.ModelProto) -> int:
    opset = None
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            opset = imp.version
    if opset is None and any(imp.domain == "ai.onnx.ml" for imp in model.opset_import) \
            and all(n.domain == "ai.onnx.ml" for n in model.graph.node):
        # A classic-ML model (skl2onnx's early output) imports only ai.onnx.ml: no node is
        # read with a default-domain opset, and the layers its importers emit are canonical.
        return MAX_OPSET
    if opset is None:
        raise ModelImportError("the model imports no default-domain opset")
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ModelImportError(f"opset {opset} is outside the supported range "
                               f"{MIN_OPSET}–{MAX_OPSET}")
    return opset


def import_model(model: onnx.ModelProto,
                 shapes: Mapping[str, Sequence[int]] | None = None,
                 input_values: Mapping[str, np.ndarray] | None = None,
                 memory_limit: int | None = None) -> Graph:
    """Import ``model`` with every input fixed (``shapes`` overrides the model's dims).

    ``input_values`` fixes the value of parameter-like inputs (shape tensors): they become
    constants and are no longer inputs of the loadable. The constants the import computes
    may add up to ``memory_limit`` bytes (default: pydla.engine.memory's default limit).
    """
    shapes = dict(shapes or {})
    input_values = dict(input_values or {})
    opset = model_opset(model)
    g = model.graph
    graph = Graph(g.name or "model")
    graph.opset = opset
    ctx = ImportContext(graph, opset)
    if memory_limit is not None:
        ctx.memory_limit = memory_limit
    init_names = {t.name for t in g.initializer}
    for t in g.initializer:
        arr, dtype = tensor_to_array(t)
        graph.reserve_name(t.name)
        ctx.bind(t.name, Value(t.name, tuple(arr.shape), dtype, const=arr))
    real_inputs = [vi for vi in g.input if vi.name not in init_names]
    unknown = (set(shapes) | set(input_values)) - {vi.name for vi in real_inputs}
    if unknown:
        raise ShapeError(f"--shapes names {sorted(unknown)}, which are not inputs of the model "
                         f"(inputs: {[vi.name for vi in real_inputs]})")
    for vi in real_inputs:
        dims, dtype = _value_shape(vi)
        if vi.name in input_values:
            arr = np.asarray(input_values[vi.name])
            if dtype is DType.BFLOAT16 and arr.dtype != np.uint16:
                arr = arr.view(np.uint16)
            graph.reserve_name(vi.name)
            ctx.bind(vi.name, Value(vi.name, tuple(arr.shape), dtype,
                                    const=np.asarray(arr, dtype=dtype.np, order="C")))
            continue
        if vi.name in shapes:
            fixed = tuple(int(d) for d in shapes[vi.name])
            if len(fixed) != len(dims) and dims:
                raise ShapeError(f"--shapes gives {vi.name!r} rank {len(fixed)}, the model "
                                 f"declares rank {len(dims)}")
            for want, have in zip(fixed, dims):
                if isinstance(have, int) and have != want:
                    raise ShapeError(f"--shapes gives {vi.name!r} shape {fixed}, but the model "
                                     f"fixes it to {tuple(dims)}")
        elif all(isinstance(d, int) for d in dims):
            fixed = tuple(dims)  # type: ignore[arg-type]
        else:
            raise ShapeError(f"input {vi.name!r} has dynamic shape "
                             f"{tuple(d if d is not None else '?' for d in dims)}; fix it with "
                             f"--shapes={vi.name}:" + "x".join(
                                 str(d) if isinstance(d, int) else "1" for d in dims)
                             + " (each dynamic dimension set to 1: change them as needed)")
        graph.reserve_name(vi.name)
        v = Value(vi.name, fixed, dtype)
        graph.inputs.append(v)
        ctx.bind(vi.name, v)
    import_nodes(ctx, g.node)
    for vo in g.output:
        v = ctx.lookup(vo.name)
        if v is None:
            raise ModelImportError(f"graph output {vo.name!r} is never produced")
        graph.add_output(vo.name, v)
    return graph


_MALFORMED = (ArithmeticError, AssertionError, LookupError, TypeError, ValueError)


def import_nodes(ctx: ImportContext, nodes: Sequence[onnx.NodeProto]) -> None:
    for index, proto in enumerate(nodes):
        name = proto.name or f"{proto.op_type}_{index}"
        # Other domains' ops register as "domain.Op" (com.microsoft's quantized ops).
        custom = proto.domain not in ("", "ai.onnx")
        op_key = f"{proto.domain}.{proto.op_type}" if custom else proto.op_type
        if custom and find_importer(op_key, ctx.opset) is None:
            raise ModelImportError(f"custom domain {proto.domain!r} is not supported", name,
                                   proto.op_type)
        inputs: list[Value | None] = []
        for iname in proto.input:
            if not iname:
                inputs.append(None)
                continue
            v = ctx.lookup(iname)
            if v is None:
                raise ModelImportError(f"input {iname!r} is not defined before this node "
                                       "(the graph is not in topological order)", name,
                                       proto.op_type)
            inputs.append(v)
        fn = find_importer(op_key, ctx.opset)
        if fn is None:
            raise ModelImportError(f"operator {proto.op_type} (opset {ctx.opset}) is not "
                                   "supported", name, proto.op_type)
        outer, outer_fresh = ctx.node, ctx.fresh
        try:
            node = OnnxNode(proto, inputs, ctx.opset, name)
            ctx.node, ctx.fresh = node, set()
            outs = list(fn(ctx, node))
            fresh = ctx.fresh
        except (ModelImportError, ResourceLimitError):  # both name the node already
            raise
        except PydlaError as e:
            raise ModelImportError(str(e), name, proto.op_type) from e
        except MemoryError as e:  # numpy could not allocate what the node computes
            raise ResourceLimitError(f"node {name!r} ({proto.op_type}): out of memory "
                                     f"computing it at build time ({e or 'MemoryError'})"
                                     ) from e
        except _MALFORMED as e:
            # The one funnel for untrusted models: whatever a malformed node makes an
            # importer trip over (a non-UTF-8 string attribute, a zero stride, a negative
            # dimension, a rank it did not expect) ends as a typed error naming the node.
            raise ModelImportError(f"malformed node ({type(e).__name__}: {e})", name,
                                   proto.op_type) from e
        finally:
            ctx.node, ctx.fresh = outer, outer_fresh
        for oname, v in zip(proto.output, outs):
            if oname:
                if v is None:
                    raise ModelImportError(f"output {oname!r} is not produced", name,
                                           proto.op_type)
                if id(v) in fresh:
                    v.name = ctx.graph.unique_name(oname)
                    fresh.discard(id(v))
                ctx.bind(oname, v)
        ctx.fresh |= fresh
        missing = [o for o in proto.output[len(outs):] if o]
        if missing:
            raise ModelImportError(f"outputs {missing} are not supported", name, proto.op_type)


def import_subgraph(ctx: ImportContext, g: onnx.GraphProto) -> list[Value]:
    """Inline a subgraph (If branch) in a new scope that sees the outer names."""
    ctx.scopes.append({})
    try:
        for t in g.initializer:
            arr, dtype = tensor_to_array(t)
            ctx.bind(t.name, ctx.const(arr, dtype, t.name))
        import_nodes(ctx, g.node)
        outs = []
        for vo in g.output:
            v = ctx.lookup(vo.name)
            if v is None:
                raise ctx.error(f"subgraph output {vo.name!r} is never produced")
            outs.append(v)
        return outs
    finally:
        ctx.scopes.pop()
