"""Channel-blocked activations: which tensors live as (n, ⌈c/16⌉, h, w, 16) between layers.

onnxruntime keeps a MobileNet's activations in blocks of channels (NCHWc) from layer to
layer, so that kernels computing 16 channels per vector need no transposes. The builder
does the same where pydla has blocked kernels: depthwise convolutions, 1×1 convolutions
(strided ones gather their pixels), stems with few input channels (planar in, blocked
out), other one-group convolutions (taps_nchw16c, and Winograd's blocked tactics for 3×3
at stride 1), and the pointwise
layers (residual adds, squeeze-excitation scaling), max pools and global average pools
between them.
``Reorder`` layers convert at a region's edges; blocked tensors have their physical 5-D
shape in the IR and the loadable, so memory planning needs nothing new, and the layer
info shows each Conv's ``layouts`` and every Reorder.

A region is blocked if it holds a depthwise convolution, or if its 1×1 convolutions and
the transposes its other layers leave out save more than the reorders at its edges cost
(``_pointwise_gain``): ResNet-50's bottlenecks — 1×1 layers chained through their residual
adds — ran 8 % faster so at batch 1 with the 3×3 layers between them planar and a reorder
on either side, and with those blocked too (Winograd's blocked tactics), the whole network
keeps one reorder, at its end; so does CRNN. YOLO's lone 1×1 layers between
concatenations stay planar.

Channel counts that are not multiples of 16 are blocked as well, their last block
padded — on large planes too: DBNet's 8- and 32-channel layers at 320×320 and 160×160 ran
8 % faster end to end blocked (batch 1; the same at batch 8) than planar, where a rule
used to keep them while the blocked kernels still staged their output.

Lanes past the last channel of a block are never read as data: producers write finite
values there (zero weights and bias, then the epilogue; Reorder writes zero), consumers'
weights for them are zero — which is why only pointwise ops that map finite values to
finite values join a region.

Contract: runs after the graph passes (epilogues fused) and precision assignment, before
tactic choice; float32 layers only. Graph inputs and outputs stay planar; every value a
planar layer reads is planar; results equal the planar graph's up to kernel rounding.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydla.backends.cpu.kernels.conv_fast.direct_c16 import MAX_K as MAX_STEM_K
from pydla.backends.cpu.kernels.conv_fast.epilogue import native_epilogue
from pydla.backends.cpu.kernels.conv_fast.geometry import (
    BLOCKED,
    PLANAR,
    blocked_shape,
    inside,
)
from pydla.backends.cpu.kernels.conv_fast.taps_c16 import MIN_K as TAPS_MIN_K
from pydla.dtypes import DType
from pydla.ir import Graph, Node, Value
from pydla.passes import PassContext

MIN_PIXELS = 16  # 1×1 layers on smaller planes (squeeze-excitation vectors) stay planar
# A stem writing fewer channels still writes one block (lanes past m zero): cheaper than
# reordering its output, which at a 640×640 input's 320×320 plane cost DBNet 0.7 ms.
MIN_STEM_CHANNELS = 4
# A layer on a plane this large that needs more reorders blocked than planar stays planar:
# reorders of a large plane cost more than the blocked kernel saves (DBNet's FPN: 1×1
# convolutions adding planar upsamplings, read by planar 3×3 layers).
ISLAND_PIXELS = 1024
# A region without depthwise layers is blocked where its 1×1 convolutions gain more than
# its edges' reorders cost (``_pointwise_gain``; ResNet-50's bottlenecks yes, YOLO's lone
# 1×1 layers between concatenations no).
MAC_SAVED_NS = 1.6e-3
REORDER_NS = 0.2
# Pointwise ops that keep finite inputs finite (the padded lanes must stay harmless).
SAFE_POINTWISE = frozenset({
    "Add", "Sub", "Mul", "Max", "Min", "Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid",
    "HardSwish", "Swish", "Tanh", "Neg", "Abs", "PRelu", "Identity",
})


def _f32(values: Sequence[Value | None]) -> bool:
    return all(v is None or v.dtype == DType.FLOAT32 for v in values)


def _epilogue_ok(node: Node, out: Value) -> bool:
    epi = node.attrs.get("epilogue")
    if epi is None:
        return True
    extras = node.inputs[len(node.inputs) - int(epi["inputs"]):]
    if any(v is None or v.is_const or v.shape != out.shape for v in extras):
        return False  # per-channel operands have no row of their own in a blocked run
    # One the convolution kernels run themselves (conv_fast.epilogue), of safe ops.
    program = epi["program"]
    return (native_epilogue(program) and list(program[-1]["shape"]) == list(out.shape)
            and all(s["op"] in SAFE_POINTWISE for s in program))


def _conv_role(node: Node) -> str | None:
    """'depthwise', 'pointwise' (1×1), 'stem' or 'conv' (any other one-group convolution)
    for a Conv the blocked kernels run."""
    x, w, out = node.inputs[0], node.inputs[1], node.outputs[0]
    if (x is None or w is None or x.is_const or not w.is_const or len(x.shape) != 4
            or len(w.shape) != 4
            or not _f32(node.inputs) or not _f32(node.outputs) or not _epilogue_ok(node, out)):
        return None
    a = node.attrs
    group = int(a.get("group", 1))
    m, cg, kh, kw = w.shape
    if group == x.shape[1] == m and cg == 1:
        return "depthwise"
    if group != 1:
        return None
    # 1×1, strided or not (gemm_nchw16c gathers a strided layer's pixels first).
    if (kh, kw) == (1, 1) and not any(a.get("pads") or []) \
            and out.shape[2] * out.shape[3] >= MIN_PIXELS:
        return "pointwise"
    # A stem reads the network's image (or what a layer outside any region made of it).
    if x.shape[1] * kh * kw <= MAX_STEM_K and m >= MIN_STEM_CHANNELS and (
            x.producer is None or _role(x.producer) is None):
        return "stem"
    # Any other one-group convolution: taps_nchw16c, and for 3×3 at stride 1 Winograd's
    # blocked tactics.
    if (kh, kw) != (1, 1) and x.shape[1] * kh * kw >= TAPS_MIN_K:
        return "conv"
    return None


def _winograd_domain(node: Node) -> bool:
    """A 3×3 convolution at stride 1 without dilation: Winograd's."""
    a, w = node.attrs, node.inputs[1]
    return (w is not None and tuple(w.shape[2:]) == (3, 3)
            and [int(v) for v in a.get("strides") or (1, 1)] == [1, 1]
            and [int(v) for v in a.get("dilations") or (1, 1)] == [1, 1])


