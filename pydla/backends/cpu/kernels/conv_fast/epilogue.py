"""Pointwise epilogues run inside the fast convolution kernels (pydla.backends.cpu.fused has
the program format).

A program is compiled at bind time into a table of steps: opcode, two operand registers and
two float parameters. Kernels call ``run_epilogue`` on each block of rows they finish while
it is still in cache: register 0 is the block (convolution + bias) in the kernel's staging
buffer, registers 1…k the layer's extra inputs — either full-shape tensors (at most two, a
residual) or one value per (image, channel) (a bias, a scale, a scalar) — and each step
writes a scratch row; the last one writes the layer's output. Every step is one loop over
the row that LLVM vectorizes, so the staging buffer must never be the output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from pydla.backends.base import LayerSpec
from pydla.backends.cpu import workspace
from pydla.backends.cpu.kernels.conv_fast.simd import fill

# Opcodes. Unary ops read operand a; binary ops read a and b.
RELU, CLIP, LEAKY_RELU, SIGMOID, HARD_SIGMOID, HARD_SWISH, SWISH = 1, 2, 3, 4, 5, 6, 7
NEG = 8  # a CQT front end negates its imaginary-part filters' output
ADD, SUB, MUL, DIV, MAX, MIN, PRELU = 20, 21, 22, 23, 24, 25, 26
# Operand kinds.
ACC, FULL0, FULL1, VEC, STEP = 0, 1, 2, 3, 4
MAX_STEPS = 16
# A short epilogue that the blocked micro-kernels apply as they store the output
# (fused_epilogue; gemm._final_epilogue): FIN_OUT stores into the output; FIN_RES adds a
# full-shape register, FIN_CLAMP clamps, then HardSwish or x·sigmoid(x), then
# FIN_RES_AFTER adds the register.
FIN_OUT, FIN_RES, FIN_RES_AFTER, FIN_HSWISH, FIN_SILU, FIN_CLAMP = 1, 2, 4, 8, 16, 32

_UNARY = {"Relu": RELU, "Clip": CLIP, "LeakyRelu": LEAKY_RELU, "Sigmoid": SIGMOID,
          "HardSigmoid": HARD_SIGMOID, "HardSwish": HARD_SWISH, "Swish": SWISH, "Neg": NEG}
_BINARY = {"Add": ADD, "Sub": SUB, "Mul": MUL, "Div": DIV, "Max": MAX, "Min": MIN,
           "PRelu": PRELU}
_FLOATS = ("float32", "float16", "bfloat16")

_F0, _F1, _HALF, _SIXTH = np.float32(0), np.float32(1), np.float32(0.5), np.float32(1 / 6)
# Cephes expf: exp(x) = 2^n · p(r), r = x - n·ln2 split in two parts; ≈ 1 ulp.
_EXP_HI, _EXP_LO = np.float32(88.3762626647949), np.float32(-88.3762626647949)
_LOG2E, _LN2_HI, _LN2_LO = np.float32(1.44269504088896341), np.float32(0.693359375), \
    np.float32(-2.12194440e-4)
_P0, _P1, _P2 = np.float32(1.9875691500e-4), np.float32(1.3981999507e-3), \
    np.float32(8.3334519073e-3)
_P3, _P4, _P5 = np.float32(4.1665795894e-2), np.float32(1.6666665459e-1), \
    np.float32(5.0000001201e-1)
_BIAS, _MANTISSA = np.float32(127), np.float32(1 << 23)  # float32 exponent bias, 2^23
# The same constants for gemm._exp, which computes exp32 on vectors of registers.
EXP_HI, EXP_LO, LOG2E, LN2_HI, LN2_LO = _EXP_HI, _EXP_LO, _LOG2E, _LN2_HI, _LN2_LO
EXP_P = (_P0, _P1, _P2, _P3, _P4, _P5)


@intrinsic
def _float_from_bits(typingctx, bits):  # type: ignore[no-untyped-def]
    """The float32 whose bit pattern is the int32 ``bits``."""
    if bits != types.int32:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@njit(inline="always")
def exp32(x: float) -> float:
    """float32 exp in plain arithmetic: unlike libm's expf, LLVM vectorizes it."""
    x = min(max(x, _EXP_LO), _EXP_HI)
    n = np.floor(x * _LOG2E + _HALF)
    r = x - n * _LN2_HI
    r = r - n * _LN2_LO
    p = ((((_P0 * r + _P1) * r + _P2) * r + _P3) * r + _P4) * r + _P5
    p = p * (r * r) + r + _F1
    # 2^n from its exponent bits; computed in float32 so that the loop stays 32-bit wide.
    return p * _float_from_bits(np.int32((n + _BIAS) * _MANTISSA))


