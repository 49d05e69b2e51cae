"""Test helpers: make small ONNX models and check pydla against onnxruntime (the oracle)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from pydla.builder import BuildOptions, build
from pydla.engine import LoadedModule


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Mapping[str, tuple[np.dtype, Sequence]],
               outputs: Sequence[str], initializers: Mapping[str, np.ndarray] | None = None,
               opset: int = 17) -> onnx.ModelProto:
    """A model whose output types are filled by ONNX shape inference."""
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(dt)),
                                         list(shape)) for n, (dt, shape) in inputs.items()]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in (initializers or {}).items()]
    outs = [helper.make_empty_tensor_value_info(n) for n in outputs]
    graph = helper.make_graph(list(nodes), "test", ins, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)
    inferred = onnx.shape_inference.infer_shapes(model)
    known = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    del model.graph.output[:]
    for n in outputs:
        vi = known.get(n)
        if vi is None or not vi.type.tensor_type.elem_type:
            raise ValueError(f"ONNX cannot infer the type of output {n!r}")
        out = onnx.ValueInfoProto()
        out.CopyFrom(vi)
        model.graph.output.append(out)
    return model


def run_ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, dict(feeds))


def run_pydla(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
              options: BuildOptions | None = None) -> list[np.ndarray]:
    module = LoadedModule(build(model, options))
    return module.run({k: v for k, v in feeds.items() if k in module.input_names})


def assert_close(got: Sequence[np.ndarray], want: Sequence[np.ndarray], rtol: float = 1e-4,
                 atol: float = 1e-5, names: Sequence[str] | None = None) -> None:
    assert len(got) == len(want), f"{len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        label = names[i] if names else f"output {i}"
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"{label}: shape {g.shape}, expected {w.shape}"
        assert g.dtype == w.dtype, f"{label}: dtype {g.dtype}, expected {w.dtype}"
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=label)
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                       atol=atol, err_msg=label)


def check_against_ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], rtol: float = 1e-4,
                      atol: float = 1e-5, options: BuildOptions | None = None) -> list[np.ndarray]:
    """Build and run with pydla, run with onnxruntime, compare every output."""
    want = run_ort(model, feeds)
    got = run_pydla(model, feeds, options)
    assert_close(got, want, rtol, atol, [o.name for o in model.graph.output])
    return got


def model_tolerance_ok(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> list[float]:
    """The core tolerance for whole models: max|Δ| ≤ 1e-3 · max(1, max|reference|)."""
    errs = []
    for g, w in zip(got, want):
        w64 = np.asarray(w, np.float64)
        err = float(np.max(np.abs(np.asarray(g, np.float64) - w64))) if w64.size else 0.0
        bound = 1e-3 * max(1.0, float(np.max(np.abs(w64))) if w64.size else 1.0)
        assert err <= bound, f"max|Δ| {err:.3g} exceeds {bound:.3g}"
        errs.append(err)
    return errs