def _pointwise_ok(node: Node) -> bool:
    out = node.outputs[0]
    if len(out.shape) != 4 or not _f32(node.inputs) or not _f32(node.outputs):
        return False
    n, c = out.shape[:2]
    for v in node.inputs:
        if v is None:
            return False
        if v.is_const:
            if v.size != 1:
                return False
        elif v.shape != out.shape and v.shape not in ((n, c, 1, 1), (1, c, 1, 1)):
            return False
    steps = node.attrs.get("program", [{"op": node.op, "shape": list(out.shape)}])
    return all(s["op"] in SAFE_POINTWISE and len(s["shape"]) == 4 and s["shape"][1] == c
               for s in steps)


def _role(node: Node) -> str | None:
    if len(node.outputs) != 1:
        return None
    if node.op == "Conv":
        return _conv_role(node)
    if node.op == "Pointwise" or node.op in SAFE_POINTWISE:
        return "pointwise_op" if "epilogue" not in node.attrs and _pointwise_ok(node) else None
    if node.op == "MaxPool" and _max_pool_ok(node):
        return "max_pool"
    if node.op == "GlobalAveragePool" and len(node.inputs[0].shape) == 4 \
            and _f32(node.inputs):  # type: ignore[union-attr]
        return "pool"
    return None


def _max_pool_ok(node: Node) -> bool:
    """A 2-D float32 max pool (no Indices) every window of which reaches into the image
    (the blocked kernel has no empty window to fill)."""
    x, out, a = node.inputs[0], node.outputs[0], node.attrs
    kernel = [int(k) for k in a.get("kernel_shape") or ()]
    if (len(node.outputs) != 1 or x is None or len(x.shape) != 4 or len(kernel) != 2
            or not _f32(node.inputs) or not _f32(node.outputs)):
        return False
    strides = [int(s) for s in a.get("strides") or (1, 1)]
    dilations = [int(d) for d in a.get("dilations") or (1, 1)]
    begin = [int(p) for p in (a.get("pads") or (0, 0, 0, 0))[:2]]
    for size, osize, k, s, d, b in zip(x.shape[2:], out.shape[2:], kernel, strides,
                                       dilations, begin):
        if any(inside(o * s - b, k, d, size)[1] == 0 for o in range(osize)):
            return False
    return True


