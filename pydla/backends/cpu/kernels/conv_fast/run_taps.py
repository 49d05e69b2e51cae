"""The register-blocked inner loop of ``direct_planes``: runs of 16·P output positions of M
output channels, summed over a table of taps with the accumulators in registers.

Each tap is a scalar weight per output channel times a shifted unit-stride run of the
input (conv_fast.phases): per tap, P vector loads of the run serve all M channels, and
M·P multiply-adds go to independent accumulators. numba's own loop over a run kept the
accumulators in memory (a load and a store per few multiply-adds) and could not share a
loaded run between output channels. Written as LLVM vector code on <16 x float>, which
LLVM lowers to one AVX-512 or two AVX2 registers (``simd.ACC_VECTORS`` sizes P·M).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from pydla.backends.cpu.kernels.conv_fast.simd import (
    _F32,
    _I64,
    _fma,
    _offset,
    _vec_at,
    counted_loop,
    splat,
)


def run_taps(vectors: int, channels: int) -> Callable[..., None]:
    """An intrinsic ``(src, offsets, weights, taps, wstep, bias, dst, dst_step)`` (int64 byte
    addresses and strides; ``offsets`` the address of ``taps`` int64 byte offsets): for
    k < channels and p < vectors, the 16 floats at dst + k·dst_step + 64·p = bias[k] +
    Σ_t weights[k·wstep/4 + t] · (16 floats at src + offsets[t] + 64·p) — bias and
    weights float32 scalars. The caller keeps every address inside its buffers."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        src, offs, w, n, wstep, b, d, ds = args
        fma = _fma(builder)
        vec = functools.partial(_vec_at, builder)

        def scalar(addr: ir.Value) -> ir.Value:
            return splat(builder, builder.load(builder.inttoptr(addr, _F32.as_pointer()),
                                               align=4))

        four = ir.Constant(_I64, 4)
        starts = [scalar(builder.add(b, ir.Constant(_I64, 4 * k))) for k in range(channels)]
        rows = [builder.add(w, builder.mul(wstep, ir.Constant(_I64, k)))
                for k in range(channels)]

        def body(t: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            at = builder.add(src, _offset(builder, offs, t))  # accs: p-major, then k
            wt = builder.mul(t, four)
            wv = [scalar(builder.add(r, wt)) for r in rows]
            new = []
            for p in range(vectors):
                x = builder.load(vec(builder.add(at, ir.Constant(_I64, 64 * p))), align=4)
                for k in range(channels):
                    new.append(builder.call(fma, [wv[k], x, accs[len(new)]]))
            return new

        out = counted_loop(builder, ir.Constant(_I64, 0), n,
                           [starts[k] for _ in range(vectors) for k in range(channels)], body)
        for p in range(vectors):
            for k in range(channels):
                at = builder.add(builder.add(d, builder.mul(ds, ir.Constant(_I64, k))),
                                 ir.Constant(_I64, 64 * p))
                builder.store(out[p * channels + k], vec(at), align=4)
        return context.get_dummy_value()

    @intrinsic
    def apply(typingctx, src, offsets, weights, taps, wstep, bias, dst, dst_step):  # type: ignore[no-untyped-def]
        return types.void(*([types.int64] * 8)), codegen

    return apply  # type: ignore[no-any-return]
