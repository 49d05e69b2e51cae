"""Shape and data-movement ops against onnxruntime, across the opsets where their form changes."""

from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import helper

from pydla.builder import BuildOptions, build
from pydla.loadable import read_loadable
from tests.oracle import check_against_ort, make_model

RNG = np.random.default_rng(0)


def rand(*shape: int, dtype: type = np.float32) -> np.ndarray:
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(-5, 6, shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


Feeds = dict[str, np.ndarray]


def check(nodes: list[onnx.NodeProto], feeds: Feeds, outputs: Sequence[str] = ("y",),
          inits: Feeds | None = None, opset: int = 17) -> list[np.ndarray]:
    """Build a model whose graph inputs are ``feeds`` and compare it with onnxruntime."""
    inputs = {n: (a.dtype, a.shape) for n, a in feeds.items()}
    model = make_model(nodes, inputs, list(outputs), inits, opset=opset)
    return check_against_ort(model, feeds)


def layer_ops(nodes: list[onnx.NodeProto], feeds: Feeds, outputs: Sequence[str] = ("y",),
              inits: Feeds | None = None, opset: int = 17) -> list[str]:
    inputs = {n: (a.dtype, a.shape) for n, a in feeds.items()}
    model = make_model(nodes, inputs, list(outputs), inits, opset=opset)
    return [layer.op for layer in read_loadable(build(model, BuildOptions())).layers]


def i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def test_shape_size_fold_to_constants():
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1, end=-1),
             helper.make_node("Size", ["x"], ["n"]),
             helper.make_node("Shape", ["x"], ["all"])]
    feeds = {"x": rand(2, 3, 4, 5)}
    check(nodes, feeds, ["s", "n", "all"], opset=15)
    # Only the copies of the constant outputs remain.
    assert set(layer_ops(nodes, feeds, ["s", "n", "all"], opset=15)) == {"Identity"}


def test_shape_gather_concat_reshape_chain_folds():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
             helper.make_node("Concat", ["d0", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = {"i0": i64(0), "minus1": i64(-1)}
    feeds = {"x": rand(2, 3, 4)}
    check(nodes, feeds, inits=inits)
    assert layer_ops(nodes, feeds, inits=inits) == ["Reshape"]


@pytest.mark.parametrize("target,allowzero,shape", [
    ([0, -1], 0, (2, 3, 4)), ([-1], 0, (2, 3, 4)), ([4, 0, 2, -1], 0, (2, 3, 4)),
    ([], 0, (1, 1)), ([0, 3], 1, (3, 0)), ([2, 0, 3], 1, (0, 6)),
])
def test_reshape(target, allowzero, shape):
    check([helper.make_node("Reshape", ["x", "t"], ["y"], allowzero=allowzero)],
          {"x": rand(*shape)}, inits={"t": np.array(target, np.int64)}, opset=14)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_flatten(axis):
    check([helper.make_node("Flatten", ["x"], ["y"], axis=axis)], {"x": rand(2, 3, 4)})


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axes", [None, [], [0, -1]])
def test_squeeze(opset, axes):
    if axes is None or (axes == [] and opset < 13):
        node, inits = helper.make_node("Squeeze", ["x"], ["y"]), {}
    elif opset < 13:
        node, inits = helper.make_node("Squeeze", ["x"], ["y"], axes=axes), {}
    else:
        node, inits = helper.make_node("Squeeze", ["x", "a"], ["y"]), {"a": i64(*axes)}
    check([node], {"x": rand(1, 3, 1)}, inits=inits, opset=opset)


@pytest.mark.parametrize("opset", [11, 13])
def test_unsqueeze(opset):
    axes = [-1, 0, 3]
    if opset < 13:
        node, inits = helper.make_node("Unsqueeze", ["x"], ["y"], axes=axes), {}
    else:
        node, inits = helper.make_node("Unsqueeze", ["x", "a"], ["y"]), {"a": i64(*axes)}
    check([node], {"x": rand(2, 3)}, inits=inits, opset=opset)


@pytest.mark.parametrize("perm", [None, [1, 0, 2], [2, 0, 1]])
def test_transpose(perm):
    kw = {} if perm is None else {"perm": perm}
    check([helper.make_node("Transpose", ["x"], ["y"], **kw)], {"x": rand(2, 3, 4)})


def test_transpose_fp16_and_int():
    check([helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])],
          {"x": rand(3, 5).astype(np.float16)})
    check([helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])],
          {"x": rand(3, 5, dtype=np.int32)})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_with_weight_and_empty(axis):
    shape = [2, 3, 2]
    shape[axis] = 0
    check([helper.make_node("Concat", ["a", "w", "b", "e"], ["y"], axis=axis)],
          {"a": rand(2, 3, 2), "b": rand(2, 3, 2)},
          inits={"w": rand(2, 3, 2), "e": np.zeros(shape, np.float32)})


