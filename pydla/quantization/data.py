"""Calibration data: ``--calibData`` (.npz files) and ``--data-loader-script`` (Polygraphy's
convention), checked against the network's inputs, one feed dict per sample.

A sample is one set of inputs of the build shape. In an ``.npz`` every array is named by a
network input and its first axis counts samples: ``(S, *shape)``; an array of
``(S * shape[0], *shape[1:])`` is also accepted and split along the batch axis, so
``(16, 3, 224, 224)`` gives 16 samples for a ``1x3x224x224`` build. A folder means every
``.npz`` in it, in name order. Nothing is read before a source is iterated, and only one
file's arrays are held at a time.
"""

from __future__ import annotations

import importlib.util
import os
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pydla.dtypes import DType
from pydla.errors import CalibrationError

Feed = dict[str, np.ndarray]


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple[int, ...]
    dtype: DType


class CalibrationSource:
    """Re-iterable calibration samples; each pass over it yields checked feed dicts."""

    def __init__(self, describe: str, make: Callable[[], Iterable[Any]],
                 inputs: Sequence[InputSpec], count: int | None = None) -> None:
        self.describe = describe
        self._make = make
        self.inputs = tuple(inputs)
        # Known ahead for files (the progress bar's total); None for a loader script.
        self.count = count

    def __iter__(self) -> Iterator[Feed]:
        n = 0
        try:
            items = iter(self._make())
        except CalibrationError:
            raise
        except Exception as e:  # noqa: BLE001  (a user's script may raise anything)
            raise CalibrationError(f"{self.describe} raised {type(e).__name__}: {e}") from e
        while True:
            try:
                item = next(items)
            except StopIteration:
                break
            except CalibrationError:
                raise
            except Exception as e:  # noqa: BLE001
                raise CalibrationError(f"{self.describe} raised {type(e).__name__} at "
                                       f"sample {n}: {e}") from e
            yield check_feed(item, self.inputs, f"{self.describe}, sample {n}")
            n += 1
        if n == 0:
            raise CalibrationError(f"{self.describe} gave no calibration samples")


def check_feed(item: Any, inputs: Sequence[InputSpec], where: str) -> Feed:
    """One sample as the network's inputs, or a one-line error naming the tensor."""
    if not isinstance(item, Mapping):
        raise CalibrationError(f"{where} is a {type(item).__name__}, not a dict of input "
                               "name -> array")
    names = [s.name for s in inputs]
    extra = sorted(set(map(str, item)) - set(names))
    if extra:
        raise CalibrationError(f"{where}: {extra[0]!r} is not a network input (inputs: "
                               f"{', '.join(names)})")
    feed: Feed = {}
    for spec in inputs:
        if spec.name not in item:
            raise CalibrationError(f"{where} has no array for input {spec.name!r}")
        feed[spec.name] = _as_input(np.asarray(item[spec.name]), spec, where)
    return feed


def _as_input(a: np.ndarray, spec: InputSpec, where: str) -> np.ndarray:
    if a.shape != spec.shape:
        raise CalibrationError(f"{where}: input {spec.name!r} has shape {a.shape}; the engine "
                               f"is built for {spec.shape}")
    want = spec.dtype.np
    # Same kind only: float data for a float input (any width), integers for integers.
    if a.dtype.kind not in _KINDS.get(np.dtype(want).kind, np.dtype(want).kind):
        raise CalibrationError(f"{where}: input {spec.name!r} has dtype {a.dtype}; the "
                               f"network takes {spec.dtype.name.lower()}")
    return a.astype(want, copy=False)


_KINDS = {"f": "f", "i": "iu", "u": "ui", "b": "b"}


