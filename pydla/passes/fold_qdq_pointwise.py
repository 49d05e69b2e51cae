"""Fold the float pointwise work a QDQ model keeps between DequantizeLinear and
QuantizeLinear nodes into one ``QPointwise`` layer that reads and writes the 8-bit tensors:

    DQ(a) ─┐
    DQ(b) ─┼─ Mul/Add/Sub/HardSwish/Relu/… ─[Q → DQ]─ … ─ Q
    float ─┘

becomes one layer whose program (pydla.backends.cpu.kernels.qlinear_pointwise) has a
``DequantizeLinear`` step per 8-bit input, the float32 ops, a ``QuantizeLinear`` →
``DequantizeLinear`` pair for each Q/DQ round trip inside the chain, and the final
``QuantizeLinear`` — exactly the nodes' arithmetic (onnxruntime's: rounding half to even,
saturation), in one pass over memory instead of one per node. onnxruntime's
``quantize_static`` wraps every Add/Mul (open_nsfw's Sub/Mul/Add batch norms, residual
Adds), and a QDQ model keeps BatchNormalization/HardSwish (PP-LCNet) and LSTM gate
arithmetic (CRNN) between Q/DQ pairs.

Runs before fold_qdq: a convolution whose Q is read by such a layer then keeps its 8-bit
output. Nodes reading a Conv/Gemm/MatMul output directly are left to fold_qdq (its
residual Add and activation epilogue). BatchNormalization with constant parameters inside a
chain is lowered to Mul/Add first (fold_batchnorm's lowering). CPU target only: the CUDA
backend has no QPointwise kernel.
"""

from __future__ import annotations

import heapq

import numpy as np

from pydla.dtypes import DType
from pydla.ir import Graph, Node, Value
from pydla.ops import POINTWISE
from pydla.passes.base import PassContext
from pydla.passes.fold_batchnorm import lower_to_affine
from pydla.passes.patterns import RewritePass
from pydla.passes.programs import Step, to_program
from pydla.passes.rewrite import Uses, merge_provenance, place_at

_INT8 = (DType.INT8, DType.UINT8)
# A Conv/Gemm/MatMul output read directly is fold_qdq's (residual Add, activation clamp).
_HOSTS = frozenset({"Conv", "Gemm", "MatMul"})


def qdq_params(node: Node) -> tuple[float, int] | None:
    """(scale, zero point) of a per-tensor QuantizeLinear/DequantizeLinear between float32
    and int8/uint8 with constant parameters (a Q dividing in float32); None otherwise."""
    x, y = node.inputs[0], node.outputs[0]
    scale = node.inputs[1] if len(node.inputs) > 1 else None
    zp = node.inputs[2] if len(node.inputs) > 2 else None
    if x is None or scale is None or scale.const is None or scale.size != 1 or \
            (zp is not None and (zp.const is None or zp.size != 1)) or \
            int(node.attrs.get("block_size", 0)) or len(node.outputs) != 1:
        return None
    if node.op == "QuantizeLinear":
        if x.dtype is not DType.FLOAT32 or y.dtype not in _INT8 or \
                int(node.attrs.get("precision", int(DType.FLOAT32))) != int(DType.FLOAT32):
            return None
    elif node.op != "DequantizeLinear" or x.dtype not in _INT8 or y.dtype is not DType.FLOAT32:
        return None
    value = float(np.float32(scale.const.reshape(-1)[0]))
    if not np.isfinite(value) or value <= 0:
        return None
    return value, 0 if zp is None else int(zp.const.reshape(-1)[0])


def _float_pointwise(node: Node) -> bool:
    """A float32 pointwise op or fused Pointwise layer (no epilogue, one output)."""
    if node.op not in POINTWISE and node.op != "Pointwise":
        return False
    if len(node.outputs) != 1 or "epilogue" in node.attrs or \
            node.outputs[0].dtype is not DType.FLOAT32:
        return False
    if any(v is None or v.dtype is not DType.FLOAT32 for v in node.inputs):
        return False
    if node.op == "Pointwise":
        return all(s["dtype"] == "float32" for s in node.attrs["program"])
    return True