@njit(inline="always", error_model="numpy")
def _unary(op: int, a: np.ndarray, d: np.ndarray, p0: np.float32, p1: np.float32) -> None:
    # One loop per op over 1-D views: branch-free bodies with no index arithmetic, which is
    # what LLVM vectorizes (error_model="numpy": no zero-division check in the loop).
    n = d.shape[0]
    if op == RELU:
        for i in range(n):
            x = a[i]
            d[i] = _F0 if x < _F0 else x  # NaN stays NaN, as in the reference
    elif op == CLIP:
        for i in range(n):
            x = a[i]
            x = p0 if x < p0 else x
            d[i] = p1 if x > p1 else x
    elif op == LEAKY_RELU:
        for i in range(n):
            x = a[i]
            d[i] = x if x >= _F0 else x * p0
    elif op == SIGMOID:
        for i in range(n):
            d[i] = _F1 / (_F1 + exp32(-a[i]))
    elif op == SWISH:
        for i in range(n):
            x = a[i]
            d[i] = x * (_F1 / (_F1 + exp32(-(x * p0))))
    elif op == HARD_SIGMOID:
        for i in range(n):
            x = a[i] * p0 + p1
            x = _F0 if x < _F0 else x
            d[i] = _F1 if x > _F1 else x
    elif op == NEG:
        for i in range(n):
            d[i] = -a[i]
    elif op == HARD_SWISH:
        for i in range(n):
            x = a[i]
            h = x * _SIXTH + _HALF
            h = _F0 if h < _F0 else h
            h = _F1 if h > _F1 else h
            d[i] = h * x


@njit(inline="always", error_model="numpy")
def _binary(op: int, a: np.ndarray, b: np.ndarray, d: np.ndarray) -> None:
    n = d.shape[0]
    if op == ADD:
        for i in range(n):
            d[i] = a[i] + b[i]
    elif op == SUB:
        for i in range(n):
            d[i] = a[i] - b[i]
    elif op == MUL:
        for i in range(n):
            d[i] = a[i] * b[i]
    elif op == DIV:
        for i in range(n):
            d[i] = a[i] / b[i]
    elif op == MAX:
        for i in range(n):
            x, y = a[i], b[i]
            d[i] = x if x >= y or x != x else y
    elif op == MIN:
        for i in range(n):
            x, y = a[i], b[i]
            d[i] = x if x <= y or x != x else y
    elif op == PRELU:
        for i in range(n):
            x = a[i]
            d[i] = x if x >= _F0 else x * b[i]


@njit(inline="always")
def _operand(kind: int, index: int, spare: int, acc: np.ndarray, yr: int, yo: int, n: int,
             full0: np.ndarray, full1: np.ndarray, vecs: np.ndarray,
             scratch: np.ndarray) -> np.ndarray:
    """A register's values for this block, as a 1-D view."""
    if kind == ACC:
        return acc
    if kind == FULL0:
        return full0[yr, yo:yo + n]
    if kind == FULL1:
        return full1[yr, yo:yo + n]
    if kind == STEP:
        return scratch[index, :n]
    row = scratch[spare, :n]  # one value per (image, channel): spread over a spare row
    fill(row, vecs[index, yr])
    return row


@njit(inline="always")
def run_epilogue(acc: np.ndarray, y: np.ndarray, yr: int, yo: int, code: np.ndarray,
                 prm: np.ndarray, full0: np.ndarray, full1: np.ndarray, vecs: np.ndarray,
                 scratch: np.ndarray) -> None:
    """y[yr, yo:yo+n] = program(acc), acc a 1-D block of n values (never a view of y);
    rows of y, full0 and full1 are image·channels + channel, vecs is (registers, rows)."""
    _program(acc, y[yr, yo:yo + acc.shape[0]], np.int64(yr), np.int64(yo), code, prm, full0,
             full1, vecs, scratch)


