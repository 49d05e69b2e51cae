"""onnx's backend interface over pydla's real path: build → loadable bytes → load → run.

    rep = pydla.onnx_backend.prepare(model, "CPU")
    outputs = rep.run([x])

Inputs that the model uses as parameters (a Reshape's shape, a Slice's starts, …) must be
known at build time, as TensorRT's shape tensors are. When a build stops on such an input,
the representation builds at its first ``run`` with the values given there, and rebuilds if
a later run gives other values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from pydla.builder import BuildOptions, build
from pydla.dtypes import DType
from pydla.engine import LoadedModule
from pydla.engine.module import IOError_
from pydla.errors import NotConstantError

# Inputs larger than this are never treated as build-time parameters.
_MAX_PARAMETER_ELEMENTS = 4096


def _graph_inputs(model: onnx.ModelProto) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [vi.name for vi in model.graph.input if vi.name not in inits]


class PydlaRep(BackendRep):
    def __init__(self, model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> None:
        self.model = model
        self.shapes = dict(shapes)
        self.input_names = _graph_inputs(model)
        self.parameters: list[str] = []  # inputs baked into the loadable
        self._cache: dict[bytes, LoadedModule] = {}
        self.module: LoadedModule | None = None
        try:
            self.module = self._build({})
        except NotConstantError as e:
            # A parameter computed from inputs is resolved at the first run (_specialize).
            if e.value in self.input_names:
                self.parameters = [e.value]

    def _build(self, values: Mapping[str, np.ndarray]) -> LoadedModule:
        data = build(self.model, BuildOptions(shapes=self.shapes, input_values=dict(values)))
        return LoadedModule(data)

    def _specialize(self, named: dict[str, np.ndarray]) -> LoadedModule:
        """The module built with the current parameter inputs' values baked in."""
        while True:
            values = {n: named[n] for n in self.parameters}
            key = b"".join(n.encode() + b"\0" + np.ascontiguousarray(v).tobytes()
                           for n, v in values.items())
            if key in self._cache:
                return self._cache[key]
            try:
                module = self._build(values)
            except NotConstantError as e:
                if e.value in self.input_names and e.value not in self.parameters:
                    self.parameters.append(e.value)
                    continue
                # A parameter computed from inputs: bake every small integer input.
                extra = [n for n in self.input_names if n not in self.parameters
                         and named[n].dtype.kind in "iub" and named[n].size
                         <= _MAX_PARAMETER_ELEMENTS]
                if not extra:
                    raise
                self.parameters += extra
                continue
            self._cache[key] = module
            return module

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        if isinstance(inputs, Mapping):
            if sorted(inputs) != sorted(self.input_names):
                raise IOError_(f"inputs {sorted(inputs)} given, the model takes "
                               f"{self.input_names}")
            named = {n: np.asarray(inputs[n]) for n in self.input_names}
        else:
            inputs = list(inputs)
            if len(inputs) != len(self.input_names):
                raise IOError_(f"{len(inputs)} inputs given, the model takes "
                               f"{self.input_names}")
            named = {n: np.asarray(x) for n, x in zip(self.input_names, inputs)}
        module = self.module if self.module is not None else self._specialize(named)
        assert module is not None
        prog = module.program
        # LoadedModule.run checks each input's exact shape and dtype (pydla.engine.inputs).
        outs = module.run([named[prog.tensors[io.tensor].name] for io in prog.inputs])
        return tuple(_public(o, prog.tensors[io.tensor].dtype) for o, io in zip(outs, prog.outputs))


def _public(x: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype is DType.BFLOAT16:
        try:
            import ml_dtypes  # present wherever onnx is (a builder-side dependency)

            return x.view(ml_dtypes.bfloat16)
        except ImportError:
            return x
    return x


class PydlaBackend(Backend):
    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU"

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU",
                shapes: Mapping[str, Sequence[int]] | None = None, **kwargs: Any) -> PydlaRep:
        return PydlaRep(model, shapes or {})

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Any = None, **kwargs: Any) -> tuple[np.ndarray, ...]:
        raise NotImplementedError("pydla runs whole models; use prepare()")


prepare = PydlaBackend.prepare
run_model = PydlaBackend.run_model
supports_device = PydlaBackend.supports_device
