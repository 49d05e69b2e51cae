"""pydla as a Polygraphy backend: ``polygraphy run model.onnx --pydla --onnxrt``.

Polygraphy (NVIDIA's comparison tool) loads ``polygraphy run`` plugins from the
``polygraphy.run.plugins`` entry point; pydla declares ``export_argument_groups`` there
(pyproject.toml), which adds the ``--pydla`` runner. ``PydlaRunner`` is also usable in
Polygraphy's Python API (``Comparator.run([PydlaRunner("model.onnx"), ...])``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["PydlaRunner", "PydlaRunnerArgs", "export_argument_groups"]


def export_argument_groups() -> list[Any]:
    from pydla.polygraphy.args import PydlaRunnerArgs

    return [PydlaRunnerArgs()]


def __getattr__(name: str) -> Any:
    # Polygraphy is imported only when one of its classes is asked for.
    if name == "PydlaRunner":
        from pydla.polygraphy.runner import PydlaRunner

        return PydlaRunner
    if name == "PydlaRunnerArgs":
        from pydla.polygraphy.args import PydlaRunnerArgs

        return PydlaRunnerArgs
    raise AttributeError(f"module 'pydla.polygraphy' has no attribute {name!r}")
