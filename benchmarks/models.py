"""Full-size benchmark models, built with tests.models.netbuilder (no downloads).

Architectures follow the public reference implementations (torchvision, ultralytics,
PaddleOCR, BERT); weights are random, which is all a latency benchmark needs. Each builder
returns (model, feeds) like tests/models/families.py.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto

from tests.models.families import Feeds, resnet50
from tests.models.netbuilder import Net


def _image(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _divisible(v: float, d: int = 8) -> int:
    """torchvision's _make_divisible: round channels to multiples of 8, never below 90 %."""
    new = max(d, int(v + d / 2) // d * d)
    return new + d if new < 0.9 * v else new


# -- MobileNetV2 (torchvision) ------------------------------------------------------------
_MBV2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
         (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenetv2(size: int = 224, batch: int = 1, classes: int = 1000
                ) -> tuple[onnx.ModelProto, Feeds]:
    n = Net("mobilenetv2", seed=21)
    x = n.input("input", [batch, 3, size, size])
    y = n.conv(x, 3, 32, 3, 2, act="relu6")
    cin = 32
    for t, c, reps, s in _MBV2:
        for i in range(reps):
            stride = s if i == 0 else 1
            hidden = cin * t
            h = n.conv(y, cin, hidden, 1, act="relu6") if t != 1 else y
            h = n.conv(h, hidden, hidden, 3, stride, groups=hidden, act="relu6")
            h = n.conv(h, hidden, c, 1, act=None)
            y = n.op("Add", [y, h]) if stride == 1 and cin == c else h
            cin = c
    y = n.conv(y, cin, 1280, 1, act="relu6")
    y = n.op("Flatten", [n.op("GlobalAveragePool", [y])], axis=1)
    y = n.op("Gemm", [y, n.weight(classes, 1280), n.const(np.zeros(classes, np.float32))],
             transB=1)
    return n.model([y]), {"input": _image((batch, 3, size, size), 21)}


# -- MobileNetV3 bottlenecks (torchvision): (kernel, expanded, out, SE, activation, stride)
Bneck = tuple[int, int, int, bool, str, int]
_MBV3_SMALL: tuple[Bneck, ...] = (
    (3, 16, 16, True, "relu", 2), (3, 72, 24, False, "relu", 2), (3, 88, 24, False, "relu", 1),
    (5, 96, 40, True, "hardswish", 2), (5, 240, 40, True, "hardswish", 1),
    (5, 240, 40, True, "hardswish", 1), (5, 120, 48, True, "hardswish", 1),
    (5, 144, 48, True, "hardswish", 1), (5, 288, 96, True, "hardswish", 2),
    (5, 576, 96, True, "hardswish", 1), (5, 576, 96, True, "hardswish", 1))
_MBV3_LARGE: tuple[Bneck, ...] = (
    (3, 16, 16, False, "relu", 1), (3, 64, 24, False, "relu", 2), (3, 72, 24, False, "relu", 1),
    (5, 72, 40, True, "relu", 2), (5, 120, 40, True, "relu", 1), (5, 120, 40, True, "relu", 1),
    (3, 240, 80, False, "hardswish", 2), (3, 200, 80, False, "hardswish", 1),
    (3, 184, 80, False, "hardswish", 1), (3, 184, 80, False, "hardswish", 1),
    (3, 480, 112, True, "hardswish", 1), (3, 672, 112, True, "hardswish", 1),
    (5, 672, 160, True, "hardswish", 2), (5, 960, 160, True, "hardswish", 1),
    (5, 960, 160, True, "hardswish", 1))


def _bneck(n: Net, y: str, cin: int, k: int, exp: int, cout: int, se: bool, act: str,
           stride: int) -> str:
    h = n.conv(y, cin, exp, 1, act=act) if exp != cin else y
    h = n.conv(h, exp, exp, k, stride, groups=exp, act=act)
    if se:
        sq_c = _divisible(exp // 4)
        sq = n.op("GlobalAveragePool", [h])
        sq = n.conv(sq, exp, sq_c, 1, act="relu", bn=False, bias=True)
        sq = n.conv(sq, sq_c, exp, 1, act="hardsigmoid", bn=False, bias=True)
        h = n.op("Mul", [h, sq])
    h = n.conv(h, exp, cout, 1, act=None)
    return n.op("Add", [y, h]) if stride == 1 and cin == cout else h


def mobilenetv3_small(size: int = 224, batch: int = 1, classes: int = 1000
                      ) -> tuple[onnx.ModelProto, Feeds]:
    n = Net("mobilenetv3_small", seed=22)
    x = n.input("input", [batch, 3, size, size])
    y = n.conv(x, 3, 16, 3, 2, act="hardswish")
    cin = 16
    for k, exp, cout, se, act, s in _MBV3_SMALL:
        y = _bneck(n, y, cin, k, exp, cout, se, act, s)
        cin = cout
    y = n.conv(y, cin, 576, 1, act="hardswish")
    y = n.op("Flatten", [n.op("GlobalAveragePool", [y])], axis=1)
    y = n.act(n.op("Gemm", [y, n.weight(1024, 576), n.const(np.zeros(1024, np.float32))],
                   transB=1), "hardswish")
    y = n.op("Gemm", [y, n.weight(classes, 1024), n.const(np.zeros(classes, np.float32))],
             transB=1)
    return n.model([y]), {"input": _image((batch, 3, size, size), 22)}


# -- YOLOv8n (ultralytics): C2f depths 1,2,2,1, widths 16…256, SPPF, PAN neck, DFL head ----
def yolov8n(size: int = 640, batch: int = 1, classes: int = 80, width: int = 16,
            depths: tuple[int, int, int, int] = (1, 2, 2, 1)) -> tuple[onnx.ModelProto, Feeds]:
    n = Net("yolov8n", seed=23)
    x = n.input("images", [batch, 3, size, size])
    w = width

    def c2f(t: str, cin: int, cout: int, reps: int, shortcut: bool) -> str:
        c = cout // 2
        a, b = n.op("Split", [n.conv(t, cin, 2 * c, 1, act="silu"), n.shape_const([c, c])],
                    n_out=2, axis=1)
        parts = [a, b]
        for _ in range(reps):
            h = n.conv(n.conv(parts[-1], c, c, 3, act="silu"), c, c, 3, act="silu")
            parts.append(n.op("Add", [parts[-1], h]) if shortcut else h)
        return n.conv(n.op("Concat", parts, axis=1), (2 + reps) * c, cout, 1, act="silu")

    def up(t: str) -> str:
        return n.op("Resize", [t, "", n.const(np.array([1, 1, 2, 2], np.float32), "scales")],
                    mode="nearest")

    y = n.conv(n.conv(x, 3, w, 3, 2, act="silu"), w, 2 * w, 3, 2, act="silu")
    y = c2f(y, 2 * w, 2 * w, depths[0], True)
    p3 = c2f(n.conv(y, 2 * w, 4 * w, 3, 2, act="silu"), 4 * w, 4 * w, depths[1], True)
    p4 = c2f(n.conv(p3, 4 * w, 8 * w, 3, 2, act="silu"), 8 * w, 8 * w, depths[2], True)
    p5 = c2f(n.conv(p4, 8 * w, 16 * w, 3, 2, act="silu"), 16 * w, 16 * w, depths[3], True)
    s = n.conv(p5, 16 * w, 8 * w, 1, act="silu")  # SPPF
    pools = [s]
    for _ in range(3):
        pools.append(n.op("MaxPool", [pools[-1]], kernel_shape=[5, 5], pads=[2, 2, 2, 2],
                          strides=[1, 1]))
    p5 = n.conv(n.op("Concat", pools, axis=1), 32 * w, 16 * w, 1, act="silu")
    h4 = c2f(n.op("Concat", [up(p5), p4], axis=1), 24 * w, 8 * w, 1, False)
    h3 = c2f(n.op("Concat", [up(h4), p3], axis=1), 12 * w, 4 * w, 1, False)
    h4 = c2f(n.op("Concat", [n.conv(h3, 4 * w, 4 * w, 3, 2, act="silu"), h4], axis=1),
             12 * w, 8 * w, 1, False)
    h5 = c2f(n.op("Concat", [n.conv(h4, 8 * w, 8 * w, 3, 2, act="silu"), p5], axis=1),
             24 * w, 16 * w, 1, False)
    reg_max = 16
    c_box, c_cls = max(16, 4 * w // 4, 4 * reg_max), max(4 * w, min(classes, 100))
    outs, anchors, strides = [], [], []
    for feat, c, stride in ((h3, 4 * w, 8), (h4, 8 * w, 16), (h5, 16 * w, 32)):
        box = n.conv(n.conv(feat, c, c_box, 3, act="silu"), c_box, c_box, 3, act="silu")
        box = n.conv(box, c_box, 4 * reg_max, 1, act=None, bn=False, bias=True)
        cls = n.conv(n.conv(feat, c, c_cls, 3, act="silu"), c_cls, c_cls, 3, act="silu")
        cls = n.conv(cls, c_cls, classes, 1, act=None, bn=False, bias=True)
        g = size // stride
        outs.append(n.op("Reshape", [n.op("Concat", [box, cls], axis=1),
                                     n.shape_const([batch, 4 * reg_max + classes, g * g])]))
        yy, xx = np.meshgrid(np.arange(g) + 0.5, np.arange(g) + 0.5, indexing="ij")
        anchors.append(np.stack([xx.ravel(), yy.ravel()]))
        strides.append(np.full(g * g, stride))
    box, cls = n.op("Split", [n.op("Concat", outs, axis=2),
                              n.shape_const([4 * reg_max, classes])], n_out=2, axis=1)
    total = sum(a.shape[1] for a in anchors)
    d = n.op("Reshape", [box, n.shape_const([batch, 4, reg_max, total])])
    d = n.op("Softmax", [n.op("Transpose", [d], perm=[0, 2, 1, 3])], axis=1)
    proj = n.const(np.arange(reg_max, dtype=np.float32).reshape(1, reg_max, 1, 1), "dfl")
    d = n.op("Reshape", [n.op("Conv", [d, proj]), n.shape_const([batch, 4, total])])
    lt, rb = n.op("Split", [d, n.shape_const([2, 2])], n_out=2, axis=1)
    anc = n.const(np.concatenate(anchors, axis=1)[None].astype(np.float32), "anchors")
    x1y1 = n.op("Sub", [anc, lt])
    x2y2 = n.op("Add", [anc, rb])
    xy = n.op("Div", [n.op("Add", [x1y1, x2y2]), n.const(np.float32(2))])
    wh = n.op("Sub", [x2y2, x1y1])
    scale = n.const(np.concatenate(strides)[None, None].astype(np.float32), "strides")
    boxes = n.op("Mul", [n.op("Concat", [xy, wh], axis=1), scale])
    out = n.op("Concat", [boxes, n.op("Sigmoid", [cls])], axis=1)
    return n.model([out]), {"images": _image((batch, 3, size, size), 23)}


# -- DBNet (PaddleOCR's mobile detector): MobileNetV3-large ×0.5, DB-FPN, DB head ----------
def dbnet(size: int = 640, batch: int = 1, scale: float = 0.5, fpn: int = 96
          ) -> tuple[onnx.ModelProto, Feeds]:
    n = Net("dbnet", seed=24)
    x = n.input("x", [batch, 3, size, size])
    y = n.conv(x, 3, _divisible(16 * scale), 3, 2, act="hardswish")
    cin = _divisible(16 * scale)
    taps, chans = [], []
    for i, (k, exp, cout, se, act, s) in enumerate(_MBV3_LARGE):
        # A feature map leaves the backbone before every stride-2 stage change.
        if s == 2 and i > 1:
            taps.append(y)
            chans.append(cin)
        exp, cout = _divisible(exp * scale), _divisible(cout * scale)
        y = _bneck(n, y, cin, k, exp, cout, se, act, s)
        cin = cout
    last = _divisible(960 * scale)
    taps.append(n.conv(y, cin, last, 1, act="hardswish"))
    chans.append(last)
    inner = [n.conv(t, c, fpn, 1, act=None, bn=False) for t, c in zip(taps, chans)]
    for i in range(len(inner) - 2, -1, -1):  # top-down: nearest ×2 and add
        upper = n.op("Resize", [inner[i + 1], "", n.const(np.array([1, 1, 2, 2], np.float32))],
                     mode="nearest")
        inner[i] = n.op("Add", [inner[i], upper])
    ps = []
    for i, t in enumerate(inner):
        p = n.conv(t, fpn, fpn // 4, 3, act=None, bn=False)
        if i:
            f = float(2 ** i)
            p = n.op("Resize", [p, "", n.const(np.array([1, 1, f, f], np.float32))],
                     mode="linear", coordinate_transformation_mode="half_pixel")
        ps.append(p)
    h = n.conv(n.op("Concat", ps[::-1], axis=1), fpn, fpn // 4, 3, act="relu")
    c = fpn // 4
    h = n.op("ConvTranspose", [h, n.weight(c, c, 2, 2), n.const(np.zeros(c, np.float32))],
             kernel_shape=[2, 2], strides=[2, 2])
    h = n.act(n.bn(h, c), "relu")
    h = n.op("ConvTranspose", [h, n.weight(c, 1, 2, 2), n.const(np.zeros(1, np.float32))],
             kernel_shape=[2, 2], strides=[2, 2])
    return n.model([n.act(h, "sigmoid")]), {"x": _image((batch, 3, size, size), 24)}


# -- BERT-tiny (2 layers, hidden 128, 2 heads): embeddings, primitive LayerNorm, GELU erf ---
def bert_tiny(seq: int = 128, batch: int = 1, hidden: int = 128, heads: int = 2,
              layers: int = 2, vocab: int = 30522) -> tuple[onnx.ModelProto, Feeds]:
    n = Net("bert_tiny", seed=25)
    ids = n.input("input_ids", [batch, seq], TensorProto.INT64)
    mask = n.input("attention_mask", [batch, seq], TensorProto.INT64)
    h = n.op("Gather", [n.weight(vocab, hidden, scale=0.05), ids], axis=0)
    h = n.op("Add", [h, n.weight(1, seq, hidden, scale=0.05)])  # positions (+ token type 0)
    h = n.layernorm_primitive(h, hidden)
    # Extended attention mask, as BERT exports it: (1 - mask) · -10000 on [B, 1, 1, T].
    m = n.op("Cast", [n.op("Unsqueeze", [mask, n.shape_const([1, 2])])], to=TensorProto.FLOAT)
    m = n.op("Mul", [n.op("Sub", [n.const(np.float32(1)), m]), n.const(np.float32(-10000))])
    hd = hidden // heads

    def split_heads(t: str) -> str:
        return n.op("Transpose", [n.op("Reshape", [t, n.shape_const([batch, seq, heads, hd])])],
                    perm=[0, 2, 1, 3])

    for _ in range(layers):
        q, k, v = (split_heads(n.linear(h, hidden, hidden)) for _ in range(3))
        s = n.op("MatMul", [q, n.op("Transpose", [k], perm=[0, 1, 3, 2])])
        s = n.op("Add", [n.op("Div", [s, n.const(np.float32(np.sqrt(hd)))]), m])
        o = n.op("MatMul", [n.op("Softmax", [s], axis=-1), v])
        o = n.op("Reshape", [n.op("Transpose", [o], perm=[0, 2, 1, 3]),
                             n.shape_const([batch, seq, hidden])])
        h = n.layernorm_primitive(n.op("Add", [h, n.linear(o, hidden, hidden)]), hidden)
        f = n.linear(n.gelu_erf(n.linear(h, hidden, 4 * hidden)), 4 * hidden, hidden)
        h = n.layernorm_primitive(n.op("Add", [h, f]), hidden)
    first = n.op("Gather", [h, n.const(np.int64(0))], axis=1)
    pooled = n.op("Tanh", [n.op("Gemm", [first, n.weight(hidden, hidden),
                                         n.const(np.zeros(hidden, np.float32))], transB=1)])
    rng = np.random.default_rng(25)
    ids_val = rng.integers(1000, vocab, (batch, seq)).astype(np.int64)
    mask_val = np.ones((batch, seq), np.int64)
    mask_val[:, seq - seq // 4:] = 0
    return n.model([h, pooled]), {"input_ids": ids_val, "attention_mask": mask_val}


# -- CRNN (Shi et al.): VGG-style convolutions, two bidirectional LSTMs, CTC logits ---------
def crnn(height: int = 32, width_px: int = 128, batch: int = 1, hidden: int = 256,
         classes: int = 37) -> tuple[onnx.ModelProto, Feeds]:
    n = Net("crnn", seed=26)
    x = n.input("x", [batch, 1, height, width_px])
    y = n.conv(x, 1, 64, 3, act="relu", bn=False, bias=True)
    y = n.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = n.conv(y, 64, 128, 3, act="relu", bn=False, bias=True)
    y = n.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = n.conv(n.conv(y, 128, 256, 3, act="relu"), 256, 256, 3, act="relu", bn=False, bias=True)
    y = n.op("MaxPool", [y], kernel_shape=[2, 1], strides=[2, 1])
    y = n.conv(n.conv(y, 256, 512, 3, act="relu"), 512, 512, 3, act="relu")
    y = n.op("MaxPool", [y], kernel_shape=[2, 1], strides=[2, 1])
    y = n.op("MaxPool", [y], kernel_shape=[2, 1], strides=[2, 1])  # height 1
    steps = width_px // 4
    seq = n.op("Transpose", [n.op("Reshape", [y, n.shape_const([batch, 512, steps])])],
               perm=[2, 0, 1])  # [T, B, C]
    c = 512
    for _ in range(2):
        b = n.const((0.05 * n.rng.standard_normal((2, 8 * hidden))).astype(np.float32))
        ys, _, _ = n.op("LSTM", [seq, n.weight(2, 4 * hidden, c), n.weight(2, 4 * hidden, hidden),
                                 b], n_out=3, hidden_size=hidden, direction="bidirectional")
        seq = n.op("Reshape", [n.op("Transpose", [ys], perm=[0, 2, 1, 3]),
                               n.shape_const([steps, batch, 2 * hidden])])
        c = 2 * hidden
    logits = n.linear(seq, c, classes)
    return n.model([n.op("LogSoftmax", [logits], axis=-1)]), {
        "x": _image((batch, 1, height, width_px), 26)}


Builder = Callable[[int], tuple[onnx.ModelProto, Feeds]]

# Suite name → builder of one batch size.
SUITE: dict[str, Builder] = {
    "resnet50": lambda b: resnet50(224, batch=b),
    "mobilenetv2": lambda b: mobilenetv2(224, batch=b),
    "mobilenetv3_small": lambda b: mobilenetv3_small(224, batch=b),
    "yolov8n_320": lambda b: yolov8n(320, batch=b),
    "yolov8n_640": lambda b: yolov8n(640, batch=b),
    "dbnet_640": lambda b: dbnet(640, batch=b),
    "bert_tiny": lambda b: bert_tiny(128, batch=b),
    "crnn": lambda b: crnn(32, 128, batch=b),
}
