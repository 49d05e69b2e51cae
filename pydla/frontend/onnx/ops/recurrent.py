"""Importers of recurrent layers: LSTM, GRU, RNN.

Weights, biases, sequence lengths, initial states and peepholes stay data inputs (in ONNX
order). The canonical attributes are complete: ``direction``, ``hidden_size``, ``layout``,
``clip`` (None when absent), ``activations`` (lower-case, one list per direction, so
``2 × gates`` names when bidirectional), with ``activation_alpha``/``activation_beta``
aligned one-to-one with them (defaults filled in), plus ``input_forget`` (LSTM) and
``linear_before_reset`` (GRU); ``quantize_hidden`` 1 only where an importer asks for it
(com.microsoft DynamicQuantizeLSTM: each step's h passes a dynamic uint8 round trip).
"""

from __future__ import annotations

from pydla.frontend.onnx.importer import ImportContext, OnnxNode
from pydla.frontend.onnx.registry import onnx_op
from pydla.ir import Value

# Per op: number of gates in W/R and the default activation list of one direction.
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_DEFAULT_ACTIVATIONS = {"LSTM": ["sigmoid", "tanh", "tanh"], "GRU": ["sigmoid", "tanh"],
                        "RNN": ["tanh"]}
# Per activation: (takes alpha, takes beta, default alpha, default beta). As in onnxruntime,
# activation_alpha/beta are consumed in order by the activations that take them; defaults
# are the ONNX operators' own.
_ACTIVATION_ARGS = {
    "relu": (False, False, 0.0, 0.0), "tanh": (False, False, 0.0, 0.0),
    "sigmoid": (False, False, 0.0, 0.0), "softsign": (False, False, 0.0, 0.0),
    "softplus": (False, False, 0.0, 0.0), "affine": (True, True, 1.0, 0.0),
    "leakyrelu": (True, False, 0.01, 0.0), "thresholdedrelu": (True, False, 1.0, 0.0),
    "scaledtanh": (True, True, 1.0, 1.0), "hardsigmoid": (True, True, 0.2, 0.5),
    "elu": (True, False, 1.0, 0.0),
}


def _activations(ctx: ImportContext, node: OnnxNode,
                 num_directions: int) -> tuple[list[str], list[float], list[float]]:
    per_direction = _DEFAULT_ACTIVATIONS[node.op_type]
    names = [str(n).lower() for n in node.attr("activations", [])] or per_direction
    if num_directions == 2 and len(names) == len(per_direction):
        names = names * 2
    if len(names) != len(per_direction) * num_directions:
        raise ctx.error(f"{len(names)} activations given, {node.op_type} needs "
                        f"{len(per_direction) * num_directions}")
    alphas = [float(a) for a in node.attr("activation_alpha", [])]
    betas = [float(b) for b in node.attr("activation_beta", [])]
    out_alpha, out_beta = [], []
    for name in names:
        if name not in _ACTIVATION_ARGS:
            raise ctx.error(f"activation {name!r} is not supported")
        takes_alpha, takes_beta, alpha, beta = _ACTIVATION_ARGS[name]
        if takes_alpha and alphas:
            alpha = alphas.pop(0)
        if takes_beta and betas:
            beta = betas.pop(0)
        out_alpha.append(alpha)
        out_beta.append(beta)
    return names, out_alpha, out_beta


def _check_shape(ctx: ImportContext, v: Value | None, what: str, want: tuple[int, ...]) -> None:
    if v is not None and v.shape != want:
        raise ctx.error(f"{what} has shape {v.shape}, expected {want}")


@onnx_op("LSTM", "GRU", "RNN", since=7)
def import_recurrent(ctx: ImportContext, node: OnnxNode,
                     quantize_hidden: bool = False) -> list[Value]:
    op = node.op_type
    x, w, r = node.inputs[0], node.input(1), node.input(2)
    assert x is not None
    if w is None or r is None:
        raise ctx.error("W and R are required")
    a = node.attrs_with_defaults()
    direction = str(a.get("direction", "forward"))
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ctx.error(f"direction {direction!r} is not supported")
    dirs = 2 if direction == "bidirectional" else 1
    layout = int(a.get("layout", 0))
    if len(x.shape) != 3:
        raise ctx.error(f"X must have rank 3, got shape {x.shape}")
    seq, batch, size = (x.shape[1], x.shape[0], x.shape[2]) if layout else x.shape
    hidden = int(a.get("hidden_size", r.shape[-1]))
    gates = _GATES[op]
    _check_shape(ctx, w, "W", (dirs, gates * hidden, size))
    _check_shape(ctx, r, "R", (dirs, gates * hidden, hidden))
    _check_shape(ctx, node.input(3), "B", (dirs, 2 * gates * hidden))
    _check_shape(ctx, node.input(4), "sequence_lens", (batch,))
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    _check_shape(ctx, node.input(5), "initial_h", state)
    if op == "LSTM":
        _check_shape(ctx, node.input(6), "initial_c", state)
        _check_shape(ctx, node.input(7), "P", (dirs, 3 * hidden))
    names, alphas, betas = _activations(ctx, node, dirs)
    clip = a.get("clip")
    attrs = {"direction": direction, "hidden_size": hidden, "layout": layout,
             "activations": names, "activation_alpha": alphas, "activation_beta": betas,
             "clip": None if clip is None else float(clip)}
    if op == "LSTM":
        attrs["input_forget"] = int(a.get("input_forget", 0))
        if quantize_hidden:
            attrs["quantize_hidden"] = 1
    if op == "GRU":
        attrs["linear_before_reset"] = int(a.get("linear_before_reset", 0))
    y_shape = (batch, seq, dirs, hidden) if layout else (seq, dirs, batch, hidden)
    n_out = min(max(len(node.output_names), 1), 3 if op == "LSTM" else 2)
    out_types = [(y_shape, x.dtype)] + [(state, x.dtype)] * (n_out - 1)
    return ctx.emit(op, node.inputs, attrs, out_types=out_types)
