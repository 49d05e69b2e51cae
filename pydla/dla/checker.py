"""Check every layer of a network against the DLA rules (``pydla.dla.rules``).

The layers are the model's ONNX nodes as TensorRT's parser would see them after constant
and shape folding, with batch norms and pads folded into their convolutions — no pointwise
fusion, since TensorRT checks DLA support layer by layer before it fuses. Each layer gets a
verdict and, when refused, the first rule it breaks; runs of supported layers in execution
order become DLA subgraphs (a contiguous run of a topological order never leaves and
re-enters itself, so each run is a valid loadable).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydla.dla.rules import LAYER_OF_OP, RULE_SET, RULES
from pydla.dtypes import DType
from pydla.errors import BuildError
from pydla.ir import Graph, Node, Value


class DlaRuleError(BuildError):
    """A layer the DLA cannot run, in a build that needs every layer on the DLA."""


@dataclass(frozen=True)
class TargetRefusal:
    """Why a target cannot run a layer: a rule key and the layer's own detail."""

    rule: str
    detail: str

    @property
    def reason(self) -> str:
        return f"{self.detail} [{self.rule}]"


@dataclass(frozen=True)
class Refusal(TargetRefusal):
    """A DLA refusal: the reason also quotes the documented rule it breaks."""

    @property
    def reason(self) -> str:
        row = RULES[self.rule]
        return f"{self.detail} ({row.layer}: {row.text}) [{self.rule}]"


@dataclass
class LayerVerdict:
    name: str
    op: str
    layer_type: str | None
    supported: bool
    refusal: TargetRefusal | None
    onnx_nodes: list[str]
    flops: int
    segment: int | None = None
    runs_on: str = "DLA"  # the device of a supported layer
    otherwise: str = "GPU"  # of a refused one ("none": nothing runs it)

    @property
    def device(self) -> str:
        return self.runs_on if self.supported else self.otherwise

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "op": self.op, "supported": self.supported,
                "device": self.device,
                "reason": self.refusal.reason if self.refusal else None,
                "rule": self.refusal.rule if self.refusal else None,
                "layer_type": self.layer_type, "onnx_nodes": list(self.onnx_nodes),
                "flops": self.flops, "segment": self.segment}


class LayerReport(ABC):
    """What every target's check reports (``pydla check --target=…``): a verdict per
    layer, the share of layers and FLOPs the target runs, notes."""

    target: str
    layers: list[LayerVerdict]
    notes: list[str]

    @property
    def supported_layers(self) -> int:
        return sum(v.supported for v in self.layers)

    @property
    def flops_fraction(self) -> float:
        total = sum(v.flops for v in self.layers)
        return sum(v.flops for v in self.layers if v.supported) / total if total else 1.0

    def coverage(self, what: str) -> str:
        """"N of M layers, X % of the FLOPs, ``what``"."""
        return (f"{self.supported_layers} of {len(self.layers)} layers, "
                f"{100 * self.flops_fraction:.1f} % of the FLOPs, {what}")

    @abstractmethod
    def summary(self) -> str:
        """The one-line verdict on the whole model."""

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "layers": [v.to_json() for v in self.layers],
                "supported_layers": self.supported_layers, "total_layers": len(self.layers),
                "flops_fraction": round(self.flops_fraction, 6),
                "notes": list(self.notes), "summary": self.summary()}


@dataclass
class DlaReport(LayerReport):
    precision: str
    layers: list[LayerVerdict]
    segments: list[list[str]]
    notes: list[str] = field(default_factory=list)
    target: str = "dla"

    def summary(self) -> str:
        k = len(self.segments)
        return self.coverage(f"can run on DLA ({self.precision}); {k} DLA "
                             f"subgraph{'s' if k != 1 else ''}")

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "rule_set": RULE_SET, "precision": self.precision,
                "dla_subgraphs": len(self.segments), "segments": self.segments}


# -- the checks ---------------------------------------------------------------------------
Check = Callable[[Node, "_Context"], Refusal | None]


@dataclass
class _Context:
    precision: str
    producers: dict[int, Node]
    consumers: dict[int, list[Node]]


def _in_range(values: Sequence[int], bounds: tuple[int, int]) -> bool:
    return all(bounds[0] <= int(v) <= bounds[1] for v in values)


