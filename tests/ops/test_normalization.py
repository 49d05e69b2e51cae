"""The normalizations against onnxruntime."""

import numpy as np
import pytest
from onnx import helper, numpy_helper

from pydla.builder import build
from pydla.errors import ModelImportError
from tests.oracle import check_against_ort, make_model

RNG = np.random.default_rng(2)


def _rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def _check(op: str, x: np.ndarray, params: dict[str, np.ndarray], outputs=("y",),
           opset: int = 17, tol: float = 1e-4, **attrs) -> None:
    node = helper.make_node(op, ["x", *params], list(outputs), **attrs)
    if op in ("GroupNormalization", "MeanVarianceNormalization"):
        # ONNX's inference does not type these function ops: declare Y like X.
        vi = helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(x.dtype),
                                           list(x.shape))
        xi = helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype),
                                           list(x.shape))
        graph = helper.make_graph([node], "test", [xi], [vi],
                                  [numpy_helper.from_array(v, k) for k, v in params.items()])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 10
    else:
        model = make_model([node], {"x": (x.dtype, x.shape)}, [o for o in outputs if o], params,
                           opset=opset)
    check_against_ort(model, {"x": x}, rtol=tol, atol=tol)


def _bn_params(c: int, shape: tuple[int, ...] | None = None) -> dict[str, np.ndarray]:
    shape = shape or (c,)
    return {"s": _rand(*shape), "b": _rand(*shape), "m": _rand(*shape),
            "v": RNG.uniform(0.5, 2.0, shape).astype(np.float32)}


@pytest.mark.parametrize("opset", [7, 9, 14, 15])
def test_batch_normalization(opset):
    _check("BatchNormalization", _rand(2, 3, 4, 5), _bn_params(3), opset=opset, epsilon=1e-3)
    _check("BatchNormalization", _rand(2, 3), _bn_params(3), opset=opset)


def test_batch_normalization_spatial0_and_fp16():
    _check("BatchNormalization", _rand(2, 3, 2, 2), _bn_params(3, (3, 2, 2)), opset=7, spatial=0)
    params = {k: v.astype(np.float16) for k, v in _bn_params(3).items()}
    _check("BatchNormalization", _rand(1, 3, 4, 4, dtype=np.float16), params, tol=1e-2)


def test_batch_normalization_constant_folded():
    params = _bn_params(2)
    nodes = [helper.make_node("BatchNormalization", ["c", *params], ["n"]),
             helper.make_node("Add", ["n", "x"], ["y"])]
    model = make_model(nodes, {"x": (np.float32, [1, 2, 3])}, ["y"],
                       params | {"c": _rand(1, 2, 3)})
    check_against_ort(model, {"x": _rand(1, 2, 3)})


def test_instance_normalization():
    _check("InstanceNormalization", _rand(2, 3, 4, 5), {"s": _rand(3), "b": _rand(3)},
           epsilon=1e-3)
    _check("InstanceNormalization", _rand(2, 3, 6), {"s": _rand(3), "b": _rand(3)}, opset=7)


@pytest.mark.parametrize("axis", [-1, -2, 1, 0])
def test_layer_normalization(axis):
    x = _rand(2, 3, 4)
    pshape = x.shape[axis % 3:]
    _check("LayerNormalization", x, {"s": _rand(*pshape), "b": _rand(*pshape)},
           outputs=("y", "mean", "inv"), axis=axis, epsilon=1e-3)


def test_layer_normalization_variants():
    _check("LayerNormalization", _rand(3, 5), {"s": _rand(5)})  # no bias, one output
    _check("LayerNormalization", _rand(2, 3, 4), {"s": _rand(4), "b": _rand(4)},
           outputs=("y", "", "inv"))
    _check("LayerNormalization", _rand(2, 8, dtype=np.float16),
           {"s": _rand(8, dtype=np.float16), "b": _rand(8, dtype=np.float16)}, tol=1e-2)


@pytest.mark.parametrize("groups,opset", [(2, 21), (4, 21), (1, 21), (2, 18)])
def test_group_normalization(groups, opset):
    n = 4 if opset >= 21 else groups  # one scale per channel from opset 21, per group before
    _check("GroupNormalization", _rand(2, 4, 3, 3), {"s": _rand(n), "b": _rand(n)},
           opset=opset, num_groups=groups, epsilon=1e-3)


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_normalization(axis):
    x = _rand(2, 3, 4)
    _check("RMSNormalization", x, {"s": _rand(*x.shape[axis % 3:])}, opset=23, axis=axis)


@pytest.mark.parametrize("p,axis", [(1, -1), (2, 1), (2, 0)])
def test_lp_normalization(p, axis):
    x = _rand(3, 4, 5)
    x[0, 0] = 0  # a zero vector stays zero
    _check("LpNormalization", x, {}, p=p, axis=axis)


@pytest.mark.parametrize("size", [1, 3, 5])  # onnxruntime takes odd sizes only
def test_lrn(size):
    _check("LRN", _rand(2, 6, 3, 3), {}, size=size, alpha=1e-2, beta=0.6, bias=2.0)


@pytest.mark.parametrize("opset,axes", [(9, None), (13, [1]), (13, [-1, -2])])
def test_mean_variance_normalization(opset, axes):
    attrs = {} if axes is None else {"axes": axes}
    _check("MeanVarianceNormalization", _rand(2, 3, 4, 5), {}, opset=opset, **attrs)


@pytest.mark.parametrize("opset,attrs,outputs", [(9, {}, ["y", "mean", "var"]),
                                                 (15, {"training_mode": 1}, ["y", "rm", "rv"])])
def test_batch_normalization_training_refused(opset, attrs, outputs):
    params = _bn_params(3)
    node = helper.make_node("BatchNormalization", ["x", *params], outputs, **attrs)
    model = make_model([node], {"x": (np.float32, [2, 3, 2])}, ["y"], params, opset=opset)
    with pytest.raises(ModelImportError, match="training mode"):
        build(model)


@pytest.mark.parametrize("spatial,pshape", [(1, (3,)), (0, (3, 4, 4))])
def test_conv_then_batch_normalization(spatial, pshape):
    """Per-channel BN after Conv (foldable) and per-element spatial=0 BN (Mul + Add)."""
    params = {k: RNG.uniform(0.5, 1.5, pshape).astype(np.float32) for k in "sbmv"}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", *params], ["y"], spatial=spatial)]
    model = make_model(nodes, {"x": (np.float32, (1, 2, 4, 4))}, ["y"],
                       {"w": _rand(3, 2, 3, 3)} | params, opset=7)
    check_against_ort(model, {"x": _rand(1, 2, 4, 4)})
