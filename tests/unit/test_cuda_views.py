"""The CUDA backend's strided views of Tile, DepthToSpace and SpaceToDepth (pure functions,
no GPU): read through numpy's ``as_strided`` over channels-last and row-major memory, they
give what the CPU backend computes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

from pydla.backends.cuda.layout import Placement
from pydla.backends.cuda.views import CopyView, depth_space_view, split_strides, tile_view
from pydla.dtypes import DType

X = np.arange(2 * 8 * 4 * 6, dtype=np.int64).reshape(2, 8, 4, 6)


def _memory(x: np.ndarray, layout: str) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1) if layout == "nhwc" else x).ravel()


def _copy(view: CopyView, x_mem: np.ndarray, out: Placement) -> np.ndarray:
    """Run the strided copy on the host; the output in logical order."""
    shape, x_strides, out_strides = view
    out_mem = np.full(out.size, -1, np.int64)
    src = as_strided(x_mem, shape, [s * 8 for s in x_strides])
    as_strided(out_mem, shape, [s * 8 for s in out_strides])[...] = src
    if out.layout == "nhwc":
        n, c, h, w = out.shape
        return out_mem.reshape(n, h, w, c).transpose(0, 3, 1, 2)
    return out_mem.reshape(out.shape)


def _depth_to_space(x: np.ndarray, bs: int, dcr: bool) -> np.ndarray:
    b, c, h, w = x.shape
    if dcr:
        t = x.reshape(b, bs, bs, c // bs ** 2, h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(b, c // bs ** 2, bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    return t.reshape(b, c // bs ** 2, h * bs, w * bs)


def _space_to_depth(x: np.ndarray, bs: int, dcr: bool) -> np.ndarray:
    b, c, h, w = x.shape
    perm = (0, 3, 5, 1, 2, 4) if dcr else (0, 1, 3, 5, 2, 4)
    return x.reshape(b, c, h // bs, bs, w // bs, bs).transpose(perm).reshape(
        b, c * bs * bs, h // bs, w // bs)


LAYOUTS = list(itertools.product(["linear", "nhwc"], repeat=2))


@pytest.mark.parametrize(("x_layout", "out_layout"), LAYOUTS)
def test_depth_ops_match_numpy(x_layout: str, out_layout: str) -> None:
    x = Placement(0, X.shape, DType.INT64, x_layout)
    for op, dcr in itertools.product(["DepthToSpace", "SpaceToDepth"], [True, False]):
        want = (_depth_to_space if op == "DepthToSpace" else _space_to_depth)(X, 2, dcr)
        out = Placement(0, want.shape, DType.INT64, out_layout)
        got = _copy(depth_space_view(op, x, out, 2, dcr), _memory(X, x_layout), out)
        np.testing.assert_array_equal(got, want, err_msg=f"{op} dcr={dcr}")


@pytest.mark.parametrize(("x_layout", "out_layout"), LAYOUTS)
def test_tile_matches_numpy(x_layout: str, out_layout: str) -> None:
    x = Placement(0, X.shape, DType.INT64, x_layout)
    for repeats in ([2, 1, 3, 1], [1, 2, 1, 2], [1, 1, 1, 1]):
        want = np.tile(X, repeats)
        out = Placement(0, want.shape, DType.INT64, out_layout)
        got = _copy(tile_view(x, out, repeats), _memory(X, x_layout), out)
        np.testing.assert_array_equal(got, want, err_msg=str(repeats))


def test_split_strides_of_a_row_major_tensor() -> None:
    p = Placement(0, (6, 10), DType.FLOAT32, "linear")
    assert split_strides(p, [[2, 3], [10]]) == [30, 10, 1]
    assert split_strides(p, [[6], [5, 2]]) == [10, 2, 1]