def _activations(node: Node) -> list[Value]:
    return [v for v in node.inputs if v is not None and not v.is_const]


def _spatial(node: Node, key: str, default: int, count: int = 2) -> list[int]:
    return [int(v) for v in node.attrs.get(key, [default] * count)]


def _pads(node: Node) -> list[int]:
    return [int(v) for v in node.attrs.get("pads", [0, 0, 0, 0])]


def _flat4(shape: Sequence[int]) -> bool:
    """Rank 4, or rank 2 ([N, C] is [N, C, 1, 1] to the DLA)."""
    return len(shape) in (2, 4)


def _check_activation(node: Node, ctx: _Context) -> Refusal | None:
    if node.op not in RULES["activation.types"].limit:
        return Refusal("activation.types", f"{node.op} is not a DLA activation")
    x = node.inputs[0]
    if x is not None and not _flat4(x.shape):
        return Refusal("activation.rank", f"input of rank {len(x.shape)}")
    if node.op == "Clip" and any(v is not None and not v.is_const for v in node.inputs[1:]):
        return Refusal("activation.types", "Clip bounds computed at run time")
    return None


def _check_prelu(node: Node, ctx: _Context) -> Refusal | None:
    slope = node.inputs[1]
    if slope is None or not slope.is_const:
        return Refusal("prelu.slope", "the slope is computed at run time")
    return None


def _check_comparison(node: Node, ctx: _Context) -> Refusal | None:
    if ctx.precision != "int8":
        return Refusal("comparison.precision", f"a {ctx.precision} build")
    users = ctx.consumers.get(id(node.outputs[0]), [])
    if not users or any(u.op != "Cast" for u in users):
        return Refusal("comparison.cast", "the output is not cast at once")
    return None


def _check_concat(node: Node, ctx: _Context) -> Refusal | None:
    out = node.outputs[0].shape
    if len(out) != 4:
        return Refusal("concat.axis", f"a rank-{len(out)} concatenation")
    axis = int(node.attrs.get("axis", 1)) % 4
    if axis != 1:
        return Refusal("concat.axis", f"axis {axis}")
    parts = [v for v in node.inputs if v is not None]
    if len(parts) < 2:
        return Refusal("concat.inputs", f"{len(parts)} input")
    if len({tuple(v.shape[2:]) for v in parts}) > 1:
        return Refusal("concat.inputs", "inputs of different spatial sizes")
    return None


def _check_conv(node: Node, ctx: _Context) -> Refusal | None:
    x, w = node.inputs[0], node.inputs[1]
    if x is None or w is None or len(x.shape) != 4:
        return Refusal("conv.rank", f"a {len(x.shape) - 2 if x is not None else '?'}-D "
                       "convolution")
    if not w.is_const or (len(node.inputs) > 2 and node.inputs[2] is not None
                          and not node.inputs[2].is_const):
        return Refusal("conv.weights", "weights computed at run time")
    kernel = list(w.shape[2:])
    if not _in_range(kernel, RULES["conv.kernel"].limit):
        return Refusal("conv.kernel", f"kernel {kernel[0]}x{kernel[1]}")
    strides = _spatial(node, "strides", 1)
    if not _in_range(strides, RULES["conv.stride"].limit):
        return Refusal("conv.stride", f"stride {strides[0]}x{strides[1]}")
    pads = _pads(node)
    if not _in_range(pads, RULES["conv.padding"].limit) or any(
            p >= kernel[i % 2] for i, p in enumerate(pads)):
        return Refusal("conv.padding", f"padding {pads} with kernel {kernel[0]}x{kernel[1]}")
    dilations = _spatial(node, "dilations", 1)
    if not _in_range(dilations, RULES["conv.dilation"].limit):
        return Refusal("conv.dilation", f"dilation {dilations[0]}x{dilations[1]}")
    group = int(node.attrs.get("group", 1))
    if group > RULES["conv.groups"].limit:
        return Refusal("conv.groups", f"{group} groups")
    maps = int(w.shape[0])
    if not _in_range([maps], RULES["conv.output_maps"].limit):
        return Refusal("conv.output_maps", f"{maps} output maps")
    return None


