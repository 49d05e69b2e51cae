"""CPU kernels of comparisons, boolean logic, Where and Cast."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu.kernels.elementwise import select, ufunc_kernel
from pydla.backends.cpu.registry import kernel

Inputs = Sequence[np.ndarray | None]
Outputs = Sequence[np.ndarray]

for _op, _ufunc in (("Equal", np.equal), ("Less", np.less), ("Greater", np.greater),
                    ("LessOrEqual", np.less_equal), ("GreaterOrEqual", np.greater_equal),
                    ("Not", np.logical_not), ("And", np.logical_and), ("Or", np.logical_or),
                    ("Xor", np.logical_xor)):
    ufunc_kernel(_op, _ufunc)


@kernel("Where")
def bind_where(spec: LayerSpec) -> RunFn:
    def run(inputs: Inputs, outputs: Outputs) -> None:
        select(inputs[0], inputs[1], inputs[2], outputs[0])

    return run


@kernel("Cast")
def bind_cast(spec: LayerSpec) -> RunFn:
    # The planned output has the target type (half types arrive widened to float32 and are
    # rounded to nearest even by the backend). Out-of-range floats convert as onnxruntime's
    # static_cast does on this machine, and NaN is a legitimate input: no warnings.
    def run(inputs: Inputs, outputs: Outputs) -> None:
        with np.errstate(invalid="ignore", over="ignore"):
            np.copyto(outputs[0], inputs[0], casting="unsafe")

    return run