def _reads_blocked(node: Node, role: str) -> list[int]:
    """Input positions a blocked layer reads in the blocked layout."""
    if node.op == "Conv":  # X (a stem's image stays planar) and the epilogue's tensors
        epi = node.attrs.get("epilogue")
        own = len(node.inputs) - (int(epi["inputs"]) if epi else 0)
        return ([] if role == "stem" else [0]) + list(range(own, len(node.inputs)))
    return [i for i, v in enumerate(node.inputs) if v is not None and not v.is_const]


def _regions(graph: Graph, users: dict[int, list[Node]]) -> dict[int, str]:
    """id(node) → role for the layers of every region worth blocking: one holding a
    depthwise convolution, or 1×1 convolutions that gain more than the reorders cost."""
    roles = {id(n): r for n in graph.nodes if (r := _role(n)) is not None}
    parent = {k: k for k in roles}

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for node in graph.nodes:
        if id(node) not in roles:
            continue
        for i in _reads_blocked(node, roles[id(node)]):
            src = node.inputs[i].producer  # type: ignore[union-attr]
            if src is not None and id(src) in roles:
                parent[find(id(src))] = find(id(node))
    groups: dict[int, list[Node]] = {}
    for node in graph.nodes:
        if id(node) in roles:
            groups.setdefault(find(id(node)), []).append(node)
    keep = {k for k, members in groups.items()
            if any(roles[id(n)] == "depthwise" for n in members)
            or _pointwise_gain(graph, members, roles, users) > 0}
    chosen = {k: r for k, r in roles.items() if find(k) in keep}
    return _drop_islands(graph, chosen, users)


def _pointwise_gain(graph: Graph, members: list[Node], roles: dict[int, str],
                    users: dict[int, list[Node]]) -> float:
    """Nanoseconds a region without depthwise layers saves blocked: its 1×1 convolutions
    run faster on blocks, its edges pay reorders. Measured here on ResNet-50's bottleneck
    1×1 layers (with the residual add fused): the blocked GEMM took 0.22-0.29 ms where the
    planar ones took 0.27-0.44 (≈ 1.6 ps a multiply-add saved), while a reorder moves
    ≈ 5 values a nanosecond."""
    inside = {id(n) for n in members}
    outputs = {id(v) for v in graph.outputs}
    macs = transposed = 0
    edges: dict[int, int] = {}  # id(value) → values reordered at the region's edge
    for node in members:
        role = roles[id(node)]
        if role == "pointwise":
            x, out = node.inputs[0], node.outputs[0]
            macs += out.size * x.shape[1]  # type: ignore[union-attr]
        elif role == "conv" and not _winograd_domain(node):
            # taps_c16 transposes its input and output, taps_nchw16c not. Planar Winograd
            # transposes while it loads and stores anyway (its blocked tactic is 0-15 %
            # faster alone, less than a reorder of its input costs): no gain counted — it
            # joins a region where it saves reorders (``_drop_islands``).
            transposed += node.inputs[0].size + node.outputs[0].size  # type: ignore[union-attr]
        elif role == "stem":  # direct_c16 transposes its output, direct_nchw16c not
            transposed += node.outputs[0].size
        for i in _reads_blocked(node, role):
            v = node.inputs[i]
            if v is not None and (v.producer is None or id(v.producer) not in inside):
                edges[id(v)] = v.size
        out = node.outputs[0]
        if id(out) in outputs or any(id(u) not in inside for u in users.get(id(out), [])):
            edges[id(out)] = out.size
    return macs * MAC_SAVED_NS + (transposed - sum(edges.values())) * REORDER_NS


