"""A Loop that runs as one layer: its body imported as a graph of its own.

A Loop whose trip count or condition is known only at run time (a decoder that stops at
its end token), or whose unrolled copies would exceed the build's budget, becomes one
``Loop`` node. Its body is imported into a separate Graph (the parent's ``bodies``) with
fixed shapes: the iteration number and condition are body inputs, each loop-carried value
keeps its initial value's type, and an outer tensor the body reads becomes a body input
fed once per run (a constant stays a constant, so the passes fold into it). A carried
value the body hands back unchanged is loop-invariant: SLANet passes its 20 weight
matrices through its decoder loop that way, and they become constants of the body.

The Loop node's inputs are ``[carried initial values..., captured outer tensors..., M,
cond]`` (M and cond absent as None), its outputs the final carried values; attrs
``body`` (index into ``graph.bodies``), ``num_carried`` and ``max_iterations`` (the cap
the runtime enforces: the trip count when it is a constant, else MAX_LOOP_ITERATIONS).
The body's inputs are ``[iteration, cond, carried..., captured...]``, its outputs
``[cond, carried...]`` (pydla.loadable.rules_control checks the two agree).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu.backend import bind_layer
from pydla.dtypes import DType
from pydla.errors import NotConstantError
from pydla.frontend.onnx.importer import ImportContext, OnnxNode, import_nodes, tensor_to_array
from pydla.frontend.onnx.ops.loop_dynamic import DOMAIN, DYNAMIC_PARAMS
from pydla.frontend.onnx.ops.loop_invariants import hoist, hoistable, passes_through
from pydla.ir import Graph, Node, Value
from pydla.loadable.rules_control import MAX_LOOP_ITERATIONS


class BodyContext(ImportContext):
    """Imports a Loop body into its own graph; names it does not define resolve in the
    enclosing context and are captured (a constant copied, a tensor made a body input)."""

    def __init__(self, outer: ImportContext, graph: Graph) -> None:
        super().__init__(graph, outer.opset)
        self.outer = outer
        self.memory_limit = outer.memory_limit
        self.computed_bytes = outer.computed_bytes
        # outer tensors feeding the body inputs after the carried ones, in order
        self.captures: list[Value] = []
        self._captured: dict[int, Value] = {}
        # inner value id -> the outer value it stands for (captures and invariant states)
        self.outer_of: dict[int, Value] = {}
        # loop-invariant nodes go to the outer graph (pydla.frontend.onnx.ops.
        # loop_invariants); ``hoisted`` binds their inputs' body names there
        self.hoist = False
        self.hoisted: dict[str, Value] = {}
        self.hoisted_nodes = 0
        # first-iteration values of the body's inputs (iteration 0, the initial states;
        # zeros for what only the run knows), from which first_value computes the rest
        self.probes: dict[int, np.ndarray] = {}

    def first_value(self, v: Value) -> np.ndarray:
        """``v``'s value in the first iteration: the body's layers that produce it run on
        the probes (pydla.frontend.onnx.ops.loop_dynamic plans shapes with it)."""
        if v.const is not None:
            return v.const
        found = self.probes.get(id(v))
        if found is not None:
            return found
        node = v.producer
        if node is None:
            raise self.error(f"{v.name!r} has no value before the loop runs")
        arrays = [None if x is None else self.first_value(x) for x in node.inputs]
        outs = [np.empty(o.shape, o.dtype.np) for o in node.outputs]
        spec = LayerSpec(node.name, node.op, node.attrs,
                         tuple(None if x is None else TensorSpec(x.shape, x.dtype)
                               for x in node.inputs),
                         tuple(TensorSpec(o.shape, o.dtype) for o in node.outputs))
        bind_layer(spec)(arrays, outs)
        for o, a in zip(node.outputs, outs):
            self.probes[id(o)] = a
        return self.probes[id(v)]

    def local(self, name: str) -> Value | None:
        """``name`` as the body itself binds it (None: an outer name)."""
        return super().lookup(name)

    def lookup(self, name: str) -> Value | None:
        v = super().lookup(name)
        if v is not None:
            return v
        outer = self.outer.lookup(name)
        return None if outer is None else self.capture(outer)

    def capture(self, outer: Value) -> Value:
        inner = self._captured.get(id(outer))
        if inner is None:
            name = self.graph.unique_name(outer.name)
            inner = Value(name, outer.shape, outer.dtype, const=outer.const)
            if not outer.is_const:
                self.graph.inputs.append(inner)
                self.captures.append(outer)
                self.probes[id(inner)] = np.zeros(inner.shape, inner.dtype.np)
                self.outer_of[id(inner)] = outer
            self._captured[id(outer)] = inner
        return inner


def import_body(bctx: BodyContext, nodes: Sequence[onnx.NodeProto]) -> None:
    """Import a body's nodes; a Slice or Range whose parameters are tensors goes to its
    body-only importer (pydla.frontend.onnx.ops.loop_dynamic) under the private domain."""
    for index, proto in enumerate(nodes):
        params = DYNAMIC_PARAMS.get(proto.op_type, ())
        if proto.domain in ("", "ai.onnx") and any(
                k < len(proto.input) and proto.input[k]
                and (v := bctx.lookup(proto.input[k])) is not None and not v.is_const
                for k in params):
            routed = onnx.NodeProto()
            routed.CopyFrom(proto)
            routed.domain = DOMAIN
            routed.name = proto.name or f"{proto.op_type}_{index}"
            proto = routed
        if bctx.hoist and hoistable(bctx, proto):
            hoist(bctx, proto)
        else:
            import_nodes(bctx, [proto])


def _declared_rank(vi: onnx.ValueInfoProto) -> int:
    """The rank a body declares for its iteration or condition input (ONNX allows a scalar
    or a [1] tensor; onnxruntime feeds what is declared)."""
    tt = vi.type.tensor_type
    return len(tt.shape.dim) if tt.HasField("shape") else 0


def _scalar_input(graph: Graph, vi: onnx.ValueInfoProto, dtype: DType) -> Value:
    shape = (1,) * min(_declared_rank(vi), 1)
    graph.reserve_name(vi.name)
    v = Value(vi.name, shape, dtype)
    graph.inputs.append(v)
    return v


def _import_body(ctx: ImportContext, node: OnnxNode, carried: list[Value],
                 invariant: list[bool], hoist: bool
                 ) -> tuple[Graph, BodyContext, list[Value], list[Value]]:
    """Import the Loop's body: (its graph, its context, the loop states' body inputs, the
    values of the body's outputs)."""
    body = node.graph_attrs["body"]
    in_names = [vi.name for vi in body.input]
    graph = Graph(f"{node.name}_body")
    graph.opset = ctx.opset
    bctx = BodyContext(ctx, graph)
    bctx.hoist = hoist
    iteration = _scalar_input(graph, body.input[0], DType.INT64)
    first_cond = _scalar_input(graph, body.input[1], DType.BOOL)
    bctx.probes[id(iteration)] = np.zeros(iteration.shape, np.int64)
    bctx.probes[id(first_cond)] = np.ones(first_cond.shape, np.bool_)
    bctx.bind(in_names[0], iteration)
    bctx.bind(in_names[1], first_cond)
    state_in: list[Value] = []
    for k, v in enumerate(carried):
        if invariant[k]:
            continue  # captured below: the states come first among the body's inputs
        graph.reserve_name(in_names[2 + k])
        inner = Value(in_names[2 + k], v.shape, v.dtype)
        graph.inputs.append(inner)
        bctx.probes[id(inner)] = (v.const if v.const is not None
                                  else np.zeros(v.shape, v.dtype.np))
        state_in.append(inner)
        bctx.bind(in_names[2 + k], inner)
    for k, v in enumerate(carried):
        if invariant[k]:
            bctx.bind(in_names[2 + k], bctx.capture(v))
    bctx.scopes.append({})
    for t in body.initializer:
        arr, dtype = tensor_to_array(t)
        bctx.bind(t.name, bctx.const(arr, dtype, t.name))
    ctx.scopes.append(bctx.hoisted)  # where hoisted nodes bind their inputs and outputs
    results: list[Value] = []
    try:
        import_body(bctx, body.node)
        for vo in body.output:
            v = bctx.lookup(vo.name)
            if v is None:
                raise ctx.error(f"Loop body output {vo.name!r} is never produced")
            results.append(v)
    finally:
        ctx.scopes.pop()
    ctx.computed_bytes = bctx.computed_bytes
    return graph, bctx, state_in, results