def npz_source(path: str, inputs: Sequence[InputSpec]) -> CalibrationSource:
    """``--calibData=PATH``: one ``.npz`` or a folder of them."""
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".npz"))
        if not files:
            raise CalibrationError(f"calibration folder {path!r} has no .npz files")
    elif os.path.isfile(path):
        files = [path]
    else:
        raise CalibrationError(f"calibration data {path!r} does not exist")
    counts = [_npz_count(f, inputs) for f in files]
    if sum(counts) == 0:
        raise CalibrationError(f"calibration data {path!r} holds no samples")

    def samples() -> Iterator[Feed]:
        for f, count in zip(files, counts):
            with np.load(f, allow_pickle=False) as z:
                arrays = {k: _samples_of(z[k], _spec(inputs, k, f), f) for k in z.files}
            for i in range(count):
                yield {k: a[i] for k, a in arrays.items()}

    return CalibrationSource(f"calibration data {path!r}", samples, inputs, sum(counts))


def _spec(inputs: Sequence[InputSpec], name: str, path: str) -> InputSpec:
    for s in inputs:
        if s.name == name:
            return s
    raise CalibrationError(f"calibration data {path!r}: array {name!r} is not a network "
                           f"input (inputs: {', '.join(s.name for s in inputs)})")


def _samples_of(a: np.ndarray, spec: InputSpec, path: str) -> np.ndarray:
    """The array as (samples, *build shape)."""
    return a.reshape(_sample_shape(a.shape, spec, path))


def _sample_shape(have: tuple[int, ...], spec: InputSpec, path: str) -> tuple[int, ...]:
    shape = spec.shape
    if len(have) == len(shape) + 1 and have[1:] == shape:
        return have
    if (len(have) == len(shape) and have and have[1:] == shape[1:] and shape[0] > 0
            and have[0] % shape[0] == 0):
        return (have[0] // shape[0], *shape)
    want = "x".join(map(str, shape))
    raise CalibrationError(f"calibration data {path!r}: array {spec.name!r} has shape "
                           f"{have}; expected (samples, {want.replace('x', ', ')}) "
                           f"(samples of the build shape {want})")


def _npz_count(path: str, inputs: Sequence[InputSpec]) -> int:
    """Samples in one file, after checking its names and shapes (headers only)."""
    counts = {}
    for k, shape in _npz_shapes(path).items():
        counts[k] = _sample_shape(shape, _spec(inputs, k, path), path)[0]
    missing = [s.name for s in inputs if s.name not in counts]
    if missing:
        raise CalibrationError(f"calibration data {path!r} has no array for input "
                               f"{missing[0]!r}")
    if len(set(counts.values())) > 1:
        raise CalibrationError(f"calibration data {path!r}: inputs hold different numbers "
                               f"of samples {counts}")
    return next(iter(counts.values()))


def _npz_shapes(path: str) -> dict[str, tuple[int, ...]]:
    """Each array's shape from its .npy header, without reading the data."""
    shapes = {}
    try:
        with zipfile.ZipFile(path) as zf:
            for member in zf.namelist():
                with zf.open(member) as f:
                    version = np.lib.format.read_magic(f)
                    header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                              else np.lib.format.read_array_header_2_0)
                    shapes[member.removesuffix(".npy")] = header(f)[0]
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise CalibrationError(f"cannot read calibration data {path!r}: {e}") from e
    return shapes


def script_source(spec: str, inputs: Sequence[InputSpec]) -> CalibrationSource:
    """``--data-loader-script=file.py[:func]``: ``func()`` (default ``load_data``) returns an
    iterable of feed dicts, as Polygraphy's data loader scripts do. Called once per pass."""
    path, func = spec, "load_data"
    head, sep, tail = spec.rpartition(":")
    if sep and tail.isidentifier() and head:
        path, func = head, tail
    if not os.path.isfile(path):
        raise CalibrationError(f"data loader script {path!r} does not exist")
    module_spec = importlib.util.spec_from_file_location("pydla_data_loader", path)
    if module_spec is None or module_spec.loader is None:
        raise CalibrationError(f"data loader script {path!r} is not a Python file")
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001  (a user's script may raise anything)
        raise CalibrationError(f"data loader script {path!r} raised {type(e).__name__} "
                               f"while loading: {e}") from e
    load = getattr(module, func, None)
    if not callable(load):
        raise CalibrationError(f"data loader script {path!r} has no function {func!r}")
    return CalibrationSource(f"data loader script {path!r} ({func})", load, inputs)
