"""Which ops and tensor types the CUDA backend has kernels for, known without a GPU.

``CUDA_OPS`` is the CUDA kernel registry's op set written as data, so the builder, ``pydla
check --target=cuda`` and the tests can read it on a machine without CuPy. Two tests keep it
honest: ``tests/unit/test_cuda_coverage.py`` compares it with the ``@kernel(...)``
registrations parsed (``ast``, no import) from ``kernels/*.py``, and
``tests/gpu/test_cuda_registry_gpu.py`` with the imported registry. ``CPU_ONLY`` gives, for
every CPU kernel without a CUDA one, the reason — the to-do list of issue 26.

``layer_refusal(node)`` applies what the kernels themselves refuse at bind: the compute
kernels read and write float32, float16 or bfloat16 (``codegen.c_type``); the kernels that
move, select, compare or cast elements take every stored type (``codegen.storage_type``:
the integers and bool too, not float64), and integer arithmetic runs on integer tensors
(``typed_steps.INTEGER_OPS``); plus a few structural limits.
"""

from __future__ import annotations

import ast
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from pydla.backends.cuda.codegen import STORAGE_TYPES
from pydla.backends.cuda.tree_rules import tree_ensemble_refusal
from pydla.backends.cuda.typed_steps import INTEGER_OPS, MIXED_OPS
from pydla.dla.checker import LayerReport, LayerVerdict, TargetRefusal, layer_verdicts
from pydla.dtypes import DType
from pydla.ir import Graph, Node
from pydla.ops import POINTWISE

KERNEL_SOURCES = Path(__file__).parent / "kernels"

CUDA_OPS = frozenset({
    # conv.py, conv_transpose.py, gemm.py, matmul.py
    "Conv", "ConvTranspose", "Gemm", "MatMul",
    # normalization.py
    "BatchNormalization", "LayerNormalization",
    # argreduce.py, indexing.py
    "ArgMax", "ArgMin", "GatherElements", "GatherND", "ScatterElements", "ScatterND",
    "ReverseSequence",
    # pointwise.py: fused programs, every pointwise op (typed: float, integer, bool), layout
    # copies, Expand
    "Pointwise", "Identity", *POINTWISE,
    "Flatten", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Expand",
    # pad.py
    "Pad",
    # rearrange.py
    "Tile", "DepthToSpace", "SpaceToDepth",
    # pooling.py
    "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
    # recurrent.py, recurrent_gru.py
    "LSTM", "GRU",
    # reduce.py
    "ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceProd", "ReduceMax", "ReduceMin",
    # quantize.py, qgemm.py, qconv.py
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QGemm", "QConv",
    # resize.py, shape.py, softmax.py, topk.py, tree_ensemble.py
    "Resize", "Slice", "Split", "Gather", "Softmax", "LogSoftmax", "TopK", "TreeEnsemble",
})

_FLOAT_ONLY = "the CUDA backend computes float32/float16/bfloat16 only"
_STORED = frozenset(STORAGE_TYPES)  # every type but float64
_FLOATS = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)
_INTEGERS = _STORED - {*_FLOATS, DType.BOOL}
# ops whose kernels move, select, compare or cast elements: any stored type
_ANY_TYPE = MIXED_OPS | {"Flatten", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Concat",
                         "Slice", "Split", "Gather", "Expand", "Pad", "ArgMax", "ArgMin", "Tile",
                         "DepthToSpace", "SpaceToDepth", "GatherElements", "GatherND",
                         "ScatterElements", "ScatterND", "ReverseSequence", "TopK",
                         "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
                         "QGemm", "QConv", "TreeEnsemble",
                         "Pointwise"}  # a program's steps are checked one by one

