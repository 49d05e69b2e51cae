"""``pydla.InferenceSession``: onnxruntime's session API over pydla's builder and runtime.

    sess = pydla.InferenceSession("model.onnx")             # or bytes, a ModelProto, a loadable
    [y] = sess.run(None, {"x": x})                            # outputs in the model's dtypes

A session over an ONNX model builds a loadable for the input shapes it is run with — the
first run with a new shape builds (or loads from the cache) and keeps the module; later
runs with that shape only run. Symbolic dimensions (a free batch, free image sizes) thus work
as onnxruntime users expect. Loadables are cached on disk, keyed by the model's digest, the
build options, the shapes and pydla's version (``cache_dir``, default
``~/.cache/pydla/sessions``; ``PYDLA_SESSION_CACHE`` moves it). A session over a loadable
runs its fixed shapes.

Inputs must have the model's exact types (as onnxruntime demands); bfloat16 tensors go in
and come out as ``ml_dtypes.bfloat16`` (the same bits, never a cast).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from pydla import __version__
from pydla.dtypes import DType
from pydla.errors import BuildError, PydlaError

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
_MODULES_KEPT = 8  # shapes whose modules a session keeps loaded (least recently used go)

_TYPE_NAMES = {
    DType.FLOAT32: "tensor(float)", DType.FLOAT16: "tensor(float16)",
    DType.BFLOAT16: "tensor(bfloat16)", DType.FLOAT64: "tensor(double)",
    DType.INT8: "tensor(int8)", DType.UINT8: "tensor(uint8)", DType.INT16: "tensor(int16)",
    DType.UINT16: "tensor(uint16)", DType.INT32: "tensor(int32)", DType.UINT32: "tensor(uint32)",
    DType.INT64: "tensor(int64)", DType.UINT64: "tensor(uint64)", DType.BOOL: "tensor(bool)",
}


_SEQ_MAP = "seq(map(int64,tensor(float)))"  # what onnxruntime calls a ZipMap's output


class SessionError(PydlaError):
    """A session call with wrong arguments (names, shapes, types, providers)."""


@dataclass(frozen=True)
class NodeArg:
    """An input or output as onnxruntime describes it: ``name``, ``shape`` (ints, and
    strings or None for symbolic dims) and ``type`` (``"tensor(float)"``)."""

    name: str
    shape: list[int | str | None]
    type: str


@dataclass(frozen=True)
class _Tensor:
    name: str
    shape: tuple[int | str | None, ...]
    dtype: DType
    # A ZipMap's output: the loadable holds the (N, C) probabilities, the session returns
    # onnxruntime's list of {label: probability} (build["zipmap"], docs/builder.md).
    zipmap: tuple[int, ...] | None = None


def numpy_dtype(type_name: str) -> np.dtype:
    """The numpy dtype of an onnxruntime type string (``"tensor(float)"`` → float32)."""
    for dtype, name in _TYPE_NAMES.items():
        if name == type_name:
            return _numpy_type(dtype)
    raise SessionError(f"no numpy type for {type_name!r}")


def _numpy_type(dtype: DType) -> np.dtype:
    if dtype is DType.BFLOAT16:
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype.np)


class InferenceSession:
    """``InferenceSession(model, providers=None, sess_options=None, cache_dir=None)``.

    ``model``: an ONNX file path, its bytes, an ``onnx.ModelProto``, or a loadable (path or
    bytes). ``providers``: onnxruntime's names — ``"CPUExecutionProvider"`` (the default)
    or ``"CUDAExecutionProvider"`` (pydla's CUDA backend; where it cannot run, the session
    falls back to the CPU with a warning, as onnxruntime does). ``sess_options``: an
    ``onnxruntime.SessionOptions``-like object; ``intra_op_num_threads`` sets pydla's thread
    count and ``graph_optimization_level`` 0 builds without optimizations.
    """

    def __init__(self, model: Any, providers: Sequence[Any] | None = None,
                 sess_options: Any = None, cache_dir: str | os.PathLike[str] | None = None,
                 **build_options: Any) -> None:
        self._providers = _providers(providers)
        # onnxruntime's CUDA provider option: the caller's stream, as an int (or a string)
        self._user_stream = _provider_option(providers, CUDA, "user_compute_stream")
        self._threads = int(getattr(sess_options, "intra_op_num_threads", 0) or 0)
        level = getattr(sess_options, "graph_optimization_level", None)
        opt_level = 0 if level is not None and int(level) == 0 else 3
        self._build_options = {"opt_level": opt_level, **build_options}
        self._cache = Path(cache_dir or os.environ.get("PYDLA_SESSION_CACHE")
                           or Path.home() / ".cache" / "pydla" / "sessions")
        self._lock = threading.Lock()
        self._modules: OrderedDict[tuple[tuple[int, ...], ...], Any] = OrderedDict()
        data = _model_bytes(model)
        from pydla.loadable.format import MAGIC

        self._onnx: bytes | None = None if data[:len(MAGIC)] == MAGIC else data
        if self._onnx is None:
            module = self._load(data)
            program = module.program
            self._inputs = [_Tensor(t.name, t.shape, t.dtype) for t in
                            (program.tensors[io.tensor] for io in program.inputs)]
            maps = program.build.get("zipmap", {})
            self._outputs = [_Tensor(t.name, t.shape, t.dtype, _labels(maps, t.name, t.shape))
                             for t in (program.tensors[io.tensor] for io in program.outputs)]
            self._modules[tuple(tuple(t.shape) for t in self._inputs)] = module
            # an optimization profile's loadable runs every shape in its range (the module
            # picks the plan): dims that differ between its plans are symbolic, as in ONNX
            self._profiled = module if program.profiles is not None else None
            if self._profiled is not None:
                self._inputs, self._outputs = _profile_dims(program, self._inputs,
                                                            self._outputs)
        else:
            self._inputs, self._outputs = _onnx_io(self._onnx)
            self._digest = hashlib.sha256(self._onnx).hexdigest()
        # read at every run: worked out once
        self._input_names = frozenset(t.name for t in self._inputs)
        self._feed_types = [(t, _numpy_type(t.dtype), tuple(t.shape)) for t in self._inputs]
        self._output_types = {t.name: t for t in self._outputs}
        self._all_outputs = [t.name for t in self._outputs]
        # the module of the shapes run last, checked before the lock and the LRU order
        self._last: tuple[tuple[tuple[int, ...], ...], Any] | None = None

    # -- onnxruntime's description calls -----------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        return [NodeArg(t.name, list(t.shape), _TYPE_NAMES.get(t.dtype, "tensor(undefined)"))
                for t in self._inputs]

    def get_outputs(self) -> list[NodeArg]:
        return [NodeArg(t.name, [], _SEQ_MAP) if t.zipmap is not None else
                NodeArg(t.name, list(t.shape), _TYPE_NAMES.get(t.dtype, "tensor(undefined)"))
                for t in self._outputs]

    def get_providers(self) -> list[str]:
        return list(self._providers)

    # -- running -------------------------------------------------------------------------
    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: Any = None) -> list[np.ndarray]:
        """Outputs named ``output_names`` (None: all), in the model's dtypes."""
        feeds = self._check_feeds(input_feed)
        shapes = tuple(x.shape for x in feeds.values())  # numpy's: Python ints
        last = self._last
        module = last[1] if last is not None and last[0] == shapes else self._module(shapes)
        types = self._output_types
        wanted = self._all_outputs if not output_names else list(output_names)
        unknown = [n for n in wanted if n not in types]
        if unknown:
            raise SessionError(f"unknown output names {unknown}; the model's outputs are "
                               f"{list(types)}")
        results = module.run({t.name: _storage(feeds[t.name], t.dtype) for t in self._inputs})
        at = module.output_positions
        return [_logical(results[at[n]], types[n].dtype) if types[n].zipmap is None
                else _zipped(results[at[n]], types[n].zipmap) for n in wanted]

    def _check_feeds(self, input_feed: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The feeds as arrays, in the order of the model's inputs."""
        if input_feed.keys() != self._input_names:
            names = [t.name for t in self._inputs]
            unknown = sorted(set(input_feed) - set(names))
            if unknown:
                raise SessionError(f"unknown input names {unknown}; the model's inputs are "
                                   f"{names}")
            raise SessionError(f"missing inputs {[n for n in names if n not in input_feed]}")
        feeds = {}
        for t, dtype, shape in self._feed_types:
            x = input_feed[t.name]
            if type(x) is not np.ndarray:
                x = np.asarray(x)
            if x.dtype != dtype or x.shape != shape:  # else exactly the model's type
                _check_type(t, x.shape, x.dtype)
            feeds[t.name] = x
        return feeds

    # -- onnxruntime's I/O binding (pydla/iobinding.py) ------------------------------------
    def io_binding(self) -> Any:
        """An ``IOBinding`` for ``run_with_iobinding`` (device tensors in and out)."""
        from pydla.iobinding import IOBinding

        return IOBinding(self)

    def run_with_iobinding(self, iobinding: Any, run_options: Any = None,
                           stream: Any = None) -> None:
        """Run from and into the bound buffers. ``stream`` (or the CUDA provider option
        ``user_compute_stream``): queue the run on the caller's stream and return at once."""
        from pydla.iobinding import run

        on_gpu = self._providers[0] == CUDA
        handle = None
        if on_gpu and (stream is not None or self._user_stream):
            from pydla.backends.cuda.driver import stream_handle

            handle = stream_handle(stream if stream is not None else self._user_stream)
        run(iobinding, self._inputs, self._outputs, self._module, on_gpu, handle)

    def _check_io_name(self, name: str, role: str) -> None:
        names = [t.name for t in (self._inputs if role == "input" else self._outputs)]
        if name not in names:
            raise SessionError(f"unknown {role} name {name!r}; the model's {role}s are {names}")

    def _module(self, shapes: tuple[tuple[int, ...], ...]) -> Any:
        with self._lock:
            found = self._modules.get(shapes)
            if found is not None:
                self._modules.move_to_end(shapes)
                self._last = (shapes, found)
                return found
            if self._onnx is None and self._profiled is not None:
                return self._profiled
            if self._onnx is None:
                raise SessionError(f"the loadable runs shapes "
                                   f"{[t.shape for t in self._inputs]} only, given "
                                   f"{[list(s) for s in shapes]}")
            module = self._load(self._loadable(shapes))
            self._modules[shapes] = module
            while len(self._modules) > _MODULES_KEPT:
                self._modules.popitem(last=False)
            self._last = (shapes, module)  # never an evicted one: the newest stays
            return module

    def _loadable(self, shapes: tuple[tuple[int, ...], ...]) -> bytes:
        target = "cuda" if self._providers[0] == CUDA else "cpu"
        key = json.dumps({"model": self._digest, "pydla": __version__, "target": target,
                          "shapes": shapes, "options": self._build_options}, sort_keys=True)
        path = self._cache / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.bin"
        if path.is_file():
            return path.read_bytes()
        from pydla.builder import BuildOptions, build

        named = {t.name: s for t, s in zip(self._inputs, shapes)}
        data = build(self._onnx, BuildOptions(shapes=named, target=target,
                                              **self._build_options))
        try:  # the cache is an optimisation: a read-only home still runs
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except OSError as e:
            warnings.warn(f"pydla session cache {self._cache} not written: {e}", stacklevel=3)
        return data

    def _load(self, data: bytes) -> Any:
        from pydla.engine.module import LoadedModule

        if self._threads:
            from pydla.backends.cpu.threads import set_num_threads

            set_num_threads(self._threads)
        backend = None
        if self._providers[0] == CUDA:
            from pydla.backends.cuda import CudaBackend

            backend = CudaBackend()
        return LoadedModule(data, backend)


def _profile_dims(program: Any, inputs: list[_Tensor], outputs: list[_Tensor]
                  ) -> tuple[list[_Tensor], list[_Tensor]]:
    """Inputs and outputs with None for each dim that differs between the profile's plans."""
    plans = [program.profile_program(k) for k in range(len(program.profiles.profiles))]

    def dims(tensors: list[_Tensor], kind: str) -> list[_Tensor]:
        out = []
        for j, t in enumerate(tensors):
            shapes = {p.tensors[getattr(p, kind)[j].tensor].shape for p in plans}
            out.append(replace(t, shape=tuple(d if len({s[a] for s in shapes}) == 1 else None
                                              for a, d in enumerate(t.shape))))
        return out

    return dims(inputs, "inputs"), dims(outputs, "outputs")


def _providers(providers: Sequence[Any] | None) -> list[str]:
    names = [p[0] if isinstance(p, (tuple, list)) else p for p in (providers or [CPU])]
    unknown = [n for n in names if n not in (CPU, CUDA)]
    if unknown:
        raise SessionError(f"unknown providers {unknown}; pydla offers {CPU!r} and {CUDA!r}")
    if names[0] == CUDA and not _cuda_available():
        warnings.warn("CUDAExecutionProvider is not available here (no CUDA GPU or no "
                      "pydla[cuda]); running on CPUExecutionProvider", stacklevel=3)
        names = [n for n in names if n != CUDA] or [CPU]
    if CPU not in names:
        names.append(CPU)
    return names


def _provider_option(providers: Sequence[Any] | None, name: str, key: str) -> Any:
    for p in providers or ():
        if isinstance(p, (tuple, list)) and len(p) == 2 and p[0] == name and \
                isinstance(p[1], Mapping) and p[1].get(key) is not None:
            value = p[1][key]
            return int(value) if isinstance(value, str) else value
    return None


def _cuda_available() -> bool:
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount()) > 0
    except Exception:  # noqa: BLE001  (no CuPy, no driver, no device)
        return False


