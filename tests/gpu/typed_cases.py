"""Small networks over integer and bool tensors and the kernels that move, select, compare
or cast them (Cast, integer arithmetic, comparisons and logic, Where, Expand, Gather, Pad,
ArgMax/ArgMin, reshapes, Tile, DepthToSpace/SpaceToDepth, a bool step fused into a
convolution's epilogue). Built without CUDA; ``tests/gpu/test_typed_kernels_gpu`` runs
them on the GPU against the CPU backend with exact equality: every one of these kernels
is exact. ``FLOAT_CASES`` are the ones whose data is float, run at fp32, fp16 and bf16."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.models.netbuilder import Net

Feeds = dict[str, np.ndarray]
Case = Callable[[], tuple[onnx.ModelProto, Feeds]]

INTS = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "int16": TensorProto.INT16,
        "uint16": TensorProto.UINT16, "int32": TensorProto.INT32,
        "uint32": TensorProto.UINT32, "int64": TensorProto.INT64,
        "uint64": TensorProto.UINT64}
TYPES = {**INTS, "bool": TensorProto.BOOL, "float32": TensorProto.FLOAT,
         "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}
# float values whose casts exercise every rule: NaN, ±inf, out of every range, fractions
SPECIAL = np.array([np.nan, np.inf, -np.inf, 300.0, -1.0, 3e9, 1e20, -2.7, 2.7, -129.0,
                    128.5, 65537.0, -3e9, 5e9, 0.0, -0.0, 255.9, 4.2e9, 1e19, -1e19],
                   np.float32)


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _ints(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    info = np.iinfo(dtype)
    return _rng(seed).integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def _cast_from(src: str) -> Case:
    """One input of ``src``, cast to every type."""
    def case() -> tuple[onnx.ModelProto, Feeds]:
        n = Net(f"cast_{src}")
        shape = (4, 5)
        x = n.input("x", shape, TYPES[src])
        outs = [n.op("Cast", [x], to=TYPES[dst]) for dst in TYPES if dst != src]
        if src == "float32":
            value = SPECIAL.reshape(shape)
        elif src == "bool":
            value = _rng(1).random(shape) < 0.5
        elif src in INTS:
            value = _ints(src, shape, 2)
        else:
            value = SPECIAL.reshape(shape)
        return n.model(outs), {"x": _as(value, src)}

    return case


def _as(value: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        import ml_dtypes

        return np.asarray(value, np.float32).astype(ml_dtypes.bfloat16)
    with np.errstate(over="ignore", invalid="ignore"):  # SPECIAL holds values out of range
        return np.asarray(value).astype(dtype)


def _arith(dtype: str) -> Case:
    """Wrapping arithmetic, division and Mod with zero divisors, comparisons."""
    def case() -> tuple[onnx.ModelProto, Feeds]:
        n = Net(f"arith_{dtype}")
        a, b = n.input("a", (6, 7), INTS[dtype]), n.input("b", (6, 7), INTS[dtype])
        outs = [n.op(op, [a, b]) for op in ("Add", "Sub", "Mul", "Div", "Max", "Min", "Equal",
                                            "Less", "Greater", "LessOrEqual",
                                            "GreaterOrEqual", "BitwiseAnd", "BitwiseXor")]
        outs += [n.op("Mod", [a, b], fmod=f) for f in (0, 1)]
        outs += [n.op("Abs", [a]), n.op("Neg", [a]) if dtype[0] == "i" else n.op("Sign", [a]),
                 n.op("Clip", [a, n.const(np.array(3, dtype)), n.const(np.array(90, dtype))])]
        va, vb = _ints(dtype, (6, 7), 4), _ints(dtype, (6, 7), 5)
        vb[0, :3] = 0  # division by zero gives 0, as numpy
        vb[1, :] = vb[1, :] % 7 + 1
        if dtype[0] == "i":
            vb[2, :2] = -1
            va[2, 0] = np.iinfo(dtype).min  # min / -1 wraps
            vb[3, :] = -(vb[3, :] % 5) - 1
        return n.model(outs, opset=18), {"a": va, "b": vb}

    return case


def _int64_exact() -> tuple[onnx.ModelProto, Feeds]:
    """int64 values above 2^24 (float32 would round them): a fused chain stays exact."""
    n = Net("int64_exact")
    a = n.input("a", (3, 8), TensorProto.INT64)
    big = n.const(np.array([(1 << 40) + 1], np.int64))
    s = n.op("Add", [n.op("Mul", [a, n.const(np.array([3], np.int64))]), big])
    outs = [s, n.op("Div", [s, n.const(np.array([7], np.int64))]), n.op("Cast", [s],
                                                                         to=TensorProto.INT32)]
    va = _rng(6).integers(-(1 << 50), 1 << 50, (3, 8), dtype=np.int64)
    return n.model(outs), {"a": va}


def _logic() -> tuple[onnx.ModelProto, Feeds]:
    n = Net("logic")
    p, q = n.input("p", (5, 6), TensorProto.BOOL), n.input("q", (5, 6), TensorProto.BOOL)
    x = n.input("x", (5, 6))
    i = n.input("i", (5, 6), TensorProto.INT64)
    outs = [n.op(op, [p, q]) for op in ("And", "Or", "Xor", "Equal")]
    outs += [n.op("Not", [p]), n.op("IsNaN", [x]), n.op("IsInf", [x]),
             n.op("IsInf", [x], detect_negative=0), n.op("Where", [p, x, n.op("Neg", [x])]),
             n.op("Where", [q, i, n.const(np.array([-7], np.int64))]),
             n.op("Where", [n.op("Less", [x, n.const(np.zeros(1, np.float32))]), q, p])]
    r = _rng(7)
    vx = r.standard_normal((5, 6)).astype(np.float32)
    vx.flat[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, np.nan]
    return n.model(outs), {"p": r.random((5, 6)) < 0.5, "q": r.random((5, 6)) < 0.5,
                           "x": vx, "i": _ints("int64", (5, 6), 8)}


def _moves(dtype: str) -> Case:
    """Rank-4 tensors (channels-last on the GPU) reshaped, transposed, sliced, concatenated,
    expanded and gathered."""
    def case() -> tuple[onnx.ModelProto, Feeds]:
        n = Net(f"moves_{dtype}")
        x = n.input("x", (2, 3, 4, 5), TYPES[dtype])
        idx = n.input("idx", (2, 3), TensorProto.INT32)
        outs = [n.op("Identity", [x]),
                n.op("Reshape", [x, n.shape_const([2, 12, 5, 1])]),
                n.op("Transpose", [x], perm=[0, 2, 3, 1]),
                n.op("Slice", [x, n.shape_const([1, -1]), n.shape_const([3, -5]),
                               n.shape_const([1, 3]), n.shape_const([1, -2])]),
                n.op("Concat", [x, x], axis=1),
                n.op("Expand", [n.op("Slice", [x, n.shape_const([0]), n.shape_const([1]),
                                               n.shape_const([1])]),
                                n.shape_const([2, 2, 3, 4, 5])]),
                n.op("Gather", [x, idx], axis=3),
                n.op("Gather", [x, n.const(np.array([-1, 0], np.int64))], axis=1)]
        r = _rng(9)
        value = (_ints(dtype, (2, 3, 4, 5), 10) if dtype in INTS else
                 r.random((2, 3, 4, 5)) < 0.5 if dtype == "bool" else
                 r.standard_normal((2, 3, 4, 5)))
        vi = r.integers(-5, 5, (2, 3)).astype(np.int32)
        return n.model(outs), {"x": _as(value, dtype), "idx": vi}

    return case


def _rearrange(dtype: str) -> Case:
    """Tile, DepthToSpace (both modes) and SpaceToDepth of a rank-4 tensor."""
    def case() -> tuple[onnx.ModelProto, Feeds]:
        n = Net(f"rearrange_{dtype}")
        x = n.input("x", (2, 8, 4, 6), TYPES[dtype])
        outs = [n.op("Tile", [x, n.shape_const([2, 1, 3, 1])]),
                n.op("Tile", [n.op("Reshape", [x, n.shape_const([16, 24])]),
                              n.shape_const([1, 2])]),
                n.op("DepthToSpace", [x], blocksize=2, mode="DCR"),
                n.op("DepthToSpace", [x], blocksize=2, mode="CRD"),
                n.op("SpaceToDepth", [x], blocksize=2)]
        value = (_ints(dtype, (2, 8, 4, 6), 16) if dtype in INTS else
                 _rng(16).standard_normal((2, 8, 4, 6)))
        return n.model(outs), {"x": _as(value, dtype)}

    return case


def _indexing(dtype: str) -> Case:
    """GatherElements, GatherND (batch_dims 0 and 1), ScatterElements and ScatterND with
    negative indices; scatters without a reduction get distinct indices (ONNX leaves
    duplicates open), the reductions get duplicates."""
    def case() -> tuple[onnx.ModelProto, Feeds]:
        n = Net(f"indexing_{dtype}")
        x = n.input("x", (4, 5, 6), TYPES[dtype])
        ie = n.input("ie", (4, 3, 6), TensorProto.INT64)
        nd = n.input("nd", (3, 2), TensorProto.INT64)
        nb = n.input("nb", (4, 2, 1), TensorProto.INT32)
        u = n.input("u", (4, 3, 6), TYPES[dtype])
        us = n.input("us", (3, 6), TYPES[dtype])
        perm = n.const(np.array([[2], [-1], [0]], np.int64))  # distinct rows of x
        outs = [n.op("GatherElements", [x, ie], axis=1),
                n.op("GatherND", [x, nd]),
                n.op("GatherND", [x, nb], batch_dims=1),
                n.op("ScatterND", [x, perm, n.input("un", (3, 5, 6), TYPES[dtype])]),
                n.op("ScatterElements", [x, n.op("Slice", [ie, n.shape_const([0]),
                                                           n.shape_const([1]),
                                                           n.shape_const([1])]),
                                         n.op("Slice", [u, n.shape_const([0]),
                                                        n.shape_const([1]),
                                                        n.shape_const([1])])], axis=1)]
        for red in ("add", "mul", "max", "min"):
            outs.append(n.op("ScatterElements", [x, ie, u], axis=1, reduction=red))
        outs.append(n.op("ScatterND", [x, nd, us], reduction="add"))
        r = _rng(17)
        if dtype in INTS:
            vx, vu, vus, vun = (r.integers(-3, 4, sh).astype(dtype) for sh in
                                ((4, 5, 6), (4, 3, 6), (3, 6), (3, 5, 6)))
        else:
            vx, vu, vus, vun = (r.standard_normal(sh) for sh in
                                ((4, 5, 6), (4, 3, 6), (3, 6), (3, 5, 6)))
        return n.model(outs, opset=18), {
            "x": _as(vx, dtype), "ie": r.integers(-5, 5, (4, 3, 6)), "u": _as(vu, dtype),
            "us": _as(vus, dtype), "un": _as(vun, dtype),
            "nd": np.array([[1, -1], [3, 0], [1, -1]], np.int64),
            "nb": r.integers(-5, 5, (4, 2, 1)).astype(np.int32)}

    return case


def _reverse_sequence() -> tuple[onnx.ModelProto, Feeds]:
    n = Net("reverse_sequence")
    x = n.input("x", (4, 7, 3), TensorProto.INT32)
    lens = n.input("lens", (4,), TensorProto.INT64)
    y = n.input("y", (5, 3, 2), TensorProto.INT32)
    outs = [n.op("ReverseSequence", [x, lens], batch_axis=0, time_axis=1),
            n.op("ReverseSequence", [y, n.const(np.array([5, 2, 4], np.int64))],
                 batch_axis=1, time_axis=0)]
    return n.model(outs), {"x": _ints("int32", (4, 7, 3), 20), "y": _ints("int32", (5, 3, 2), 21),
                           "lens": np.array([7, 0, 3, 1], np.int64)}


def _pad(dtype: str, rank: int) -> Case:
    def case() -> tuple[onnx.ModelProto, Feeds]:
        n = Net(f"pad_{dtype}_{rank}")
        shape = (2, 3, 5, 6)[-rank:]
        x = n.input("x", shape, TYPES[dtype])
        fill = n.input("fill", (), TYPES[dtype])
        big = [1, 2, 4, 3][-rank:] + [2, 1, 3, 4][-rank:]
        crop = [0, -1, 2, -2][-rank:] + [1, 0, -1, 3][-rank:]
        outs = []
        for mode in ("constant", "reflect", "edge", "wrap"):
            for pads in (big, crop):
                if mode == "reflect" and pads is big:  # reflect needs pad < size
                    pads = [min(p, d - 1) for p, d in zip(pads, list(shape) * 2)]
                outs.append(n.op("Pad", [x, n.shape_const(pads)], mode=mode))
        outs.append(n.op("Pad", [x, n.shape_const(big), fill], mode="constant"))
        outs.append(n.op("Pad", [x, n.shape_const(big), n.const(_as(np.array(3), dtype))],
                         mode="constant"))
        value = (_ints(dtype, shape, 11) if dtype in INTS else
                 _rng(12).random(shape) < 0.5 if dtype == "bool" else
                 _rng(12).standard_normal(shape))
        return n.model(outs), {"x": _as(value, dtype), "fill": _as(np.array(1), dtype)}

    return case


def _argreduce(dtype: str) -> Case:
    def case() -> tuple[onnx.ModelProto, Feeds]:
        n = Net(f"arg_{dtype}")
        x = n.input("x", (3, 4, 7), TYPES[dtype])
        outs = [n.op(op, [x], axis=axis, keepdims=keep, select_last_index=last)
                for op in ("ArgMax", "ArgMin") for axis in (0, -1) for keep in (0, 1)
                for last in (0, 1)]
        if dtype in INTS:
            value = _rng(13).integers(0, 4, (3, 4, 7)).astype(dtype)  # many ties
        else:
            value = np.round(_rng(13).standard_normal((3, 4, 7)))  # ties too
            value[0, 0, 2] = value[1, 2, 5] = value[1, 2, 6] = np.nan
        return n.model(outs), {"x": _as(value, dtype)}

    return case


def _conv_where() -> tuple[onnx.ModelProto, Feeds]:
    """Relu, Less, Not and Where fused into a convolution's epilogue (bool steps)."""
    n = Net("conv_where")
    x = n.input("x", (1, 4, 6, 6))
    c = n.op("Relu", [n.op("Conv", [x, n.weight(4, 4, 3, 3)], pads=[1, 1, 1, 1])])
    zero = n.const(np.zeros((), np.float32))
    pos = n.op("Not", [n.op("Less", [c, n.const(np.array(0.1, np.float32))])])
    return n.model([n.op("Where", [pos, c, zero])]), {
        "x": _rng(14).standard_normal((1, 4, 6, 6)).astype(np.float32)}


