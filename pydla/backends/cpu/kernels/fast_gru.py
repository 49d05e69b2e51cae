"""GRU and RNN in one numba function (tactic ``fused_gates``), as fast_lstm runs LSTM: the
default activations (GRU sigmoid, tanh; RNN tanh), no clip, either layout, both values of
``linear_before_reset``, sequence lengths (read at every run: a sequence's state stops at
its length, its outputs past it are zeros, and the steps stop at the longest; lengths out
of [0, T] go to the reference kernel, which refuses them). Piper's TTS runs nine
bidirectional GRUs on sequences padded to 64 whose lengths are the text's: on the
reference kernel they took 20× onnxruntime's time.

1. The input projections of every step and direction are one GEMM, X · Wᵀ
   (fast_recurrent.InputProjection), G's rows in X's order (step-major in layout 0,
   batch-major in layout 1).
2. Per direction and step, h · Rᵀ (fast_recurrent.padded_product), then one loop over
   B × P for the gates (z, r, h in ONNX's order) and the state update. Each gate's block
   is P = H rounded up to whole vectors (zero weights past H), so the loops run in whole
   vectors; h lives in a (D, B, P) buffer, copied into Y (either layout) after each step.
   With ``linear_before_reset`` = 0 the candidate's product needs r first: h · R_zrᵀ,
   the reset gate into r ⊙ h, then (r ⊙ h) · R_hᵀ.
3. Tactic ``fused_gates`` runs on the calling thread; ``fused_gates_parallel`` (where a
   layer has the work) forks the input product (fast_recurrent.FORK_MIN_MACS) and runs
   two directions one per thread (FORK_MIN_STEP_MACS). On a quiet machine the fork pays
   (a GRU like lac's, 2 × 50 steps of H = 128 from 256 inputs: 1.2-1.5× faster, best of
   400 runs); on this shared 2-core machine under load, a fork between long serial loops
   found numba's workers asleep and waited out scheduler time slices to wake them:
   8-35 ms for layers of 0.1-0.9 ms on one thread. Timing both, the autotuner picks what
   the machine gives; without timing the parallel one is preferred (the backend's thread
   governor runs it on one thread while the cores are busy).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numba import njit

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import threads
from pydla.backends.cpu.fork import fork_call
from pydla.backends.cpu.kernels.conv_fast.gemm import MR, NR, pack_b, packed_b_size
from pydla.backends.cpu.kernels.conv_fast.simd import LANES, copy_bytes
from pydla.backends.cpu.kernels.fast_math import FASTMATH_REDUCE, sigmoid32, tanh32
from pydla.backends.cpu.kernels.fast_recurrent import (
    InputProjection,
    applies,
    constant_weights,
    forks,
    padded_product,
    panel_batch,
)
from pydla.backends.cpu.kernels.recurrent import bind_recurrent
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import PreboundKernel, chain, prebind
from pydla.backends.cpu.workspace import aligned_zeros

Thunk = Callable[[], None]

_DEFAULTS = {"GRU": ["sigmoid", "tanh"], "RNN": ["tanh"]}
_GATES = {"GRU": 3, "RNN": 1}
# The cell each direction runs (geo[5]).
_RNN, _GRU, _GRU_BEFORE = 0, 1, 2
# Two directions fork onto two threads from this many multiply-adds of recurrent product
# per direction (T·B·H·gates); below it they run one after the other on the calling
# thread. A step of a small layer is a few thousand multiply-adds (madmom's: 25 × 96), but
# the threads meet once per layer, not per step, so the fork costs its ≈ 5 µs start and
# the wait for the slower direction: best of 400 runs on this 2-core machine, H = 64,
# T = 100 (1.2 M per direction) 193 µs forked vs 231 µs; lac's H = 128, T = 50 (2.5 M)
# 367 vs 551 µs.
FORK_MIN_STEP_MACS = 1 << 20
# geo: [T, B, H, D, reverse of direction 0, cell, layout, threads, P]


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def _directions(t0: int, rt: np.ndarray, rp: np.ndarray, rph: np.ndarray, hs: np.ndarray,
                rs: np.ndarray, edge: np.ndarray, bsum: np.ndarray, rbh: np.ndarray,
                h0: np.ndarray, h: np.ndarray, g: np.ndarray, rh: np.ndarray, y: np.ndarray,
                yh: np.ndarray, lens: np.ndarray, geo: np.ndarray) -> None:
    """Directions t0, t0 + threads, … (a fork task). Gate blocks are P = H rounded up to
    whole vectors wide (zero weights and biases past H), so that every gate loop and row
    of the product runs in whole vectors (H = 25 ran 11 of its 25 sigmoids in scalar
    tails); h (D, B, P) holds the state: h0 at first, copied into Y after every step and
    into Y_h at the end. rt (D, H, gates·P) Rᵀ; rp (D, its packed columns: all, or z and
    r where the candidate's product waits for r), rph (D, the candidate's packed columns
    then); hs (D, B rows padded to panels × H) and edge (D, MR·NR) the micro-kernel's
    scratch; rs (D, B, P) r ⊙ h; bsum (D, gates·P) the biases added to the gates (both,
    but R_bh where it multiplies by r: rbh (D, P)). lens (B) the sequence lengths, each in
    [0, T]: the steps run to the longest (a reverse direction from its end), a sequence's
    state is left as it is at steps past its own length, where Y gets zeros; an empty
    sequence's Y_h is zeros, as onnxruntime's."""
    steps, batch, hidden, dirs = geo[0], geo[1], geo[2], geo[3]
    cell, layout, nthreads, pad = geo[5], geo[6], geo[7], geo[8]
    width = pad if cell == _RNN else 3 * pad
    first = 2 * pad if cell == _GRU else width  # the columns of h · Rᵀ
    # Element strides of Y (t, d, b), of the states (d, b) and of G's row (t, b).
    if layout == 0:
        y_t, y_d, y_b = dirs * batch * hidden, batch * hidden, hidden
        s_d, s_b = batch * hidden, hidden
        g_t, g_b = batch, 1
    else:
        y_t, y_d, y_b = dirs * hidden, hidden, steps * dirs * hidden
        s_d, s_b = hidden, dirs * hidden
        g_t, g_b = 1, steps
    longest = 0
    for b in range(batch):
        longest = max(longest, lens[b])
    for d in range(t0, dirs, nthreads):
        reverse = d == 1 or geo[4] != 0
        rt_at = d * hidden * width
        rh_at = d * batch * width
        h_at = d * batch * pad
        bd = bsum[d]
        rbd = rbh[d]
        for b in range(batch):  # past H the state stays 0: zero weights, biases and h
            copy_bytes(h.ctypes.data + 4 * (h_at + b * pad),
                       h0.ctypes.data + 4 * (d * s_d + b * s_b), 4 * hidden)
        for s in range(longest):
            t = longest - 1 - s if reverse else s
            padded_product(batch, hidden, h, h_at, pad, rt, rt_at, width, first, rp[d], hs[d],
                           edge[d], rh, rh_at, width)
            if cell == _GRU:
                # The candidate's product takes r ⊙ h: the reset gates first.
                for b in range(batch):
                    gb = (t * g_t + b * g_b) * dirs * width + d * width + pad
                    rb = rh_at + b * width + pad
                    hb = h_at + b * pad
                    for j in range(pad):
                        reset = sigmoid32(g[np.uint64(gb + j)] + rh[np.uint64(rb + j)]
                                          + bd[pad + j])
                        rs[np.uint64(hb + j)] = reset * h[np.uint64(hb + j)]
                padded_product(batch, hidden, rs, h_at, pad, rt, rt_at + 2 * pad, width, pad,
                               rph[d], hs[d], edge[d], rh, rh_at + 2 * pad, width)
            for b in range(batch):
                if t >= lens[b]:  # past this sequence's end
                    _zeros(y, t * y_t + d * y_d + b * y_b, hidden)
                    continue
                gb = (t * g_t + b * g_b) * dirs * width + d * width
                rb = rh_at + b * width
                hb = h_at + b * pad
                if cell == _RNN:
                    for j in range(pad):
                        h[np.uint64(hb + j)] = tanh32(g[np.uint64(gb + j)]
                                                      + rh[np.uint64(rb + j)] + bd[j])
                elif cell == _GRU_BEFORE:
                    for j in range(pad):
                        z = sigmoid32(g[np.uint64(gb + j)] + rh[np.uint64(rb + j)] + bd[j])
                        reset = sigmoid32(g[np.uint64(gb + pad + j)]
                                          + rh[np.uint64(rb + pad + j)] + bd[pad + j])
                        cand = tanh32(g[np.uint64(gb + 2 * pad + j)] + bd[2 * pad + j]
                                      + reset * (rh[np.uint64(rb + 2 * pad + j)] + rbd[j]))
                        h[np.uint64(hb + j)] = (1 - z) * cand + z * h[np.uint64(hb + j)]
                else:
                    for j in range(pad):
                        z = sigmoid32(g[np.uint64(gb + j)] + rh[np.uint64(rb + j)] + bd[j])
                        cand = tanh32(g[np.uint64(gb + 2 * pad + j)] + bd[2 * pad + j]
                                      + rh[np.uint64(rb + 2 * pad + j)])
                        h[np.uint64(hb + j)] = (1 - z) * cand + z * h[np.uint64(hb + j)]
                copy_bytes(y.ctypes.data + 4 * (t * y_t + d * y_d + b * y_b),
                           h.ctypes.data + 4 * hb, 4 * hidden)
        for t in range(longest, steps):
            for b in range(batch):
                _zeros(y, t * y_t + d * y_d + b * y_b, hidden)
        for b in range(batch):
            if lens[b] == 0:
                _zeros(yh, d * s_d + b * s_b, hidden)
            else:
                copy_bytes(yh.ctypes.data + 4 * (d * s_d + b * s_b),
                           h.ctypes.data + 4 * (h_at + b * pad), 4 * hidden)


@njit(cache=True, nogil=True)
def _zeros(x: np.ndarray, at: int, n: int) -> None:
    for j in range(n):
        x[np.uint64(at + j)] = 0


def _applies(spec: LayerSpec) -> bool:
    return applies(spec, _DEFAULTS[spec.op], layouts=(0, 1), absent=())


def _geometry(spec: LayerSpec) -> tuple[int, int, int, int, int, int]:
    """T, B, input size, H, directions, P (H padded to whole vectors)."""
    x = spec.inputs[0]
    assert x is not None
    layout = int(spec.attrs["layout"])
    steps, batch, size = (x.shape[1], x.shape[0], x.shape[2]) if layout else x.shape
    hidden = int(spec.attrs["hidden_size"])
    dirs = 2 if spec.attrs["direction"] == "bidirectional" else 1
    return steps, batch, size, hidden, dirs, -(-hidden // LANES) * LANES


def _forks(spec: LayerSpec) -> tuple[bool, bool]:
    """Whether the parallel tactic forks the input product, and the directions."""
    steps, batch, size, hidden, dirs, pad = _geometry(spec)
    width = _GATES[spec.op] * pad
    return (forks(steps * batch * size * dirs * width),
            dirs == 2 and steps * batch * hidden * width >= FORK_MIN_STEP_MACS)


def _applies_parallel(spec: LayerSpec) -> bool:
    return _applies(spec) and any(_forks(spec))


def bind_fused_gates(spec: LayerSpec) -> RunFn:
    return _bind(spec, parallel=False)


def bind_fused_gates_parallel(spec: LayerSpec) -> RunFn:
    return _bind(spec, parallel=True)


def _bind(spec: LayerSpec, parallel: bool) -> RunFn:
    layout = int(spec.attrs["layout"])
    steps, batch, size, hidden, dirs, pad = _geometry(spec)
    gates = _GATES[spec.op]
    width = gates * pad  # one direction's gate columns, each gate P = pad wide
    cell = _RNN if spec.op == "RNN" else (
        _GRU_BEFORE if int(spec.attrs["linear_before_reset"]) else _GRU)
    pool = threads.configure()  # also keeps BLAS (sgemm for big batches) single-threaded
    nthreads = pool if parallel else 1
    fork_input, fork_dirs = _forks(spec)
    forked = fork_dirs and nthreads > 1
    geo = np.array([steps, batch, hidden, dirs, int(spec.attrs["direction"] == "reverse"),
                    cell, layout, 2 if forked else 1, pad], np.int64)
    n_out = len(spec.outputs)
    # Sequence lengths outside [0, T] go to the reference kernel (its error).
    has_lens = len(spec.inputs) > 4 and spec.inputs[4] is not None
    reference = bind_recurrent(spec) if has_lens else None
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    # The columns of the first product (all but the candidate's where that one waits for r).
    first = 2 * pad if cell == _GRU else width
    panel = panel_batch(batch)

    def prebind_fused(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        src, w, r = ins[0], ins[1], ins[2]
        assert src is not None and w is not None and r is not None
        b = ins[3] if len(ins) > 3 else None
        lens = ins[4] if len(ins) > 4 else None
        h0 = ins[5] if len(ins) > 5 and ins[5] is not None else np.zeros(state, np.float32)
        proj = InputProjection(steps * batch, size, dirs * width,
                               nthreads if fork_input else 1)
        h = aligned_zeros((dirs, batch, pad))
        rh = aligned_zeros((dirs, batch, width))
        rs = aligned_zeros((dirs, batch, pad))
        yh = outs[1] if n_out > 1 else np.empty(state, np.float32)
        lengths = np.full(batch, steps, np.int64)  # the lens input's, at every run
        # Rᵀ and the biases with each gate's block padded from H to P with zeros.
        rt = aligned_zeros((dirs, hidden, gates, pad))
        bsum = np.zeros((dirs, gates, pad), np.float32)
        rbh = np.zeros((dirs, pad), np.float32)
        edge = np.zeros((dirs, MR * NR), np.float32)
        rp = aligned_zeros((dirs, packed_b_size(hidden, first) if panel else 0))
        rph = aligned_zeros((dirs, packed_b_size(hidden, pad) if panel and cell == _GRU
                             else 0))
        hs = np.zeros((dirs, -(-batch // MR) * MR * hidden if panel else 0), np.float32)

        def prepare() -> None:
            np.copyto(rt[..., :hidden], r.reshape(dirs, gates, hidden, hidden)
                      .transpose(0, 3, 1, 2))
            if panel:
                for d in range(dirs):
                    flat = rt[d].reshape(-1)
                    pack_b(flat, width, hidden, first, rp[d])
                    if cell == _GRU:
                        pack_b(flat[2 * pad:], width, hidden, pad, rph[d])
            if b is not None:
                bw = b[:, :gates * hidden].reshape(dirs, gates, hidden)
                br = b[:, gates * hidden:].reshape(dirs, gates, hidden)
                np.add(bw, br, out=bsum[..., :hidden])
                if cell == _GRU_BEFORE:  # R_bh goes inside r ⊙ (h · R_hᵀ + R_bh)
                    np.copyto(bsum[:, 2, :hidden], bw[:, 2])
                    np.copyto(rbh[:, :hidden], br[:, 2])
            wpad = np.zeros((dirs, gates, pad, size), np.float32)  # W's gate blocks, padded
            wpad[:, :, :hidden] = w.reshape(dirs, gates, hidden, size)
            proj.pack(wpad)

        constant = constant_weights(w, r, b)
        if constant:
            prepare()
        run = chain(proj.thunk(),
                    fork_call(_directions, int(geo[7]), rt.reshape(-1), rp, rph, hs,
                                 rs.reshape(-1), edge, bsum.reshape(dirs, width),
                                 rbh, np.ascontiguousarray(h0).reshape(-1), h.reshape(-1),
                                 proj.g.reshape(-1), rh.reshape(-1), outs[0].reshape(-1),
                                 yh.reshape(-1), lengths, geo))
        fallback = None if reference is None else prebind(reference, ins, outs)

        def step() -> None:
            rows = None
            if fallback is not None and lens is not None:
                np.copyto(lengths, lens, casting="unsafe")
                longest = int(lengths.max()) if batch else 0
                if lengths.min() < 0 or longest > steps:
                    fallback()
                    return
                if layout == 0:  # step-major rows: the steps past the longest are not read
                    rows = longest * batch
            if not constant:
                prepare()
            proj.load(src, rows)
            run()

        return step

    return PreboundKernel(prebind_fused)


for _op in _GATES:
    tactic(_op, "fused_gates", applies=_applies, priority=10)(bind_fused_gates)
    tactic(_op, "fused_gates_parallel", applies=_applies_parallel,
           priority=11)(bind_fused_gates_parallel)
