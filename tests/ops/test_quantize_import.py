"""QuantizeLinear/DequantizeLinear import: parameter shapes real models use, and the
refusals of bad parameters (each naming the node and tensor)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pydla.errors import ModelImportError
from tests.oracle import check_against_ort, make_model, run_pydla


def _pair(scale, zero_point, opset=13, **attrs):
    """x -> QuantizeLinear -> DequantizeLinear, sharing one scale and zero point."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], **attrs),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], **attrs)]
    return make_model(nodes, {"x": (np.float32, [2, 3, 4])}, ["q", "y"],
                      {"s": scale, "z": zero_point}, opset=opset)


def _x(seed=0):
    return (np.random.default_rng(seed).standard_normal((2, 3, 4)) * 30).astype(np.float32)


@pytest.mark.parametrize("scale_shape,zp_shape", [((1,), ()), ((), (1,)), ((1,), (1,))])
def test_scalar_and_one_element_parameters_mix(scale_shape, zp_shape):
    # onnxruntime's quantizer and exported QAT models pair a scalar zero point with a
    # one-element scale: valid ONNX, one per-tensor parameter.
    model = _pair(np.full(scale_shape, 0.3, np.float32), np.full(zp_shape, 7, np.uint8))
    check_against_ort(model, {"x": _x()})


@pytest.mark.parametrize("bad", [0.0, -0.5, np.inf])
def test_non_positive_scale_refused(bad):
    scale = np.array([0.2, bad, 0.4], np.float32)
    model = _pair(scale, np.zeros(3, np.int8), axis=1)
    with pytest.raises(ModelImportError, match=r"QuantizeLinear.*scale 's'.*index \(1,\)"):
        run_pydla(model, {"x": _x()})


def test_zero_point_type_must_match_input():
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])]
    model = make_model(nodes, {"x": (np.int8, [4])}, ["y"],
                       {"s": np.array(0.5, np.float32), "z": np.array(1, np.uint8)}, opset=13)
    with pytest.raises(ModelImportError, match="zero point 'z' type uint8 differs from the "
                                               "type int8 of input 'x'"):
        run_pydla(model, {"x": np.zeros(4, np.int8)})


def test_zero_point_type_must_match_output_dtype():
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"],
                            output_dtype=TensorProto.INT8)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, [4])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "s"),
         numpy_helper.from_array(np.array(1, np.uint8), "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(ModelImportError, match="output_dtype INT8 differs from the type uint8 "
                                               "of zero point 'z'"):
        run_pydla(model, {"x": np.zeros(4, np.float32)})


def test_axis_out_of_range_refused():
    model = _pair(np.full(3, 0.2, np.float32), np.zeros(3, np.int8), axis=3)
    with pytest.raises(ModelImportError, match="axis 3 is out of range for input 'x' of rank 3"):
        run_pydla(model, {"x": _x()})


@pytest.mark.parametrize("n,zn", [(4, 4), (3, 2)])
def test_per_axis_length_mismatch_refused(n, zn):
    model = _pair(np.full(n, 0.2, np.float32), np.zeros(zn, np.int8), axis=1)
    with pytest.raises(ModelImportError, match="'QuantizeLinear_0'|QuantizeLinear") as err:
        run_pydla(model, {"x": _x()})
    assert "'s'" in str(err.value) or "'z'" in str(err.value)
