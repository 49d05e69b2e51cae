"""Gemm and MatMul split across the engine's threads, epilogue fused: on BLAS (tactic
``blas``) or, with one weight matrix, on pydla's own GEMM with the weights packed once
(tactic ``packed``).

BLAS runs single-threaded while pydla runs (pydla.backends.cpu.threads), so the product is
cut into blocks — batches, then rows, or columns when there are few rows — and each numba
thread calls ``sgemm`` on its blocks. A product with a few rows (a batch-1 fully connected
layer is one) runs fast_gemv's loops instead: sgemm would pack all of B on every call.

Gemm's bias (beta·C, any broadcast) and the layer's pointwise epilogue (activation,
residual, attention scale and mask…) become one compiled pointwise program
(fast_pointwise.compile_epilogue), run in place on each block of the output by the thread
that computed it, while the block is in cache (``driver_source``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from pydla.backends.base import LayerSpec, RunFn, TensorSpec
from pydla.backends.cpu import threads
from pydla.backends.cpu.fork import fork_call
from pydla.backends.cpu.kernels import fast_gemv
from pydla.backends.cpu.kernels.conv_fast import gemm as packed_gemm
from pydla.backends.cpu.kernels.conv_fast.binding import Derived
from pydla.backends.cpu.kernels.conv_fast.blas import AVAILABLE, sgemm
from pydla.backends.cpu.kernels.conv_fast.gemm import MR, NR, gemm_rows, pack_b
from pydla.backends.cpu.kernels.conv_fast.simd import copy_bytes
from pydla.backends.cpu.kernels.fast_gemv import MAX_ROWS, axpy_rows, dot_rows
from pydla.backends.cpu.kernels.fast_math import FASTMATH_REDUCE
from pydla.backends.cpu.kernels.fast_pointwise import CompiledProgram, compile_epilogue
from pydla.backends.cpu.kernels.fast_pointwise_ops import FLOAT_OPS
from pydla.backends.cpu.registry import tactic
from pydla.backends.cpu.steps import Fixed, PreboundKernel, chain
from pydla.backends.cpu.workspace import aligned_zeros
from pydla.dtypes import DType

Thunk = Callable[[], None]

# Below this many multiply-adds (≈ 10 µs on one thread) one thread does the product: a
# parallel region costs microseconds to start, and more on a busy machine.
PARALLEL_MIN = 1 << 20
GEMV_PARALLEL_MIN = 1 << 16  # elements of B (256 KiB) for the few-row loops
_FLOATS = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)
# geo layout: [trans_a, trans_b, m, n, k, lda, ldb, ldc, rows, cols, batches, mode,
# offsets…]; mode 0: sgemm per block, DOT/AXPY: fast_gemv's loops for a few rows of A.
_HEADER = 12
SGEMM, DOT, AXPY, PACKED = 0, 1, 2, 3
# Generated drivers inline this file's block functions: their names carry its hash.
SOURCE_HASH = hashlib.sha256(b"".join(
    open(f, "rb").read() for f in (__file__, fast_gemv.__file__, packed_gemm.__file__))
).hexdigest()[:16]

# Batched products keep one (A, B, C) offset triple per batch; beyond this many the
# reference kernel runs them (no real model comes near; a malformed one can ask for 2**40).
_MAX_BATCHES = 1 << 20


@njit(inline="always", cache=True)
def block_coords(task: int, geo: np.ndarray) -> tuple[int, int, int, int, int]:
    """(batch, first row, end row, first column, end column) of a task's block of C."""
    m, n, rows, cols = geo[2], geo[3], geo[8], geo[9]
    rb, cb = (m + rows - 1) // rows, (n + cols - 1) // cols
    r0 = (task // cb) % rb * rows
    c0 = task % cb * cols
    return task // (rb * cb), r0, min(m, r0 + rows), c0, min(n, c0 + cols)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def product_block(task: int, a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: float,
                  mode: int, geo: np.ndarray) -> None:
    """``mode`` (geo[11]) is a literal where the caller is compiled for one
    (``bind_blas``): only that branch is compiled. With all four, ResNet-50's classifier
    (a row of dot products) compiled the packed GEMM's micro-kernels too."""
    ta, tb, k = geo[0], geo[1], geo[4]
    lda, ldb, ldc = geo[5], geo[6], geo[7]
    batch, r0, r1, c0, c1 = block_coords(task, geo)
    o = _HEADER + 3 * batch
    if mode == DOT:
        dot_rows(b, geo[o + 1], ldb, a, geo[o] + r0 * lda, lda, c, geo[o + 2] + r0 * ldc, ldc,
                 r1 - r0, c0, c1, k, alpha)
        return
    if mode == AXPY:
        axpy_rows(b, geo[o + 1], ldb, a, geo[o] + r0 * lda, lda, c, geo[o + 2] + r0 * ldc,
                  ldc, r1 - r0, c0, c1, k, alpha)
        return
    if mode == PACKED:
        _packed_block(a, geo[o] + r0 * lda, lda, geo[2] - r0, r1 - r0, b, c0, c1, k, c,
                      geo[o + 2] + r0 * ldc + c0, ldc, alpha)
        return
    # Element offsets of the block's first row/column in op(A), op(B) and C.
    a_at = geo[o] + (r0 if ta else r0 * lda)
    b_at = geo[o + 1] + (c0 * ldb if tb else c0)
    c_at = geo[o + 2] + r0 * ldc + c0
    sgemm(ta, tb, r1 - r0, c1 - c0, k, alpha, a.ctypes.data + 4 * a_at, lda,
          b.ctypes.data + 4 * b_at, ldb, np.float32(0), c.ctypes.data + 4 * c_at, ldc)


