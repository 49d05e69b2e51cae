"""``--pydla`` for ``polygraphy run``: the argument group that adds pydla's runner."""

from __future__ import annotations

from typing import Any

from polygraphy import mod
from polygraphy.tools.args import util as args_util
from polygraphy.tools.args.backend.onnx.loader import OnnxLoadArgs
from polygraphy.tools.args.base import BaseRunnerArgs
from polygraphy.tools.args.model import ModelArgs
from polygraphy.tools.script import make_invocable


@mod.export()
class PydlaRunnerArgs(BaseRunnerArgs):
    """pydla Inference: running inference with pydla (``--pydla``).

    Depends on:

        - ModelArgs
        - OnnxLoadArgs
    """

    def get_name_opt_impl(self) -> tuple[str, str]:
        return "pydla", "pydla"

    def add_parser_args_impl(self) -> None:
        self.group.add_argument(
            "--pydla-providers", dest="pydla_providers", nargs="+", default=None,
            help="pydla's execution providers, in onnxruntime's names "
                 "(CPUExecutionProvider, CUDAExecutionProvider)")

    def parse_impl(self, args: Any) -> None:
        """Attributes: providers (list[str] | None): the providers for pydla's session."""
        self.providers = args_util.get(args, "pydla_providers")

    def add_to_script_impl(self, script: Any) -> None:
        if self.arg_groups[OnnxLoadArgs].must_use_onnx_loader():
            model = self.arg_groups[OnnxLoadArgs].add_to_script(script, serialize_model=True)
        else:
            model = self.arg_groups[ModelArgs].path
        script.add_import(imports=["PydlaRunner"], frm="pydla.polygraphy.runner")
        script.add_runner(make_invocable("PydlaRunner", model, providers=self.providers))