def _check_fc(node: Node, ctx: _Context) -> Refusal | None:
    a, b = node.inputs[0], node.inputs[1]
    if a is None or b is None or not b.is_const or a.is_const:
        return Refusal("fc.weights", "a product of two activations")
    if node.op == "Gemm" and int(node.attrs.get("transA", 0)):
        return Refusal("fc.weights", "a transposed activation (transA=1)")
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    if bias is not None and not bias.is_const:
        return Refusal("fc.weights", "a bias computed at run time")
    if len(a.shape) not in RULES["fc.rank"].limit:
        return Refusal("fc.rank", f"input of rank {len(a.shape)}")
    maps = int(node.outputs[0].shape[-1]) if len(a.shape) == 2 else int(b.shape[-1])
    if not _in_range([maps], RULES["conv.output_maps"].limit):
        return Refusal("conv.output_maps", f"{maps} output maps")
    return None


def _long_or_range(values: Sequence[int], limit: tuple[tuple[int, int], set[int]]) -> bool:
    short, longs = limit
    if _in_range(values, short):
        return True
    return sorted(int(v) in longs for v in values) == [False, True] and 1 in values


def _check_deconv(node: Node, ctx: _Context) -> Refusal | None:
    x, w = node.inputs[0], node.inputs[1]
    if x is None or w is None or len(x.shape) != 4:
        return Refusal("deconv.rank", "not a 2-D deconvolution")
    if not w.is_const:
        return Refusal("conv.weights", "weights computed at run time")
    kernel = list(w.shape[2:])
    if not _long_or_range(kernel, RULES["deconv.kernel"].limit):
        return Refusal("deconv.kernel", f"kernel {kernel[0]}x{kernel[1]}")
    strides = _spatial(node, "strides", 1)
    if not _long_or_range(strides, RULES["deconv.stride"].limit):
        return Refusal("deconv.stride", f"stride {strides[0]}x{strides[1]}")
    pads = _pads(node)
    if any(pads) or any(int(v) for v in node.attrs.get("output_padding", [0, 0])):
        return Refusal("deconv.padding", f"padding {pads}")
    if int(node.attrs.get("group", 1)) != 1:
        return Refusal("deconv.groups", f"{node.attrs['group']} groups")
    if any(d != 1 for d in _spatial(node, "dilations", 1)):
        return Refusal("deconv.dilation", f"dilation {_spatial(node, 'dilations', 1)}")
    maps = int(node.outputs[0].shape[1])
    if not _in_range([maps], RULES["deconv.output_maps"].limit):
        return Refusal("deconv.output_maps", f"{maps} output maps")
    return None


def _check_eltwise(node: Node, ctx: _Context) -> Refusal | None:
    if node.op not in RULES["eltwise.ops"].limit:
        return Refusal("eltwise.ops", f"{node.op}")
    out = tuple(node.outputs[0].shape)
    if not _flat4(out):
        return Refusal("eltwise.rank", f"output of rank {len(out)}")
    for v in _activations(node):
        shape = tuple(v.shape)
        per_channel = len(shape) == len(out) and all(
            s == 1 for i, s in enumerate(shape) if i != 1) and shape[1] == out[1]
        if shape != out and not per_channel and math.prod(shape) != 1:
            return Refusal("eltwise.rank", f"operand {v.name} {list(shape)} broadcast to "
                           f"{list(out)}")
    return None


def _check_lrn(node: Node, ctx: _Context) -> Refusal | None:
    size = int(node.attrs.get("size", 0))
    if size not in RULES["lrn.window"].limit:
        return Refusal("lrn.window", f"window {size}")
    return None


def _check_pool(node: Node, ctx: _Context) -> Refusal | None:
    x = node.inputs[0]
    if x is None or len(x.shape) != 4:
        return Refusal("pool.rank", "not a 2-D pooling")
    if node.op.startswith("Global"):
        window = [int(v) for v in x.shape[2:]]
        if not _in_range(window, RULES["pool.window"].limit):
            return Refusal("pool.window", f"a global pool over {window[0]}x{window[1]}")
        return None
    if len(node.outputs) > 1:
        return Refusal("general.layer", "MaxPool indices have no TensorRT layer")
    if any(d != 1 for d in _spatial(node, "dilations", 1)):
        return Refusal("general.layer", "dilated pooling has no TensorRT layer")
    window = _spatial(node, "kernel_shape", 1)
    if not _in_range(window, RULES["pool.window"].limit):
        return Refusal("pool.window", f"window {window[0]}x{window[1]}")
    strides = _spatial(node, "strides", 1)
    if not _in_range(strides, RULES["pool.stride"].limit):
        return Refusal("pool.stride", f"stride {strides[0]}x{strides[1]}")
    pads = _pads(node)
    if not _in_range(pads, RULES["pool.padding"].limit):
        return Refusal("pool.padding", f"padding {pads}")
    return None


