"""The int8 tactic of QConv/QGemm (K's vector kernels, qlinear_tactic) against the exact
reference kernels, bit for bit, on each ISA path this CPU has (PYDLA_CPU_ISA forces one)."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu.backend import bind_layer
from pydla.backends.cpu.kernels import int8
from pydla.backends.cpu.steps import prebind
from pydla.dtypes import DType

RNG = np.random.default_rng(11)


def _ro(a):
    a = np.ascontiguousarray(a)
    a.flags.writeable = False  # a loadable's parameter
    return a


def _run(op, arrays, out_shape, out_dtype, attrs, tactic):
    spec = LayerSpec("layer", op, attrs,
                     tuple(None if a is None else TensorSpec(a.shape, DType.from_numpy(a.dtype))
                           for a in arrays),
                     (TensorSpec(out_shape, out_dtype),), tactic)
    out = np.empty(out_shape, out_dtype.np)
    prebind(bind_layer(spec), arrays, [out])()
    return out


def _params(x_dtype, n, out):
    """x_scale, x_zp, w_scale, w_zp, y_scale, y_zp, bias for one output kind."""
    x_zp = np.array(37 if x_dtype == np.uint8 else -5, x_dtype)
    ws = RNG.uniform(0.002, 0.01, n).astype(np.float32)
    quantized = out in ("uint8", "int8", "dequantized")
    y_dtype = np.int8 if out == "int8" else np.uint8
    ys = np.array(0.05, np.float32) if quantized else None
    y_zp = np.array(3 if y_dtype == np.int8 else 128, y_dtype) if quantized else None
    bias = RNG.integers(-3000, 3000, n).astype(np.int32)
    if out == "int32":
        return [None, x_zp, None, None, None, None, None]
    return [np.array(0.02, np.float32), x_zp, ws, np.zeros(n, np.int8), ys, y_zp, bias]


OUT_TYPES = {"uint8": DType.UINT8, "int8": DType.INT8, "dequantized": DType.FLOAT32,
             "float": DType.FLOAT32, "int32": DType.INT32}


@pytest.fixture(params=["native", "avx2"])
def isa_path(request, monkeypatch):
    if request.param == "avx2":
        monkeypatch.setenv("PYDLA_CPU_ISA", "avx2")
        if int8.isa() != "avx2":
            pytest.skip("this CPU has no AVX2")
    return int8.isa()


@pytest.mark.parametrize("x_dtype,out,w_shape,attrs", [
    (np.uint8, "uint8", (16, 8, 3, 3), {"pads": [1, 1, 1, 1], "strides": [1, 1]}),
    (np.int8, "int8", (16, 8, 3, 3), {"pads": [0, 1, 1, 0], "strides": [2, 2]}),
    (np.uint8, "dequantized", (16, 8, 1, 1), {"pads": [0, 0, 0, 0], "strides": [1, 1]}),
    (np.uint8, "float", (8, 1, 3, 3), {"pads": [1, 1, 1, 1], "strides": [1, 1], "group": 8}),
    (np.uint8, "int32", (16, 4, 3, 3), {"pads": [1, 1, 1, 1], "strides": [1, 1], "group": 2}),
])
def test_qconv_int8_tactic_matches_reference(isa_path, x_dtype, out, w_shape, attrs):
    attrs = {"dilations": [1, 1], "group": 1, **attrs, "clip": [0.0, 6.0]}
    if out == "int32":
        del attrs["clip"]
    n = w_shape[0]
    x = RNG.integers(np.iinfo(x_dtype).min, np.iinfo(x_dtype).max + 1, (2, 8, 9, 11))
    w = RNG.integers(-128, 128, w_shape).astype(np.int8)
    xs, xz, ws, wz, ys, yz, b = _params(x_dtype, n, out)
    arrays = [x.astype(x_dtype), xs, xz, w, ws, wz, ys, yz, b]
    arrays = [None if a is None else _ro(a) for a in arrays]
    p, s, k = attrs["pads"], attrs["strides"], w_shape[2:]
    shape = (2, n, (9 + p[0] + p[2] - k[0]) // s[0] + 1, (11 + p[1] + p[3] - k[1]) // s[1] + 1)
    want = _run("QConv", arrays, shape, OUT_TYPES[out], attrs, "reference")
    got = _run("QConv", arrays, shape, OUT_TYPES[out], attrs, "int8")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("x_shape,out", [((5, 40), "uint8"), ((2, 3, 40), "dequantized"),
                                         ((7, 40), "float"), ((4, 40), "int32")])
def test_qgemm_int8_tactic_matches_reference(isa_path, x_shape, out):
    n = 24
    x = RNG.integers(0, 256, x_shape).astype(np.uint8)
    w = RNG.integers(-128, 128, (40, n)).astype(np.int8)
    xs, xz, ws, wz, ys, yz, b = _params(np.uint8, n, out)
    arrays = [None if a is None else _ro(a) for a in [x, xs, xz, w, ws, wz, ys, yz, b]]
    shape = (*x_shape[:-1], n)
    want = _run("QGemm", arrays, shape, OUT_TYPES[out], {}, "reference")
    got = _run("QGemm", arrays, shape, OUT_TYPES[out], {}, "int8")
    np.testing.assert_array_equal(got, want)


def test_nonzero_weight_zero_point_runs_the_reference():
    n = 6
    x = _ro(RNG.integers(0, 256, (3, 10)).astype(np.uint8))
    w = _ro(RNG.integers(-128, 128, (10, n)).astype(np.int8))
    xs, xz, ws, _, ys, yz, b = _params(np.uint8, n, "uint8")
    wz = np.arange(n, dtype=np.int8)
    arrays = [None if a is None else _ro(a) for a in [x, xs, xz, w, ws, wz, ys, yz, b]]
    want = _run("QGemm", arrays, (3, n), DType.UINT8, {}, "reference")
    np.testing.assert_array_equal(_run("QGemm", arrays, (3, n), DType.UINT8, {}, "int8"), want)


@pytest.mark.parametrize("out", ["uint8", "float"])
def test_residual_epilogue_matches_reference(isa_path, out):
    n, shape = 16, (1, 16, 6, 6)
    x = RNG.integers(0, 256, (1, 8, 6, 6)).astype(np.uint8)
    w = RNG.integers(-128, 128, (n, 8, 1, 1)).astype(np.int8)
    xs, xz, ws, wz, ys, yz, b = _params(np.uint8, n, out)
    attrs = {"pads": [0, 0, 0, 0], "strides": [1, 1], "dilations": [1, 1], "group": 1,
             "clip": [0.0, float("inf")]}
    if out == "uint8":
        residual = RNG.integers(0, 256, shape).astype(np.uint8)
        attrs["residual"] = {"scale": 0.03, "zero_point": 100}
    else:
        residual = RNG.standard_normal(shape).astype(np.float32)
    arrays = [None if a is None else _ro(a) for a in [x, xs, xz, w, ws, wz, ys, yz, b]]
    arrays.append(residual)
    want = _run("QConv", arrays, shape, OUT_TYPES[out], attrs, "reference")
    got = _run("QConv", arrays, shape, OUT_TYPES[out], attrs, "int8")
    np.testing.assert_array_equal(got, want)
