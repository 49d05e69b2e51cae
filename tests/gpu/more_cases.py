"""Small networks for the CUDA kernels of Resize, LayerNormalization, BatchNormalization,
Reduce*, MatMul, Gather, Slice, Split, LSTM, ConvTranspose, strided Softmax and reshapes
into channels-last tensors (no CUDA needed to build them: ``tests/gpu/test_more_kernels``
runs them on the GPU against the CPU backend)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from tests.models.netbuilder import Net

N, C, H, W = 2, 12, 13, 11
Feeds = dict[str, np.ndarray]


def _image(shape: tuple[int, ...], seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _net(body: Callable[[Net, str], str]) -> tuple[onnx.ModelProto, Feeds]:
    n = Net("more", seed=3)
    x = n.input("x", [N, C, H, W])
    return n.model([body(n, x)]), {"x": _image((N, C, H, W))}


def _f32(values: list[float]) -> np.ndarray:
    return np.array(values, np.float32)


def _resize(mode: str, scales: list[float], **attrs: object) -> Callable[[Net, str], str]:
    def body(n: Net, x: str) -> str:
        y = n.conv(x, C, 8, 3)
        return n.op("Resize", [y, "", n.const(_f32(scales), "scales")], mode=mode, **attrs)

    return body


def _lstm(direction: str, states: bool, layout: int = 0, peepholes: bool = False
          ) -> tuple[onnx.ModelProto, Feeds]:
    steps, batch, size, hidden = 7, 3, 10, 12
    dirs = 2 if direction == "bidirectional" else 1
    n = Net("lstm", seed=5)
    shape = [batch, steps, size] if layout else [steps, batch, size]
    x = n.input("x", shape)
    ins = [x, n.weight(dirs, 4 * hidden, size), n.weight(dirs, 4 * hidden, hidden),
           n.const((0.1 * n.rng.standard_normal((dirs, 8 * hidden))).astype(np.float32))]
    feeds = {"x": _image(tuple(shape), 11)}
    if states or peepholes:
        state = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
        ins += ["", n.input("h0", state), n.input("c0", state)]
        feeds["h0"] = 0.5 * _image(tuple(state), 12)
        feeds["c0"] = 0.5 * _image(tuple(state), 13)
    if peepholes:
        ins.append(n.const((0.2 * n.rng.standard_normal((dirs, 3 * hidden))).astype(np.float32)))
    ys, yh, yc = n.op("LSTM", ins, n_out=3, hidden_size=hidden, direction=direction,
                      layout=layout)
    return n.model([ys, yh, yc]), feeds


def _matmul_3d(n: Net, x: str) -> str:
    t = n.op("Reshape", [n.conv(x, C, 16, 3), n.shape_const([N, 16, H * W])])
    t = n.op("Transpose", [t], perm=[0, 2, 1])  # [N, HW, 16]
    return n.op("Add", [n.op("MatMul", [t, n.weight(16, 24)]),
                        n.const(np.linspace(-1, 1, 24).astype(np.float32))])


def _attention(n: Net, x: str) -> str:
    q = n.conv(x, C, 8, 1, act=None)  # [N, 8, H, W]: 8 heads of W features
    k = n.conv(x, C, 8, 1, act=None)
    s = n.op("MatMul", [q, n.op("Transpose", [k], perm=[0, 1, 3, 2])])  # [N, 8, H, H]
    s = n.op("Softmax", [n.op("Div", [s, n.const(np.float32(3.0))])], axis=-1)
    return n.op("MatMul", [s, q])


CASES: dict[str, Callable[[], tuple[onnx.ModelProto, Feeds]]] = {
    "resize_nearest_x2": lambda: _net(_resize("nearest", [1, 1, 2, 2])),
    "resize_nearest_asym_floor": lambda: _net(_resize(
        "nearest", [1, 1, 1.5, 0.5], coordinate_transformation_mode="asymmetric",
        nearest_mode="floor")),
    "resize_linear_half_pixel": lambda: _net(_resize(
        "linear", [1, 1, 2, 3], coordinate_transformation_mode="half_pixel")),
    "resize_linear_align_corners": lambda: _net(_resize(
        "linear", [1, 1, 1.5, 2], coordinate_transformation_mode="align_corners")),
    "resize_linear_pytorch_down": lambda: _net(_resize(
        "linear", [1, 1, 0.5, 0.5], coordinate_transformation_mode="pytorch_half_pixel")),
    "resize_cubic": lambda: _net(_resize("cubic", [1, 1, 2, 2])),
    "layernorm_tokens": lambda: _net(lambda n, x: n.op("LayerNormalization", [
        n.op("Reshape", [n.conv(x, C, 16, 3), n.shape_const([N, 16, H * W])]),
        n.const(np.linspace(0.5, 1.5, H * W).astype(np.float32)),
        n.const(np.linspace(-0.2, 0.2, H * W).astype(np.float32))], axis=-1, epsilon=1e-5)),
    "layernorm_nhwc_last_axes": lambda: _net(lambda n, x: n.op("LayerNormalization", [
        n.conv(x, C, 16, 3), n.const(np.linspace(0.5, 1.5, H * W).astype(np.float32)
                                     .reshape(H, W))], axis=2)),
    "layernorm_primitive": lambda: _net(lambda n, x: n.layernorm_primitive(
        n.op("Reshape", [x, n.shape_const([N, C, H * W])]), H * W)),
    "batchnorm_standalone": lambda: _net(lambda n, x: n.bn(n.op("Relu", [x]), C)),
    "reduce_mean_hw_keep": lambda: _net(lambda n, x: n.op("ReduceMean", [n.conv(x, C, 16, 3)],
                                                         axes=[2, 3], keepdims=1)),
    "reduce_sum_channels": lambda: _net(lambda n, x: n.op("ReduceSum", [
        n.conv(x, C, 16, 3), n.shape_const([1])], keepdims=0)),
    "reduce_max_c_w": lambda: _net(lambda n, x: n.op("ReduceMax", [n.conv(x, C, 16, 3)],
                                                    axes=[1, 3], keepdims=0)),
    "reduce_min_all": lambda: _net(lambda n, x: n.op("ReduceMin", [x], keepdims=1)),
    "reduce_l2_h": lambda: _net(lambda n, x: n.op("ReduceL2", [x], axes=[2], keepdims=1)),
    "reduce_logsumexp_w": lambda: _net(lambda n, x: n.op("ReduceLogSumExp", [x], axes=[3],
                                                         keepdims=0)),
    "matmul_nhwc_weight": lambda: _net(lambda n, x: n.op("MatMul", [n.conv(x, C, 16, 3),
                                                                   n.weight(W, 7)])),
    "matmul_tokens_bias": lambda: _net(_matmul_3d),
    "matmul_attention": lambda: _net(_attention),
    "gather_channels": lambda: _net(lambda n, x: n.op("Gather", [
        n.conv(x, C, 16, 3), n.const(np.array([3, 0, -1, 7], np.int64))], axis=1)),
    "gather_rows_2d": lambda: _net(lambda n, x: n.op("Gather", [
        n.conv(x, C, 16, 3), n.const(np.array([[1, 2], [4, 0]], np.int64))], axis=2)),
    "slice_steps": lambda: _net(lambda n, x: n.op("Slice", [
        n.conv(x, C, 16, 3), n.shape_const([1, 2]), n.shape_const([16, 13]),
        n.shape_const([1, 2]), n.shape_const([2, 3])])),
    "slice_negative_step": lambda: _net(lambda n, x: n.op("Slice", [
        x, n.shape_const([-1, 9]), n.shape_const([-100, 1]), n.shape_const([3, 1]),
        n.shape_const([-2, -3])])),
    "split_channels": lambda: _net(lambda n, x: n.op("Concat", [
        n.op("Relu", [a]) for a in n.op("Split", [n.conv(x, C, 16, 3), n.shape_const([5, 11])],
                                        n_out=2, axis=1)][::-1], axis=1)),
    "split_width": lambda: _net(lambda n, x: n.op("Concat", n.op(
        "Split", [n.op("Tanh", [x]), n.shape_const([5, 6])], n_out=2, axis=3)[::-1], axis=3)),
    "conv_transpose_s2": lambda: _net(lambda n, x: n.op("Relu", [n.op("ConvTranspose", [
        x, n.weight(C, 4, 3, 3), n.const(np.linspace(-0.1, 0.1, 8).astype(np.float32))],
        kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], group=2)])),
    "conv_transpose_k2": lambda: _net(lambda n, x: n.op("ConvTranspose", [
        x, n.weight(C, 6, 2, 2)], kernel_shape=[2, 2], strides=[2, 2])),
    "softmax_last_axis_nhwc": lambda: _net(lambda n, x: n.op("Softmax", [n.conv(x, C, 16, 3)],
                                                             axis=-1)),
    "reshape_into_nhwc": lambda: _net(lambda n, x: n.conv(n.op("Reshape", [
        n.op("Flatten", [n.conv(x, C, 8, 3)], axis=1), n.shape_const([N, 8, W, H])]), 8, 8, 3)),
    "lstm_forward": lambda: _lstm("forward", False),
    "lstm_bidirectional_states": lambda: _lstm("bidirectional", True),
    "lstm_reverse_batch_first": lambda: _lstm("reverse", True, layout=1),
    "lstm_peepholes": lambda: _lstm("forward", True, peepholes=True),
}