def _axes(node: Node, rank: int) -> list[int]:
    axes = node.attrs.get("axes")
    return sorted(int(a) % rank for a in axes) if axes else list(range(rank))


def _check_reduce(node: Node, ctx: _Context) -> Refusal | None:
    x = node.inputs[0]
    rank = len(x.shape) if x is not None else 0
    if node.op not in RULES["reduce.ops"].limit:
        hint = ""
        if node.op == "ReduceMean" and rank == 4 and _axes(node, rank) == [2, 3]:
            hint = "; --adjust rewrites it as a global average pool"
        return Refusal("reduce.ops", f"{node.op}{hint}")
    if 0 in _axes(node, rank):
        return Refusal("reduce.axes", "reduces the batch axis")
    return None


def _check_resize(node: Node, ctx: _Context) -> Refusal | None:
    x, y = node.inputs[0], node.outputs[0]
    if x is None or len(x.shape) != 4:
        return Refusal("resize.scales", f"a rank-{len(x.shape) if x is not None else 0} resize")
    scales = node.attrs.get("scales") or [o / i for o, i in zip(y.shape, x.shape)]
    scales = [float(s) for s in scales]
    if len(scales) != 4 or scales[0] != 1 or scales[1] != 1:
        return Refusal("resize.scales", f"scales {scales}")
    mode = str(node.attrs.get("mode", "nearest"))
    bounds = RULES["resize.factor"].limit.get(mode)
    if bounds is None:
        return Refusal("resize.mode", f"mode {mode}")
    if any(s != int(s) for s in scales[2:]) or not _in_range([int(s) for s in scales[2:]],
                                                            bounds):
        return Refusal("resize.factor", f"{mode} scales {scales[2]:g}x{scales[3]:g}")
    ctm = str(node.attrs.get("coordinate_transformation_mode", "half_pixel"))
    rounding = str(node.attrs.get("nearest_mode", "round_prefer_floor")) \
        if mode == "nearest" else None
    if (ctm, rounding) not in RULES["resize.mode"].limit[mode]:
        return Refusal("resize.mode", f"{mode} with {ctm}" + (f" and {rounding}" if rounding
                                                               else ""))
    return None


def _check_scale(node: Node, ctx: _Context) -> Refusal | None:
    x = node.inputs[0]
    if x is None or not _flat4(x.shape):
        return Refusal("scale.rank", f"input of rank {len(x.shape) if x is not None else 0}")
    if any(v is not None and not v.is_const for v in node.inputs[1:]):
        return Refusal("scale.rank", "scale or shift computed at run time")
    return None


def _squeezed(shape: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(d) for d in shape if d != 1)


def _check_shuffle(node: Node, ctx: _Context) -> Refusal | None:
    x, y = node.inputs[0], node.outputs[0]
    if x is None:
        return Refusal("shuffle.rank", "no input")
    # [N, C, 1, 1] <-> [N, C] and friends move no data: no layer on the DLA.
    if node.op != "Transpose" and x.shape[:1] == y.shape[:1] and _squeezed(x.shape) == \
            _squeezed(y.shape) and _flat4(x.shape) and _flat4(y.shape):
        return None
    if len(x.shape) != 4 or len(y.shape) != 4:
        return Refusal("shuffle.rank", f"{list(x.shape)} -> {list(y.shape)}")
    if node.op == "Transpose" and int(node.attrs.get("perm", [0])[0]) != 0:
        return Refusal("shuffle.rank", f"permutation {node.attrs.get('perm')} moves the batch")
    if x.shape[0] != y.shape[0]:
        return Refusal("shuffle.rank", f"{list(x.shape)} -> {list(y.shape)} changes the batch")
    return None


