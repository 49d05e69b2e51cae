"""Epilogues fused into the backend's own kernels (depthwise and direct convolution, GEMM).

The epilogue program's register 0 is the kernel's accumulator; registers 1…k are the
layer's extra inputs, read at the output element's logical coordinates (broadcasting).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pydla.backends.cuda.codegen import compute_type, emit_program, storage_type
from pydla.backends.cuda.layout import Placement, broadcast_strides
from pydla.dtypes import DType
from pydla.errors import KernelError


@dataclass(frozen=True)
class Epilogue:
    params: list[str]  # kernel parameters (extra input pointers)
    args: list[np.uint64]  # their values
    program: Sequence[Mapping[str, Any]]
    strides: list[tuple[int, ...]]  # per extra input, by output logical dimension
    dtypes: tuple[DType, ...] = ()  # per extra input (a Where's condition may be bool)

    def lines(self, value: str, coords: Sequence[str], prefix: str = "r") -> tuple[list[str],
                                                                                   str]:
        """Statements applying the epilogue to float ``value`` at logical ``coords``."""
        operands = [value]
        out: list[str] = []
        for k, strides in enumerate(self.strides):
            terms = [f"({c}) * {s}" for c, s in zip(coords, strides) if s]
            ctype = compute_type(self.dtypes[k])
            out.append(f"const {ctype} {prefix}e{k} = ld(e{k} + ({' + '.join(terms) or '0'}));")
            operands.append(f"{prefix}e{k}")
        dtypes = [DType.FLOAT32, *self.dtypes]
        lines, result = emit_program(self.program, operands, "epilogue", prefix, dtypes)
        return out + lines, result


def make_epilogue(program: Sequence[Mapping[str, Any]], extras: Sequence[Placement],
                  out: Placement, where: str) -> Epilogue:
    try:
        strides = [broadcast_strides(p, out.shape) for p in extras]
    except ValueError as e:
        raise KernelError(where, "epilogue", str(e)) from None
    params = [f"const {storage_type(p.dtype, where)}* e{k}" for k, p in enumerate(extras)]
    return Epilogue(params, [np.uint64(p.ptr) for p in extras], list(program), strides,
                    tuple(p.dtype for p in extras))


NO_EPILOGUE = Epilogue([], [], [], [])
