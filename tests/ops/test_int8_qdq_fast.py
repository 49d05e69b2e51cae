"""The fast tactic of QuantizeLinear/DequantizeLinear (qlinear_quantize) against the
reference kernels (quantize.py), bit for bit: per tensor and per axis, uint8/int8, with
and without a zero point, ties that round half to even, saturation, NaN-free extremes."""

from __future__ import annotations

import numpy as np
import pytest

from pydla.backends.base import LayerSpec, TensorSpec
from pydla.backends.cpu.backend import bind_layer
from pydla.backends.cpu.registry import candidate_tactics
from pydla.backends.cpu.steps import prebind
from pydla.dtypes import DType

RNG = np.random.default_rng(5)


def _ro(a: np.ndarray | None) -> np.ndarray | None:
    if a is None:
        return None
    a = np.ascontiguousarray(a)
    a.flags.writeable = False  # a loadable's parameter
    return a


def _run(op: str, arrays: list, out_dtype: DType, axis: int, tactic: str) -> np.ndarray:
    x = arrays[0]
    attrs = {"axis": axis % x.ndim, "block_size": 0, "precision": int(DType.FLOAT32)}
    spec = LayerSpec("q", op, attrs, tuple(
        None if a is None else TensorSpec(a.shape, DType.from_numpy(a.dtype)) for a in arrays),
        (TensorSpec(x.shape, out_dtype),), tactic)
    out = np.empty(x.shape, out_dtype.np)
    prebind(bind_layer(spec), arrays, [out])()
    return out


CASES = [  # shape, axis, per-axis?
    ((1, 16, 40, 40), 1, False),   # large enough to fork onto the threads
    ((2, 24, 9, 11), 1, True),
    ((3, 5, 7), 2, True),
    ((4, 33), 0, True),
    ((1,), 0, False),
]


@pytest.mark.parametrize(("shape", "axis", "per_axis"), CASES)
@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
@pytest.mark.parametrize("with_zp", [True, False])
def test_fast_qdq_matches_reference(shape: tuple, axis: int, per_axis: bool, qtype: type,
                                    with_zp: bool) -> None:
    channels = shape[axis] if per_axis else 1
    scale = RNG.uniform(0.01, 0.06, channels).astype(np.float32)
    scale[0] = 0.25  # x = k·0.125 below: exact halves, rounded to even
    info = np.iinfo(qtype)
    zp = RNG.integers(info.min, info.max, channels).astype(qtype) if with_zp else None
    x = (RNG.standard_normal(shape) * 4).astype(np.float32)
    flat = x.reshape(-1)
    flat[: min(8, flat.size)] = np.array([0.125, 0.375, -0.125, -0.375, 1e6, -1e6, 0.0, 0.625],
                                         np.float32)[: min(8, flat.size)]
    params = [_ro(scale if per_axis else scale[:1].reshape(())),
              _ro(None if zp is None else (zp if per_axis else zp[:1].reshape(())))]
    qdt = DType.from_numpy(np.dtype(qtype))
    got = _run("QuantizeLinear", [x, *params], qdt, axis, "fast")
    want = _run("QuantizeLinear", [x, *params], qdt, axis, "reference")
    np.testing.assert_array_equal(got, want)
    back = _run("DequantizeLinear", [want, *params], DType.FLOAT32, axis, "fast")
    ref = _run("DequantizeLinear", [want, *params], DType.FLOAT32, axis, "reference")
    np.testing.assert_array_equal(back.view(np.uint32), ref.view(np.uint32))


def test_fast_tactic_scope() -> None:
    """Blocked scales and a float16 quotient stay on the reference."""
    def spec(block: int, precision: DType) -> LayerSpec:
        return LayerSpec("q", "QuantizeLinear",
                         {"axis": 1, "block_size": block, "precision": int(precision)},
                         (TensorSpec((2, 8), DType.FLOAT32), TensorSpec((2, 4), DType.FLOAT32),
                          None), (TensorSpec((2, 8), DType.UINT8),))

    assert [t.name for t in candidate_tactics(spec(0, DType.FLOAT32))] == ["fast"]
    assert candidate_tactics(spec(2, DType.FLOAT32)) == []
    assert candidate_tactics(spec(0, DType.FLOAT16)) == []
