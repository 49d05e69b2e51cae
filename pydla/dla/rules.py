"""The DLA rules pydla checks, kept as data: one row per documented limit.

Rule set: NVIDIA Jetson AGX Orin's DLA as TensorRT documents it — the page "DLA Supported
Layers and Restrictions" (TensorRT 10.x/11.x documentation; its general restrictions and
its per-layer table) and, where the page's table is terse, the per-layer DLA notes in
TensorRT 11.1's public header ``NvInfer.h`` (e.g. ``IConvolutionLayer::setPaddingNd``: "If
executing this layer on DLA ... padding must be in the range [0,31], and the padding must be
less than the kernel size"). Windows-on-ARM's beta DLA has another, smaller rule set and is
not checked. A newer page is a change of this table, not of the checker.

Each ``Rule`` names the TensorRT layer type, the limit in the page's words, the numbers the
checker compares against, and where the rule is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PAGE = ("TensorRT documentation, 'DLA Supported Layers and Restrictions' "
        "(docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/"
        "dla-layer-restrictions.html)")
HEADER = "TensorRT 11.1 NvInfer.h, per-layer DLA notes"
RULE_SET = "Orin DLA (TensorRT 10.x/11.x)"
DLA_CORES = 2  # Jetson AGX Orin has two DLA cores: --useDLACore=0 or 1


@dataclass(frozen=True)
class Rule:
    id: str
    layer: str  # the TensorRT layer type the rule is written for
    text: str  # the limit, in the documentation's words
    limit: Any  # what the checker compares against (a range, a set, a number)
    source: str = PAGE


def _rules(*rows: Rule) -> dict[str, Rule]:
    table: dict[str, Rule] = {}
    for row in rows:
        if row.id in table:
            raise ValueError(f"DLA rule {row.id!r} listed twice")
        table[row.id] = row
    return table


RULES = _rules(
    # -- general restrictions -------------------------------------------------------------
    Rule("general.precision", "*", "DLA runs layers in FP16 or INT8 only", {"fp16", "int8"}),
    Rule("general.dtype", "*", "DLA tensors are FP16 or INT8 (no int32, int64 or bool "
         "tensors)", {"float32", "float16", "int8"}),
    Rule("general.batch", "*", "the maximum batch size is 4096 (batch: the product of all "
         "dimensions but C, H and W)", 4096),
    Rule("general.dims", "*", "the maximum size of a non-batch dimension is 8192", 8192),
    Rule("general.dynamic", "*", "no dynamic dimensions: min, opt and max shapes equal", None),
    Rule("general.loadables", "*", "only 16 DLA loadables can be loaded concurrently per core",
         16),
    Rule("general.internal_bytes", "*", "the internal (non-I/O) tensors of one DLA subgraph "
         "must total less than 1 GiB", 1 << 30, HEADER),
    Rule("general.layer", "*", "the layer type has a row in the DLA layer table", None),
    # -- per layer --------------------------------------------------------------------------
    Rule("activation.types", "Activation", "2D only; ReLU, Sigmoid, TanH, Clipped ReLU, "
         "Leaky ReLU", {"Relu", "Sigmoid", "Tanh", "Clip", "LeakyRelu"}),
    Rule("activation.rank", "Activation", "2D only (4-D NCHW tensors)", 4),
    Rule("prelu.slope", "Parametric ReLU", "the slope must be a build-time constant", None,
         HEADER),
    Rule("comparison.precision", "Comparison", "Equal, Greater, Less: INT8 only", {"int8"}),
    Rule("comparison.cast", "Comparison", "the output must be cast to FP16/INT8 immediately",
         None),
    Rule("concat.axis", "Concatenation", "channel axis only (the third-to-last axis)", -3),
    Rule("concat.inputs", "Concatenation", "at least 2 inputs with the same spatial "
         "dimensions", 2),
    Rule("conv.rank", "Convolution", "2D only", 2),
    Rule("conv.kernel", "Convolution", "kernel height and width in [1, 32]", (1, 32), HEADER),
    Rule("conv.stride", "Convolution", "stride height and width in [1, 8]", (1, 8), HEADER),
    Rule("conv.padding", "Convolution", "padding height and width in [0, 31] and less than "
         "the kernel size", (0, 31), HEADER),
    Rule("conv.dilation", "Convolution", "dilation height and width in [1, 32]", (1, 32),
         HEADER),
    Rule("conv.output_maps", "Convolution", "output maps (channels) in [1, 8192]", (1, 8192)),
    Rule("conv.groups", "Convolution", "at most 8192 groups", 8192, HEADER),
    Rule("conv.weights", "Convolution", "weights and bias are build-time constants", None),
    Rule("fc.rank", "Fully Connected", "the input is [N, K] or [N, K, 1, 1] (rank 2 or 4)",
         (2, 4)),
    Rule("fc.weights", "Fully Connected", "a matrix product with a build-time constant "
         "weight (run as a 1x1 convolution); a product of two activations is not a DLA "
         "layer", None),
    Rule("deconv.rank", "Deconvolution", "2D only", 2),
    Rule("deconv.kernel", "Deconvolution", "kernel height and width in [1, 32], or 64/96/128 "
         "in one dimension with 1 in the other", ((1, 32), {64, 96, 128}), HEADER),
    Rule("deconv.stride", "Deconvolution", "stride height and width in [1, 32], or 64/96/128 "
         "in one dimension with 1 in the other", ((1, 32), {64, 96, 128}), HEADER),
    Rule("deconv.padding", "Deconvolution", "padding must be 0", 0),
    Rule("deconv.groups", "Deconvolution", "no grouped deconvolution (groups must be 1)", 1),
    Rule("deconv.dilation", "Deconvolution", "no dilated deconvolution", 1),
    Rule("deconv.output_maps", "Deconvolution", "output maps in [1, 8192]", (1, 8192), HEADER),
    Rule("eltwise.ops", "ElementWise", "2D only; Sum, Sub, Product, Max, Min, Div, Pow",
         {"Add", "Sub", "Mul", "Max", "Min", "Div", "Pow", "Sum"}),
    Rule("eltwise.rank", "ElementWise", "2D only (4-D NCHW operands; a constant operand "
         "broadcast per tensor or per channel)", 4),
    Rule("lrn.window", "LRN", "window size 3, 5, 7 or 9; ACROSS_CHANNELS only", {3, 5, 7, 9}),
    Rule("pool.rank", "Pooling", "2D only; max or average", 2),
    Rule("pool.window", "Pooling", "window height and width in [1, 8]", (1, 8), HEADER),
    Rule("pool.stride", "Pooling", "stride height and width in [1, 16]", (1, 16), HEADER),
    Rule("pool.padding", "Pooling", "padding height and width in [0, 7]", (0, 7), HEADER),
    Rule("reduce.ops", "Reduce", "max reductions only (an average over H and W is a pooling "
         "layer: see --adjust)", {"ReduceMax"}),
    Rule("reduce.axes", "Reduce", "over C, H and W, not the batch", None),
    Rule("qdq.precision", "Quantize/Dequantize", "explicit quantization runs on the DLA in "
         "INT8 builds (Orin: TensorRT 11.4.1+, strongly typed networks)", {"int8"}),
    Rule("qdq.per_tensor", "Quantize/Dequantize", "activations have per-tensor scales (INT8 "
         "on the DLA needs one scale per tensor; per-channel scales on constant weights are "
         "folded into the layer)", None),
    Rule("resize.scales", "Resize", "4 scales, the first two exactly 1", None, HEADER),
    Rule("resize.factor", "Resize", "integer H and W scales in [1, 32] (nearest) or [1, 4] "
         "(linear)", {"nearest": (1, 32), "linear": (1, 4)}, HEADER),
    Rule("resize.mode", "Resize", "nearest: asymmetric + floor, or half_pixel + round half "
         "down/up; linear: half_pixel", {
             "nearest": {("asymmetric", "floor"), ("half_pixel", "round_prefer_floor"),
                         ("half_pixel", "round_prefer_ceil")},
             "linear": {("half_pixel", None), ("pytorch_half_pixel", None)}}, HEADER),
    Rule("scale.rank", "Scale", "a per-tensor, per-channel or element-wise scale and shift "
         "of a 4-D tensor", 4),
    Rule("shuffle.rank", "Shuffle", "4-D input and output; the batch axis stays first",
         4),
    Rule("slice.constant", "Slice", "start, size and stride are build-time constants", None,
         HEADER),
    Rule("slice.stride", "Slice", "strides are 1 for all dimensions", 1, HEADER),
    Rule("slice.first_dim", "Slice", "no slicing of the first dimension", None, HEADER),
    Rule("slice.rank", "Slice", "the input tensor has four dimensions", 4, HEADER),
    Rule("softmax.axis", "SoftMax", "the axis is the channel or a spatial dimension", None,
         HEADER),
    Rule("softmax.size", "SoftMax", "the axis is at most 8192 when every other non-batch "
         "dimension is 1, else at most 1024", (8192, 1024), HEADER),
    Rule("unary.ops", "Unary", "Abs only", {"Abs"}, HEADER),
)

# ONNX op (as pydla's IR names it after import and folding) → TensorRT layer type.
LAYER_OF_OP: dict[str, str] = {
    "Relu": "Activation", "Sigmoid": "Activation", "Tanh": "Activation", "Clip": "Activation",
    "LeakyRelu": "Activation", "Elu": "Activation", "Selu": "Activation",
    "HardSigmoid": "Activation", "HardSwish": "Activation", "Softplus": "Activation",
    "Softsign": "Activation", "ThresholdedRelu": "Activation", "Gelu": "Activation",
    "Mish": "Activation", "Celu": "Activation",
    "PRelu": "Parametric ReLU",
    "Equal": "Comparison", "Greater": "Comparison", "Less": "Comparison",
    "Concat": "Concatenation",
    "Conv": "Convolution",
    "Gemm": "Fully Connected", "MatMul": "Fully Connected",
    "ConvTranspose": "Deconvolution",
    "Add": "ElementWise", "Sub": "ElementWise", "Mul": "ElementWise", "Max": "ElementWise",
    "Min": "ElementWise", "Div": "ElementWise", "Pow": "ElementWise", "Sum": "ElementWise",
    "Mod": "ElementWise",
    "LRN": "LRN",
    "MaxPool": "Pooling", "AveragePool": "Pooling", "GlobalAveragePool": "Pooling",
    "GlobalMaxPool": "Pooling",
    "ReduceMax": "Reduce", "ReduceMean": "Reduce", "ReduceSum": "Reduce", "ReduceMin": "Reduce",
    "ReduceProd": "Reduce", "ReduceL1": "Reduce", "ReduceL2": "Reduce",
    "ReduceSumSquare": "Reduce", "ReduceLogSum": "Reduce", "ReduceLogSumExp": "Reduce",
    "Resize": "Resize", "Upsample": "Resize",
    "BatchNormalization": "Scale",
    "Reshape": "Shuffle", "Transpose": "Shuffle", "Flatten": "Shuffle", "Squeeze": "Shuffle",
    "Unsqueeze": "Shuffle",
    "Slice": "Slice",
    "Softmax": "SoftMax",
    "QuantizeLinear": "Quantize/Dequantize", "DequantizeLinear": "Quantize/Dequantize",
    "Abs": "Unary", "Exp": "Unary", "Log": "Unary", "Sqrt": "Unary", "Neg": "Unary",
    "Reciprocal": "Unary", "Sin": "Unary", "Cos": "Unary", "Floor": "Unary", "Ceil": "Unary",
    "Round": "Unary", "Erf": "Unary", "Not": "Unary", "Sign": "Unary",
}