CPU_ONLY: dict[str, str] = {
    # integer or quantized tensors
    "OneHot": "no kernel yet (integer indices)",
    "MaxUnpool": "no kernel yet (int64 indices input)",
    "TensorScatter": "no kernel yet (int64 write indices)",
    "NegativeLogLikelihoodLoss": "no kernel yet (int64 targets)",
    "SoftmaxCrossEntropyLoss": "no kernel yet (int64 labels)",
    "ConstantOfShape": "no kernel yet (folded at build when its shape input is constant)",
    "QPointwise": "8-bit pointwise programs: CPU builds only (fold_qdq_pointwise)",
    "QLinearSoftmax": "no kernel yet (int8/uint8 tensors)",
    # float ops without a kernel yet
    **{op: "no kernel yet" for op in (
        "AffineGrid", "Attention", "CausalConvWithState", "Col2Im", "CumProd", "CumSum",
        "DFT", "DeformConv", "Det", "Einsum", "GridSample",
        "GroupNormalization", "Hardmax", "InstanceNormalization", "LRN", "LinearAttention",
        "LpNormalization", "LpPool", "MeanVarianceNormalization", "RMSNormalization",
        "RNN", "RoiAlign", "RotaryEmbedding", "STFT", "Trilu")},
    "ScorePostTransform": "classic-ML score transform (PROBIT, SOFTMAX_ZERO, binary "
                          "widening): no kernel yet",
    "BitCast": "no kernel yet (reinterprets the bytes; the shape changes with the element "
               "size)",
    "Loop": "control flow: the CUDA backend binds no sub-programs (a Loop with a constant "
            "trip count is unrolled at build)",
    **{op: "shapes computed at run time: the CUDA backend binds static shapes only"
       for op in ("DynamicRange", "DynamicSlice")},
    "Reorder": "the CPU backend's blocked-layout change: a cuda build assigns no blocked "
               "layouts, so it never emits one",
}

_INDEX_TYPES = (DType.INT32, DType.INT64)
_INDEXED = ("Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND",
            "ReverseSequence")
_RESHAPES = ("Flatten", "Reshape", "Squeeze", "Unsqueeze")


def _type_refusal(node: Node) -> str | None:
    """The first tensor whose type no kernel of this op reads or writes."""
    inputs = list(node.inputs)
    if node.op in _INDEXED and len(inputs) > 1 and inputs[1] is not None:
        idx = inputs[1]
        # constant indices are widened to int64 on upload; tensors must be int32/int64
        if not idx.is_const and idx.dtype not in _INDEX_TYPES:
            return f"indices {idx.name} are {idx.dtype.name.lower()}, not int32/int64"
        inputs = inputs[:1] + inputs[2:]
    if node.op in ("ScatterElements", "ScatterND") and node.attrs.get(
            "reduction", "none") != "none" and inputs[0].dtype.itemsize == 1:
        return f"reduction {node.attrs['reduction']!r} over {inputs[0].dtype.name.lower()}: " \
               "the CUDA scatter combines 2-, 4- and 8-byte numbers only"
    if node.op == "LSTM" and len(inputs) > 4 and inputs[4] is not None:
        if not inputs[4].is_const:
            return "sequence_lens computed at run time: the CUDA LSTM runs full-length " \
                   "sequences only"
        inputs = inputs[:4] + inputs[5:]
    if node.op == "GRU" and len(inputs) > 4 and inputs[4] is not None:
        # the CUDA GRU reads sequence_lens, constant or computed, as int32 or int64
        if inputs[4].dtype not in _INDEX_TYPES:
            return f"sequence_lens {inputs[4].name} is {inputs[4].dtype.name.lower()}, " \
                   "not int32/int64"
        inputs = inputs[:4] + inputs[5:]
    extra = int((node.attrs.get("epilogue") or {}).get("inputs", 0))
    if extra and node.op != "Pointwise":
        # a fused epilogue's extra inputs (its last inputs) are read by the program's typed
        # code (a Where's bool condition…): the program's steps are checked on their own
        for v in inputs[len(inputs) - extra:]:
            if v is not None and v.dtype not in _STORED:
                return f"{v.name} is {v.dtype.name.lower()}: the CUDA backend stores no " \
                       f"{v.dtype.name.lower()} tensors"
        inputs = inputs[:len(inputs) - extra]
    values = [v for v in inputs + list(node.outputs) if v is not None]
    if node.op in _RESHAPES and all(len(v.shape) != 4 for v in values):
        return None  # row-major on both sides: a memcpy, whatever the type
    for v in values:
        why = _dtype_refusal(node.op, v.dtype)
        if why is not None:
            return f"{v.name} is {v.dtype.name.lower()}: {why}"
    return None


def _dtype_refusal(op: str, dtype: DType) -> str | None:
    """Why ``op``'s CUDA kernel reads or writes no tensor of ``dtype`` (None: it does)."""
    if dtype not in _STORED:
        return "the CUDA backend stores float32/float16/bfloat16, integer and bool tensors"
    if op in _ANY_TYPE or dtype in _FLOATS:
        return None
    if op == "MaxPool" and dtype in (DType.INT8, DType.UINT8):
        return None  # pooling.py: an 8-bit MaxPool between int8 layers
    if op == "BitShift" and dtype not in (DType.UINT8, DType.UINT16, DType.UINT32,
                                          DType.UINT64):
        return "the CUDA BitShift shifts unsigned integers only"
    if op in INTEGER_OPS and dtype in _INTEGERS:
        return None
    return f"{op} on the GPU: {_FLOAT_ONLY}" + (
        "; integer arithmetic covers " + ", ".join(sorted(INTEGER_OPS - {"Cast", "Identity"}))
        if dtype in _INTEGERS else "")