def _dequantized_constant(v: Value | None) -> np.ndarray | None:
    """A constant's value, or that of a DequantizeLinear of constants (a QDQ model's
    BatchNormalization parameters: fold_constants has not run yet)."""
    if v is None or v.is_const:
        return None if v is None else v.const
    dq = v.producer
    if dq is None or dq.op != "DequantizeLinear" or any(
            x is not None and not x.is_const for x in dq.inputs[:3]) or \
            int(dq.attrs.get("block_size", 0)) or dq.inputs[0] is None or \
            dq.inputs[1] is None or len(v.shape) > 1:
        return None
    x = dq.inputs[0].const.astype(np.float32)  # type: ignore[union-attr]
    zp = dq.inputs[2] if len(dq.inputs) > 2 else None
    if zp is not None:
        x = x - zp.const.astype(np.float32).reshape(-1)  # type: ignore[union-attr]
    return (x * dq.inputs[1].const.astype(np.float32).reshape(-1)).astype(np.float32)


def _lowerable_batchnorm(node: Node) -> bool:
    return (node.op == "BatchNormalization" and len(node.outputs) == 1
            and len(node.inputs) >= 5
            and all(_dequantized_constant(v) is not None for v in node.inputs[1:5]))


def _lower_batchnorm(graph: Graph, bn: Node, ctx: PassContext) -> bool:
    """The BatchNormalization as Mul/Add of constants (its dequantized parameters taken
    as constants first)."""
    for i in range(1, 5):
        v = bn.inputs[i]
        value = _dequantized_constant(v)
        if v is not None and not v.is_const and value is not None:
            bn.inputs[i] = Value(graph.unique_name(f"{v.name}_const"), v.shape, DType.FLOAT32,
                                 const=value.reshape(v.shape))
    return lower_to_affine(graph, bn, ctx)


class _Chain:
    """The nodes of one match, found walking producers back from the final Q."""

    def __init__(self, graph: Graph, uses: Uses, root: Node) -> None:
        self.uses = uses
        self.order = {id(n): i for i, n in enumerate(graph.nodes)}
        self.members: dict[int, Node] = {id(root): root}
        # DQs that other layers read too: they stay, the program dequantizes their input
        self.shared: dict[int, Node] = {}
        self.batchnorm: Node | None = None
        self._grow(root)
        self._demote_round_trips(root)

    def _inside(self, node: Node) -> bool:
        """Every reader of the node's outputs is in the match (and none is a graph output)."""
        return all(id(v) not in self.uses.outputs and self.uses.of(v) and
                   all(id(r) in self.members for r in self.uses.of(v)) for v in node.outputs)

    def _grow(self, root: Node) -> None:
        heap: list[tuple[int, int, Node]] = []
        seen: set[int] = set()

        def push(node: Node) -> None:
            for v in node.inputs:
                p = v.producer if v is not None else None
                if p is not None and id(p) not in seen and id(p) in self.order:
                    seen.add(id(p))
                    # latest first: a node's readers are decided before it
                    heapq.heappush(heap, (-self.order[id(p)], id(p), p))

        push(root)
        while heap:
            _, _, node = heapq.heappop(heap)
            if not self._joins(node):
                continue
            if not self._inside(node):
                if node.op == "DequantizeLinear":
                    self.shared[id(node.outputs[0])] = node
                continue
            if _lowerable_batchnorm(node):
                self.batchnorm = node
                return
            self.members[id(node)] = node
            if node.op != "DequantizeLinear" or produced(node.inputs[0], "QuantizeLinear"):
                push(node)

    def _joins(self, node: Node) -> bool:
        if node.op == "DequantizeLinear":
            return qdq_params(node) is not None
        if node.op == "QuantizeLinear":  # inside: read only by member DQs (a round trip)
            return qdq_params(node) is not None and all(
                r.op == "DequantizeLinear" for r in self.uses.of(node.outputs[0]))
        if not (_float_pointwise(node) or _lowerable_batchnorm(node)):
            return False
        return not any(v is not None and v.producer is not None and v.producer.op in _HOSTS
                       for v in node.inputs)

    def _demote_round_trips(self, root: Node) -> None:
        """A member Q whose input no member computes stays a Q layer: the DQs reading it
        read its 8-bit output as the layer's input."""
        changed = True
        while changed:
            changed = False
            for key, node in list(self.members.items()):
                if node is root or node.op != "QuantizeLinear":
                    continue
                p = node.inputs[0].producer if node.inputs[0] is not None else None
                if p is None or id(p) not in self.members:
                    del self.members[key]
                    changed = True

    def nodes(self) -> list[Node]:
        return sorted(self.members.values(), key=lambda n: self.order[id(n)])


