"""Tools on int8 layers: layer info (pydla inspect, --dumpLayerInfo) carries each quantized
layer's precision and scales."""

import numpy as np
from onnx import helper

from pydla.builder import BuildOptions, build
from pydla.loadable import read_loadable
from pydla.tools.cmd_build import format_layer_info
from pydla.tools.layerinfo import layer_info
from tests.oracle import make_model


def test_layer_info_shows_int8_precision_and_scales():
    inits = {"xs": np.array(0.05, np.float32), "xz": np.array(128, np.uint8),
             "w": np.ones((4, 3, 1, 1), np.int8),
             "ws": np.array([0.01, 0.02, 0.03, 0.04], np.float32), "wz": np.zeros(4, np.int8),
             "ys": np.array(0.5, np.float32), "yz": np.array(3, np.uint8)}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"],
                            ["y"], name="qconv")
    model = make_model([node], {"x": (np.uint8, [1, 3, 4, 4])}, ["y"], inits, opset=10)
    info = layer_info(read_loadable(build(model, BuildOptions(autotune=False))))
    (layer,) = info["layers"]
    assert layer["type"] == "QConv" and layer["precision"] == "int8"
    assert layer["quantization"] == {
        "x": {"scale": 0.05000000074505806, "zero_point": 128},
        "w": {"scale_min": 0.009999999776482582, "scale_max": 0.03999999910593033,
              "channels": 4, "zero_point": 0},
        "y": {"scale": 0.5, "zero_point": 3}}
    assert "scales x 0.05@128, w 0.01..0.04 (4 channels), y 0.5@3" in format_layer_info(info)
