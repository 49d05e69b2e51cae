"""CPU kernels of recurrent layers: LSTM, GRU, RNN.

The input projections of all time steps are one matmul (x @ Wᵀ, biases folded in); only
the recurrent part (h @ Rᵀ and the gates) runs step by step. A reverse direction runs
forward over each sequence reversed within its own length, and is reversed back. Steps
past a sequence's length keep the state and output zeros, and an empty sequence ends with
zero states, as in onnxruntime.

An LSTM with ``quantize_hidden`` (onnxruntime's DynamicQuantizeLSTM) feeds each step's h to
the recurrent product through a dynamic uint8 round trip, as onnxruntime's integer GEMM.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import numpy as np

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu.registry import kernel
from pydla.errors import KernelError

Inputs = Sequence[np.ndarray | None]
Outputs = Sequence[np.ndarray]
Activation = Callable[[np.ndarray], np.ndarray]

_FUNCTIONS: dict[str, Callable[[np.ndarray, float, float], np.ndarray]] = {
    "sigmoid": lambda x, a, b: 0.5 * (np.tanh(0.5 * x) + 1),  # overflow-free logistic
    "tanh": lambda x, a, b: np.tanh(x),
    "relu": lambda x, a, b: np.maximum(x, 0),
    "affine": lambda x, a, b: a * x + b,
    "leakyrelu": lambda x, a, b: np.where(x >= 0, x, a * x),
    "thresholdedrelu": lambda x, a, b: np.where(x > a, x, 0),
    "scaledtanh": lambda x, a, b: a * np.tanh(b * x),
    "hardsigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1),
    "elu": lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0))),
    "softsign": lambda x, a, b: x / (1 + np.abs(x)),
    "softplus": lambda x, a, b: np.logaddexp(0, x),
}


def _activation(name: str, alpha: float, beta: float) -> Activation:
    fn = _FUNCTIONS[name]
    return lambda x: fn(x, alpha, beta)


def _clipper(clip: float | None) -> Activation:
    if clip is None:
        return lambda x: x
    return lambda x: np.clip(x, -clip, clip)


def dynamic_uint8_round_trip(a: np.ndarray) -> np.ndarray:
    """``a`` quantized as DynamicQuantizeLinear does (per tensor, uint8, the range widened
    to hold 0, round half to even) and dequantized: what onnxruntime's dynamically
    quantized GEMMs multiply instead of the float operand."""
    lo = np.float32(min(np.float32(a.min()), np.float32(0)))
    hi = np.float32(max(np.float32(a.max()), np.float32(0)))
    scale = np.float32((hi - lo) / np.float32(255)) if hi != lo else np.float32(1)
    zero = np.clip(np.rint(np.float32(0) - lo / scale), 0, 255)
    q = np.clip(np.rint(a / scale) + zero, 0, 255)
    return ((q - zero) * scale).astype(a.dtype)


class _Cell(ABC):
    """One direction of one layer: the recurrence over precomputed input projections."""

    def __init__(self, acts: list[Activation], clip: Activation, attrs: dict) -> None:
        self.acts = acts
        self.clip = clip
        self.attrs = attrs

    @abstractmethod
    def bind(self, r: np.ndarray, b: np.ndarray | None, p: np.ndarray | None) -> None:
        """Take this direction's recurrent weights, bias and peepholes for the next run."""

    @abstractmethod
    def step(self, g: np.ndarray, h: np.ndarray, c: np.ndarray | None
             ) -> tuple[np.ndarray, np.ndarray | None]:
        """One time step from the input projection g: the new hidden (and cell) state."""

    def bias(self, b: np.ndarray) -> np.ndarray:
        """The part of B folded into the input projection (Wb + Rb for most gates)."""
        half = b.shape[0] // 2
        return b[:half] + b[half:]


class _RNN(_Cell):
    def bind(self, r: np.ndarray, b: np.ndarray | None, p: np.ndarray | None) -> None:
        self.rt = r.T

    def step(self, g: np.ndarray, h: np.ndarray, c: np.ndarray | None
             ) -> tuple[np.ndarray, np.ndarray | None]:
        return self.acts[0](self.clip(g + h @ self.rt)), None


class _GRU(_Cell):
    def bind(self, r: np.ndarray, b: np.ndarray | None, p: np.ndarray | None) -> None:
        n = r.shape[1]
        self.n = n
        self.rt_zr = r[:2 * n].T
        self.rt_h = r[2 * n:].T
        self.rb_h = np.zeros(n, r.dtype) if b is None else b[5 * n:]
        self.before = bool(self.attrs["linear_before_reset"])

    def bias(self, b: np.ndarray) -> np.ndarray:
        n = b.shape[0] // 6
        folded = b[:3 * n] + b[3 * n:]
        if self.attrs["linear_before_reset"]:
            folded[2 * n:] = b[2 * n:3 * n]  # Rbh is applied inside the reset product
        return folded

    def step(self, g: np.ndarray, h: np.ndarray, c: np.ndarray | None
             ) -> tuple[np.ndarray, np.ndarray | None]:
        f, act_g = self.acts
        n = self.n
        zr = g[:, :2 * n] + h @ self.rt_zr
        z = f(self.clip(zr[:, :n]))
        reset = f(self.clip(zr[:, n:]))
        if self.before:
            pre = g[:, 2 * n:] + reset * (h @ self.rt_h + self.rb_h)
        else:
            pre = g[:, 2 * n:] + (reset * h) @ self.rt_h
        candidate = act_g(self.clip(pre))
        return (1 - z) * candidate + z * h, None


