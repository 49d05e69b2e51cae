"""Fast int8 CPU kernels: exact u8×s8→s32 GEMM and 2-D convolution with a requantizing
epilogue, for the int8 layers QGemm and QConv (issue 24).

The interface (``api.py``; engine E binds these as the fast tactic of QConv/QGemm)::

    pack_weights(w, group=1) -> PackedWeights
        w: int8, (N, K) for a GEMM (out = A @ w.T) or (OC, C/group, kh, kw) for a conv.
        Packed once at bind time, in this package's own layout for the ISA path chosen
        then (isa()); PackedWeights.col_sums is int32[N], Σ_k w[n, k].

    Requant(a_zero_point, bias, scale, y_zero_point, lo, hi, out_dtype,
            residual_zero_point=0, residual_scale=1.0)
        acc[n]  = Σ_k (a[k] - a_zero_point) · w[n, k] + bias[n]                (exact, int32)
        uint8 / int8 out:  y = clamp(rint(float32(acc) · scale[n]) + y_zero_point, lo, hi)
        float32 out:       y = clamp(float32(acc) · scale[n], lo, hi)   (lo/hi real bounds,
                           ±inf for none; y_zero_point must be 0)
        int32 out:         y = acc                  (ConvInteger/MatMulInteger; scale unused)
        rint rounds half to even; float32(acc) rounds to nearest even; every product is
        one float32 multiplication (MLAS's order, as onnxruntime computes QLinearConv).
        With a residual r (same shape as out; uint8, int8 or float32): the term
        float32(r - residual_zero_point) · residual_scale is added (float32) before rint
        and the clamp: for uint8/int8 out residual_scale = r_scale / y_scale; for float32
        out r_scale itself (a float32 r: zero point 0 and scale 1, a plain add).
        a_zero_point is that of the activations as given: int8 activations are shifted to
        uint8 (x + 128) inside, and their zero point with them.

    qgemm(a, w, rq, out, residual=None)          a: uint8/int8 (M, K), out (M, N)
    qconv2d(x, w, rq, strides, pads, dilations, out, residual=None)
        x: uint8/int8 NCHW, out NCHW; pads (top, left, bottom, right), padded with
        a_zero_point (a real zero).
    bind_qgemm(...) / bind_qconv2d(...) take the same arguments and return a no-argument
    callable bound to those buffers (what an executor's prebind wants: scratch, per-thread
    split and the compiled entry are set up once); qgemm/qconv2d are bind-then-call.
    isa() -> "avx512_vnni" | "avx2" | "generic", the path kernels bound now will use:
        the CPU's features, unless the environment variable PYDLA_CPU_ISA (avx512_vnni,
        avx2 or generic) asks for another that the CPU supports; read at each bind.

Bad shapes, dtypes or parameters raise pydla.errors.KernelError naming the layer (the
``name`` argument of the bind functions) and what disagrees.
"""

from pydla.backends.cpu.kernels.int8.api import (
    PackedWeights,
    Requant,
    bind_qconv2d,
    bind_qgemm,
    isa,
    pack_weights,
    qconv2d,
    qgemm,
)

__all__ = ["PackedWeights", "Requant", "bind_qconv2d", "bind_qgemm", "isa", "pack_weights",
           "qconv2d", "qgemm"]