@njit(inline="always")
def run_epilogue_to(acc: np.ndarray, out: np.ndarray, yr: int, yo: int, code: np.ndarray,
                    prm: np.ndarray, full0: np.ndarray, full1: np.ndarray, vecs: np.ndarray,
                    scratch: np.ndarray) -> None:
    """``run_epilogue`` with the result in ``out`` (n values; it may be scratch row
    steps - 1, which the last step does not read) instead of y's run at (yr, yo)."""
    _program(acc, out, np.int64(yr), np.int64(yo), code, prm, full0, full1, vecs, scratch)


# The interpreter itself, compiled once per process for all the kernels that call it
# (numba's cache keeps it): its callers pass row indices as literals, prange's unsigned
# index or int64, each a signature of its own — compiled again, 3-8 s each — unless cast
# to int64 first, as the two fronts above do.
@njit(cache=True, error_model="numpy")
def _program(acc: np.ndarray, out: np.ndarray, yr: int, yo: int, code: np.ndarray,
             prm: np.ndarray, full0: np.ndarray, full1: np.ndarray, vecs: np.ndarray,
             scratch: np.ndarray) -> None:
    n = acc.shape[0]
    steps = code.shape[0]
    spare = steps  # rows steps and steps+1 of scratch hold broadcast operands
    for s in range(steps):
        op = code[s, 0]
        a = _operand(code[s, 1], code[s, 2], spare, acc, yr, yo, n, full0, full1, vecs, scratch)
        d = out if s == steps - 1 else scratch[s, :n]
        if op < ADD:
            _unary(op, a, d, prm[s, 0], prm[s, 1])
        else:
            b = _operand(code[s, 3], code[s, 4], spare + 1, acc, yr, yo, n, full0, full1,
                         vecs, scratch)
            _binary(op, a, b, d)


# -- bind time --------------------------------------------------------------------------