class _LSTM(_Cell):
    def bind(self, r: np.ndarray, b: np.ndarray | None, p: np.ndarray | None) -> None:
        n = r.shape[1]
        self.n = n
        self.rt = r.T
        # Peepholes are ordered i, o, f.
        self.p = None if p is None else (p[:n], p[n:2 * n], p[2 * n:])
        self.couple = bool(self.attrs["input_forget"])
        self.quantize_hidden = bool(self.attrs.get("quantize_hidden", 0))

    def step(self, g: np.ndarray, h: np.ndarray, c: np.ndarray | None
             ) -> tuple[np.ndarray, np.ndarray | None]:
        f, act_g, act_h = self.acts
        n = self.n
        g = g + (dynamic_uint8_round_trip(h) if self.quantize_hidden else h) @ self.rt
        gi, go, gf, gc = g[:, :n], g[:, n:2 * n], g[:, 2 * n:3 * n], g[:, 3 * n:]
        if self.p is not None:
            gi = gi + self.p[0] * c
            gf = gf + self.p[2] * c
        i = f(self.clip(gi))
        forget = 1 - i if self.couple else f(self.clip(gf))
        c_new = forget * c + i * act_g(self.clip(gc))
        if self.p is not None:
            go = go + self.p[1] * c_new
        o = f(self.clip(go))
        return o * act_h(c_new), c_new


_CELLS: dict[str, type[_Cell]] = {"RNN": _RNN, "GRU": _GRU, "LSTM": _LSTM}


def _input(inputs: Inputs, i: int) -> np.ndarray | None:
    return inputs[i] if i < len(inputs) else None


def _run_direction(cell: _Cell, xw: np.ndarray, h: np.ndarray, c: np.ndarray | None,
                   valid: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Run the recurrence over xw (steps, batch, gates·hidden); returns Y, last h, last c."""
    ys = np.zeros(xw.shape[:2] + h.shape[1:], xw.dtype)
    for t in range(xw.shape[0]):
        h_new, c_new = cell.step(xw[t], h, c)
        if valid is None:
            h, c = h_new, c_new
            ys[t] = h
            continue
        live = valid[t][:, None]
        h = np.where(live, h_new, h)
        if c is not None:
            c = np.where(live, c_new, c)
        ys[t] = np.where(live, h_new, 0)
    return ys, h, c


def bind_recurrent(spec: LayerSpec) -> RunFn:
    op = spec.op
    attrs = dict(spec.attrs)
    layout = int(attrs["layout"])
    n = int(attrs["hidden_size"])
    direction = attrs["direction"]
    dirs = 2 if direction == "bidirectional" else 1
    x_shape = spec.inputs[0].shape
    steps, batch = (x_shape[1], x_shape[0]) if layout else x_shape[:2]
    dtype = spec.inputs[0].dtype.np
    per_dir = len(attrs["activations"]) // dirs
    acts = [_activation(name, a, b) for name, a, b in
            zip(attrs["activations"], attrs["activation_alpha"], attrs["activation_beta"])]
    clip = _clipper(attrs["clip"])
    cells = [_CELLS[op](acts[d * per_dir:(d + 1) * per_dir], clip, attrs) for d in range(dirs)]
    reverse = [direction == "reverse" or d == 1 for d in range(dirs)]
    t_index = np.arange(steps)[:, None]
    b_index = np.arange(batch)[None, :]

    def run(inputs: Inputs, outputs: Outputs) -> None:
        x, w, r = inputs[0], inputs[1], inputs[2]
        b, lens = _input(inputs, 3), _input(inputs, 4)
        h0, c0, p = _input(inputs, 5), _input(inputs, 6), _input(inputs, 7)
        if layout:
            x = x.transpose(1, 0, 2)
            h0 = None if h0 is None else h0.transpose(1, 0, 2)
            c0 = None if c0 is None else c0.transpose(1, 0, 2)
        lengths = np.full(batch, steps, np.int64) if lens is None else lens.astype(np.int64)
        if lengths.size and (lengths.min() < 0 or lengths.max() > steps):
            raise KernelError(spec.name, op, f"sequence_lens {lengths.tolist()} must lie in "
                              f"[0, {steps}], the sequence's length")
        valid = None
        if np.any(lengths != steps):
            valid = t_index < lengths[None, :]
        # Reversal within each sequence's own length (an involution: it also undoes itself).
        backward = np.where(t_index < lengths[None, :], lengths[None, :] - 1 - t_index, t_index)
        flat = x.reshape(steps * batch, -1)
        y = np.empty((dirs, steps, batch, n), dtype)
        y_h = np.empty((dirs, batch, n), dtype)
        y_c = np.empty((dirs, batch, n), dtype)
        for d, cell in enumerate(cells):
            cell.bind(r[d], None if b is None else b[d], None if p is None else p[d])
            xw = (flat @ w[d].T).reshape(steps, batch, -1)
            if b is not None:
                xw += cell.bias(b[d])
            if reverse[d]:
                xw = xw[backward, b_index]
            h = np.zeros((batch, n), dtype) if h0 is None else h0[d]
            c = None
            if op == "LSTM":
                c = np.zeros((batch, n), dtype) if c0 is None else c0[d]
            ys, h, c = _run_direction(cell, xw, h, c, valid)
            y[d] = ys[backward, b_index] if reverse[d] else ys
            y_h[d] = h
            if c is not None:
                y_c[d] = c
        # onnxruntime gives empty sequences zero final states, not their initial ones.
        y_h[:, lengths == 0] = 0
        y_c[:, lengths == 0] = 0
        results = [y.transpose(2, 1, 0, 3) if layout else y.transpose(1, 0, 2, 3)]
        results += [s.transpose(1, 0, 2) if layout else s for s in (y_h, y_c)]
        for out, res in zip(outputs, results):
            np.copyto(out, res)

    return run


for _op in _CELLS:
    kernel(_op)(bind_recurrent)