def test_concat_fp16():
    check([helper.make_node("Concat", ["a", "b"], ["y"], axis=1)],
          {"a": rand(2, 3).astype(np.float16), "b": rand(2, 1).astype(np.float16)})


@pytest.mark.parametrize("opset,split,n", [
    (11, [1, 3], 2), (11, None, 2), (13, [2, 0, 2], 3), (13, None, 4), (18, None, 3),
])
def test_split(opset, split, n):
    outs = [f"y{i}" for i in range(n)]
    inits = {}
    if split is not None and opset < 13:
        node = helper.make_node("Split", ["x"], outs, axis=1, split=split)
    elif split is not None:
        node = helper.make_node("Split", ["x", "s"], outs, axis=1)
        inits = {"s": i64(*split)}
    elif opset >= 18:
        node = helper.make_node("Split", ["x"], outs, axis=-1, num_outputs=n)  # uneven: 2,2,1
    else:
        node = helper.make_node("Split", ["x"], outs, axis=1)
    check([node], {"x": rand(2, 4, 5)}, outs, inits, opset)


def test_slice_opset9_attributes():
    check([helper.make_node("Slice", ["x"], ["y"], starts=[1, -3], ends=[100, -1],
                            axes=[0, 2])], {"x": rand(3, 4, 5)}, opset=9)


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [3], None, None),
    ([-1, 0], [-100, 100], [1, 2], [-1, 2]),
    ([10, -2], [-10, 1], [-1, 0], [-2, -1]),
    ([0], [2**63 - 1], [1], [3]),
    ([3], [1], [2], None),
])
def test_slice(starts, ends, axes, steps):
    names = ["x", "s", "e"]
    inits = {"s": i64(*starts), "e": i64(*ends)}
    if axes is not None:
        names.append("a")
        inits["a"] = i64(*axes)
    if steps is not None:
        if axes is None:
            names.append("")
        names.append("st")
        inits["st"] = i64(*steps)
    check([helper.make_node("Slice", names, ["y"])], {"x": rand(3, 4, 5)}, inits=inits)


@pytest.mark.parametrize("shape,target", [((3, 1), [2, 1, 4]), ((2, 3), [1, 1]), ((1,), [])])
def test_expand(shape, target):
    check([helper.make_node("Expand", ["x", "t"], ["y"])], {"x": rand(*shape)},
          inits={"t": np.array(target, np.int64)})


def test_tile():
    check([helper.make_node("Tile", ["x", "r"], ["y"])], {"x": rand(2, 3)},
          inits={"r": i64(3, 2)})
    check([helper.make_node("Tile", ["x", "r"], ["y"])], {"x": rand(2, 1, 3, dtype=np.int64)},
          inits={"r": i64(1, 4, 0)})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[1, 2, 2, 1], [0, 0, 1, 2], [-1, 1, 2, -2]])
def test_pad_modes(mode, pads):
    check([helper.make_node("Pad", ["x", "p", "v"], ["y"], mode=mode)], {"x": rand(4, 5)},
          inits={"p": i64(*pads), "v": np.array(1.5, np.float32)}, opset=19)


def test_pad_opset10_attributes_and_axes_input():
    check([helper.make_node("Pad", ["x"], ["y"], pads=[0, 1, 1, 0, 2, 0], value=-2.0)],
          {"x": rand(2, 3, 2)}, opset=10)
    check([helper.make_node("Pad", ["x", "p", "", "a"], ["y"], mode="edge")],
          {"x": rand(2, 3, 2)}, inits={"p": i64(1, 2, 0, 3), "a": i64(-1, 0)}, opset=18)