def native_epilogue(program: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the fast kernels run this program themselves (else the generic path does)."""
    if not program or len(program) > MAX_STEPS:
        return False
    shape = list(program[-1]["shape"])
    for step in program:
        op, regs = step["op"], step["in"]
        if list(step["shape"]) != shape or step["dtype"] not in _FLOATS:
            return False  # a step on extra inputs alone, or a non-float result
        if op in _UNARY:
            if len(regs) != 1:
                return False  # Clip with bounds as tensors
        elif op in _BINARY:
            if len(regs) != 2:
                return False
        else:
            return False
    return True


def _step_params(step: Mapping[str, Any]) -> tuple[float, float]:
    attrs = step.get("attrs", {})
    op = step["op"]
    if op == "Clip":
        lo, hi = attrs.get("min"), attrs.get("max")
        return (-np.inf if lo is None else float(lo)), (np.inf if hi is None else float(hi))
    if op == "LeakyRelu":
        return float(attrs.get("alpha", 0.01)), 0.0
    if op == "HardSigmoid":
        return float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5))
    if op == "Swish":
        return float(attrs.get("alpha", 1.0)), 0.0
    return 0.0, 0.0


@dataclass(frozen=True)
class Epilogue:
    """A compiled program and where its registers come from."""

    code: np.ndarray           # (steps, 5) int64: op, kind a, index a, kind b, index b
    prm: np.ndarray            # (steps, 2) float32
    full: tuple[int, ...]      # layer input positions of the full-shape registers
    vec: tuple[tuple[int, tuple[int, int]], ...]  # (input position, (images, channels))

    @property
    def steps(self) -> int:
        return int(self.code.shape[0])


NONE = Epilogue(np.zeros((0, 5), np.int64), np.zeros((0, 2), np.float32), (), ())


def _classify(shape: Sequence[int], out: Sequence[int]) -> tuple[int, int] | str | None:
    """'full', (images, channels) for a per-(image, channel) value, or None."""
    if len(shape) > len(out):
        return None
    padded = (1,) * (len(out) - len(shape)) + tuple(shape)
    if padded == tuple(out):
        return "full"
    if any(d != 1 for d in padded[2:]):
        return None
    if padded[0] not in (1, out[0]) or padded[1] not in (1, out[1]):
        return None
    return padded[0], padded[1]


def compile_epilogue(spec: LayerSpec) -> Epilogue | None:
    """The layer's epilogue for the fast kernels; NONE without one, None when its extra
    inputs broadcast in a way the kernels do not handle (the generic path runs it)."""
    epi = spec.attrs.get("epilogue")
    if epi is None:
        return NONE
    program = epi["program"]
    if not native_epilogue(program):
        return None
    k = int(epi["inputs"])
    out = spec.outputs[0].shape
    first = len(spec.inputs) - k
    kinds: list[tuple[int, int]] = [(ACC, 0)]
    full: list[int] = []
    vec: list[tuple[int, tuple[int, int]]] = []
    for pos in range(first, len(spec.inputs)):
        s = spec.inputs[pos]
        cls = None if s is None else _classify(s.shape, out)
        if cls is None:
            return None
        if cls == "full":
            if len(full) == 2:
                return None
            kinds.append((FULL0 + len(full), 0))
            full.append(pos)
        else:
            kinds.append((VEC, len(vec)))
            vec.append((pos, cls))  # type: ignore[arg-type]
    code = np.zeros((len(program), 5), np.int64)
    prm = np.zeros((len(program), 2), np.float32)
    for i, step in enumerate(program):
        regs = [int(r) for r in step["in"]]
        if any(not 0 <= r < len(kinds) for r in regs):
            return None
        code[i, 0] = _UNARY.get(step["op"]) or _BINARY[step["op"]]
        code[i, 1:3] = kinds[regs[0]]
        if len(regs) > 1:
            code[i, 3:5] = kinds[regs[1]]
        prm[i] = _step_params(step)
        kinds.append((STEP, i))
    return Epilogue(code, prm, tuple(full), tuple(vec))


def fused_epilogue(epi: Epilogue) -> tuple[int, float, float] | None:
    """(flags, lo, hi) where the program is one the micro-kernel applies as it stores
    (gemm._final_epilogue): [Add of the block and its first full-shape register], then
    [Relu or Clip], or [HardSwish], or [Sigmoid, Mul: x·sigmoid(x)] then [Add of the
    register] — every part optional; else None (the interpreter runs it). The
    micro-kernel computes the interpreter's float operations in the same order: a 1×1
    layer's output no longer goes through the stage and a second pass (ResNet-50's
    64->256 at 56×56 with its residual spent a quarter of its time there)."""
    flags, lo, hi = FIN_OUT, -np.inf, np.inf
    steps = [tuple(int(v) for v in row) for row in epi.code]
    at = 0  # the step whose result the next one must read
    source = (ACC, 0)

    def adds_register(step: tuple[int, ...], value: tuple[int, int]) -> bool:
        return step[0] == ADD and sorted([step[1:3], step[3:5]]) == sorted([value, (FULL0, 0)])

    if steps and adds_register(steps[0], source):
        flags |= FIN_RES
        steps, source, at = steps[1:], (STEP, 0), 1
    if not steps:
        return flags, lo, hi
    op, kind, index = steps[0][:3]
    if (kind, index) != source:
        return None
    if op in (RELU, CLIP):
        lo, hi = (0.0, np.inf) if op == RELU else (float(epi.prm[at, 0]), float(epi.prm[at, 1]))
        return (flags | FIN_CLAMP, lo, hi) if len(steps) == 1 else None
    if flags & FIN_RES:
        return None  # an activation of the sum: not a pattern of our models
    if op == HARD_SWISH:
        flags |= FIN_HSWISH
        steps, at = steps[1:], at + 1
    elif (op == SIGMOID and len(steps) > 1 and steps[1][0] == MUL
          and sorted([steps[1][1:3], steps[1][3:5]]) == [(ACC, 0), (STEP, at)]):
        flags |= FIN_SILU
        steps, at = steps[2:], at + 2
    else:
        return None
    if steps and adds_register(steps[0], (STEP, at - 1)):
        flags |= FIN_RES_AFTER
        steps = steps[1:]
    return (flags, lo, hi) if not steps else None


class FusedStore:
    """A blocked kernel's fused store, chosen at bind time: the program's fused form
    (fused_epilogue; None where the output streams around the caches or the program does
    not qualify) and its clamp as the kernels read it."""

    def __init__(self, epi: Epilogue, enabled: bool) -> None:
        self.short = fused_epilogue(epi) if enabled else None
        self.lohi = np.array(self.short[1:] if self.short else (-np.inf, np.inf), np.float32)

    def at(self, y: np.ndarray, full0: np.ndarray) -> tuple[int, int]:
        """The kernel's (fused, res) arguments for this output and residual (fuse_at)."""
        return fuse_at(self.short, y, full0)


