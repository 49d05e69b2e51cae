"""The CUDA kernel registry, imported (CuPy and a GPU present), is exactly
``pydla.backends.cuda.coverage.CUDA_OPS`` — what ``pydla check --target=cuda`` and the
CPU-only test (tests/unit/test_cuda_coverage.py) read without a GPU."""

from __future__ import annotations

from tests.gpu.gpu import require_gpu

require_gpu()

import pydla.backends.cuda.kernels  # noqa: E402, F401  (registers every CUDA kernel)
from pydla.backends.cuda.coverage import CPU_ONLY, CUDA_OPS, registered_ops  # noqa: E402
from pydla.backends.cuda.registry import KERNELS  # noqa: E402


def test_imported_registry_is_cuda_ops() -> None:
    assert set(KERNELS) == CUDA_OPS, (
        f"registered, not in CUDA_OPS: {sorted(set(KERNELS) - CUDA_OPS)}; "
        f"in CUDA_OPS, not registered: {sorted(CUDA_OPS - set(KERNELS))}")
    assert set(registered_ops()) == set(KERNELS)  # the source parser sees what imports do
    assert not set(CPU_ONLY) & set(KERNELS)