def test_pad_runtime_constant_value_and_int():
    check([helper.make_node("Pad", ["x", "p", "v"], ["y"])],
          {"x": rand(2, 3), "v": np.array(7.0, np.float32)}, inits={"p": i64(1, 0, 0, 2)})
    check([helper.make_node("Pad", ["x", "p", "v"], ["y"], mode="reflect")],
          {"x": rand(3, 4, dtype=np.int32)},
          inits={"p": i64(2, 1, 0, 3), "v": np.array(0, np.int32)})


def test_pad_fp16():
    check([helper.make_node("Pad", ["x", "p", "v"], ["y"])], {"x": rand(2, 3).astype(np.float16)},
          inits={"p": i64(1, 1, 1, 1), "v": np.array(0.25, np.float16)})


def test_center_crop_pad():
    check([helper.make_node("CenterCropPad", ["x", "s"], ["y"], axes=[0, -1])],
          {"x": rand(5, 3, 4)}, inits={"s": i64(2, 7)}, opset=18)
    check([helper.make_node("CenterCropPad", ["x", "s"], ["y"])], {"x": rand(4, 4)},
          inits={"s": i64(3, 6)}, opset=18)


def test_constant_of_shape_is_folded():
    value = helper.make_tensor("v", 6, [1], [3])  # int32
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["c"], value=value),
             helper.make_node("Add", ["x", "c"], ["y"])]
    feeds = {"x": rand(2, 3, dtype=np.int32)}
    check(nodes, feeds, inits={"s": i64(2, 3)})
    assert layer_ops(nodes, feeds, inits={"s": i64(2, 3)}) == ["Add"]
    check([helper.make_node("ConstantOfShape", ["s"], ["y"])], {}, inits={"s": i64(0, 2)})


@pytest.mark.parametrize("start,limit,delta,dtype", [
    (3, 9, 3, np.int64), (10, 4, -2, np.int32), (1.0, 5.5, 0.5, np.float32),
    (0.0, -1.0, -0.25, np.float64), (5, 5, 1, np.int64),
])
def test_range(start, limit, delta, dtype):
    inits = {"a": np.array(start, dtype), "b": np.array(limit, dtype),
             "c": np.array(delta, dtype)}
    check([helper.make_node("Range", ["a", "b", "c"], ["y"])], {}, inits=inits)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(mode):
    check([helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode=mode)],
          {"x": rand(1, 8, 2, 3)})


def test_space_to_depth():
    check([helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2)], {"x": rand(2, 2, 4, 6)})


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 2])
def test_trilu(upper, k):
    names, inits = (["x"], {}) if k is None else (["x", "k"], {"k": np.array(k, np.int64)})
    check([helper.make_node("Trilu", names, ["y"], upper=upper)], {"x": rand(2, 3, 4)},
          inits=inits, opset=14)


def test_eye_like():
    check([helper.make_node("EyeLike", ["x"], ["y"], k=1, dtype=7)], {"x": rand(3, 4)})
    check([helper.make_node("EyeLike", ["x"], ["y"], k=-2)], {"x": rand(4, 3)})


def test_col2im():
    check([helper.make_node("Col2Im", ["x", "img", "blk"], ["y"], strides=[1, 2],
                            pads=[1, 0, 1, 1], dilations=[2, 1])],
          {"x": rand(2, 3 * 4, 12)}, inits={"img": i64(4, 5), "blk": i64(2, 2)}, opset=18)


def test_identity():
    check([helper.make_node("Identity", ["x"], ["y"])], {"x": rand(2, 3)})


def test_opset7_attribute_forms_chain():
    nodes = [helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0, 3]),
             helper.make_node("Squeeze", ["u"], ["q"], axes=[0]),
             helper.make_node("Slice", ["q"], ["s"], starts=[0, -3], ends=[2, 1000], axes=[0, 1]),
             helper.make_node("Pad", ["s"], ["p"], pads=[0, 1, 0, 1, 0, 0], mode="edge"),
             helper.make_node("Split", ["p"], ["a", "b"], axis=1, split=[1, 3]),
             helper.make_node("Concat", ["b", "a"], ["c"], axis=1),
             helper.make_node("Transpose", ["c"], ["t"], perm=[2, 0, 1]),
             helper.make_node("Reshape", ["t", "shape"], ["r"]),
             helper.make_node("Flatten", ["r"], ["y"], axis=2)]
    check(nodes, {"x": rand(3, 4)}, inits={"shape": i64(0, -1, 2)}, opset=7)
