"""Single-precision GEMM callable from numba kernels: numpy's own OpenBLAS ``cblas_sgemm``.

numba's ``np.dot`` needs SciPy, allocates unless every operand is contiguous, and cannot
accumulate (beta = 1) or address a block of a larger matrix. Calling CBLAS directly can.
The symbol is looked up in the BLAS that numpy itself loaded and registered with LLVM
under a fixed name, so kernels compiled with ``cache=True`` refer to it by name and link
against this process's address when they are loaded from the disk cache.
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_SYMBOL = "pydla_cblas_sgemm"
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112

# (symbol, integer width): numpy ≥ 2 wheels ship OpenBLAS with ILP64 and a "scipy_" prefix.
_CANDIDATES = (("scipy_cblas_sgemm64_", 64), ("cblas_sgemm64_", 64), ("cblas_sgemm", 32))


def _find_sgemm() -> tuple[int, int] | None:
    """(address, integer width) of numpy's cblas_sgemm, or None."""
    try:
        lib = ctypes.CDLL(np._core._multiarray_umath.__file__)  # dlsym searches its deps
    except (OSError, AttributeError):
        return None
    for name, bits in _CANDIDATES:
        try:
            fn = getattr(lib, name)
        except AttributeError:
            continue
        address = ctypes.cast(fn, ctypes.c_void_p).value
        if address:
            return address, bits
    return None


_FOUND = _find_sgemm()
# Kernels are compiled for one integer width; a 32-bit BLAS gets the same symbol name
# through a different LLVM signature, so a cache built against another BLAS never links.
INT_BITS = _FOUND[1] if _FOUND else 64
AVAILABLE = _FOUND is not None
if _FOUND is not None:
    llvm.add_symbol(_SYMBOL, _FOUND[0])


@intrinsic
def sgemm(typingctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):  # type: ignore[no-untyped-def]
    """C[m×n] = alpha·op(A)·op(B) + beta·C, row-major; a, b, c are addresses (int64) of the
    first elements, lda/ldb/ldc their row strides in elements; trans_* are 0 or 1."""
    sig = types.void(types.int64, types.int64, types.int64, types.int64, types.int64,
                     types.float32, types.int64, types.int64, types.int64, types.int64,
                     types.float32, types.int64, types.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i32, blasint = ir.IntType(32), ir.IntType(INT_BITS)
        f32 = ir.FloatType()
        fptr = f32.as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, blasint, blasint, blasint, f32,
                                               fptr, blasint, fptr, blasint, f32, fptr, blasint])
        fn = cgutils.get_or_insert_function(builder.module, fnty, _SYMBOL)
        ta, tb, m_, n_, k_, al, pa, la, pb, lb, be, pc, lc = args

        def trans(flag):  # type: ignore[no-untyped-def]
            pick = builder.icmp_signed("!=", flag, ir.Constant(flag.type, 0))
            return builder.select(pick, ir.Constant(i32, TRANS), ir.Constant(i32, NO_TRANS))

        def dim(v):  # type: ignore[no-untyped-def]
            return builder.trunc(v, blasint) if INT_BITS < 64 else v

        builder.call(fn, [ir.Constant(i32, ROW_MAJOR), trans(ta), trans(tb), dim(m_), dim(n_),
                          dim(k_), al, builder.inttoptr(pa, fptr), dim(la),
                          builder.inttoptr(pb, fptr), dim(lb), be,
                          builder.inttoptr(pc, fptr), dim(lc)])
        return context.get_dummy_value()

    return sig, codegen
