"""ScatterElements on its numba loop (pydla.backends.cpu.kernels.fast_scatter): every
reduction, axes first/middle/last, negative and repeated indices, int32/int64 indices,
float and int data — against onnxruntime; a bad index is a KernelError; shapes the loop
does not take stay on the reference kernel, still correct."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from pydla.builder import BuildOptions, build
from pydla.engine import LoadedModule
from pydla.errors import KernelError
from pydla.loadable import read_loadable
from tests.oracle import assert_close, make_model, run_ort

RNG = np.random.default_rng(31)


def _case(data_shape, idx_shape, axis, reduction, dtype=np.float32, idx_dtype=np.int64):  # noqa: ANN001, ANN202
    dim = data_shape[axis]
    idx = RNG.integers(-dim, dim, idx_shape).astype(idx_dtype)  # repeats and negatives
    if dtype == np.float32:
        data = RNG.standard_normal(data_shape).astype(dtype)
        upd = RNG.standard_normal(idx_shape).astype(dtype)
    else:
        data = RNG.integers(-5, 5, data_shape).astype(dtype)
        upd = RNG.integers(-3, 4, idx_shape).astype(dtype)
    attrs = {"axis": axis} | ({} if reduction == "none" else {"reduction": reduction})
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], **attrs)
    feeds = {"x": data, "i": idx, "u": upd}
    model = make_model([node], {k: (v.dtype, v.shape) for k, v in feeds.items()}, ["y"],
                       opset=18)
    return model, feeds


def _built(model):  # noqa: ANN001, ANN202
    data = build(model, BuildOptions(autotune=False))
    [layer] = [lay for lay in read_loadable(data).layers if lay.op == "ScatterElements"]
    return LoadedModule(data), layer.tactic


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("data_shape,idx_shape,axis", [
    ((50, 16), (400, 16), 0),       # index_add of edge messages onto atoms
    ((3, 7, 5), (3, 11, 5), 1),
    ((4, 6), (4, 9), -1),
])
def test_loop_matches_onnxruntime(data_shape, idx_shape, axis, reduction) -> None:  # noqa: ANN001
    model, feeds = _case(data_shape, idx_shape, axis, reduction)
    module, tactic = _built(model)
    assert tactic == "loop"
    want = run_ort(model, feeds)
    if reduction == "none":  # repeated indices: onnxruntime's order, the last one wins
        assert_close(module.run(feeds), want, rtol=0, atol=0)
    else:
        assert_close(module.run(feeds), want, rtol=1e-5, atol=1e-5)


def test_int_data_and_int32_indices() -> None:
    model, feeds = _case((20, 3), (60, 3), 0, "add", dtype=np.int32, idx_dtype=np.int32)
    module, tactic = _built(model)
    assert tactic == "loop"
    assert_close(module.run(feeds), run_ort(model, feeds), rtol=0, atol=0)


def test_bad_index_is_a_kernel_error() -> None:
    model, feeds = _case((10, 4), (30, 4), 0, "add")
    module, _ = _built(model)
    feeds["i"][7, 2] = 10
    with pytest.raises(KernelError, match="index 10 is out of range for axis 0 of size 10"):
        module.run(feeds)


def test_smaller_indices_on_another_axis_stay_on_the_reference() -> None:
    model, feeds = _case((10, 6), (12, 4), 0, "add")  # indices narrower than the data
    module, tactic = _built(model)
    assert tactic == "reference"
    assert_close(module.run(feeds), run_ort(model, feeds), rtol=1e-5, atol=1e-5)