def produced(v: Value | None, op: str) -> bool:
    return v is not None and v.producer is not None and v.producer.op == op


class _Program:
    """The QPointwise program of a chain: its inputs and steps."""

    def __init__(self, graph: Graph, shared: dict[int, Node]) -> None:
        self.graph = graph
        self.inputs: list[Value] = []
        self.steps: list[Step] = []
        self.registers: dict[int, int] = {}  # id(Value) -> register
        self.shared = shared
        # a DequantizeLinear step's result -> (its operand's register, scale, zero point,
        # 8-bit type): a Q of it with the same parameters gives the operand back exactly
        self.dequantized: dict[int, tuple[int, float, int, DType]] = {}

    def register(self, v: Value) -> int:
        dq = self.shared.get(id(v))
        if dq is not None and id(v) not in self.registers:
            self.node(dq)
        if id(v) not in self.registers:
            self.inputs.append(v)
            self.registers[id(v)] = len(self.inputs) - 1
        return self.registers[id(v)]

    def add(self, op: str, ins: list[int], out: Value, attrs: dict) -> None:
        self.steps.append({"op": op, "in": ins, "attrs": attrs, "shape": list(out.shape),
                           "dtype": out.dtype.name.lower()})

    def node(self, node: Node, final: bool = False) -> None:
        """Append ``node``'s steps; its operands are inputs or earlier steps' results
        (``final``: the layer's result, always a step of its own)."""
        if node.op in ("QuantizeLinear", "DequantizeLinear"):
            scale, zp = qdq_params(node)  # type: ignore[misc]
            x, y = node.inputs[0], node.outputs[0]
            assert x is not None
            if node.op == "DequantizeLinear" and x.const is not None:
                # a constant's dequantized value (the DQ kernel's float32 arithmetic) is an
                # input, not a step per element
                value = (x.const.astype(np.float32) - np.float32(zp)) * np.float32(scale)
                const = Value(self.graph.unique_name(f"{x.name}_dequantized"), x.shape,
                              DType.FLOAT32, const=value.astype(np.float32))
                self.registers[id(y)] = self.register(const)
                return
            if node.op == "QuantizeLinear" and x.const is not None and not final:
                # a constant's quantized value (the Q kernel's float32 arithmetic)
                info = np.iinfo(y.dtype.np)
                q = np.rint(np.divide(x.const.astype(np.float32), np.float32(scale),
                                      dtype=np.float32)) + np.float32(zp)
                const = Value(self.graph.unique_name(f"{x.name}_quantized"), x.shape, y.dtype,
                              const=np.clip(q, info.min, info.max).astype(y.dtype.np))
                self.registers[id(y)] = self.register(const)
                return
            operand = self.register(x)
            if node.op == "QuantizeLinear" and not final:
                back = self.dequantized.get(id(x))
                if back is not None and back[1:] == (scale, zp, y.dtype):
                    # Q(DQ(q)) with DQ's parameters is q: |q - zp| ≤ 255 survives the
                    # float32 round trip well inside rint's half step
                    self.registers[id(y)] = back[0]
                    return
            self.add(node.op, [operand], y, {"scale": scale, "zero_point": zp})
            if node.op == "DequantizeLinear":
                self.dequantized[id(y)] = (operand, scale, zp, x.dtype)
        else:
            ins, steps = to_program(node)
            base = [self.register(v) for v in ins]
            first = len(self.steps)
            for s in steps:
                regs = [base[r] if r < len(ins) else self._result(first + r - len(ins))
                        for r in s["in"]]
                self.steps.append({**s, "in": regs})
        # Step results get provisional (negative) numbers until finish() knows how many
        # inputs precede them.
        self.registers[id(node.outputs[0])] = self._result(len(self.steps) - 1)

    @staticmethod
    def _result(step: int) -> int:
        return -1 - step

    def finish(self) -> list[Step]:
        n = len(self.inputs)
        return [{**s, "in": [r if r >= 0 else n + (-1 - r) for r in s["in"]]}
                for s in self.steps]


