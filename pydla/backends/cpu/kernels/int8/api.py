"""The int8 kernels' interface (see the package docstring): weights packing, requantize
parameters, qgemm / qconv2d and their bound forms."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from pydla.backends.cpu.kernels.int8 import generic, pack
from pydla.backends.cpu.kernels.int8.dot import PATHS
from pydla.backends.cpu.kernels.int8.features import isa
from pydla.backends.cpu.kernels.int8.requant import LANES, OUT_KINDS, RES_KINDS
from pydla.errors import KernelError

Thunk = Callable[[], object]
OUT_DTYPES = (np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.float32), np.dtype(np.int32))


@dataclass(frozen=True)
class PackedWeights:
    """The int8 weights of one conv/GEMM, packed once at bind time."""

    data: np.ndarray       # the ISA path's own layout (per group), see pack.py
    n: int                 # output channels (all groups)
    k: int                 # reduction length per group (C/group·kh·kw, or a GEMM's K)
    group: int
    col_sums: np.ndarray   # int32[n]: Σ_k w[n, k], for the activation zero point
    kernel: tuple[int, int] = (1, 1)   # (kh, kw) of a conv; (1, 1) for a GEMM
    path: str = "generic"  # the ISA path the layout is for
    original: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8), repr=False)


@dataclass(frozen=True)
class Requant:
    """How the int32 accumulator becomes the output (formulas in the package docstring)."""

    a_zero_point: int
    bias: np.ndarray        # int32[n]
    scale: np.ndarray       # float32[n]
    y_zero_point: int
    lo: float
    hi: float
    out_dtype: np.dtype
    residual_zero_point: int = 0
    residual_scale: float = 1.0
    # float32 out only: quantize as for uint8/int8 (lo/hi the quantized clamp), then store
    # (q - y_zero_point) · dequantize_scale — a Q→DQ pair fused (requant.py's "dequantized")
    dequantize_scale: float | None = None


def pack_weights(w: np.ndarray, group: int = 1, name: str = "int8") -> PackedWeights:
    """``w`` int8, (N, K) or (OC, C/group, kh, kw), packed for the path isa() picks now."""
    if w.dtype != np.int8 or w.ndim not in (2, 4):
        raise KernelError(name, "pack_weights", f"weights must be int8 (N, K) or (OC, C/group, "
                          f"kh, kw); got {w.dtype} {w.shape}")
    n = int(w.shape[0])
    if group < 1 or n % group:
        raise KernelError(name, "pack_weights", f"{n} output channels do not split into "
                          f"{group} groups")
    flat = np.ascontiguousarray(w.reshape(n, -1))
    kernel = (int(w.shape[2]), int(w.shape[3])) if w.ndim == 4 else (1, 1)
    col_sums = flat.astype(np.int32).sum(axis=1, dtype=np.int32)
    path = isa()
    if path == "generic":
        data = generic.pack(flat, group)
    elif w.ndim == 4:
        data = pack.conv_weights(w, group, PATHS[path])
    else:
        data = pack.gemm_weights(flat, PATHS[path])
    return PackedWeights(data, n, int(flat.shape[1]), group, col_sums, kernel, path, flat)


def _check_requant(rq: Requant, n: int, out: np.ndarray, name: str, op: str) -> None:
    if out.dtype not in OUT_DTYPES:
        raise KernelError(name, op, f"output dtype {out.dtype} is not one of "
                          f"{[str(d) for d in OUT_DTYPES]}")
    if np.dtype(rq.out_dtype) != out.dtype:
        raise KernelError(name, op, f"Requant.out_dtype {np.dtype(rq.out_dtype)} but the output "
                          f"is {out.dtype}")
    if rq.bias.shape != (n,) or rq.bias.dtype != np.int32:
        raise KernelError(name, op, f"bias must be int32[{n}]; got {rq.bias.dtype} "
                          f"{rq.bias.shape}")
    if rq.scale.shape != (n,) or rq.scale.dtype != np.float32:
        raise KernelError(name, op, f"scale must be float32[{n}]; got {rq.scale.dtype} "
                          f"{rq.scale.shape}")
    if out.dtype.kind in "iu" and out.dtype != np.int32:
        info = np.iinfo(out.dtype)
        if not info.min <= rq.lo <= rq.hi <= info.max:
            raise KernelError(name, op, f"clamp [{rq.lo}, {rq.hi}] is not within {out.dtype}'s "
                              f"range")
    elif out.dtype == np.float32 and rq.y_zero_point != 0 and rq.dequantize_scale is None:
        raise KernelError(name, op, "a float32 output has no zero point (y_zero_point must "
                          "be 0)")


def _check_activation(a: np.ndarray, rq: Requant, name: str, op: str) -> None:
    if a.dtype not in (np.uint8, np.int8):
        raise KernelError(name, op, f"activations must be uint8 or int8; got {a.dtype}")
    info = np.iinfo(a.dtype)
    if not info.min <= rq.a_zero_point <= info.max:
        raise KernelError(name, op, f"activation zero point {rq.a_zero_point} is outside "
                          f"{a.dtype}'s range")


def _check_residual(residual: np.ndarray | None, out: np.ndarray, name: str, op: str) -> None:
    if residual is None:
        return
    if out.dtype == np.int32:
        raise KernelError(name, op, "an int32 (raw accumulator) output takes no residual")
    if residual.shape != out.shape:
        raise KernelError(name, op, f"residual {residual.shape} does not match the output "
                          f"{out.shape}")
    if residual.dtype not in (np.uint8, np.int8, np.float32):
        raise KernelError(name, op, f"a residual must be uint8, int8 or float32; got "
                          f"{residual.dtype}")


def bind_qgemm(a: np.ndarray, w: PackedWeights, rq: Requant, out: np.ndarray,
               residual: np.ndarray | None = None, name: str = "int8") -> Thunk:
    """``out = requant(a @ w.T)`` bound to these buffers (they must outlive the callable)."""
    op = "QGemm"
    _check_activation(a, rq, name, op)
    if a.ndim != 2 or w.group != 1 or a.shape[1] != w.k or out.shape != (a.shape[0], w.n):
        raise KernelError(name, op, f"A {a.shape} @ W ({w.n}, {w.k}) (group {w.group}) does not "
                          f"give the output {out.shape}")
    _check_requant(rq, w.n, out, name, op)
    _check_residual(residual, out, name, op)
    if w.path == "generic" or w.kernel != (1, 1) or w.data.ndim != 3:
        return lambda: generic.gemm(a, w.original, rq, out, residual)
    from pydla.backends.cpu.kernels.int8 import gemm  # noqa: PLC0415  (compiles its tasks)

    flip, corr = _zero_point(a, rq, w)
    return gemm.bind(a, w.data, w.path, flip, corr, _padded(rq.scale), out,
                     _kinds(out, residual, rq), _q(rq),
                     residual, _r_q(rq))


def conv_out_size(size: int, k: int, stride: int, dilation: int, before: int, after: int) -> int:
    return (size + before + after - dilation * (k - 1) - 1) // stride + 1


def bind_qconv2d(x: np.ndarray, w: PackedWeights, rq: Requant, strides: Sequence[int],
                 pads: Sequence[int], dilations: Sequence[int], out: np.ndarray,
                 residual: np.ndarray | None = None, name: str = "int8") -> Thunk:
    """A 2-D convolution, NCHW, bound to these buffers (they must outlive the callable)."""
    op = "QConv"
    _check_activation(x, rq, name, op)
    kh, kw = w.kernel
    if x.ndim != 4 or out.ndim != 4 or len(strides) != 2 or len(pads) != 4 or \
            len(dilations) != 2 or min(strides) < 1 or min(dilations) < 1 or min(pads) < 0:
        raise KernelError(name, op, f"needs NCHW x and out, 2 strides, 4 pads, 2 dilations; got "
                          f"x {x.shape}, out {out.shape}, strides {tuple(strides)}, pads "
                          f"{tuple(pads)}, dilations {tuple(dilations)}")
    oh = conv_out_size(x.shape[2], kh, strides[0], dilations[0], pads[0], pads[2])
    ow = conv_out_size(x.shape[3], kw, strides[1], dilations[1], pads[1], pads[3])
    if x.shape[1] * kh * kw != w.k * w.group or oh < 1 or ow < 1 or \
            out.shape != (x.shape[0], w.n, oh, ow):
        raise KernelError(name, op, f"x {x.shape} with weights ({w.n}, {w.k // (kh * kw)}, {kh}, "
                          f"{kw}) group {w.group} gives ({x.shape[0]}, {w.n}, {oh}, {ow}), not "
                          f"the output {out.shape}")
    _check_requant(rq, w.n, out, name, op)
    _check_residual(residual, out, name, op)
    if w.path == "generic" or w.original.ndim != 2 or w.data.ndim != 3 or \
            w.data.shape[0] != w.group:
        geometry = (tuple(strides), tuple(pads), tuple(dilations))
        return lambda: generic.conv2d(x, w.original, w.group, w.kernel, rq, geometry, out,
                                      residual)
    from pydla.backends.cpu.kernels.int8 import conv, depthwise  # noqa: PLC0415  (compiles)

    flip, corr = _zero_point(x, rq, w)
    if depthwise.applies(w.group, w.n, x.shape[1], strides, dilations):
        return depthwise.bind(x, w.original, w.path, w.kernel, strides, pads, dilations, flip,
                              rq.a_zero_point + flip, corr, _padded(rq.scale), out,
                              _kinds(out, residual, rq), _q(rq), residual,
                              _r_q(rq))
    return conv.bind(x, w.data, w.path, w.group, w.n, x.shape[1] // w.group, w.kernel,
                     strides, pads, dilations, flip, rq.a_zero_point + flip, corr,
                     _padded(rq.scale), out, _kinds(out, residual, rq), _q(rq), residual,
                     _r_q(rq))


def _zero_point(a: np.ndarray, rq: Requant, w: PackedWeights) -> tuple[int, np.ndarray]:
    """(the xor that makes the activations uint8, bias - zp·col_sums in int32)."""
    flip = 0x80 if a.dtype == np.int8 else 0
    zp = rq.a_zero_point + (128 if flip else 0)
    corr = rq.bias.astype(np.int64) - zp * w.col_sums.astype(np.int64)
    return flip, _padded(corr.astype(np.int32))


def _padded(v: np.ndarray) -> np.ndarray:
    """v with zeros after it: the epilogue loads whole vectors of per-channel values, up
    to the packed width (a multiple of 64) plus one vector."""
    out = np.zeros(-(-v.size // 64) * 64 + LANES, v.dtype)
    out[:v.size] = v
    return out


def _kinds(out: np.ndarray, residual: np.ndarray | None, rq: Requant) -> tuple[int, int]:
    dequantized = rq.dequantize_scale is not None and out.dtype == np.float32
    return (OUT_KINDS.index("dequantized" if dequantized else out.dtype.name),
            RES_KINDS.index("none" if residual is None else residual.dtype.name))


def _r_q(rq: Requant) -> tuple[float, float, float]:
    """The residual's zero point and scale, and the dequantized output's scale."""
    return (float(rq.residual_zero_point), float(rq.residual_scale),
            float(rq.dequantize_scale or 0.0))


def _q(rq: Requant) -> tuple[float, float, float]:
    return float(rq.y_zero_point), float(rq.lo), float(rq.hi)


def qgemm(a: np.ndarray, w: PackedWeights, rq: Requant, out: np.ndarray,
          residual: np.ndarray | None = None) -> None:
    bind_qgemm(a, w, rq, out, residual)()


def qconv2d(x: np.ndarray, w: PackedWeights, rq: Requant, strides: Sequence[int],
            pads: Sequence[int], dilations: Sequence[int], out: np.ndarray,
            residual: np.ndarray | None = None) -> None:
    bind_qconv2d(x, w, rq, strides, pads, dilations, out, residual)()


__all__ = ["PackedWeights", "Requant", "bind_qconv2d", "bind_qgemm", "isa", "pack_weights",
           "qconv2d", "qgemm"]
