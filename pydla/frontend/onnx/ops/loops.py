"""Importers of Loop and Scan: a small constant loop is unrolled at build time.

With every shape fixed, a loop whose trip count is known at build time is exactly its body
repeated. A Loop that cannot be unrolled (trip count or condition known only at run time,
or more body copies than MAX_UNROLLED_NODES) runs as one Loop layer instead
(pydla.frontend.onnx.ops.loop_layer); Scan is always unrolled. Each iteration imports the
body subgraph in a fresh scope where the body's formal inputs name the loop-carried values
(and the iteration number, a constant), so shape plumbing on the iteration number folds
away. Scan slices its scan inputs with Gather, and per-iteration outputs are stacked with
Unsqueeze + Concat. A Loop whose condition becomes a constant false stops unrolling there.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from pydla.dtypes import DType
from pydla.frontend.onnx.importer import ImportContext, OnnxNode, import_subgraph
from pydla.frontend.onnx.ops.loop_layer import loop_layer
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value

# Unrolling copies the body this many times at most (a bigger loop is not worth a loadable).
MAX_UNROLL = 4096
# ... and at most this many body nodes in all. Past it the build time is what grows, not the
# model: the passes walk the whole graph, so 501 copies of SLANet's 166-node decoder body
# (83,166 nodes) did not finish building in 300 s (import 37 s, passes 112 s of a profile
# cut at 150 s). A Loop past it runs as a Loop layer; Scan past it is refused.
MAX_UNROLLED_NODES = 6000


def _run_body(ctx: ImportContext, body: onnx.GraphProto,
              bindings: Sequence[Value]) -> list[Value]:
    """Import ``body`` once with its formal inputs bound, in order, to ``bindings``."""
    names = [vi.name for vi in body.input]
    if len(names) != len(bindings):
        raise ctx.error(f"the body takes {len(names)} inputs, the loop gives {len(bindings)}")
    ctx.scopes.append(dict(zip(names, bindings)))
    try:
        return import_subgraph(ctx, body)
    finally:
        ctx.scopes.pop()


def _stack(ctx: ImportContext, values: Sequence[Value], axis: int, what: str) -> Value:
    """``values`` (one per iteration, same type) stacked along a new ``axis``."""
    first = values[0]
    if any(v.shape != first.shape or v.dtype != first.dtype for v in values):
        raise ctx.error(f"{what} changes shape or type between iterations")
    rank = len(first.shape) + 1
    if not -rank <= axis < rank:
        raise ctx.error(f"{what} axis {axis} is out of range for rank {rank}")
    axis %= rank
    one = first.shape[:axis] + (1,) + first.shape[axis:]
    parts = [ctx.emit("Unsqueeze", [v], {"axes": [axis]}, out_types=[(one, v.dtype)])[0]
             for v in values]
    if len(parts) == 1:
        return parts[0]
    shape = one[:axis] + (len(parts),) + one[axis + 1:]
    return ctx.emit("Concat", parts, {"axis": axis}, out_types=[(shape, first.dtype)])[0]


def _take(ctx: ImportContext, x: Value, axis: int, index: int) -> Value:
    """Slice ``index`` of ``x`` along ``axis``, the axis dropped."""
    shape = x.shape[:axis] + x.shape[axis + 1:]
    idx = ctx.const(np.array(index, np.int64), DType.INT64, "scan_index")
    return ctx.emit("Gather", [x, idx], {"axis": axis}, out_types=[(shape, x.dtype)])[0]


def _body_size(body: onnx.GraphProto) -> int:
    """ONNX nodes in one copy of ``body``, nested subgraphs included."""
    return sum(1 + sum(_body_size(a.g) for a in n.attribute if a.HasField("g"))
               + sum(_body_size(g) for a in n.attribute for g in a.graphs) for n in body.node)


def _over_budget(iterations: int, size: int) -> bool:
    """Whether unrolling would copy more than MAX_UNROLLED_NODES body nodes."""
    return iterations * size > MAX_UNROLLED_NODES


class _NotUnrollable(Exception):
    """The body's condition is known only at run time: the Loop runs as a layer."""