def _matmul_mask() -> tuple[onnx.ModelProto, Feeds]:
    """A Where over a bool mask input fused into a MatMul's and a Gemm's epilogue (the mask
    is an extra input of the fused layer: a bool tensor read by the epilogue code)."""
    n = Net("matmul_mask")
    a = n.input("a", (2, 5, 8))
    mask = n.input("mask", (1, 5, 6), TensorProto.BOOL)
    fill = n.const(np.array(-1e4, np.float32))
    mm = n.op("MatMul", [a, n.weight(8, 6)])
    a2 = n.input("a2", (5, 8))
    gm = n.op("Gemm", [a2, n.weight(6, 8), n.weight(6)], transB=1)
    outs = [n.op("Where", [mask, mm, fill]),
            n.op("Where", [n.op("Squeeze", [mask, n.shape_const([0])]), gm, fill])]
    r = _rng(18)
    return n.model(outs), {"a": r.standard_normal((2, 5, 8)).astype(np.float32),
                           "a2": r.standard_normal((5, 8)).astype(np.float32),
                           "mask": r.random((1, 5, 6)) < 0.5}


def _conv1d() -> tuple[onnx.ModelProto, Feeds]:
    """1-D convolutions (run as 2-D ones of height 1): padded, strided, dilated, depthwise,
    with a fused epilogue reading a [K, 1] extra input; a strided 1-D ConvTranspose."""
    n = Net("conv1d")
    x = n.input("x", (2, 6, 17))
    a = n.op("Conv", [x, n.weight(8, 6, 3), n.weight(8)], pads=[1, 2], strides=[2])
    a = n.op("Relu", [n.op("Add", [a, n.const(np.linspace(-1, 1, 8, dtype=np.float32)
                                                .reshape(8, 1))])])
    b = n.op("Conv", [x, n.weight(6, 1, 5)], group=6, pads=[4, 4], dilations=[2])
    c = n.op("ConvTranspose", [x, n.weight(6, 4, 4), n.weight(4)], strides=[2], pads=[1, 1])
    return n.model([a, b, c]), {"x": _rng(19).standard_normal((2, 6, 17)).astype(np.float32)}


