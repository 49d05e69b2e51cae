"""Shape rules of the compute layers: convolutions, GEMMs, pooling, reductions, softmax,
normalizations, resize and the layout reorder."""

from __future__ import annotations

import math

from pydla.dtypes import DType
from pydla.loadable.rules_elementwise import own_inputs, with_epilogue
from pydla.loadable.validate import (
    BLOCK,
    Expected,
    LayerCheck,
    blocked_shape,
    broadcast,
    layouts,
    logical,
    rule,
)

_MAX_SPATIAL = 6
_DIM = 1 << 40


def _window_sizes(check: LayerCheck, sizes: tuple[int, ...], kernel: list[int],
                  transposed: bool = False) -> tuple[list[int], list[int]]:
    """(smallest, largest) output sizes a window of ``kernel`` makes of ``sizes``: floor
    and ceil of the ONNX formula (ceil_mode is folded into the planned output shape)."""
    nd = len(kernel)
    strides = check.ints("strides", nd, [1] * nd, 1, 1 << 20)
    dil = check.ints("dilations", nd, [1] * nd, 1, 1 << 20)
    pads = check.ints("pads", 2 * nd, [0] * (2 * nd), 0, 1 << 20)
    lo, hi = [], []
    for i, (d, k, s, di) in enumerate(zip(sizes, kernel, strides, dil)):
        if transposed:  # output_padding and output_shape only add rows past the natural
            lo.append(s * (d - 1) + (k - 1) * di + 1 - pads[i] - pads[nd + i])
            hi.append(_DIM)
            continue
        span = d + pads[i] + pads[nd + i] - (k - 1) * di - 1
        if span < 0:
            raise check.fail(".attrs.kernel_shape", f"window {kernel} (dilations {dil}) is "
                             f"larger than the padded input {sizes}")
        lo.append(span // s + 1)
        hi.append(-(-span // s) + 1)
    return lo, hi


def _fits(check: LayerCheck, got: tuple[int, ...], lo: list[int], hi: list[int],
          head: tuple[int, ...]) -> tuple[int, ...]:
    """The output shape: ``head`` + spatial sizes, the planned ones if within [lo, hi]."""
    spatial = got[len(head):] if len(got) == len(head) + len(lo) else ()
    if spatial and all(a <= g <= b for g, a, b in zip(spatial, lo, hi)) and min(lo) >= 1:
        return head + tuple(spatial)
    return head + tuple(lo)


@rule("Conv", "ConvInteger")
def _conv(check: LayerCheck) -> Expected:
    own = own_inputs(check)
    if own not in (2, 3, 4):
        raise check.fail(".inputs", f"{own} inputs of its own, Conv takes 2 or 3")
    w = check.x(1, (3, 2 + _MAX_SPATIAL))
    group = check.int_("group", 1, 1, 1 << 20)
    m, cg, *kernel = w.shape
    nd = len(kernel)
    kernel = check.ints("kernel_shape", nd, list(kernel), 1, 1 << 20)
    if list(w.shape[2:]) != kernel:
        raise check.fail(".attrs.kernel_shape", f"{kernel} is not the weight's {w.shape[2:]}")
    x_blocked, y_blocked = layouts(check)
    x = logical(check, check.x(0), x_blocked, cg * group, ".inputs[0]")
    if len(x) != nd + 2 or x[1] != cg * group or m % group:
        raise check.fail(".inputs[0]", f"input {x} does not fit weight {w.shape} in "
                         f"{group} groups")
    if check.layer.op == "Conv" and own >= 3 and check.ins[2] is not None:
        b = check.ins[2]
        check.need(b.shape in ((m,), (1, m)), 2, f"bias shape {b.shape} is not ({m},)")
    lo, hi = _window_sizes(check, x[2:], kernel)
    y = logical(check, check.outs[0], y_blocked, m, ".outputs[0]") if y_blocked \
        else check.outs[0].shape
    shape = _fits(check, y, lo, lo, (x[0], m))
    if min(lo) < 1:
        raise check.fail(".outputs[0]", f"output sizes {lo} are empty")
    result = blocked_shape(shape) if y_blocked else shape
    return with_epilogue(check, own, [(result, None)])


@rule("ConvTranspose")
def _conv_transpose(check: LayerCheck) -> Expected:
    own = own_inputs(check)
    w = check.x(1, (3, 2 + _MAX_SPATIAL))
    group = check.int_("group", 1, 1, 1 << 20)
    c, mg, *kernel = w.shape
    x = check.x(0, len(w.shape))
    if x.shape[1] != c or c % group:
        raise check.fail(".inputs[0]", f"input {x.shape} does not fit weight {w.shape}")
    lo, hi = _window_sizes(check, x.shape[2:], kernel, transposed=True)
    lo = [max(v, 1) for v in lo]
    if own >= 3 and check.ins[2] is not None:
        check.need(check.ins[2].shape == (mg * group,), 2, "bias does not match the channels")
    shape = _fits(check, check.outs[0].shape, lo, hi, (x.shape[0], mg * group))
    return with_epilogue(check, own, [(shape, None)])


def _matmul_shape(check: LayerCheck, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if not a or not b:
        raise check.fail(".inputs", "MatMul of a scalar")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise check.fail(".inputs[1]", f"inner dimensions of {a} and {b} differ")
    batch = broadcast(check, [a2[:-2], b2[:-2]], ".inputs")
    out = (*batch, a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


@rule("MatMul", "MatMulInteger")
def _matmul(check: LayerCheck) -> Expected:
    own = own_inputs(check) if check.layer.op == "MatMul" else len(check.ins)
    a, b = check.x(0, (1, 16)), check.x(1, (1, 16))
    return with_epilogue(check, own, [(_matmul_shape(check, a.shape, b.shape), None)])


@rule("Gemm")
def _gemm(check: LayerCheck) -> Expected:
    own = own_inputs(check)
    a, b = check.x(0, 2).shape, check.x(1, 2).shape
    if check.int_("transA", 0, 0, 1):
        a = a[::-1]
    if check.int_("transB", 0, 0, 1):
        b = b[::-1]
    if a[1] != b[0]:
        raise check.fail(".inputs[1]", f"inner dimensions of {a} and {b} differ")
    out = (a[0], b[1])
    c = check.opt(2) if own >= 3 else None
    if c is not None and broadcast(check, [c.shape, out], ".inputs[2]") != out:
        raise check.fail(".inputs[2]", f"C {c.shape} does not broadcast to {out}")
    return with_epilogue(check, own, [(out, None)])


@rule("MaxPool", "AveragePool", "LpPool")
def _pool(check: LayerCheck) -> Expected:
    check.arity(1, 1, (1, 2))
    kernel = check.ints("kernel_shape", None, None, 1, 1 << 20)
    check.choice("storage_order", (0, 1), 0)  # MaxPool's indices output reads it as an int
    x_blocked, y_blocked = layouts(check)
    x = check.x(0, len(kernel) + (3 if x_blocked else 2))
    channels = x.shape[1] * BLOCK if x_blocked else x.shape[1]
    xs = x.shape[:-1] if x_blocked else x.shape
    lo, hi = _window_sizes(check, xs[2:], kernel)
    if min(lo) < 1:
        raise check.fail(".outputs[0]", f"output sizes {lo} are empty")
    y = check.outs[0].shape[:-1] if y_blocked else check.outs[0].shape
    shape = _fits(check, y, lo, hi, (xs[0], xs[1]))
    main = (*shape, BLOCK) if y_blocked else shape
    del channels
    outs: list[tuple[tuple[int, ...], DType | None]] = [(main, None)]
    if len(check.outs) == 2:
        outs.append((shape, DType.INT64))
    return outs


@rule("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(check: LayerCheck) -> Expected:
    check.arity(1, 1)
    x = check.x(0, (3, 2 + _MAX_SPATIAL)).shape
    blocked = layouts(check)[0] and x[-1] == BLOCK
    if blocked:
        return [((x[0], x[1], *[1] * (len(x) - 3), BLOCK), None)]
    return [((x[0], x[1], *[1] * (len(x) - 2)), None)]


_REDUCE = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
           "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare")


@rule(*_REDUCE)
def _reduce(check: LayerCheck) -> Expected:
    check.arity(1, 1)
    x = check.x(0).shape
    axes = check.axes("axes", len(x))
    # the importer resolves ONNX's "no axes: all of them" into a list; [] reduces nothing
    keep = check.int_("keepdims", 1, 0, 1)
    shape = tuple(1 if i in axes else d for i, d in enumerate(x)) if keep \
        else tuple(d for i, d in enumerate(x) if i not in axes)
    return [(shape, None)]


@rule("ArgMax", "ArgMin")
def _arg(check: LayerCheck) -> Expected:
    check.arity(1, 1)
    x = check.x(0, (1, 16)).shape
    axis = check.axis("axis", len(x))
    if x[axis] == 0:
        raise check.fail(".inputs[0]", f"{check.layer.op} over an empty axis")
    keep = check.int_("keepdims", 1, 0, 1)
    shape = tuple(1 if i == axis else d for i, d in enumerate(x)) if keep \
        else tuple(d for i, d in enumerate(x) if i != axis)
    return [(shape, DType.INT64)]


@rule("Softmax", "LogSoftmax", "Hardmax")
def _softmax(check: LayerCheck) -> Expected:
    check.arity(1, 1)
    x = check.x(0, (1, 16))
    check.axes("axes", len(x.shape))
    return [(x.shape, x.dtype)]


@rule("LayerNormalization", "RMSNormalization")
def _layer_norm(check: LayerCheck) -> Expected:
    check.arity(1, 3, (1, 3))
    x = check.x(0, (1, 16)).shape
    axis = check.axis("axis", len(x), -1)
    norm = x[axis:]
    for k in (1, 2):
        t = check.opt(k)
        if t is not None and broadcast(check, [t.shape, norm], f".inputs[{k}]") != norm:
            raise check.fail(f".inputs[{k}]", f"{t.shape} does not broadcast to the "
                             f"normalized dims {norm}")
    stats = tuple(d if i < axis else 1 for i, d in enumerate(x))
    return [(x, None)] + [(stats, None)] * (len(check.outs) - 1)


@rule("BatchNormalization", "InstanceNormalization", "GroupNormalization", "LpNormalization",
      "LRN", "MeanVarianceNormalization")
def _same_as_input(check: LayerCheck) -> Expected:
    check.arity(1, 5)
    x = check.x(0, (1, 16)).shape
    if check.layer.op in ("BatchNormalization", "InstanceNormalization"):
        for k in range(1, len(check.ins)):
            t = check.x(k)
            check.need(len(x) >= 2 and t.shape == (x[1],), k,
                       f"{t.shape} is not one value per channel of {x}")
    return [(x, None)]


@rule("Resize")
def _resize(check: LayerCheck) -> Expected:
    check.arity(1, 4)
    x = check.x(0, (1, 8)).shape
    scales = check.attrs.get("scales")
    if (not isinstance(scales, list) or len(scales) != len(x)
            or any(isinstance(s, bool) or not isinstance(s, (int, float)) or not 0 < s < 1e6
                   for s in scales)):
        raise check.fail(".attrs.scales", f"{scales!r} is not {len(x)} positive scales")
    roi = check.attrs.get("roi")
    if (not isinstance(roi, list) or len(roi) != 2 * len(x)
            or any(isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r)
                   for r in roi)):
        raise check.fail(".attrs.roi", f"{roi!r} is not {2 * len(x)} finite numbers")
    check.choice("mode", ("nearest", "linear", "cubic"))
    y = check.outs[0].shape
    if len(y) != len(x) or any(d < 1 or o < 1 for d, o in zip(x, y)):
        raise check.fail(".outputs[0]", f"{y} is not a resize of {x}")
    # sizes may come rounded from the model's ``sizes`` input: a scale is output / input
    # within rounding; the kernels index by the output shape and clamp into the input.
    for i, (d, o, s) in enumerate(zip(x, y, scales)):
        if abs(o - d * s) > max(1.0, 1e-6 * o) and abs(o / d - s) > 1e-6:
            raise check.fail(".outputs[0]", f"dim {i}: {o} is not {d} scaled by {s}")
    return [(y, check.x(0).dtype)]


@rule("Reorder")
def _reorder(check: LayerCheck) -> Expected:
    check.arity(1, 1)
    to = check.choice("to", ("nchw", "nchw16c"))
    c = check.int_("channels", None, 1, 1 << 30)
    x = check.x(0, (3, 9))
    if to == "nchw16c":
        if x.shape[1] != c:
            raise check.fail(".inputs[0]", f"{x.shape} does not have {c} channels")
        return [(blocked_shape(x.shape), x.dtype)]
    planar = logical(check, x, True, c, ".inputs[0]")
    return [(planar, x.dtype)]


@rule("LSTM", "GRU", "RNN")
def _recurrent(check: LayerCheck) -> Expected:
    check.arity(3, 8, (1, 3))
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[check.layer.op]
    layout = check.int_("layout", 0, 0, 1)
    x = check.x(0, 3).shape
    w, r = check.x(1, 3).shape, check.x(2, 3).shape
    dirs, hidden = w[0], r[2]
    seq, batch = (x[1], x[0]) if layout else (x[0], x[1])
    if dirs not in (1, 2) or w != (dirs, gates * hidden, x[2]) \
            or r != (dirs, gates * hidden, hidden):
        raise check.fail(".inputs[1]", f"W {w} and R {r} do not fit input {x}")
    b = check.opt(3)
    if b is not None:
        check.need(b.shape == (dirs, 2 * gates * hidden), 3, f"B {b.shape} does not fit")
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    for k in (5, 6):
        t = check.opt(k)
        if t is not None:
            check.need(t.shape == state, k, f"initial state {t.shape} is not {state}")
    y = (batch, seq, dirs, hidden) if layout else (seq, dirs, batch, hidden)
    return [(y, None), (state, None), (state, None)][:len(check.outs)]
