"""Layer information in TensorRT's engine-inspector JSON (trtexec ``--exportLayerInfo`` with
``--profilingVerbosity=detailed``), the graph file NVIDIA's TREx (trt-engine-explorer) loads
beside ``--exportProfile``'s profile.

TREx reads (trex/parser.py, layer.py, activations.py, df_preprocessing.py): a dict with
"Layers" (a list of dicts) and "Bindings" (the I/O tensor names); per layer "Name",
"LayerType" (the kernel kind), "ParameterType" (the layer kind it groups by), "Inputs" and
"Outputs" (each "Name", "Dimensions", "Format/Datatype" — one of TensorRT's format strings),
optional "Weights"/"Bias" ({"Type", "Count"}), "TacticName" and "Metadata" (the ONNX nodes).
Profile records are joined to these layers by position, or by "Name" when the counts differ.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from pydla.dtypes import DType
from pydla.loadable import Program

# TensorRT's layer kinds (ParameterType) for pydla's layer ops; TREx groups and plots by it.
# Ops not listed keep their own name.
_PARAMETER_TYPES = {
    "Conv": "Convolution", "QConv": "Convolution", "ConvTranspose": "Deconvolution",
    "Gemm": "MatrixMultiply", "MatMul": "MatrixMultiply", "QGemm": "MatrixMultiply",
    "Pointwise": "PointWise", "Add": "ElementWise", "Sub": "ElementWise",
    "Mul": "ElementWise", "Div": "ElementWise", "Max": "ElementWise", "Min": "ElementWise",
    "Relu": "Activation", "Sigmoid": "Activation", "Tanh": "Activation",
    "LeakyRelu": "Activation", "HardSigmoid": "Activation", "HardSwish": "Activation",
    "MaxPool": "Pooling", "AveragePool": "Pooling", "GlobalAveragePool": "Pooling",
    "GlobalMaxPool": "Pooling", "BatchNormalization": "Scale", "Reorder": "Reformat",
    "Reshape": "Shuffle", "Flatten": "Shuffle", "Transpose": "Shuffle", "Squeeze": "Shuffle",
    "Unsqueeze": "Shuffle", "Softmax": "SoftMax", "Concat": "Concatenation",
    "QuantizeLinear": "Quantize", "DequantizeLinear": "Dequantize",
    "LayerNormalization": "Normalization", "InstanceNormalization": "Normalization",
    "ReduceMean": "Reduce", "ReduceSum": "Reduce", "ReduceMax": "Reduce", "ReduceMin": "Reduce",
    "Resize": "Resize", "Slice": "Slice", "Gather": "Gather", "Constant": "Constant",
    "Identity": "NoOp",
}

# TensorRT's format strings for (element type, pydla I/O format); each is a key of TREx's
# _regionFormatDict, so TREx shows the layout and reads the precision and element size.
_FORMATS = {
    (DType.FLOAT32, "chw"): "Row major linear FP32",
    (DType.FLOAT16, "chw"): "Row major linear FP16 format",
    (DType.BFLOAT16, "chw"): "Row major linear BFloat16 format",
    (DType.INT8, "chw"): "Row major Int8 format",
    (DType.INT32, "chw"): "Row major linear Int32",
    (DType.INT64, "chw"): "Row major linear Int64 format",
    (DType.UINT8, "chw"): "Row major linear UInt8 format",
    (DType.BOOL, "chw"): "Row major linear BOOL",
    (DType.FLOAT32, "hwc"): "Channel major FP32 format",
    (DType.FLOAT16, "hwc"): "Channel major FP16 format",
    (DType.INT8, "hwc"): "Channel major Int8 format",
    (DType.FLOAT16, "hwc8"): "Channel major FP16 format where channel % 8 == 0",
    (DType.FLOAT16, "hwc16"): "Channel major FP16 format where channel % 16 == 0",
    (DType.FLOAT32, "hwc4"): "Channel major FP32 format where channel % 4 == 0",
    (DType.FLOAT16, "hwc4"): "Channel major FP16 format where channel % 4 == 0",
    (DType.INT8, "hwc4"): "Channel major Int8 format where channel % 4 == 0",
    (DType.FLOAT16, "chw2"): "Two wide channel vectorized row major FP16 format",
    (DType.INT8, "chw4"): "Four wide channel vectorized row major Int8 format",
    (DType.FLOAT32, "chw4"): "Four wide channel vectorized row major FP32 format",
    (DType.FLOAT16, "chw16"): "Sixteen wide channel vectorized row major FP16 format",
    (DType.INT8, "chw32"): "Thirty-two wide channel vectorized row major Int8 format",
    (DType.FLOAT16, "chw32"): "Thirty-two wide channel vectorized row major FP16 format",
    (DType.FLOAT32, "chw32"): "Thirty-two wide channel vectorized row major FP32 format",
}
# A layout TensorRT has no string for (pydla's 16-channel fp32 blocks, DLA formats): the
# element type alone, as TensorRT's kgen layers write it.
_TYPE_NAMES = {
    DType.FLOAT32: "Float", DType.FLOAT16: "Half", DType.BFLOAT16: "BFloat16",
    DType.FLOAT64: "Double", DType.INT8: "Int8", DType.INT16: "Int16", DType.INT32: "Int32",
    DType.INT64: "Int64", DType.UINT8: "UInt8", DType.UINT16: "UInt16",
    DType.UINT32: "UInt32", DType.UINT64: "UInt64", DType.BOOL: "Bool",
}
# Weight types TREx counts bytes for (layer.py's _parse_constant).
_WEIGHT_TYPES = {DType.FLOAT32: "Float", DType.FLOAT16: "Half", DType.INT8: "Int8",
                 DType.INT32: "Int32"}
# Layers whose input 2 is a bias (reported apart from the weights, as TensorRT does).
_HAS_BIAS = {"Conv", "ConvTranspose", "Gemm"}
# ONNX node names in TensorRT's Metadata are separated by this character (TREx turns it
# into "+").
_METADATA_SEPARATOR = "\x1e"


def format_string(dtype: DType, layout: str) -> str:
    """TensorRT's "Format/Datatype" string for a tensor of ``dtype`` in ``layout``."""
    layout = "chw" if layout in ("linear", "chw", "dla_linear") else layout
    return _FORMATS.get((dtype, layout), _TYPE_NAMES.get(dtype, "Unknown format"))