@njit(inline="always", error_model="numpy")
def _packed_block(a: np.ndarray, a_at: int, lda: int, left: int, rows: int, bp: np.ndarray,
                  c0: int, c1: int, k: int, c: np.ndarray, c_at: int, ldc: int,
                  alpha: float) -> None:
    """C block (rows × c1 - c0, from element c_at) = alpha · A rows (from a_at, ``left``
    rows up to A's end) · B columns c0…c1, B packed in NR-column panels (c0 a multiple of
    NR). The micro-kernel reads whole MR-row panels: a last panel that would read past A's
    end goes through a zero-padded copy."""
    edge = np.empty(MR * NR, np.float32)
    bs = bp[c0 * k:]  # the block's first panel
    whole = rows if -(-rows // MR) * MR <= left else rows // MR * MR
    if whole:
        gemm_rows(whole, c1 - c0, k, a.ctypes.data + a_at * 4, lda, bs, c, c_at, ldc, edge)
    if whole < rows:
        stage = np.zeros(MR * k, np.float32)
        for r in range(rows - whole):
            copy_bytes(stage.ctypes.data + r * k * 4,
                       a.ctypes.data + (a_at + (whole + r) * lda) * 4, k * 4)
        gemm_rows(rows - whole, c1 - c0, k, stage.ctypes.data, k, bs, c, c_at + whole * ldc,
                  ldc, edge)
    if alpha != 1:
        for r in range(rows):
            row = c[c_at + r * ldc:c_at + r * ldc + c1 - c0]
            row *= alpha


@njit(cache=True, nogil=True, error_model="numpy", fastmath=FASTMATH_REDUCE)
def gemm_task(t: int, nthreads: int, a: np.ndarray, b: np.ndarray, c: np.ndarray,
              alpha: float, mode: int, geo: np.ndarray) -> None:
    """Thread t's run of blocks (fork.fork_call; t = 0 of 1: the whole product)."""
    tasks = geo[10] * ((geo[2] + geo[8] - 1) // geo[8]) * ((geo[3] + geo[9] - 1) // geo[9])
    per = -(-tasks // nthreads)
    for task in range(t * per, min(tasks, (t + 1) * per)):
        product_block(task, a, b, c, alpha, mode, geo)


def driver_source(extras: int) -> str:
    """``product_task(t, nthreads, a, b, c, alpha, mode, ggeo, e1…ek, pgeo)``: thread t's
    run of blocks of the product (as gemm_task) with its epilogue (the generated module's
    ``run_range_inplace``) applied to each block while it is in cache, row segment by row
    segment."""
    regs = "".join(f", e{i}" for i in range(1, extras + 1))
    lines = [f"# product driver; matmul {SOURCE_HASH}",
             "from pydla.backends.cpu.kernels.fast_matmul import block_coords, product_block",
             "from pydla.backends.cpu.kernels.fast_math import FASTMATH_REDUCE",
             "", "",
             "@njit(cache=True, nogil=True, error_model='numpy', fastmath=FASTMATH_REDUCE)",
             f"def product_task(t, nthreads, a, b, c, alpha, mode, ggeo{regs}, pgeo):",
             "    tasks = ggeo[10] * ((ggeo[2] + ggeo[8] - 1) // ggeo[8]) * "
             "((ggeo[3] + ggeo[9] - 1) // ggeo[9])",
             "    per = -(-tasks // nthreads)",
             "    for task in range(t * per, min(tasks, (t + 1) * per)):",
             "        product_block(task, a, b, c, alpha, mode, ggeo)",
             "        batch, r0, r1, c0, c1 = block_coords(task, ggeo)",
             f"        base = ggeo[{_HEADER} + 3 * batch + 2] + c0",
             "        if c1 - c0 == ggeo[7]:  # whole rows: one contiguous range",
             f"            run_range_inplace(c{regs}, pgeo, base + r0 * ggeo[7], "
             "base + r1 * ggeo[7])",
             "        else:",
             "            for r in range(r0, r1):",
             "                lo = base + r * ggeo[7]",
             f"                run_range_inplace(c{regs}, pgeo, lo, lo + c1 - c0)"]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Product:
    """C[batch] (m × n) = alpha · op(A[batch]) · op(B[batch]), row-major."""

    trans_a: bool
    trans_b: bool
    m: int
    n: int
    k: int
    offsets: tuple[tuple[int, int, int], ...]  # per batch: elements into A, B and C
    alpha: float = 1.0

    def geo(self, nthreads: int, packed: bool = False) -> tuple[np.ndarray, bool]:
        """The kernel's int64 argument and whether to run it in parallel; ``packed``: B is
        in micro-kernel panels (blocks then of whole panels)."""
        m, n, k, batches = self.m, self.n, self.k, len(self.offsets)
        parallel = nthreads > 1 and m * n * k * batches >= PARALLEL_MIN
        mode = PACKED if packed else SGEMM
        if m <= MAX_ROWS and not self.trans_a and not packed:
            mode = DOT if self.trans_b else AXPY
            # A few rows stream all of B: memory-bound, so split once B is large (a
            # classifier's 1024×1000 weights, 4 MB, took 0.09 ms on one thread, 0.05 on two).
            parallel = nthreads > 1 and n * k * batches >= GEMV_PARALLEL_MIN
        rows, cols = m, n
        if parallel and mode in (DOT, AXPY):
            cols = -(-n // (-(-2 * nthreads // batches)))
            cols = -(-cols // 16) * 16
        elif parallel and batches < 2 * nthreads:
            parts = -(-2 * nthreads // batches)
            # Every block packs its rows of A and its columns of B: cut the larger side,
            # so that the copies add up to little more than one of each.
            if m >= n:
                rows = max(1, -(-m // parts))
                step = MR if packed else 8
                rows = -(-rows // step) * step if rows > step else rows
            else:
                cols = -(-n // parts)
                cols = -(-cols // (NR if packed else 16)) * (NR if packed else 16)
        lda = m if self.trans_a else k
        ldb = k if self.trans_b else n
        header = [int(self.trans_a), int(self.trans_b), m, n, k, lda, ldb, n, rows, cols,
                  batches, mode]
        flat = [v for off in self.offsets for v in off]
        return np.array(header + flat, np.int64), parallel


def _gemm_product(spec: LayerSpec) -> Product | None:
    a, b = spec.inputs[0], spec.inputs[1]
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
        return None
    ta, tb = bool(spec.attrs.get("transA", 0)), bool(spec.attrs.get("transB", 0))
    m, k = (a.shape[1], a.shape[0]) if ta else a.shape
    k2, n = (b.shape[1], b.shape[0]) if tb else b.shape
    if k != k2 or spec.outputs[0].shape != (m, n):
        return None
    return Product(ta, tb, m, n, k, ((0, 0, 0),), float(spec.attrs.get("alpha", 1.0)))


def _matmul_product(spec: LayerSpec) -> Product | None:
    a, b = spec.inputs[0], spec.inputs[1]
    if a is None or b is None or len(a.shape) < 2 or len(b.shape) < 2:
        return None
    (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
    out = spec.outputs[0].shape
    if k != k2 or out[-2:] != (m, n):
        return None
    batch = out[:-2]
    if math.prod(out) == 0 or math.prod(batch) > _MAX_BATCHES:
        return None  # nothing to compute, or a per-batch offset table too large to build
    if math.prod(b.shape[:-2]) == 1:  # one weight matrix: A's batches are more rows
        rows = math.prod(a.shape[:-1])
        if math.prod(batch) * m != rows:
            return None
        return Product(False, False, rows, n, k, ((0, 0, 0),))
    # Per output batch, which batch of A and B it reads (numpy's broadcasting).
    ia = np.broadcast_to(np.arange(math.prod(a.shape[:-2])).reshape(a.shape[:-2]), batch)
    ib = np.broadcast_to(np.arange(math.prod(b.shape[:-2])).reshape(b.shape[:-2]), batch)
    offsets = tuple((int(i) * m * k, int(j) * k * n, c * m * n)
                    for c, (i, j) in enumerate(zip(ia.ravel(), ib.ravel())))
    return Product(False, False, m, n, k, offsets)


def _own_inputs(spec: LayerSpec) -> int:
    epi = spec.attrs.get("epilogue")
    return len(spec.inputs) - (int(epi["inputs"]) if epi else 0)


BETA = -1  # a program register holding Gemm's beta (not a layer input)


def _program(spec: LayerSpec) -> tuple[list[dict[str, Any]], list[int]] | None:
    """The pointwise work after the product as one program over registers [y, sources…]:
    (steps, the layer input of each register after y, or BETA). None: there is none.

    Gemm's C and beta come first: registers [y, C, epilogue extras…, beta?], steps
    [C·beta?, y + …, epilogue…] with the epilogue reading the biased value where it read y.
    """
    n_own = _own_inputs(spec)
    epi = spec.attrs.get("epilogue")
    steps: list[dict[str, Any]] = list(epi["program"]) if epi else []
    extras = list(range(n_own, len(spec.inputs)))
    beta = float(spec.attrs.get("beta", 1.0))
    c = spec.inputs[2] if spec.op == "Gemm" and n_own >= 3 else None
    if c is None or beta == 0.0:
        return (steps, extras) if steps else None
    sources = [2, *extras] + ([BETA] if beta != 1.0 else [])
    n_in = 1 + len(sources)
    shape = list(spec.outputs[0].shape)
    pre: list[dict[str, Any]] = []
    if beta != 1.0:
        pre.append({"op": "Mul", "in": [1, n_in - 1], "attrs": {}, "shape": list(c.shape),
                    "dtype": "float32"})
    pre.append({"op": "Add", "in": [0, n_in if beta != 1.0 else 1], "attrs": {},
                "shape": shape, "dtype": "float32"})
    biased = n_in + len(pre) - 1
    k = len(extras)

    def remap(r: int) -> int:
        if r == 0:
            return biased
        return r + 1 if r <= k else r - (k + 1) + n_in + len(pre)

    return pre + [{**st, "in": [remap(int(r)) for r in st["in"]]} for st in steps], sources


def _float_spec(s: TensorSpec | None) -> bool:
    return s is not None and s.dtype in _FLOATS


def _native(program: Sequence[Mapping[str, Any]]) -> bool:
    # Where takes its condition as a bool register (an If folded into a select, as in
    # openwakeword's heads); the compiled epilogue reads it in place.
    return all((s["op"] in FLOAT_OPS or s["op"] == "Where")
               and s["dtype"] in ("float32", "float16", "bfloat16") for s in program)


def _applies(spec: LayerSpec) -> bool:
    if not AVAILABLE or len(spec.outputs) != 1 or not all(
            _float_spec(s) for s in spec.inputs[:2]) or not _float_spec(spec.outputs[0]):
        return False
    product = _gemm_product(spec) if spec.op == "Gemm" else _matmul_product(spec)
    if product is None:
        return False
    epi = spec.attrs.get("epilogue")
    if epi is not None and not _native(epi["program"]):
        # The backend runs that epilogue itself and binds us without it.
        spec = LayerSpec(spec.name, spec.op, {k: v for k, v in spec.attrs.items()
                                              if k != "epilogue"},
                         spec.inputs[:_own_inputs(spec)], spec.outputs, spec.tactic)
    program = _program(spec)
    return program is None or _compile(spec, program) is not None


def _compile(spec: LayerSpec, program: tuple[list[dict[str, Any]], list[int]]
             ) -> CompiledProgram | None:
    steps, sources = program
    specs: list[TensorSpec] = []
    for i in sources:
        s = TensorSpec((), DType.FLOAT32) if i == BETA else spec.inputs[i]
        if s is None:
            return None
        specs.append(TensorSpec(s.shape, DType.FLOAT32) if s.dtype in _FLOATS else s)
    return compile_epilogue(steps, TensorSpec(spec.outputs[0].shape, DType.FLOAT32), specs)


def _applies_packed(spec: LayerSpec) -> bool:
    """One weight matrix B (any batches of A fold into rows), A not transposed, more rows
    than the few-row loops take."""
    if not _applies(spec):
        return False
    product = _gemm_product(spec) if spec.op == "Gemm" else _matmul_product(spec)
    return (product is not None and not product.trans_a and len(product.offsets) == 1
            and product.m > MAX_ROWS)


def bind_blas(spec: LayerSpec, packed: bool = False) -> RunFn:
    product = _gemm_product(spec) if spec.op == "Gemm" else _matmul_product(spec)
    assert product is not None, "applies() was checked by the backend"
    geo, parallel = product.geo(threads.configure(), packed)
    bp = aligned_zeros(-(-product.n // NR) * NR * product.k if packed else 1)

    def pack(w: np.ndarray) -> None:
        b = w.reshape(product.n, product.k).T if product.trans_b else w.reshape(product.k,
                                                                                  product.n)
        pack_b(np.ascontiguousarray(b, np.float32).reshape(-1), product.n, product.k,
               product.n, bp)

    weights = Derived(pack)
    nthreads = threads.configure() if parallel else 1
    mode = Fixed(int(geo[11]))
    alpha = np.float32(product.alpha)
    program = _program(spec)
    compiled = _compile(spec, program) if program is not None else None
    sources = program[1] if program is not None else []
    beta = np.full((), spec.attrs.get("beta", 1.0), np.float32)

    if compiled is not None:
        compiled.add_driver(driver_source(len(sources)))

    def prebind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        run = _prebind(ins, outs)
        w = ins[1]
        assert w is not None
        return weights.before(w, run) if packed else run

    def _prebind(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray]) -> Thunk:
        a, b, y = ins[0], ins[1], outs[0]
        assert a is not None and b is not None
        a, b = np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1)
        if packed:
            b = bp
        flat = y.reshape(-1)
        if compiled is None:
            return fork_call(gemm_task, nthreads, nthreads, a, b, flat, alpha, mode, geo)
        regs = [y, *(beta if i == BETA else ins[i] for i in sources)]
        operands = compiled.operands(regs)
        if operands is not None:  # the epilogue runs inside the product's parallel region
            return fork_call(compiled.module.product_task, nthreads, nthreads, a, b, flat,
                                alpha, mode, geo, *operands[1:])
        return chain(fork_call(gemm_task, nthreads, nthreads, a, b, flat, alpha, mode, geo),
                     compiled.prebind(regs, [y]))

    return PreboundKernel(prebind)


def bind_packed(spec: LayerSpec) -> RunFn:
    return bind_blas(spec, packed=True)


for _op in ("Gemm", "MatMul"):
    tactic(_op, "blas", applies=_applies, native_epilogue=_native, priority=10)(bind_blas)
    # Below blas without timing: B may be an activation, packed again on every run.
    tactic(_op, "packed", applies=_applies_packed, native_epilogue=_native,
           priority=5)(bind_packed)