def _flag(ctx: ImportContext, v: Value, what: str) -> bool:
    return bool(ctx.const_value(v, what).reshape(-1)[0])


@onnx_op("Loop")
def import_loop(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    body = node.graph_attrs["body"]
    m, cond = node.input(0), node.input(1)
    carried = list(node.inputs[2:])
    if any(v is None for v in carried):
        raise ctx.error("loop-carried inputs cannot be omitted")
    if m is None and cond is None:
        raise ctx.error("a Loop with neither trip count nor condition never ends")
    for what, v, dtype in (("trip count M", m, DType.INT64), ("condition", cond, DType.BOOL)):
        if v is not None and (v.size != 1 or v.dtype is not dtype):
            raise ctx.error(f"the Loop {what} is {v.dtype.short}{list(v.shape)}; a single "
                            f"{dtype.short} is required")
    n_carried = len(carried)
    if len(body.output) < 1 + n_carried:
        raise ctx.error(f"the body returns {len(body.output)} values, expected at least "
                        f"{1 + n_carried}")
    values: list[Value] = carried  # type: ignore[assignment]
    # Unrolled, a loop's shape plumbing on the iteration number folds away and the passes
    # fuse across iterations: y = y·0.5 + x for 5 (50) steps ran in 8.8 (15.8) µs unrolled,
    # 42 (99) µs as a Loop layer (tests/ops/test_loop_layer.py's model, 2026-12-03). So a
    # loop with its trip count and condition known at build time and a body small enough
    # to copy is unrolled; the others (a decoder stopping at its end token, SLANet's 500
    # steps) run as a Loop layer.
    if (m is not None and not m.is_const) or (cond is not None and not cond.is_const):
        return loop_layer(ctx, node, m, cond, values)
    try:
        return _unroll(ctx, node, m, cond, values)
    except _NotUnrollable:
        # The copies already emitted are read by nothing and removed with the dead nodes.
        return loop_layer(ctx, node, m, cond, values)


def _unroll(ctx: ImportContext, node: OnnxNode, m: Value | None, cond: Value | None,
            carried: list[Value]) -> list[Value]:
    body = node.graph_attrs["body"]
    trips = None if m is None else int(ctx.const_value(m, "Loop trip count M").reshape(-1)[0])
    go = True if cond is None else _flag(ctx, cond, "Loop condition")
    n_carried = len(carried)
    n_scan = len(body.output) - 1 - n_carried
    scans: list[list[Value]] = [[] for _ in range(n_scan)]
    size = _body_size(body)
    if go and trips is not None and cond is None and _over_budget(trips, size):
        raise _NotUnrollable  # else the condition may stop it early: unroll and see
    it = 0
    while go and (trips is None or it < trips):
        if it >= MAX_UNROLL or _over_budget(it + 1, size):
            raise _NotUnrollable
        counter = ctx.const(np.array(it, np.int64), DType.INT64, "loop_iteration")
        flag = ctx.const(np.array(go), DType.BOOL, "loop_condition")
        outs = _run_body(ctx, body, [counter, flag] + carried)
        carried = outs[1:1 + n_carried]
        for acc, v in zip(scans, outs[1 + n_carried:]):
            acc.append(v)
        it += 1
        if trips is not None and it >= trips:
            break  # the last condition is never read
        if not outs[0].is_const:
            raise _NotUnrollable
        go = bool(outs[0].const.reshape(-1)[0])
    if n_scan and it == 0:
        raise ctx.error("a Loop that runs zero times has scan outputs of unknown shape")
    results: list[Value] = list(carried)
    results += [_stack(ctx, acc, 0, "a Loop scan output") for acc in scans]
    return results


def _scan(ctx: ImportContext, body: onnx.GraphProto, states: list[Value],
          inputs: list[Value], in_axes: list[int], in_rev: list[int], out_axes: list[int],
          out_rev: list[int]) -> list[Value]:
    """One Scan over ``inputs`` (iterated along ``in_axes``): final states + scan outputs."""
    lengths = {x.shape[a] for x, a in zip(inputs, in_axes)}
    if len(lengths) != 1:
        raise ctx.error(f"scan inputs have different lengths {sorted(lengths)}")
    length = lengths.pop()
    if length > MAX_UNROLL:
        raise ctx.error(f"Scan runs {length} iterations, more than {MAX_UNROLL}")
    n_out = len(body.output) - len(states)
    if n_out and length == 0:
        raise ctx.error("a Scan over zero elements has scan outputs of unknown shape")
    scans: list[list[Value]] = [[] for _ in range(n_out)]
    for t in range(length):
        slices = [_take(ctx, x, a, length - 1 - t if r else t)
                  for x, a, r in zip(inputs, in_axes, in_rev)]
        outs = _run_body(ctx, body, states + slices)
        states = outs[:len(states)]
        for acc, v in zip(scans, outs[len(states):]):
            acc.append(v)
    results = list(states)
    for acc, axis, r in zip(scans, out_axes, out_rev):
        results.append(_stack(ctx, acc[::-1] if r else acc, axis, "a Scan output"))
    return results


def _ints(node: OnnxNode, name: str, count: int) -> list[int]:
    given = [int(x) for x in node.attr(name, [])]
    return given + [0] * (count - len(given))


@onnx_op("Scan", since=9)
def import_scan(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    body = node.graph_attrs["body"]
    n_in = int(node.attr("num_scan_inputs", 0))
    values = list(node.inputs)
    if n_in <= 0 or n_in > len(values) or any(v is None for v in values):
        raise ctx.error("Scan needs num_scan_inputs ≥ 1 and every input present")
    states, inputs = values[:len(values) - n_in], values[len(values) - n_in:]
    n_out = len(body.output) - len(states)
    in_axes = []
    for a, x in zip(_ints(node, "scan_input_axes", n_in), inputs):
        rank = len(x.shape)  # type: ignore[union-attr]
        if not -rank <= a < rank:
            raise ctx.error(f"scan input axis {a} is out of range for rank {rank}")
        in_axes.append(a % rank)
    return _scan(ctx, body, states, inputs, in_axes,  # type: ignore[arg-type]
                 _ints(node, "scan_input_directions", n_in),
                 _ints(node, "scan_output_axes", n_out),
                 _ints(node, "scan_output_directions", n_out))


@onnx_op("Scan", since=8)
def import_scan8(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    """Scan-8: every input has a leading batch axis and is scanned along axis 1."""
    body = node.graph_attrs["body"]
    n_in = int(node.attr("num_scan_inputs", 0))
    lens, values = node.input(0), list(node.inputs[1:])
    if n_in <= 0 or n_in > len(values) or any(v is None for v in values):
        raise ctx.error("Scan needs num_scan_inputs ≥ 1 and every input present")
    states, inputs = values[:len(values) - n_in], values[len(values) - n_in:]
    batch, length = inputs[0].shape[0], inputs[0].shape[1]  # type: ignore[union-attr]
    if lens is not None:
        given = ctx.const_value(lens, "Scan sequence_lens").reshape(-1)
        if np.any(given != length):
            raise ctx.error("Scan with sequence lengths shorter than the scan axis is not "
                            "supported")
    n_out = len(body.output) - len(states)
    per_batch: list[list[Value]] = []
    for b in range(batch):
        outs = _scan(ctx, body, [_take(ctx, s, 0, b) for s in states],  # type: ignore[arg-type]
                     [_take(ctx, x, 0, b) for x in inputs], [0] * n_in,  # type: ignore[arg-type]
                     _ints(node, "directions", n_in), [0] * n_out, [0] * n_out)
        per_batch.append(outs)
    return [_stack(ctx, list(col), 0, "a Scan output") for col in zip(*per_batch)]