def _layouts(program: Program) -> dict[int, str]:
    """Each activation's layout: I/O formats from the bindings, then the blocked layout a
    layer declares ("layouts": [input, output]) for its output."""
    out = {io.tensor: io.format for io in (*program.inputs, *program.outputs)}
    for lay in program.layers:
        layouts = lay.attrs.get("layouts")
        if layouts and lay.outputs:
            out.setdefault(lay.outputs[0], str(layouts[-1]))
        elif lay.op == "Reorder" and lay.outputs:
            out.setdefault(lay.outputs[0], str(lay.attrs.get("to")))
    return out


def _constant(program: Program, indices: list[int]) -> dict[str, Any] | None:
    """{"Type", "Count"} of these weight tensors, when TREx knows their one type."""
    types = {program.tensors[i].dtype for i in indices}
    if len(types) != 1 or next(iter(types)) not in _WEIGHT_TYPES:
        return None
    count = sum(int(program.tensors[i].nbytes // program.tensors[i].dtype.itemsize)
                for i in indices)
    return {"Type": _WEIGHT_TYPES[next(iter(types))], "Count": count}


def engine_inspector(program: Program) -> dict[str, Any]:
    """The detailed engine-inspector JSON of a loadable: {"Layers": [...], "Bindings": [...]}."""
    tensors = program.tensors
    layouts = _layouts(program)

    def region(index: int) -> dict[str, Any]:
        t = tensors[index]
        return {"Name": t.name, "Location": "Device", "Dimensions": list(t.shape),
                "Format/Datatype": format_string(t.dtype, layouts.get(index, "chw"))}

    layers = []
    for lay in program.layers:
        weights = [(slot, i) for slot, i in enumerate(lay.inputs)
                   if i >= 0 and tensors[i].kind == "weight"]
        bias = [i for slot, i in weights if slot == 2 and lay.op in _HAS_BIAS]
        entry: dict[str, Any] = {
            "Name": lay.name, "LayerType": lay.op,
            "ParameterType": _PARAMETER_TYPES.get(lay.op, lay.op),
            "Inputs": [region(i) for i in lay.inputs if i >= 0 and tensors[i].kind != "weight"],
            "Outputs": [region(i) for i in lay.outputs],
            "TacticName": lay.tactic, "Precision": lay.precision.upper(),
            "Metadata": _METADATA_SEPARATOR.join(f"[ONNX Layer: {n}]" for n in lay.fused_from),
        }
        for key, indices in (("Weights", [i for _, i in weights if i not in bias]),
                             ("Bias", bias)):
            found = _constant(program, indices) if indices else None
            if found:
                entry[key] = found
        entry.update(_convolution(lay, tensors) if lay.op in ("Conv", "QConv") else {})
        layers.append(entry)
    bindings = [tensors[io.tensor].name for io in (*program.inputs, *program.outputs)]
    return {"Layers": layers, "Bindings": bindings}


def _convolution(lay: Any, tensors: Any) -> dict[str, Any]:
    """The convolution attributes TREx tabulates (df_preprocessing.layer_attributes)."""
    a = lay.attrs
    w = tensors[lay.inputs[3 if lay.op == "QConv" else 1]]  # QLinearConv: x, scale, zp, w
    pads = list(a.get("pads", []))
    half = len(pads) // 2
    return {"Kernel": list(w.shape[2:]), "OutMaps": int(w.shape[0]),
            "Groups": int(a.get("group", 1)), "Stride": list(a.get("strides", [])),
            "Dilation": list(a.get("dilations", [])), "PrePadding": pads[:half],
            "PostPadding": pads[half:],
            "HasBias": int(len(lay.inputs) > 2 and lay.inputs[2] >= 0),
            "HasReLU": int(any(s["op"] == "Relu"
                               for s in a.get("epilogue", {}).get("program", ()))),
            "Activation": "+".join(s["op"] for s in a.get("epilogue", {}).get("program", ()))
            or "NONE"}


def add_layer_info_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--exportLayerInfo", help="write layer information (JSON) to this file: "
                   "pydla's own, or with --profilingVerbosity TensorRT's engine inspector's")
    p.add_argument("--profilingVerbosity", choices=("layer_names_only", "detailed"),
                   help="--exportLayerInfo in TensorRT's engine-inspector JSON: detailed "
                   "(every layer's tensors, formats, weights, tactic, ONNX nodes; what "
                   "NVIDIA's TREx loads) or layer_names_only")


def write_layer_info(path: str, program: Program, verbosity: str | None) -> None:
    """--exportLayerInfo: pydla's layer JSON without --profilingVerbosity, else TensorRT's."""
    if verbosity is None:
        from pydla.tools.layerinfo import layer_info

        info: dict[str, Any] = layer_info(program)
    elif verbosity == "detailed":
        info = engine_inspector(program)
    else:  # trtexec's default: names only (TREx refuses it and asks for detailed)
        info = {"Layers": [lay.name for lay in program.layers],
                "Bindings": [program.tensors[io.tensor].name
                             for io in (*program.inputs, *program.outputs)]}
    with open(path, "w") as f:
        json.dump(info, f, indent=1)
