"""TensorRT-style fusion on ResNet-50 (torchvision's architecture, built with onnx.helper)."""

from collections import Counter

from pydla.builder import BuildOptions, build
from pydla.loadable import read_loadable
from pydla.tools.layerinfo import layer_info
from tests.models.families import resnet50
from tests.oracle import model_tolerance_ok, run_ort, run_pydla


def test_resnet50_fuses_to_few_layers_and_small_memory():
    # 64×64 input: the same 53 convolutions, 16 residual blocks and layer structure as 224×224.
    model, feeds = resnet50(size=64)
    opts = BuildOptions(opt_level=2)  # every pass; kernels by heuristics (no timing)
    prog = read_loadable(build(model, opts))
    ops = Counter(lay.op for lay in prog.layers)
    # Reorders are layout, not fusion: the bottlenecks' 1×1 layers run channel-blocked, the
    # 3×3 layers planar, with at most a reorder on either side of each (pydla.plan.layouts).
    assert len(prog.layers) - ops["Reorder"] <= 60, ops
    assert ops["Reorder"] <= 2 * 16 + 4, ops
    assert ops["Conv"] == 53
    assert not {"BatchNormalization", "Relu", "Add", "Pointwise"} & set(ops), ops
    residual = [lay for lay in prog.layers if lay.op == "Conv" and "epilogue" in lay.attrs
                and [s["op"] for s in lay.attrs["epilogue"]["program"]] == ["Add", "Relu"]]
    assert len(residual) == 16  # every residual Add + ReLU runs inside a convolution
    for lay in prog.layers:
        if lay.op == "Conv":
            assert any(n.startswith("BatchNormalization") for n in lay.fused_from)
    mem = layer_info(prog)["memory"]
    assert mem["activation_bytes"] <= 0.5 * mem["naive_activation_bytes"]
    model_tolerance_ok(run_pydla(model, feeds, opts), run_ort(model, feeds))
