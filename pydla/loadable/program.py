"""The validated contents of a loadable, as the runtime sees them."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from pydla.dtypes import DType
from pydla.formats import TensorDescriptor

# How a tensor may share its parent's bytes (pydla.plan.aliasing): a part of an in-place
# Concat's output, the same bytes under a reshape's shape, or an in-place layer's output
# written over its input.
ALIAS_KINDS = ("view", "reshape", "reuse")
RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})


@dataclass(frozen=True)
class TensorInfo:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: DType
    kind: str  # input | output | activation | weight
    offset: int  # into the weights section (weight) or the activation arena (others)
    nbytes: int
    # (parent tensor, byte offset into it, one of ALIAS_KINDS) when it shares the parent's bytes
    alias: tuple[int, int, str] | None = None


@dataclass(frozen=True)
class LayerInfo:
    index: int
    name: str
    op: str
    inputs: tuple[int, ...]  # tensor indices, -1 for an absent optional input
    outputs: tuple[int, ...]
    attrs: dict[str, Any]
    fused_from: tuple[str, ...]
    precision: str
    tactic: str


@dataclass(frozen=True)
class IOTensor:
    """One network input or output as the user's buffer holds it."""

    tensor: int
    format: str
    dtype: DType  # the buffer's element type (may differ from the tensor's: a cast at the edge)
    descriptor: TensorDescriptor


@dataclass(frozen=True)
class ProgramBody:
    """What one executable program holds: the reader validates each (the top level, each
    optimization profile's plan) by the same checks, then a Program carries it."""

    tensors: tuple[TensorInfo, ...]
    layers: tuple[LayerInfo, ...]
    inputs: tuple[IOTensor, ...]
    outputs: tuple[IOTensor, ...]
    arena_bytes: int


@dataclass(frozen=True)
class InputRange:
    """One input's optimization-profile range (--minShapes/--optShapes/--maxShapes)."""

    name: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]


@dataclass(frozen=True)
class Profile:
    """One plan of an optimization profile: the input shapes it runs; ``body`` None for
    profile 0, which is the loadable's top-level program (the opt shapes)."""

    shapes: tuple[tuple[int, ...], ...]
    body: ProgramBody | None


@dataclass(frozen=True)
class ProfileSet:
    """The plans of a loadable built for a range of shapes (docs/loadable-format.md).

    ``pad_batch``: the builder proved the rows of axis 0 independent, so a batch without a
    plan of its own runs in the smallest plan holding it, padded, its outputs sliced;
    otherwise a shape runs only in a plan of exactly its shapes (the builder makes one for
    every shape in range)."""

    ranges: tuple[InputRange, ...]
    pad_batch: bool
    profiles: tuple[Profile, ...]


@dataclass(frozen=True)
class Program:
    version: tuple[int, int]
    producer: dict[str, Any]
    target: dict[str, Any]
    tensors: tuple[TensorInfo, ...]
    layers: tuple[LayerInfo, ...]
    inputs: tuple[IOTensor, ...]
    outputs: tuple[IOTensor, ...]
    arena_bytes: int
    weights: memoryview = field(repr=False)
    build: dict[str, Any] = field(default_factory=dict)
    # Programs a layer runs (a Loop's body: pydla.loadable.rules_control), by index.
    subprograms: tuple[ProgramBody, ...] = ()
    profiles: ProfileSet | None = None

    def profile_program(self, index: int) -> Program:
        """Profile ``index`` as a program of its own, sharing this one's weights."""
        if index == 0 or self.profiles is None:
            return self
        body = self.profiles.profiles[index].body
        assert body is not None  # the reader gives every profile but the first a body
        return replace(self, tensors=body.tensors, layers=body.layers, inputs=body.inputs,
                       outputs=body.outputs, arena_bytes=body.arena_bytes, subprograms=(),
                       profiles=None)

    def weight(self, t: TensorInfo) -> np.ndarray:
        """Zero-copy, read-only view of a weight tensor."""
        count = int(np.prod(t.shape, dtype=np.int64))
        arr = np.frombuffer(self.weights, dtype=t.dtype.np, count=count, offset=t.offset)
        return arr.reshape(t.shape)