_DEFAULT_ACTIVATIONS = {"LSTM": ["sigmoid", "tanh", "tanh"], "GRU": ["sigmoid", "tanh"]}


def _shape_refusal(node: Node) -> str | None:
    """Structural limits the kernels raise at bind (their KernelError texts)."""
    x = node.inputs[0] if node.inputs else None
    rank = len(x.shape) if x is not None else 0
    if node.op == "Conv" and rank not in (3, 4, 5):
        return f"a {rank - 2}-D Conv: the CUDA backend runs 1-D, 2-D and 3-D convolutions only"
    if node.op == "QConv" and rank not in (3, 4):
        return f"a {rank - 2}-D int8 convolution: the CUDA backend runs 1-D and 2-D ones only"
    if node.op == "QConv" and any(v is not None and not v.is_const for v in (
            node.inputs[3], *node.inputs[5:6], *node.inputs[8:9])):
        return "int8 weights, their zero points or bias computed at run time: the CUDA " \
               "kernel repacks them at bind and needs constants"
    if node.op == "ConvTranspose" and rank not in (3, 4):
        return f"a {rank - 2}-D ConvTranspose: the CUDA backend runs 1-D and 2-D transposed " \
               "convolutions only"
    if node.op in ("MaxPool", "AveragePool", "GlobalAveragePool",
                   "GlobalMaxPool") and rank != 4:
        return f"a {rank - 2}-D {node.op}: the CUDA backend runs 2-D (rank-4) layers only"
    weights = node.inputs[1:4] if node.op == "GRU" else node.inputs[1:3]  # the GRU's B too
    if node.op in ("Conv", "ConvTranspose", "LSTM", "GRU") and any(
            v is not None and not v.is_const for v in weights):
        return "weights computed at run time: the CUDA kernel needs constant weights"
    default = _DEFAULT_ACTIVATIONS.get(node.op)
    if default is not None and [str(a).lower() for a in node.attrs.get("activations") or []] \
            not in ([], default * (len(node.attrs.get("activations") or []) // len(default))):
        return f"activations {node.attrs['activations']}: the CUDA {node.op} runs the " \
               f"default ones ({', '.join(default)})"
    if node.op == "TreeEnsemble":
        return tree_ensemble_refusal(node.attrs)
    if node.op == "MaxPool" and len([o for o in node.outputs if o is not None]) > 1:
        return "MaxPool indices: no CUDA kernel writes them"
    if node.op == "Slice" and any(v is not None and not v.is_const for v in node.inputs[1:]):
        return "bounds computed at run time: the CUDA Slice reads them from the loadable"
    if node.op == "BatchNormalization" and len(node.outputs) > 1:
        return "training-mode BatchNormalization (running statistics as outputs)"
    return None


# what codegen.emit_program can compute: the ops with a single-step CUDA kernel
_STEP_OPS = CUDA_OPS & (POINTWISE | {"Identity"})


def _program_refusal(node: Node) -> TargetRefusal | None:
    """A fused layer's pointwise program (a Pointwise layer's, or a Conv/Gemm/MatMul
    epilogue, as the builder fuses them): the generated CUDA code has an expression only
    for ``_STEP_OPS``, each for the types of ``_dtype_refusal``."""
    program = node.attrs.get("program") if node.op == "Pointwise" else (
        node.attrs.get("epilogue") or {}).get("program")
    for i, step in enumerate(program or ()):
        if step["op"] not in _STEP_OPS:
            why = CPU_ONLY.get(step["op"], "no kernel")
            return TargetRefusal("cuda.kernel", f"step {i} ({step['op']}) of the fused "
                                 f"program has no CUDA code: {why}")
        why = _dtype_refusal(step["op"], DType.from_name(step["dtype"]))
        if why is not None:
            return TargetRefusal("cuda.types", f"step {i} ({step['op']}) of the fused "
                                 f"program computes {step['dtype']}: {why}")
    return None


def layer_refusal(node: Node) -> TargetRefusal | None:
    """Why the CUDA backend cannot run ``node`` (None: it has a kernel for it); rules
    ``cuda.kernel`` (no kernel for the op, or for a step of its fused program),
    ``cuda.types``, ``cuda.shape``. Takes the DLA check's layers (one per ONNX node) and
    the builder's (fused) alike."""
    if node.op not in CUDA_OPS:
        why = CPU_ONLY.get(node.op, "no kernel, on the CPU either")
        return TargetRefusal("cuda.kernel", f"no CUDA kernel for {node.op}: {why}")
    program = _program_refusal(node)
    if program is not None:
        return program
    why = _type_refusal(node)
    if why is not None:
        return TargetRefusal("cuda.types", why)
    why = _shape_refusal(node)
    return TargetRefusal("cuda.shape", why) if why is not None else None


# -- the registry as the kernel sources write it ------------------------------------------
def _resolve(tree: ast.Module) -> dict[str, object]:
    """Names a registration may use: module-level literal assignments (op-keyed tables:
    their keys) and the op tables of ``pydla.ops`` (pure data, no GPU)."""
    import pydla.ops

    names: dict[str, object] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "pydla.ops":
            for alias in stmt.names:
                names[alias.asname or alias.name] = getattr(pydla.ops, alias.name)
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(
                stmt.targets[0], ast.Name):
            value = stmt.value
            try:
                names[stmt.targets[0].id] = ast.literal_eval(value)
            except ValueError:
                # a table keyed by op names whose values are code (reduce.py's _OPS):
                # registrations only iterate its keys
                if isinstance(value, ast.Dict) and all(
                        isinstance(k, ast.Constant) for k in value.keys):
                    names[stmt.targets[0].id] = dict.fromkeys(
                        k.value for k in value.keys if isinstance(k, ast.Constant))
    return names


def _kernel_calls(tree: ast.Module) -> Iterable[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "kernel":
            yield node


def registered_ops(sources: Path = KERNEL_SOURCES) -> dict[str, str]:
    """op → kernel module file, from every ``kernel(...)`` call (decorator or direct) in
    ``sources``' modules, its arguments evaluated over string literals, module constants
    and ``pydla.ops`` tables only."""
    found: dict[str, str] = {}
    for path in sorted(sources.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        names = _resolve(tree)
        for call in _kernel_calls(tree):
            for arg in call.args:
                expr = arg.value if isinstance(arg, ast.Starred) else arg
                code = compile(ast.Expression(expr), str(path), "eval")
                scope = {"__builtins__": {"sorted": sorted}, **names}
                value = eval(code, scope)  # noqa: S307 (literals and pure tables only)
                for op in ([value] if isinstance(value, str) else value):
                    if op in found:
                        raise ValueError(f"{op} registered in {found[op]} and {path.name}")
                    found[op] = path.name
    return found


# -- the check of a whole model (``pydla check --target=cuda``) -----------------------------
@dataclass
class CudaReport(LayerReport):
    layers: list[LayerVerdict]
    notes: list[str] = field(default_factory=list)
    target: str = "cuda"

    def summary(self) -> str:
        return self.coverage("have a CUDA kernel")

    def gaps(self) -> dict[str, int]:
        """op → number of layers without a CUDA kernel."""
        return dict(Counter(v.op for v in self.layers if not v.supported))


def _check_node(node: Node) -> tuple[str | None, TargetRefusal | None]:
    # no layer type: the CUDA backend binds ONNX ops themselves (the DLA maps them onto
    # TensorRT layer types)
    return None, layer_refusal(node)


def check_cuda_graph(graph: Graph) -> CudaReport:
    return CudaReport(layer_verdicts(graph, _check_node, runs_on="GPU", otherwise="none"))


def check_cuda_model(model: onnx.ModelProto | str | os.PathLike[str] | bytes,
                     shapes: Mapping[str, Sequence[int]] | None = None,
                     input_values: Mapping[str, np.ndarray] | None = None,
                     built: bool = False) -> CudaReport:
    """Every layer of ``model`` against the CUDA backend's kernels and their tensor types;
    needs no GPU. The layers are the ONNX nodes as the DLA check imports them (constants,
    shapes, batch norms and pads folded; no fusion), or with ``built`` the layers a
    ``--target=cuda`` build lowers (pointwise chains fused into programs and epilogues)."""
    if not built:
        from pydla.dla import dla_graph

        return check_cuda_graph(dla_graph(model, shapes, input_values))
    from pydla.builder import BuildOptions, build_graph, load_model

    options = BuildOptions(target="cuda", shapes=dict(shapes or {}),
                           input_values=dict(input_values or {}))
    return check_cuda_graph(build_graph(load_model(model), options))
