"""Layer information of a loadable (trtexec's --exportLayerInfo, ``pydla inspect --json``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pydla.backends.cpu.fused import scratch_bytes
from pydla.loadable import Program


def layer_info(program: Program) -> dict[str, Any]:
    tensors = program.tensors
    formats = {io.tensor: io.format for io in (*program.inputs, *program.outputs)}

    def describe(index: int) -> dict[str, Any] | None:
        if index < 0:
            return None
        t = tensors[index]
        return {"name": t.name, "shape": list(t.shape), "dtype": t.dtype.name.lower(),
                "format": "weight" if t.kind == "weight" else formats.get(index, "linear")}

    # --int8's decision per ONNX layer (pydla.quantization.policy): name -> [precision, why].
    int8 = program.build.get("int8", {}).get("layers", {})
    # --fp16/--bf16/--autocast's decision per layer (pydla.plan.precision, weak_typing).
    reduced = program.build.get("precision", {}).get("layers", {})
    layers = []
    workspace = 0
    dla = program.build.get("dla") if isinstance(program.build.get("dla"), dict) else None
    devices = dla.get("devices", {}) if dla else {}
    for lay in program.layers:
        out_bytes = tensors[lay.outputs[0]].nbytes if lay.outputs else 0
        # Layers run one after another and share one workspace: the largest layer's.
        workspace = max(workspace, scratch_bytes(lay.attrs, out_bytes))
        entry = {"name": lay.name, "type": lay.op,
                 "inputs": [describe(i) for i in lay.inputs],
                 "outputs": [describe(i) for i in lay.outputs],
                 "fused_from": list(lay.fused_from), "precision": lay.precision,
                 "tactic": lay.tactic}
        if dla is not None:  # where a Jetson runs it (--useDLACore builds, pydla.dla.build)
            entry["device"] = devices.get(lay.name, "GPU")
        quant = _quantization(program, lay)
        if quant:
            entry["quantization"] = quant
        reason = _int8_reason(lay.name, lay.fused_from, int8) or (
            f"{reduced[lay.name][0]}: {reduced[lay.name][1]}" if lay.name in reduced else "")
        if reason:
            entry["precision_reason"] = reason
        if "epilogue" in lay.attrs:
            entry["epilogue"] = [s["op"] for s in lay.attrs["epilogue"]["program"]]
        if lay.op == "Pointwise":
            entry["program"] = [s["op"] for s in lay.attrs["program"]]
        if lay.attrs.get("in_place"):
            entry["in_place"] = True
        if "layouts" in lay.attrs:  # a convolution in the channel-blocked layout
            entry["layouts"] = list(lay.attrs["layouts"])
        elif lay.op == "Reorder":
            entry["layouts"] = ["nchw16c" if lay.attrs.get("to") == "nchw" else "nchw",
                                str(lay.attrs.get("to"))]
        layers.append(entry)
    activations = [t for t in tensors if t.kind != "weight"]
    extra = {"dla": {k: v for k, v in dla.items() if k != "devices"}} if dla else {}
    if reduced:  # what the layer lines' reasons answer to (cmd_build's --dumpLayerInfo)
        extra["precision_flag"] = {"weak": "--fp16/--bf16", "autocast": "--autocast"}.get(
            program.build["precision"].get("mode"), "")
    return {
        **extra,
        "layers": layers,
        "memory": {
            "activation_bytes": program.arena_bytes,
            "naive_activation_bytes": sum(t.nbytes for t in activations),
            "weight_bytes": sum(t.nbytes for t in tensors if t.kind == "weight"),
            "workspace_bytes": workspace,
        },
    }


def _int8_reason(name: str, fused_from: tuple[str, ...], decisions: dict[str, Any]) -> str:
    """Why --int8 left this layer int8 or float: its own decision, else that of the layer an
    int8 decision was made for among those fused into it, else the first one's."""
    known = [n for n in (name, *fused_from) if n in decisions]
    chosen = [n for n in known if decisions[n][0] == "int8"]
    pick = name if name in decisions else (chosen or known or [None])[0]
    return f"{decisions[pick][0]}: {decisions[pick][1]}" if pick else ""


# Scale and zero-point inputs of the quantized layers, by role (pydla.ops.QUANTIZED_INPUTS).
_QUANT_SLOTS = {"QConv": ((1, 2, "x"), (4, 5, "w"), (6, 7, "y")),
                "QGemm": ((1, 2, "x"), (4, 5, "w"), (6, 7, "y")),
                "QuantizeLinear": ((1, 2, "y"),), "DequantizeLinear": ((1, 2, "x"),)}


def _quantization(program: Program, lay: Any) -> dict[str, Any]:
    """The scales and zero points a quantized layer was built with: one value per tensor,
    or the range and count of per-channel ones; "runtime" for a network input."""
    out: dict[str, Any] = {}
    for s_at, z_at, role in _QUANT_SLOTS.get(lay.op, ()):
        if s_at >= len(lay.inputs) or lay.inputs[s_at] < 0:
            continue
        t = program.tensors[lay.inputs[s_at]]
        if t.kind != "weight":
            out[role] = "runtime"
            continue
        scale = program.weight(t).astype(np.float64).ravel()
        entry: dict[str, Any] = ({"scale": float(scale[0])} if scale.size == 1 else
                                 {"scale_min": float(scale.min()),
                                  "scale_max": float(scale.max()), "channels": scale.size})
        z = lay.inputs[z_at] if z_at < len(lay.inputs) else -1
        if z >= 0 and program.tensors[z].kind == "weight":
            zp = program.weight(program.tensors[z]).ravel()
            entry["zero_point"] = int(zp[0]) if (zp == zp[0]).all() else "per-channel"
        out[role] = entry
    return out
