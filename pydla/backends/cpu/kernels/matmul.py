"""CPU kernels of the matrix products: MatMul, Gemm, Einsum (MatMulInteger runs as QGemm).

Float products go to BLAS through np.matmul, accumulating in the tensor's own type (float32
stays float32, as onnxruntime's MLAS does).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu.registry import kernel, reference


@kernel("MatMul")
def bind_matmul(spec: LayerSpec) -> RunFn:
    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        a, b = inputs[0], inputs[1]
        assert a is not None and b is not None
        np.matmul(a, b, out=outputs[0])

    return run


@kernel("Gemm")
def bind_gemm(spec: LayerSpec) -> RunFn:
    a = spec.attrs
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    trans_a, trans_b = bool(a.get("transA", 0)), bool(a.get("transB", 0))

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        x, w = inputs[0], inputs[1]
        c = inputs[2] if len(inputs) > 2 else None
        assert x is not None and w is not None
        y = outputs[0]
        np.matmul(x.T if trans_a else x, w.T if trans_b else w, out=y)
        if alpha != 1.0:
            np.multiply(y, alpha, out=y, casting="unsafe")
        if c is not None and beta != 0.0:
            np.add(y, c if beta == 1.0 else c * beta, out=y, casting="unsafe")

    return run


@reference("Einsum")
def einsum(spec: LayerSpec, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    arrays = [x for x in inputs if x is not None]
    return [np.einsum(str(spec.attrs["equation"]), *arrays, optimize=len(arrays) > 1)]
