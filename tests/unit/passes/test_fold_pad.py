import numpy as np
import pytest

from pydla.passes import PassContext
from pydla.passes.fold_pad import FoldPad
from tests.unit.passes.helpers import F32, apply, assert_matches_ort, imported, model, node, ops

RNG = np.random.default_rng(3)
W = (0.3 * RNG.standard_normal((4, 3, 3, 3))).astype(F32)
SPATIAL = [0, 0, 1, 2, 0, 0, 1, 1]  # begins (N, C, H, W), then ends


def padded(host: str, pads=SPATIAL, value: float = 0.0, mode: str = "constant",
           extra_outputs: tuple[str, ...] = (), **host_attrs):
    inits: dict[str, np.ndarray] = {"pads": np.array(pads, np.int64)}
    pad_inputs = ["x", "pads"]
    if mode == "constant":
        inits["value"] = np.array(value, F32)
        pad_inputs.append("value")
    nodes = [node("Pad", pad_inputs, "p", mode=mode)]
    if host == "Conv":
        inits["w"] = W
        nodes.append(node("Conv", ["p", "w"], "y", pads=[1, 0, 1, 0], **host_attrs))
    else:
        nodes.append(node(host, ["p"], "y", kernel_shape=[3, 3], pads=[1, 0, 0, 0],
                          **host_attrs))
    return model(nodes, {"x": [1, 3, 7, 8]}, ["y", *extra_outputs], inits)


@pytest.mark.parametrize("host,value,attrs", [
    ("Conv", 0.0, {}), ("Conv", 0.0, {"strides": [2, 2]}),
    ("AveragePool", 0.0, {"count_include_pad": 1}),
    ("AveragePool", 0.0, {"count_include_pad": 1, "ceil_mode": 1, "strides": [2, 2]}),
    ("MaxPool", -np.inf, {}),
])
def test_pad_folds_into_the_layer(host, value, attrs):
    m = padded(host, value=value, **attrs)
    g = imported(m)
    own = list(g.nodes[1].attrs["pads"])
    assert apply(g, FoldPad())
    assert ops(g) == [host]
    assert g.nodes[0].inputs[0].name == "x"
    assert g.nodes[0].attrs["pads"] == [own[0] + 1, own[1] + 2, own[2] + 1, own[3] + 1]
    assert "Pad_p" in g.nodes[0].fused_from
    assert_matches_ort(m, g)


@pytest.mark.parametrize("host,kw,reason", [
    ("AveragePool", {"count_include_pad": 0}, "count_include_pad=0"),
    ("MaxPool", {"value": 0.0}, "-inf"),
    ("Conv", {"value": 1.0}, "zeros"),
    ("Conv", {"pads": [1, 0, 1, 1, 0, 0, 1, 1]}, "batch"),
    ("Conv", {"pads": [0, 0, 3, 0, 0, 0, 0, 0]}, "smaller than the kernel"),
    ("MaxPool", {"value": -np.inf, "pads": [0, 0, 1, 3, 0, 0, 0, 0]}, "smaller than the kernel"),
    ("Conv", {"pads": [0, 0, 1, -1, 0, 0, 1, 1]}, "crop"),
    ("Conv", {"mode": "reflect"}, "not constant"),
])
def test_refuses_what_the_layer_cannot_pad(host, kw, reason):
    m = padded(host, **kw)
    g = imported(m)
    ctx = PassContext()
    assert not apply(g, FoldPad(), ctx=ctx)
    assert ops(g) == ["Pad", host]
    assert any("kept Pad" in line and reason in line for line in ctx.log)
    assert_matches_ort(m, g)


def test_pad_with_another_reader_stays():
    m = padded("Conv", extra_outputs=("p",))
    g = imported(m)
    assert not apply(g, FoldPad())
    assert ops(g) == ["Pad", "Conv"]


def test_max_pool_with_indices_stays():
    m = model([node("Pad", ["x", "pads", "value"], "p"),
               node("MaxPool", ["p"], ["y", "idx"], kernel_shape=[2, 2])],
              {"x": [1, 2, 4, 4]}, ["y", "idx"],
              {"pads": np.array(SPATIAL, np.int64), "value": np.array(-np.inf, F32)})
    g = imported(m)
    assert not apply(g, FoldPad())
    assert ops(g) == ["Pad", "MaxPool"]