# Q round trips after which a chain of one full-size 8-bit operand is worth a table of its
# own (qlinear_pointwise's tactic ``table``: a lookup per element, however long).
TABLE_QUANTIZE = 3


def _split_for_table(chain: _Chain, root: Node) -> None:
    """Where two full-size 8-bit tensors meet first (a residual Add) and a long per-channel
    tail follows (open_nsfw: Add → Q → DQ → Sub → Q → DQ → Mul → Q → DQ → Add → Q), keep
    the tail alone: the earliest member Q after which only its own output and small
    operands are read leaves the match with everything before it, and roots a layer of its
    own on the next sweep. The tail then runs as a table lookup instead of a loop paying
    every Q's division."""
    members = chain.members
    size = root.outputs[0].size

    def ancestors(node: Node) -> set[int]:
        seen: set[int] = set()
        todo = [node]
        while todo:
            for v in todo.pop().inputs:
                p = v.producer if v is not None else None
                if p is not None and id(p) in members and id(p) not in seen:
                    seen.add(id(p))
                    todo.append(p)
        return seen

    def full_leaves(ids: set[int], besides: Value | None = None) -> int:
        count = 0
        for key in ids:
            for v in members[key].inputs:
                if v is None or v is besides or v.size < size or (
                        v.producer is not None and id(v.producer) in ids):
                    continue
                count += 1
        return count

    every = set(members)
    if full_leaves(every) < 2:
        return
    small = max((v.size for n in members.values() for v in n.inputs
                 if v is not None and v.size < size), default=1)
    if size < 256 * small:  # a table would outgrow the tensor
        return

    def quantizes(ids: set[int]) -> int:
        return sum(members[k].op == "QuantizeLinear" for k in ids)

    inner = [q for q in chain.nodes() if q is not root and q.op == "QuantizeLinear"]
    splits = [(q, ancestors(q) | {id(q)}) for q in inner]
    # a long tail on one tensor after the join: the earliest such Q; else a long head on
    # one tensor before it: the latest such Q
    for q, before in splits:
        after = every - before
        if full_leaves(after, q.outputs[0]) == 0 and full_leaves(before) >= 2 and \
                quantizes(after) >= TABLE_QUANTIZE:
            break
    else:
        for _, before in reversed(splits):
            if full_leaves(before) == 1 and quantizes(before) >= TABLE_QUANTIZE:
                break
        else:
            return
    for key in before:
        del members[key]


class FoldQDQPointwise(RewritePass):
    name = "fold_qdq_pointwise"
    ensures = ("qdq_pointwise_folded",)

    def _sweep(self, graph: Graph, ctx: PassContext) -> bool:
        # Last Q first: a chain's inner Q/DQ round trips join it before they could root
        # chains of their own.
        uses = Uses(graph)
        return any(self.rewrite(graph, uses, node, ctx) for node in reversed(graph.nodes))

    def rewrite(self, graph: Graph, uses: Uses, root: Node, ctx: PassContext) -> bool:
        if ctx.target != "cpu" or root.op != "QuantizeLinear" or qdq_params(root) is None:
            return False
        chain = _Chain(graph, uses, root)
        if chain.batchnorm is not None and _lower_batchnorm(graph, chain.batchnorm, ctx):
            return True  # matched again as Mul/Add on the next sweep
        _split_for_table(chain, root)
        nodes = chain.nodes()
        if len(nodes) < 2:
            return False
        program = _Program(graph, chain.shared)
        for node in nodes:
            program.node(node, final=node is root)
        steps = program.finish()
        layer = Node("QPointwise", graph.unique_node_name(root.name), list(program.inputs),
                     [root.outputs[0]], {"program": steps})
        layer.fused_from = []
        layer.precision = "int8"
        merge_provenance(layer, *nodes)
        place_at(graph, layer, root, nodes)
        eight = sum(v.dtype in _INT8 for v in program.inputs)
        ctx.note(f"fold_qdq_pointwise: {' + '.join(n.op for n in nodes)} -> QPointwise "
                 f"{layer.name!r} ({eight} 8-bit and {len(program.inputs) - eight} float "
                 f"inputs, {len(steps)} steps)")
        return True