def _check_slice(node: Node, ctx: _Context) -> Refusal | None:
    x = node.inputs[0]
    if any(v is not None and not v.is_const for v in node.inputs[1:]):
        return Refusal("slice.constant", "bounds computed at run time")
    if x is None or len(x.shape) != 4:
        return Refusal("slice.rank", f"input of rank {len(x.shape) if x is not None else 0}")
    steps = [int(s) for s in node.attrs.get("steps", [1] * 4)]
    if any(s != 1 for s in steps):
        return Refusal("slice.stride", f"steps {steps}")
    y = node.outputs[0]
    if y.shape[0] != x.shape[0]:
        return Refusal("slice.first_dim", f"{x.shape[0]} -> {y.shape[0]} along the batch")
    return None


def _check_softmax(node: Node, ctx: _Context) -> Refusal | None:
    x = node.inputs[0]
    rank = len(x.shape) if x is not None else 0
    axes = [int(a) % max(rank, 1) for a in node.attrs.get("axes", [node.attrs.get("axis", -1)])]
    if len(axes) != 1:
        return Refusal("softmax.axis", f"a softmax over axes {axes} at once")
    axis = axes[0]
    if rank < 2 or axis == 0 or axis < rank - 3:
        return Refusal("softmax.axis", f"axis {axis} of a rank-{rank} tensor")
    others = [int(d) for i, d in enumerate(x.shape) if i not in (0, axis)]
    single, general = RULES["softmax.size"].limit
    bound = single if all(d == 1 for d in others) else general
    if int(x.shape[axis]) > bound:
        return Refusal("softmax.size", f"an axis of {x.shape[axis]}")
    return None


def _check_unary(node: Node, ctx: _Context) -> Refusal | None:
    if node.op not in RULES["unary.ops"].limit:
        return Refusal("unary.ops", node.op)
    return None


def _check_qdq(node: Node, ctx: _Context) -> Refusal | None:
    if ctx.precision != "int8":
        return Refusal("qdq.precision", f"a {ctx.precision} build")
    x, scale = node.inputs[0], node.inputs[1]
    if x is not None and not x.is_const and scale is not None and math.prod(scale.shape) != 1:
        return Refusal("qdq.per_tensor", f"{math.prod(scale.shape)} scales on {x.name}")
    return None


CHECKS: dict[str, Check] = {
    "Activation": _check_activation, "Parametric ReLU": _check_prelu,
    "Comparison": _check_comparison, "Concatenation": _check_concat,
    "Convolution": _check_conv, "Fully Connected": _check_fc, "Deconvolution": _check_deconv,
    "ElementWise": _check_eltwise, "LRN": _check_lrn, "Pooling": _check_pool,
    "Reduce": _check_reduce, "Resize": _check_resize, "Scale": _check_scale,
    "Shuffle": _check_shuffle, "Slice": _check_slice, "SoftMax": _check_softmax,
    "Unary": _check_unary, "Quantize/Dequantize": _check_qdq,
}

_DLA_DTYPES = (DType.FLOAT32, DType.FLOAT16, DType.INT8, DType.UINT8)


def _general(node: Node, ctx: _Context, boolean: Value | None = None) -> Refusal | None:
    """The general restrictions; ``boolean``: the one tensor allowed to be bool (a
    comparison's output, cast at once)."""
    if ctx.precision not in RULES["general.precision"].limit:
        return Refusal("general.precision", f"a {ctx.precision} build")
    values = _activations(node) + list(node.outputs)
    for v in values:
        if v.dtype not in _DLA_DTYPES and v is not boolean:
            return Refusal("general.dtype", f"{v.name} is {v.dtype.name.lower()}")
    return None


def _sizes(node: Node) -> Refusal | None:
    """Batch and dimension limits, after the layer's own (more telling) limits."""
    for v in _activations(node) + list(node.outputs):
        shape = [int(d) for d in v.shape]
        batch = math.prod(shape[:-3]) if len(shape) > 3 else (shape[0] if len(shape) == 2
                                                              else 1)
        if batch > RULES["general.batch"].limit:
            return Refusal("general.batch", f"{v.name} has batch {batch}")
        rest = shape[-3:] if len(shape) > 3 else shape[1:] if len(shape) == 2 else shape
        if any(d > RULES["general.dims"].limit for d in rest):
            return Refusal("general.dims", f"{v.name} {shape}")
    return None