def loop_layer(ctx: ImportContext, node: OnnxNode, m: Value | None, cond: Value | None,
               carried: list[Value]) -> list[Value]:
    """Emit ``node`` as one Loop layer; returns the ONNX Loop's outputs (``m`` and ``cond``
    are single int64 and bool values: import_loop checked)."""
    body = node.graph_attrs["body"]
    if isinstance(ctx, BodyContext):
        raise ctx.error("a Loop inside a Loop body runs as a layer only at the top level: "
                        "the inner loop must have a constant trip count and condition and "
                        "fit the unrolling budget")
    n_carried = len(carried)
    if len(body.input) != 2 + n_carried:
        raise ctx.error(f"the body takes {len(body.input)} inputs, the loop gives "
                        f"{2 + n_carried}")
    if len(body.output) != 1 + n_carried:
        why = (f"the body has {len(body.output) - 1 - n_carried} scan outputs; a Loop run as "
               "a layer (trip count or condition known only at run time, or too long to "
               "unroll) cannot stack them: their length is the number of iterations, and a "
               "loadable has one shape per tensor")
        dynamic = next((v for v in (m, cond) if v is not None and not v.is_const), None)
        if dynamic is not None:  # fixing it at build time (--shapes=name:[v]) unrolls it
            raise NotConstantError(f"{why}; {dynamic.name!r} must be a build-time constant",
                                   node.name, node.op_type, dynamic.name)
        raise ctx.error(why)
    in_names = [vi.name for vi in body.input]
    out_names = [vo.name for vo in body.output]
    # A carried value the body returns as it got it never changes: bound as the outer
    # value (a constant or a capture), it is no state of the loop. The first import finds
    # those returned through value-preserving layers; the second hoists invariant code.
    invariant = [out_names[1 + k] == in_names[2 + k] for k in range(n_carried)]
    _, _, state_in, results = _import_body(ctx, node, carried, invariant, hoist=False)
    states = iter(state_in)
    invariant = [inv or passes_through(results[1 + k], next(states))
                 for k, inv in enumerate(invariant)]
    graph, bctx, state_in, results = _import_body(ctx, node, carried, invariant, hoist=True)
    cond_out = results[0]
    if cond_out.size != 1 or cond_out.dtype is not DType.BOOL:
        raise ctx.error(f"the Loop body's condition {cond_out.name!r} is "
                        f"{cond_out.dtype.short}{list(cond_out.shape)}; a single bool is "
                        "required")
    graph.add_output(out_names[0], cond_out)
    state_out = [v for v, inv in zip(results[1:], invariant) if not inv]
    for v_in, v_out, name in zip(state_in, state_out,
                                 [n for n, inv in zip(out_names[1:], invariant) if not inv]):
        if v_out.shape != v_in.shape or v_out.dtype is not v_in.dtype:
            raise ctx.error(
                f"loop-carried {v_in.name!r} enters the body as {v_in.dtype.short}"
                f"{list(v_in.shape)} and leaves as {v_out.dtype.short}{list(v_out.shape)}; a "
                "Loop run as a layer needs one type per carried value (a loadable has one "
                "shape per tensor)")
        graph.add_output(name, v_out)
    graph.remove_dead()
    if not state_in:  # nothing changes from one iteration to the next
        return list(carried)
    cap = MAX_LOOP_ITERATIONS
    if m is not None and m.is_const:
        cap = max(0, min(cap, int(m.const.reshape(-1)[0])))  # type: ignore[union-attr]
    outer = ctx.graph
    outer.bodies.append(graph)
    finals = [Value(outer.unique_name(f"{node.name}_{v.name}"), v.shape, v.dtype)
              for v in state_in]
    outer.add_node(Node("Loop", outer.unique_node_name(node.name),
                        [*[v for v, inv in zip(carried, invariant) if not inv],
                         *bctx.captures, m, cond],
                        finals, {"body": len(outer.bodies) - 1, "num_carried": len(state_in),
                                 "max_iterations": cap}, fused_from=[node.name]))
    ctx.fresh.update(id(v) for v in finals)
    it = iter(finals)
    return [v if inv else next(it) for v, inv in zip(carried, invariant)]
