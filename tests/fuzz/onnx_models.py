"""ONNX-importer fuzzing: mutated ModelProtos of the seed models go through the builder.

A build must succeed (and its loadable load and run) or end in a typed PydlaError; never a
crash, a hang or another exception. Dimensions are kept small enough that a mutated model
stays a test of the importer, not of the machine's memory (the builder's memory limits are
tested on their own).
"""

from __future__ import annotations

import random

import numpy as np
import onnx
from onnx import numpy_helper

from tests.fuzz.loadables import BOUNDARY_INTS
from tests.fuzz.seed_models import SEED_MODELS

SMALL_INTS = (0, 1, -1, 2, 3, -2, 5, 16, 64, 2**31 - 1, -2**31, 2**40, 2**63 - 1)
OPS = ("Conv", "Relu", "Add", "MatMul", "Gemm", "Concat", "Reshape", "Transpose", "Softmax",
       "MaxPool", "Resize", "Gather", "Slice", "Pad", "Split", "Expand", "Tile", "Where",
       "ConstantOfShape", "ReduceMean", "Unsqueeze", "Squeeze", "Flatten", "NoSuchOp")


def _mutate_attribute(rng: random.Random, a: onnx.AttributeProto) -> None:
    if a.type == onnx.AttributeProto.INT:
        a.i = rng.choice(SMALL_INTS)
    elif a.type == onnx.AttributeProto.INTS and a.ints:
        ints = list(a.ints)
        r = rng.random()
        if r < 0.3:
            ints.pop(rng.randrange(len(ints)))
        elif r < 0.5:
            ints.append(rng.choice(SMALL_INTS))
        else:
            ints[rng.randrange(len(ints))] = rng.choice(SMALL_INTS)
        del a.ints[:]
        a.ints.extend(ints)
    elif a.type == onnx.AttributeProto.FLOAT:
        a.f = rng.choice((0.0, -1.0, 1e30, float("nan"), float("inf")))
    elif a.type == onnx.AttributeProto.STRING:
        a.s = rng.choice((b"", b"linear", b"cubic", b"reflect", b"\xff", b"nearest"))


def _mutate_initializer(rng: random.Random, t: onnx.TensorProto) -> None:
    arr = numpy_helper.to_array(t)
    r = rng.random()
    if r < 0.4 and arr.dtype.kind in "iu" and arr.size:  # a shape/axes/pads/ids value
        flat = arr.reshape(-1).astype(np.int64)
        flat[rng.randrange(flat.size)] = rng.choice((0, -1, 1, 3, 7, 4096, 2**31 - 1, -2**31,
                                                     2**40, 2**62))
        arr = flat.reshape(arr.shape).astype(arr.dtype)
    elif r < 0.7 and arr.ndim:  # shape change, data repeated or cut to fit
        shape = list(arr.shape)
        i = rng.randrange(len(shape))
        shape[i] = rng.choice((0, 1, 2, shape[i] + 1, max(shape[i] - 1, 0)))
        arr = np.resize(arr, shape)
    elif arr.ndim:
        arr = arr.reshape(-1) if rng.random() < 0.5 else arr[None]
    t.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(arr), t.name))


def mutated_model(name: str, case: int) -> bytes:
    """The serialized mutated model of one case (bytes, so a worker can take it as is)."""
    rng = random.Random(f"onnx:{name}:{case}")
    model = SEED_MODELS[name]()
    g = model.graph
    for _ in range(rng.choice((1, 1, 2, 3))):
        r = rng.random()
        nodes = list(g.node)
        if r < 0.35 and nodes:
            node = rng.choice(nodes)
            if node.attribute and rng.random() < 0.8:
                _mutate_attribute(rng, rng.choice(node.attribute))
            else:
                node.op_type = rng.choice(OPS)
        elif r < 0.6 and g.initializer:
            _mutate_initializer(rng, rng.choice(g.initializer))
        elif r < 0.75:  # an input dimension
            vi = rng.choice(list(g.input))
            dims = vi.type.tensor_type.shape.dim
            if dims:
                dims[rng.randrange(len(dims))].dim_value = rng.choice(
                    (0, 1, 3, 17, 2**31, 2**40) + tuple(b for b in BOUNDARY_INTS if b > 0)[:3])
        elif r < 0.9 and nodes:  # rewire
            node = rng.choice(nodes)
            if node.input:
                names = [v for n in nodes for v in n.output] + [i.name for i in g.initializer]
                node.input[rng.randrange(len(node.input))] = rng.choice(names + ["", "nope"])
        elif nodes:
            g.node.remove(rng.choice(nodes))
        if rng.random() < 0.05:
            model.opset_import[0].version = rng.choice((1, 7, 11, 13, 21, 99))
    return model.SerializeToString()