def _model_bytes(model: Any) -> bytes:
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    if hasattr(model, "SerializeToString"):
        return model.SerializeToString()
    path = Path(os.fspath(model))
    if not path.is_file():
        raise SessionError(f"{path}: no such model file" if not path.exists()
                           else f"{path}: not a file")
    data = path.read_bytes()
    from pydla.loadable.format import MAGIC

    if data[:len(MAGIC)] != MAGIC and _has_external_data(data):
        # tensors in files beside the model (model.onnx.data): read them from the model's
        # folder now, as onnxruntime does; the session keeps one self-contained model,
        # whose digest (the cache key) then covers the weights too
        from pydla.builder import load_model

        return load_model(path).SerializeToString()
    return data


def _has_external_data(data: bytes) -> bool:
    import onnx

    try:
        graph = onnx.load_from_string(data).graph
    except Exception:  # noqa: BLE001  (not ONNX: the caller's parse names the problem)
        return False
    tensors = [*graph.initializer, *(a.t for n in graph.node for a in n.attribute
                                     if a.HasField("t"))]
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in tensors)


def _onnx_io(data: bytes) -> tuple[list[_Tensor], list[_Tensor]]:
    from pydla.builder import load_model

    try:
        model = load_model(data)
    except PydlaError as e:
        raise BuildError(f"not an ONNX model or a loadable: {e}") from e
    graph = model.graph
    inits = {t.name for t in graph.initializer}
    inferred = _inferred_output_dims(model)
    from pydla.frontend.onnx.ops.ml import zipmap_outputs

    maps = zipmap_outputs(graph)

    def tensor(v: Any) -> _Tensor:
        if v.name in maps:
            return _Tensor(v.name, (), DType.FLOAT32, _labels(maps, v.name))
        tt = v.type.tensor_type
        dims: tuple[int | str | None, ...] = tuple(
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in tt.shape.dim)
        known = inferred.get(v.name)
        if known is not None and (not tt.HasField("shape") or len(known) == len(dims)):
            # onnxruntime describes an output with the dims its shape inference fixed
            dims = known if not tt.HasField("shape") else tuple(
                k if isinstance(k, int) and not isinstance(d, int) else d
                for d, k in zip(dims, known))
        try:
            dtype = DType(tt.elem_type)
        except ValueError:
            raise SessionError(f"tensor {v.name!r}: element type {tt.elem_type} (ONNX "
                               "TensorProto) has no pydla type") from None
        return _Tensor(v.name, dims, dtype)

    return ([tensor(v) for v in graph.input if v.name not in inits],
            [tensor(v) for v in graph.output])


