"""Real-world model families, built small with onnx.helper (no downloads).

Each builder returns (model, feeds). Widths and resolutions are parameters so that the
benchmarks can build full-size variants of the same graphs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto

from tests.models.netbuilder import Net

Feeds = dict[str, np.ndarray]


def _image(shape: tuple[int, ...], seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# -- YOLOv8-style detector: SiLU, C2f (Split/Concat), SPPF, Resize, DFL head ---------------
def yolov8(size: int = 64, width: int = 16, batch: int = 1, classes: int = 4
           ) -> tuple[onnx.ModelProto, Feeds]:
    n = Net("yolov8")
    x = n.input("images", [batch, 3, size, size])
    w = width

    def c2f(x: str, c: int, shortcut: bool) -> str:
        y = n.conv(x, c, c, 1, act="silu")
        a, b = n.op("Split", [y, n.shape_const([c // 2, c // 2])], n_out=2, axis=1)
        parts = [a, b]
        h = n.conv(n.conv(b, c // 2, c // 2, 3, act="silu"), c // 2, c // 2, 3, act="silu")
        parts.append(n.op("Add", [b, h]) if shortcut else h)
        return n.conv(n.op("Concat", parts, axis=1), c * 3 // 2, c, 1, act="silu")

    p1 = n.conv(x, 3, w, 3, 2, act="silu")
    p2 = c2f(n.conv(p1, w, 2 * w, 3, 2, act="silu"), 2 * w, True)
    p3 = c2f(n.conv(p2, 2 * w, 4 * w, 3, 2, act="silu"), 4 * w, True)  # stride 8
    p4 = c2f(n.conv(p3, 4 * w, 8 * w, 3, 2, act="silu"), 8 * w, True)  # stride 16
    # SPPF
    s = n.conv(p4, 8 * w, 4 * w, 1, act="silu")
    m1 = n.op("MaxPool", [s], kernel_shape=[5, 5], pads=[2, 2, 2, 2], strides=[1, 1])
    m2 = n.op("MaxPool", [m1], kernel_shape=[5, 5], pads=[2, 2, 2, 2], strides=[1, 1])
    m3 = n.op("MaxPool", [m2], kernel_shape=[5, 5], pads=[2, 2, 2, 2], strides=[1, 1])
    p4 = n.conv(n.op("Concat", [s, m1, m2, m3], axis=1), 16 * w, 8 * w, 1, act="silu")
    up = n.op("Resize", [p4, "", n.const(np.array([1, 1, 2, 2], np.float32), "scales")],
              mode="nearest")
    f3 = c2f(n.conv(n.op("Concat", [up, p3], axis=1), 12 * w, 4 * w, 1, act="silu"),
             4 * w, False)
    reg_max = 8
    outs = []
    anchors = []
    for feat, c, stride in ((f3, 4 * w, 8), (p4, 8 * w, 16)):
        box = n.conv(n.conv(feat, c, w, 3, act="silu"), w, 4 * reg_max, 1, act=None, bn=False,
                     bias=True)
        cls = n.conv(n.conv(feat, c, w, 3, act="silu"), w, classes, 1, act=None, bn=False,
                     bias=True)
        hw = (size // stride) ** 2
        outs.append(n.op("Reshape", [n.op("Concat", [box, cls], axis=1),
                                     n.shape_const([batch, 4 * reg_max + classes, hw])]))
        g = size // stride
        yy, xx = np.meshgrid(np.arange(g) + 0.5, np.arange(g) + 0.5, indexing="ij")
        anchors.append(np.stack([xx.ravel(), yy.ravel()]) * stride)
    cat = n.op("Concat", outs, axis=2)
    box, cls = n.op("Split", [cat, n.shape_const([4 * reg_max, classes])], n_out=2, axis=1)
    total = sum(a.shape[1] for a in anchors)
    # DFL: softmax over reg_max bins, expectation by a 1×1 conv with arange weights.
    d = n.op("Reshape", [box, n.shape_const([batch, 4, reg_max, total])])
    d = n.op("Softmax", [n.op("Transpose", [d], perm=[0, 2, 1, 3])], axis=1)
    proj = n.const(np.arange(reg_max, dtype=np.float32).reshape(1, reg_max, 1, 1), "dfl")
    d = n.op("Reshape", [n.op("Conv", [d, proj]), n.shape_const([batch, 4, total])])
    lt, rb = n.op("Split", [d, n.shape_const([2, 2])], n_out=2, axis=1)
    anc = n.const(np.concatenate(anchors, axis=1)[None].astype(np.float32) / 8, "anchors")
    x1y1 = n.op("Sub", [anc, lt])
    x2y2 = n.op("Add", [anc, rb])
    xy = n.op("Div", [n.op("Add", [x1y1, x2y2]), n.const(np.float32(2))])
    wh = n.op("Sub", [x2y2, x1y1])
    boxes = n.op("Mul", [n.op("Concat", [xy, wh], axis=1), n.const(np.float32(8))])
    out = n.op("Concat", [boxes, n.op("Sigmoid", [cls])], axis=1)
    return n.model([out]), {"images": _image((batch, 3, size, size))}


# -- DBNet-style text detector: FPN with Resize, ConvTranspose head, HardSigmoid ------------
def dbnet(size: int = 64, width: int = 8, batch: int = 1) -> tuple[onnx.ModelProto, Feeds]:
    n = Net("dbnet", seed=2)
    x = n.input("x", [batch, 3, size, size])
    w = width
    c1 = n.conv(x, 3, w, 3, 2, act="hardswish")
    c2 = n.conv(n.conv(c1, w, w, 3, 1, groups=w, act="hardswish"), w, 2 * w, 1, act="relu")
    c2 = n.conv(c2, 2 * w, 2 * w, 3, 2, act="relu")  # /4
    c3 = n.conv(c2, 2 * w, 4 * w, 3, 2, act="relu")  # /8
    c4 = n.conv(c3, 4 * w, 8 * w, 3, 2, act="relu")  # /16
    inner = [n.conv(c, ci, 4 * w, 1, act=None, bn=False) for c, ci in
             ((c2, 2 * w), (c3, 4 * w), (c4, 8 * w))]
    up4 = n.op("Resize", [inner[2], "", n.const(np.array([1, 1, 2, 2], np.float32))],
               mode="nearest")
    o3 = n.op("Add", [inner[1], up4])
    up3 = n.op("Resize", [o3, "", n.const(np.array([1, 1, 2, 2], np.float32))], mode="nearest")
    o2 = n.op("Add", [inner[0], up3])
    ps = []
    for t, scale in ((o2, 1), (o3, 2), (inner[2], 4)):
        p = n.conv(t, 4 * w, w, 3, act=None, bn=False)
        if scale > 1:
            p = n.op("Resize", [p, "", n.const(np.array([1, 1, scale, scale], np.float32))],
                     mode="linear", coordinate_transformation_mode="half_pixel")
        ps.append(p)
    fuse = n.op("Concat", ps, axis=1)
    h = n.conv(fuse, 3 * w, w, 3, act="relu")
    h = n.op("ConvTranspose", [h, n.weight(w, w, 2, 2), n.const(np.zeros(w, np.float32))],
             kernel_shape=[2, 2], strides=[2, 2])
    h = n.act(n.bn(h, w), "relu")
    h = n.op("ConvTranspose", [h, n.weight(w, 1, 2, 2), n.const(np.zeros(1, np.float32))],
             kernel_shape=[2, 2], strides=[2, 2])
    prob = n.act(h, "hardsigmoid")
    return n.model([prob]), {"x": _image((batch, 3, size, size), 2)}


# -- SVTR-style recognizer: conv stem → tokens → attention with primitive LayerNorm -------
def svtr(height: int = 32, width_px: int = 64, dim: int = 32, heads: int = 4, depth: int = 2,
         classes: int = 37, batch: int = 1) -> tuple[onnx.ModelProto, Feeds]:
    n = Net("svtr", seed=3)
    x = n.input("x", [batch, 3, height, width_px])
    y = n.conv(x, 3, dim // 2, 3, 2, act="relu")
    y = n.conv(y, dim // 2, dim, 3, 2, act="relu")
    h, w = height // 4, width_px // 4
    t = h * w
    tok = n.op("Transpose", [n.op("Reshape", [y, n.shape_const([batch, dim, t])])],
               perm=[0, 2, 1])
    hd = dim // heads
    for _ in range(depth):
        z = n.layernorm_primitive(tok, dim)
        qkv = n.linear(z, dim, 3 * dim)
        qkv = n.op("Transpose", [n.op("Reshape", [qkv, n.shape_const([batch, t, 3, heads, hd])])],
                   perm=[2, 0, 3, 1, 4])
        q, k, v = n.op("Split", [qkv, n.shape_const([1, 1, 1])], n_out=3, axis=0)
        q, k, v = (n.op("Squeeze", [a, n.shape_const([0])]) for a in (q, k, v))
        att = n.op("MatMul", [q, n.op("Transpose", [k], perm=[0, 1, 3, 2])])
        att = n.op("Softmax", [n.op("Div", [att, n.const(np.float32(np.sqrt(hd)))])], axis=-1)
        o = n.op("Transpose", [n.op("MatMul", [att, v])], perm=[0, 2, 1, 3])
        o = n.linear(n.op("Reshape", [o, n.shape_const([batch, t, dim])]), dim, dim)
        tok = n.op("Add", [tok, o])
        z = n.layernorm_primitive(tok, dim)
        tok = n.op("Add", [tok, n.linear(n.gelu_erf(n.linear(z, dim, 2 * dim)), 2 * dim, dim)])
    # Collapse height by mean pooling, then classify each column.
    grid = n.op("Reshape", [tok, n.shape_const([batch, h, w, dim])])
    col = n.op("ReduceMean", [grid], axes=[1], keepdims=0)
    logits = n.linear(col, dim, classes)
    return n.model([n.op("Softmax", [logits], axis=-1)]), {"x": _image((batch, 3, height,
                                                                           width_px), 3)}


# -- MobileNetV3-style classifier: depthwise, squeeze-excite, HardSigmoid/HardSwish -------
def mobilenetv3(size: int = 64, width: int = 16, batch: int = 1, classes: int = 10,
                blocks: tuple[tuple[int, int, int, bool, str], ...] | None = None
                ) -> tuple[onnx.ModelProto, Feeds]:
    n = Net("mobilenetv3", seed=4)
    x = n.input("x", [batch, 3, size, size])
    y = n.conv(x, 3, width, 3, 2, act="hardswish")
    c = width
    cfg = blocks or ((3, 2 * width, 1, True, "relu"), (3, 3 * width, 2, False, "relu"),
                     (5, 3 * width, 1, True, "hardswish"), (3, 4 * width, 2, True, "hardswish"))
    for k, cout, s, se, act in cfg:
        e = c * 3
        h = n.conv(y, c, e, 1, act=act)
        h = n.conv(h, e, e, k, s, groups=e, act=act)
        if se:
            sq = n.op("GlobalAveragePool", [h])
            sq = n.op("Relu", [n.op("Conv", [sq, n.weight(e // 4, e, 1, 1),
                                             n.const(np.zeros(e // 4, np.float32))])])
            sq = n.op("Conv", [sq, n.weight(e, e // 4, 1, 1), n.const(np.zeros(e, np.float32))])
            h = n.op("Mul", [h, n.act(sq, "hardsigmoid")])
        h = n.conv(h, e, cout, 1, act=None)
        y = n.op("Add", [y, h]) if s == 1 and cout == c else h
        c = cout
    y = n.op("GlobalAveragePool", [n.conv(y, c, 6 * width, 1, act="hardswish")])
    y = n.op("Flatten", [y], axis=1)
    y = n.act(n.op("Gemm", [y, n.weight(8 * width, 6 * width), n.const(
        np.zeros(8 * width, np.float32))], transB=1), "hardswish")
    y = n.op("Gemm", [y, n.weight(classes, 8 * width), n.const(np.zeros(classes, np.float32))],
             transB=1)
    return n.model([y]), {"x": _image((batch, 3, size, size), 4)}


# -- CRNN with a bidirectional LSTM -------------------------------------------------------
def crnn(height: int = 32, width_px: int = 64, hidden: int = 16, classes: int = 20,
         batch: int = 1, width: int = 8) -> tuple[onnx.ModelProto, Feeds]:
    n = Net("crnn", seed=5)
    x = n.input("x", [batch, 1, height, width_px])
    y = n.conv(x, 1, width, 3, act="relu")
    y = n.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = n.conv(y, width, 2 * width, 3, act="relu")
    y = n.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = n.conv(y, 2 * width, 4 * width, 3, act="relu")
    y = n.op("MaxPool", [y], kernel_shape=[2, 1], strides=[2, 1])  # height /8
    y = n.op("ReduceMean", [y], axes=[2], keepdims=0)  # [B, C, T]
    seq = n.op("Transpose", [y], perm=[2, 0, 1])  # [T, B, C]
    c = 4 * width
    wx = n.weight(2, 4 * hidden, c)
    wh = n.weight(2, 4 * hidden, hidden)
    b = n.const((0.05 * n.rng.standard_normal((2, 8 * hidden))).astype(np.float32))
    ys, _, _ = n.op("LSTM", [seq, wx, wh, b], n_out=3, hidden_size=hidden,
                    direction="bidirectional")
    t = width_px // 4
    ys = n.op("Reshape", [n.op("Transpose", [ys], perm=[0, 2, 1, 3]),
                          n.shape_const([t, batch, 2 * hidden])])
    logits = n.op("Add", [n.op("MatMul", [ys, n.weight(2 * hidden, classes)]),
                          n.const(np.zeros(classes, np.float32))])
    return n.model([n.op("LogSoftmax", [logits], axis=-1)]), {
        "x": _image((batch, 1, height, width_px), 5)}


# -- YOLOX-style detector: Focus slices, CSP, decoupled head, grid decode ---------------
def yolox(size: int = 64, width: int = 8, batch: int = 1, classes: int = 3
          ) -> tuple[onnx.ModelProto, Feeds]:
    n = Net("yolox", seed=6)
    x = n.input("images", [batch, 3, size, size])

    def sl(t: str, hs: int, ws: int) -> str:
        return n.op("Slice", [t, n.shape_const([hs, ws]), n.shape_const([size, size]),
                              n.shape_const([2, 3]), n.shape_const([2, 2])])

    focus = n.op("Concat", [sl(x, 0, 0), sl(x, 1, 0), sl(x, 0, 1), sl(x, 1, 1)], axis=1)
    w = width
    y = n.conv(focus, 12, w, 3, act="silu")

    def csp(t: str, c: int) -> str:
        a = n.conv(t, c, c // 2, 1, act="silu")
        b = n.conv(t, c, c // 2, 1, act="silu")
        a = n.op("Add", [a, n.conv(n.conv(a, c // 2, c // 2, 1, act="silu"), c // 2, c // 2, 3,
                                   act="silu")])
        return n.conv(n.op("Concat", [a, b], axis=1), c, c, 1, act="silu")

    f1 = csp(n.conv(y, w, 2 * w, 3, 2, act="silu"), 2 * w)  # /4
    f2 = csp(n.conv(f1, 2 * w, 4 * w, 3, 2, act="silu"), 4 * w)  # /8
    outs = []
    grids = []
    for feat, c, stride in ((f1, 2 * w, 4), (f2, 4 * w, 8)):
        stem = n.conv(feat, c, w, 1, act="silu")
        cls = n.conv(n.conv(stem, w, w, 3, act="silu"), w, classes, 1, act=None, bn=False,
                     bias=True)
        reg_feat = n.conv(stem, w, w, 3, act="silu")
        reg = n.conv(reg_feat, w, 4, 1, act=None, bn=False, bias=True)
        obj = n.conv(reg_feat, w, 1, 1, act=None, bn=False, bias=True)
        o = n.op("Concat", [reg, n.op("Sigmoid", [obj]), n.op("Sigmoid", [cls])], axis=1)
        g = size // stride
        outs.append(n.op("Reshape", [o, n.shape_const([batch, 5 + classes, g * g])]))
        yy, xx = np.meshgrid(np.arange(g), np.arange(g), indexing="ij")
        grids.append((np.stack([xx.ravel(), yy.ravel()], 0), stride))
    out = n.op("Transpose", [n.op("Concat", outs, axis=2)], perm=[0, 2, 1])  # [B, A, 5+C]
    grid = np.concatenate([g for g, _ in grids], 1).T[None].astype(np.float32)
    strides = np.concatenate([np.full((g.shape[1], 1), s) for g, s in grids])[None]
    xy, wh, rest = n.op("Split", [out, n.shape_const([2, 2, 1 + classes])], n_out=3, axis=2)
    st = n.const(strides.astype(np.float32), "strides")
    xy = n.op("Mul", [n.op("Add", [xy, n.const(grid, "grid")]), st])
    wh = n.op("Mul", [n.op("Exp", [wh]), st])
    return n.model([n.op("Concat", [xy, wh, rest], axis=2)]), {
        "images": _image((batch, 3, size, size), 6)}


# -- byte-level text classifier: embeddings, masking, attention-like ops -----------------
def byte_classifier(seq: int = 32, dim: int = 32, classes: int = 5, batch: int = 1
                    ) -> tuple[onnx.ModelProto, Feeds]:
    n = Net("bytes", seed=7)
    ids = n.input("ids", [batch, seq], TensorProto.INT64)
    emb = n.op("Gather", [n.weight(256, dim, scale=0.5), ids], axis=0)  # [B, T, D]
    pos = n.weight(1, seq, dim, scale=0.1)
    h = n.op("Add", [emb, pos])
    pad = n.op("Equal", [ids, n.const(np.int64(0))])  # [B, T]
    q = n.linear(h, dim, dim)
    k = n.linear(h, dim, dim)
    v = n.linear(h, dim, dim)
    s = n.op("Div", [n.op("MatMul", [q, n.op("Transpose", [k], perm=[0, 2, 1])]),
                     n.const(np.float32(np.sqrt(dim)))])
    mask = n.op("Unsqueeze", [pad, n.shape_const([1])])  # [B, 1, T]
    s = n.op("Where", [mask, n.const(np.float32(-1e4)), s])
    a = n.op("MatMul", [n.op("Softmax", [s], axis=-1), v])
    h = n.op("Add", [h, a])
    keep = n.op("Cast", [n.op("Not", [pad])], to=TensorProto.FLOAT)  # [B, T]
    keep3 = n.op("Unsqueeze", [keep, n.shape_const([2])])
    summed = n.op("ReduceSum", [n.op("Mul", [h, keep3]), n.shape_const([1])], keepdims=0)
    count = n.op("Max", [n.op("ReduceSum", [keep, n.shape_const([1])], keepdims=1),
                         n.const(np.float32(1))])
    pooled = n.op("Div", [summed, count])
    logits = n.op("Gemm", [pooled, n.weight(dim, classes), n.const(np.zeros(classes,
                                                                          np.float32))])
    ids_val = np.random.default_rng(7).integers(1, 256, (batch, seq)).astype(np.int64)
    ids_val[:, seq - seq // 4:] = 0  # padding
    return n.model([n.op("Softmax", [logits], axis=-1)]), {"ids": ids_val}


# -- LSTM voice-activity model with state inputs and outputs -----------------------------
def lstm_vad(frames: int = 16, features: int = 20, hidden: int = 24, batch: int = 1
             ) -> tuple[onnx.ModelProto, Feeds]:
    n = Net("vad", seed=8)
    x = n.input("audio", [batch, frames, features])
    h0 = n.input("h0", [1, batch, hidden])
    c0 = n.input("c0", [1, batch, hidden])
    f = n.op("Relu", [n.linear(x, features, hidden)])
    seq = n.op("Transpose", [f], perm=[1, 0, 2])
    ys, hn, cn = n.op("LSTM", [seq, n.weight(1, 4 * hidden, hidden), n.weight(1, 4 * hidden,
                                                                              hidden),
                                n.const(np.zeros((1, 8 * hidden), np.float32)), "", h0, c0],
                      n_out=3, hidden_size=hidden)
    y = n.op("Squeeze", [ys, n.shape_const([1])])  # [T, B, H]
    prob = n.op("Sigmoid", [n.linear(y, hidden, 1)])
    rng = np.random.default_rng(8)
    feeds = {"audio": _image((batch, frames, features), 8),
             "h0": (0.1 * rng.standard_normal((1, batch, hidden))).astype(np.float32),
             "c0": (0.1 * rng.standard_normal((1, batch, hidden))).astype(np.float32)}
    return n.model([prob, hn, cn]), feeds


FAMILIES: dict[str, Callable[..., tuple[onnx.ModelProto, Feeds]]] = {
    "yolov8": yolov8, "dbnet": dbnet, "svtr": svtr, "mobilenetv3": mobilenetv3,
    "crnn": crnn, "yolox": yolox, "byte_classifier": byte_classifier, "lstm_vad": lstm_vad,
}


# -- ResNet-50 (torchvision's architecture: bottlenecks [3, 4, 6, 3], expansion 4) --------
def resnet50(size: int = 224, batch: int = 1, width: int = 64, classes: int = 1000,
             layers: tuple[int, ...] = (3, 4, 6, 3)) -> tuple[onnx.ModelProto, Feeds]:
    n = Net("resnet50", seed=9)
    x = n.input("input", [batch, 3, size, size])
    y = n.conv(x, 3, width, 7, 2)
    y = n.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = width
    for stage, blocks in enumerate(layers):
        mid = width * 2 ** stage
        cout = mid * 4
        for b in range(blocks):
            stride = 2 if b == 0 and stage > 0 else 1
            h = n.conv(y, cin, mid, 1)
            h = n.conv(h, mid, mid, 3, stride)
            h = n.conv(h, mid, cout, 1, act=None)
            skip = n.conv(y, cin, cout, 1, stride, act=None) if b == 0 else y
            y = n.op("Relu", [n.op("Add", [h, skip])])
            cin = cout
    y = n.op("Flatten", [n.op("GlobalAveragePool", [y])], axis=1)
    y = n.op("Gemm", [y, n.weight(classes, cin), n.const(np.zeros(classes, np.float32))],
             transB=1)
    return n.model([y]), {"input": _image((batch, 3, size, size), 9)}
