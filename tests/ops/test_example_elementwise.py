import numpy as np
from onnx import helper

from tests.oracle import check_against_ort, make_model


def test_add_relu_broadcast():
    model = make_model([helper.make_node("Add", ["x", "b"], ["s"]),
                        helper.make_node("Relu", ["s"], ["y"])],
                       {"x": (np.float32, [2, 3, 4])}, ["y"],
                       {"b": np.linspace(-1, 1, 4, dtype=np.float32)})
    check_against_ort(model, {"x": np.random.default_rng(0).standard_normal((2, 3, 4),
                                                                            np.float32)})