def _drop_islands(graph: Graph, chosen: dict[int, str],
                  users: dict[int, list[Node]]) -> dict[int, str]:
    """Remove the layers on large planes (and Winograd layers on any: they gain nothing
    else blocked) that cost more reorders blocked than planar —
    values reordered into blocks for them and their output reordered back, against their
    blocked inputs reordered out and their output reordered in for blocked readers — until
    none is left: each removal changes its neighbours' sums. (DBNet's first depthwise
    layer, 320×320 → 160×160, needed its 32-channel input reordered: 0.8 ms for a
    1 ms layer.)"""
    changed = True
    while changed:
        changed = False
        for node in graph.nodes:
            role = chosen.get(id(node))
            if role is None:
                continue
            out = node.outputs[0]
            big = max((v.shape[2] * v.shape[3] for v in (node.inputs[0], out)
                       if v is not None and len(v.shape) >= 4), default=0)
            if big < ISLAND_PIXELS and not (role == "conv" and _winograd_domain(node)):
                continue
            blocked_cost = planar_cost = 0
            for i in _reads_blocked(node, role):
                v = node.inputs[i]
                if v is None:
                    continue
                if v.producer is not None and id(v.producer) in chosen:
                    planar_cost += v.size
                else:
                    blocked_cost += v.size
            readers = users.get(id(out), [])
            if any(id(u) not in chosen for u in readers) or any(v is out for v in graph.outputs):
                blocked_cost += out.size
            if any(id(u) in chosen for u in readers):
                planar_cost += out.size
            if blocked_cost > planar_cost:
                del chosen[id(node)]
                changed = True
    return chosen


def assign_layouts(graph: Graph, ctx: PassContext) -> int:
    """Put the regions of ``graph`` worth blocking (``_regions``) in the blocked layout;
    returns how many layers run blocked (reorders not counted)."""
    users = graph.consumers()
    chosen = _regions(graph, users)
    if not chosen:
        return 0
    blocked_of: dict[int, Value] = {}  # id(planar value) → its blocked twin
    reorders = 0

    def reorder(src: Value, dst: Value, to: str, channels: int) -> Node:
        nonlocal reorders
        reorders += 1
        return Node("Reorder", graph.unique_node_name(f"reorder_{dst.name}"), [src], [dst],
                    {"to": to, "channels": channels})

    def twin(v: Value) -> Value:
        vb = Value(graph.unique_name(f"{v.name}_nchw16c"), blocked_shape(v.shape), v.dtype,
                   layout=BLOCKED)
        blocked_of[id(v)] = vb
        return vb

    outputs = {id(v) for v in graph.outputs}
    nodes: list[Node] = []
    # Graph inputs a blocked layer reads: reordered first.
    for v in graph.inputs:
        if any(id(u) in chosen and _reads(u, v, chosen[id(u)]) for u in users.get(id(v), [])):
            nodes.append(reorder(v, twin(v), BLOCKED, v.shape[1]))
    for node in graph.nodes:
        role = chosen.get(id(node))
        if role is not None:
            for i in _reads_blocked(node, role):
                node.inputs[i] = blocked_of[id(node.inputs[i])]  # type: ignore[index]
            out = node.outputs[0]
            vb = twin(out)
            vb.producer = node
            node.outputs = [vb]
            _convert(node, role, out)
            nodes.append(node)
            planar_users = [u for u in users.get(id(out), []) if id(u) not in chosen
                            or not _reads(u, out, chosen[id(u)])]
            if planar_users or id(out) in outputs:
                nodes.append(reorder(vb, out, PLANAR, out.shape[1]))
            continue
        nodes.append(node)
        for out in node.outputs:
            if any(id(u) in chosen and _reads(u, out, chosen[id(u)])
                   for u in users.get(id(out), [])):
                nodes.append(reorder(out, twin(out), BLOCKED, out.shape[1]))
    graph.nodes = nodes
    ctx.note(f"layouts: {len(chosen)} layers in {BLOCKED}, {reorders} reorders")
    return len(chosen)


def _reads(node: Node, v: Value, role: str) -> bool:
    """Whether blocked layer ``node`` reads ``v`` in the blocked layout."""
    return any(node.inputs[i] is v for i in _reads_blocked(node, role))


def _convert(node: Node, role: str, out: Value) -> None:
    """The layer's attributes for its blocked tensors."""
    shape = list(blocked_shape(out.shape))
    if node.op == "Conv":
        node.attrs["layouts"] = [PLANAR if role == "stem" else BLOCKED, BLOCKED]
        epi = node.attrs.get("epilogue")
        if epi is not None:
            node.attrs["epilogue"] = {**epi, "program": [{**s, "shape": shape}
                                                         for s in epi["program"]]}
    elif node.op == "MaxPool":
        node.attrs["layouts"] = [BLOCKED, BLOCKED]
    elif node.op == "GlobalAveragePool":
        node.op = "ReduceMean"  # over the plane of each block: (n, cb, 1, 1, 16)
        node.attrs = {"axes": [2, 3], "keepdims": 1}
    elif node.op == "Pointwise":
        node.attrs["program"] = [{**s, "shape": list(blocked_shape(s["shape"]))}
                                 for s in node.attrs["program"]]