def _float_math() -> tuple[onnx.ModelProto, Feeds]:
    """The float ops added with the typed code (not exact: compared within 1e-5)."""
    n = Net("float_math")
    x = n.input("x", (4, 9))
    outs = [n.op(op, [x]) for op in ("Asin", "Acos", "Atan", "Asinh", "Sinh", "Cosh",
                                     "Sign")]
    outs += [n.op("Acosh", [n.op("Add", [n.op("Abs", [x]), n.const(np.ones(1, np.float32))])]),
             n.op("Atanh", [n.op("Mul", [x, n.const(np.array([0.5], np.float32))])]),
             n.op("Celu", [x], alpha=0.7), n.op("Shrink", [x], lambd=0.3, bias=0.1),
             n.op("Mod", [x, n.const(np.array([0.3], np.float32))], fmod=1),
             n.op("Mod", [x, n.const(np.array([-0.3], np.float32))], fmod=0)]
    v = np.clip(_rng(15).standard_normal((4, 9)), -0.99, 0.99).astype(np.float32)
    return n.model(outs), {"x": v}


EXACT_CASES: dict[str, Case] = {
    **{f"cast_from_{t}": _cast_from(t) for t in ("float32", "float16", "bool", "int8", "uint8",
                                                 "int32", "int64", "uint64")},
    **{f"arith_{t}": _arith(t) for t in ("int8", "uint8", "int16", "int32", "int64",
                                         "uint32")},
    "int64_exact": _int64_exact, "logic": _logic,
    **{f"moves_{t}": _moves(t) for t in ("int64", "int32", "uint8", "bool")},
    **{f"pad_{t}_{r}": _pad(t, r) for t, r in (("int64", 2), ("uint8", 3), ("bool", 4),
                                               ("int32", 4))},
    **{f"arg_{t}": _argreduce(t) for t in ("int32", "uint8", "int64")},
    "rearrange_int64": _rearrange("int64"),
    **{f"indexing_{t}": _indexing(t) for t in ("int32", "int64")},
    "reverse_sequence": _reverse_sequence,
}
FLOAT_CASES: dict[str, Case] = {
    "moves_float32": _moves("float32"), "pad_float32_4": _pad("float32", 4),
    "pad_float32_2": _pad("float32", 2), "arg_float32": _argreduce("float32"),
    "logic_float": _logic, "rearrange_float32": _rearrange("float32"),
}
# (case, relative error bound): the float ops of the typed code; a convolution (cuDNN may use
# TF32) with bool steps in its epilogue; float scatters (atomic sums in any order); MatMul and
# Gemm with a bool extra input in their epilogues (fp32 sums in another order); 1-D
# convolutions (TF32 again)
TOLERANT_CASES: dict[str, tuple[Case, float]] = {"float_math": (_float_math, 1e-5),
                                                  "conv_where": (_conv_where, 1e-2),
                                                  "indexing_float32": (_indexing("float32"),
                                                                       1e-6),
                                                  "matmul_mask": (_matmul_mask, 1e-5),
                                                  "conv1d": (_conv1d, 1e-2)}


def gather_out_of_range() -> tuple[onnx.ModelProto, Feeds]:
    """A Gather whose run-time index may leave the axis."""
    x = helper.make_tensor_value_info("x", TensorProto.INT64, [4, 3])
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [2, 3])
    graph = helper.make_graph([helper.make_node("Gather", ["x", "i"], ["y"], name="gather",
                                                axis=0)], "oob", [x, i], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": np.arange(12, dtype=np.int64).reshape(4, 3),
                   "i": np.array([1, -4], np.int64)}