def _inferred_output_dims(model: Any) -> dict[str, tuple[int | str | None, ...]]:
    """Graph outputs' dims as ONNX shape inference finds them (empty where it fails)."""
    import onnx

    try:
        graph = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # noqa: BLE001  (inference is a description nicety, never an error)
        return {}
    out = {}
    for v in graph.output:
        tt = v.type.tensor_type
        if tt.HasField("shape"):
            out[v.name] = tuple(d.dim_value if d.HasField("dim_value") else
                                (d.dim_param or None) for d in tt.shape.dim)
    return out


def _storage(x: np.ndarray, dtype: DType) -> np.ndarray:
    return x.view(np.uint16) if dtype is DType.BFLOAT16 else x


def _logical(y: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype is DType.BFLOAT16 and y.dtype == np.uint16:
        return y.view(_numpy_type(dtype))
    return y


def _check_type(t: _Tensor, shape: Sequence[int], dtype: np.dtype) -> None:
    """A feed's exact type and shape, as onnxruntime checks them (never element count)."""
    want = np.dtype(t.dtype.np) if t.dtype is not DType.BFLOAT16 else _numpy_type(t.dtype)
    if dtype != want:
        raise SessionError(f"input {t.name!r}: unexpected data type {np.dtype(dtype).name}, "
                           f"expected {_TYPE_NAMES.get(t.dtype, t.dtype.name)}")
    if len(shape) != len(t.shape):
        raise SessionError(f"input {t.name!r}: rank {len(shape)} given, expected "
                           f"{len(t.shape)} ({_dims(t.shape)})")
    for axis, (got, dim) in enumerate(zip(shape, t.shape)):
        if isinstance(dim, int) and got != dim:
            raise SessionError(f"input {t.name!r}: dimension {axis} is {got}, expected "
                               f"{dim} ({_dims(t.shape)})")


def _labels(maps: Any, name: str, shape: Sequence[Any] | None = None
            ) -> tuple[int, ...] | None:
    """The ZipMap labels of output ``name``, if any. A loadable's (``shape`` given) are
    untrusted metadata: a list of ints, one per column of a (N, C) output."""
    if not isinstance(maps, Mapping):
        raise SessionError(f"build metadata 'zipmap' is {type(maps).__name__}, not an "
                           "object of output names")
    if name not in maps:
        return None
    labels = maps[name]
    if not isinstance(labels, list) or any(isinstance(v, bool) or not isinstance(v, int)
                                           for v in labels):
        raise SessionError(f"build metadata zipmap[{name!r}] is not a list of int64 labels")
    if shape is not None and (len(shape) != 2 or shape[1] != len(labels)):
        raise SessionError(f"build metadata zipmap[{name!r}] has {len(labels)} labels for "
                           f"output {name!r} of shape {tuple(shape)} (one per column of (N, C))")
    return tuple(labels)


def _zipped(y: np.ndarray, labels: Sequence[int]) -> list[dict[int, float]]:
    """ZipMap's sequence of maps, one {label: probability} per row, as onnxruntime."""
    rows = np.asarray(y).reshape(-1, len(labels)).tolist()
    return [dict(zip(labels, row)) for row in rows]


def _dims(shape: Sequence[int | str | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