def fuse_at(short: tuple[int, float, float] | None, y: np.ndarray,
            full0: np.ndarray) -> tuple[int, int]:
    """(flags, bytes from y to the residual) for a fused epilogue on this output, or (0, 0)
    where none applies: the residual must have y's shape and strides (its offset is one
    constant for every vector) and not overlap y — but for being y itself (an in-place
    Add: each vector is read just before it is stored over) where it is added before
    the activation; else the interpreter reads it."""
    if short is None:
        return 0, 0
    flags = short[0]
    if not flags & (FIN_RES | FIN_RES_AFTER):
        return flags, 0
    if full0.shape != y.shape or full0.strides != y.strides:
        return 0, 0
    delta = full0.ctypes.data - y.ctypes.data
    if abs(delta) < y.nbytes and (delta or flags & FIN_RES_AFTER):
        return 0, 0
    return flags, delta


_DUMMY = np.zeros((1, 1), np.float32)


class EpilogueArgs:
    """The arguments an epilogue reads besides its block: full-shape registers as
    (N·C, H·W) row views, and the per-(image, channel) values gathered into one table."""

    def __init__(self, epi: Epilogue, out_shape: Sequence[int], threads: int, rows: int) -> None:
        self.epi = epi
        n, c = int(out_shape[0]), int(out_shape[1])
        self.nc = n * c
        self.pixels = int(np.prod(out_shape[2:], dtype=np.int64))
        self.vecs = np.zeros((max(1, len(epi.vec)), self.nc), np.float32)
        self._vec_views = [(pos, self.vecs[j].reshape(n, c), shape)
                           for j, (pos, shape) in enumerate(epi.vec)]
        # Scratch per thread: one row per step result and two for broadcast operands
        # (``.array`` when the layer is prebound: the program's workspace).
        self.scratch = workspace.scratch((threads, epi.steps + 2, max(1, rows)))

    def fulls(self, inputs: Sequence[np.ndarray | None]) -> tuple[np.ndarray, np.ndarray]:
        """(full0, full1): views of this layer's full-shape registers (dummies if unused)."""
        fulls = [self._rows(inputs[pos]) for pos in self.epi.full]
        fulls += [_DUMMY] * (2 - len(fulls))
        return fulls[0], fulls[1]

    def gather(self, inputs: Sequence[np.ndarray | None], changing_only: bool = False) -> None:
        """Copy the per-(image, channel) registers into the table; with ``changing_only``,
        only those that can change between runs (read-only arrays are weights)."""
        for pos, view, shape in self._vec_views:
            x = inputs[pos]
            assert x is not None
            if not changing_only or x.flags.writeable:
                np.copyto(view, x.reshape(shape), casting="unsafe")

    def changing(self, inputs: Sequence[np.ndarray | None]) -> bool:
        """Whether ``gather(inputs, changing_only=True)`` has anything to do."""
        return any(inputs[pos] is not None and inputs[pos].flags.writeable  # type: ignore[union-attr]
                   for pos, _, _ in self._vec_views)

    def _rows(self, x: np.ndarray | None) -> np.ndarray:
        assert x is not None
        rows = x.reshape(self.nc, self.pixels)
        if not rows.flags.writeable:
            # One kernel signature for every register: writable float32 rows. A read-only
            # array is a weight, so a copy of it stays valid.
            rows = np.array(rows, np.float32)
        return rows
