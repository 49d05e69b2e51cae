"""``PydlaRunner``: Polygraphy's runner interface over ``pydla.InferenceSession``."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

from polygraphy import mod, util
from polygraphy.backend.base import BaseRunner
from polygraphy.common import TensorMetadata

from pydla.session import InferenceSession, numpy_dtype


@mod.export()
class PydlaRunner(BaseRunner):
    """Runs a model with pydla (built for the input shapes it is run with, as a
    ``pydla.InferenceSession`` does). ``model``: an ONNX path or bytes, or a loadable;
    ``providers``: onnxruntime's names (``CPUExecutionProvider`` by default)."""

    def __init__(self, model: Any, providers: list[str] | None = None,
                 name: str | None = None) -> None:
        super().__init__(name=name, prefix="pydla-runner")
        self._model = model
        self._providers = providers

    @util.check_called_by("activate")
    def activate_impl(self) -> None:
        model, _ = util.invoke_if_callable(self._model)
        self.session = InferenceSession(model, providers=self._providers)

    @util.check_called_by("get_input_metadata")
    def get_input_metadata_impl(self) -> TensorMetadata:
        meta = TensorMetadata()
        for arg in self.session.get_inputs():
            meta.add(arg.name, numpy_dtype(arg.type), arg.shape)
        return meta

    @util.check_called_by("infer")
    def infer_impl(self, feed_dict: dict[str, Any]) -> OrderedDict:
        start = time.perf_counter()
        names = [o.name for o in self.session.get_outputs()]
        values = self.session.run(names, dict(feed_dict))
        self.inference_time = time.perf_counter() - start
        return OrderedDict(zip(names, values))

    @util.check_called_by("deactivate")
    def deactivate_impl(self) -> None:
        del self.session
