"""Build once, on the driver, before any actor starts.

Building autotunes kernels (tens of seconds for a CNN); doing it in every actor would cost
that per actor and could pick different tactics in each. The driver builds once and hands
the bytes to Ray (``ray.put``): every node fetches one copy from the object store, and
every actor on it reads that copy.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from pydla.errors import BuildError


def build_once(onnx_path: str | os.PathLike[str], **build_flags: Any) -> bytes:
    """Compile ``onnx_path`` into loadable bytes. ``build_flags`` are the fields of
    ``pydla.builder.BuildOptions``; ``shapes``, ``input_formats``/``output_formats`` and
    ``autocast`` also take ``pydla build``'s flag syntax (``shapes="x:8x3x224x224"``,
    ``input_formats="fp16:chw16"``, ``autocast="fp16"``)."""
    from pydla.builder import BuildOptions, build
    from pydla.dtypes import DType
    from pydla.tools.flags import parse_io_formats, parse_shapes

    flags = dict(build_flags)
    if isinstance(flags.get("shapes"), str):
        shapes, values = parse_shapes(flags["shapes"])
        flags["shapes"] = shapes
        flags["input_values"] = {**values, **flags.get("input_values", {})}
    for key in ("input_formats", "output_formats"):
        if isinstance(flags.get(key), str):
            flags[key] = parse_io_formats(flags[key], key)
    if isinstance(flags.get("autocast"), str):
        flags["autocast"] = DType.from_name(flags["autocast"])
    known = {f.name for f in dataclasses.fields(BuildOptions)}
    unknown = sorted(set(flags) - known)
    if unknown:
        raise BuildError(f"unknown build flags {unknown}; build_once takes the fields of "
                         f"BuildOptions: {sorted(known)}")
    return build(os.fspath(onnx_path), BuildOptions(**flags))


def put_loadable(loadable: bytes | str | os.PathLike[str]) -> Any:
    """``ray.put`` the loadable's bytes (read from a path if given one): pass the returned
    ObjectRef as ``fn_constructor_kwargs={"loadable": ref}`` or to ``deployment``."""
    import ray

    from pydla.ray.predictor import loadable_bytes

    return ray.put(loadable_bytes(loadable))