def check_node(node: Node, ctx: _Context) -> tuple[str | None, Refusal | None]:
    """The TensorRT layer type of ``node`` and the first rule it breaks (None: it runs)."""
    layer = LAYER_OF_OP.get(node.op)
    if node.op == "Cast":
        src = node.inputs[0]
        producer = ctx.producers.get(id(src)) if src is not None else None
        if producer is not None and LAYER_OF_OP.get(producer.op) == "Comparison":
            return "Comparison", _general(node, ctx, src)  # the cast the comparison needs
    general = _general(node, ctx, node.outputs[0] if layer == "Comparison" else None)
    if general is not None:
        return layer, general
    if layer is None:
        return None, Refusal("general.layer", f"{node.op} has no DLA layer")
    return layer, CHECKS[layer](node, ctx) or _sizes(node)


def node_flops(node: Node) -> int:
    out = node.outputs[0].shape if node.outputs else ()
    size = math.prod(int(d) for d in out)
    w = node.inputs[1] if len(node.inputs) > 1 else None
    if node.op == "Conv" and w is not None:
        return 2 * size * math.prod(int(d) for d in w.shape[1:])
    if node.op == "ConvTranspose" and w is not None and node.inputs[0] is not None:
        # every input element meets (OC/group)·kh·kw weights
        return 2 * math.prod(int(d) for d in node.inputs[0].shape) * math.prod(
            int(d) for d in w.shape[1:])
    if node.op in ("Gemm", "MatMul") and node.inputs[0] is not None:
        a = node.inputs[0].shape
        k = int(a[0] if node.op == "Gemm" and int(node.attrs.get("transA", 0)) else a[-1])
        return 2 * size * k
    return size


def layer_verdicts(graph: Graph,
                   check: Callable[[Node], tuple[str | None, TargetRefusal | None]],
                   runs_on: str = "DLA", otherwise: str = "GPU") -> list[LayerVerdict]:
    """Every layer of ``graph`` in execution order through ``check`` (its layer type on the
    target, and why the target refuses it or None)."""
    verdicts = []
    for node in graph.nodes:
        layer, refusal = check(node)
        verdicts.append(LayerVerdict(node.name, node.op, layer, refusal is None, refusal,
                                     list(node.fused_from) or [node.name], node_flops(node),
                                     runs_on=runs_on, otherwise=otherwise))
    return verdicts


def check_graph(graph: Graph, precision: str = "fp16") -> DlaReport:
    producers = {id(o): n for n in graph.nodes for o in n.outputs}
    consumers: dict[int, list[Node]] = {}
    for n in graph.nodes:
        for v in n.inputs:
            if v is not None:
                consumers.setdefault(id(v), []).append(n)
    ctx = _Context(precision, producers, consumers)
    report = DlaReport(precision, layer_verdicts(graph, lambda n: check_node(n, ctx)), [])
    _segment(graph, report, ctx)
    return report


def _segment(graph: Graph, report: DlaReport, ctx: _Context) -> None:
    """Runs of supported layers in execution order; a run whose internal tensors pass the
    1 GiB limit is refused as a whole (TensorRT would have to split it further)."""
    itemsize = 1 if report.precision == "int8" else 2
    limit = RULES["general.internal_bytes"].limit
    runs: list[list[int]] = []
    for i, v in enumerate(report.layers):
        if v.supported:
            if runs and runs[-1][-1] == i - 1:
                runs[-1].append(i)
            else:
                runs.append([i])
    outputs = {id(v) for v in graph.outputs}
    for run in runs:
        inside = {id(graph.nodes[i]) for i in run}
        internal = 0
        for i in run:
            for o in graph.nodes[i].outputs:
                users = ctx.consumers.get(id(o), [])
                if id(o) not in outputs and users and all(id(u) in inside for u in users):
                    internal += math.prod(int(d) for d in o.shape) * itemsize
        if internal >= limit:
            for i in run:
                v = report.layers[i]
                v.supported = False
                v.refusal = Refusal("general.internal_bytes",
                                    f"its subgraph holds {internal:,} bytes of internal tensors")
            continue
        for i in run:
            report.layers[i].segment = len(report.segments)
        report.segments.append([report.layers[i].name for i in run])
    cap = RULES["general.loadables"].limit
    if len(report.segments) > cap:
        report.notes.append(f"{len(report.segments)} DLA subgraphs: only {cap} loadables can "
                            "be loaded per core at once [general.loadables]")
