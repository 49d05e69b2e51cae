"""``pydla check --target=cuda`` on int8 convolutions (issue 26 item 3): the QConv layers a
QDQ-quantized network folds into, QLinearConv and ConvInteger have a CUDA kernel
(``kernels/qconv.py``); 3-D ones and run-time weights are refused with their reason —
known without a GPU."""

from __future__ import annotations

import logging

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from pydla.backends.cuda.coverage import CPU_ONLY, CUDA_OPS, check_cuda_model, registered_ops
from tests.gpu.int8_cases import CASES


def test_qconv_is_registered_and_no_longer_listed_as_cpu_only() -> None:
    assert "QConv" in CUDA_OPS and "QConv" not in CPU_ONLY
    assert registered_ops()["QConv"] == "qconv.py"


def test_a_quantized_network_has_no_gap_as_built_for_cuda() -> None:
    logging.disable(logging.WARNING)  # onnxruntime's quantizer advises pre-processing
    try:
        model, _ = CASES["qdq_convnet_u8"]()
    finally:
        logging.disable(logging.NOTSET)
    report = check_cuda_model(model, built=True)
    qconvs = [v for v in report.layers if v.op == "QConv"]
    assert len(qconvs) == 5
    assert any(v.op == "MaxPool" and v.supported for v in report.layers)  # uint8
    assert report.gaps() == {}, [(v.name, v.refusal) for v in report.layers if not v.supported]


def test_qlinear_conv_and_conv_integer_are_covered_and_3d_is_refused() -> None:
    for name in ("qlinear_conv2d_u8w", "qlinear_conv1d", "residual_int8", "residual_float"):
        model, _ = CASES[name]()
        for built in (False, True):
            report = check_cuda_model(model, built=built)
            assert report.gaps() == {}, (name, built, report.gaps())
    w = numpy_helper.from_array(np.ones((4, 2, 3, 3, 3), np.int8), "w")
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"], name="conv3d_int")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.UINT8, [1, 2, 5, 5, 5])], [helper.make_empty_tensor_value_info("y")],
        [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    [verdict] = [v for v in check_cuda_model(model).layers if v.name == "conv3d_int"]
    assert not verdict.supported and verdict.refusal is not None
    assert verdict.refusal.rule == "cuda.shape" and "3-D int8 convolution" in \
        verdict.refusal.reason
