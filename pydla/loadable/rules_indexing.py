"""Shape rules of the indexing layers: element and N-D gathers and scatters, OneHot, TopK,
ReverseSequence and TensorScatter (canonical attributes: pydla.frontend.onnx.ops.indexing
and misc_ops).

The index *values* are runtime data: the kernels bound them before use
(pydla.backends.cpu.kernels.indexing.checked_indices) and raise a KernelError naming the
layer. These rules prove everything else: ranks, the index tensors' shapes and types, and
the outputs' shapes.
"""

from __future__ import annotations

import math

from pydla.dtypes import DType
from pydla.loadable.validate import Expected, LayerCheck, rule

_DIM = 1 << 31
_REDUCTIONS = ("none", "add", "mul", "max", "min")


@rule("GatherElements")
def _gather_elements(check: LayerCheck) -> Expected:
    check.arity(2, 2)
    data = check.x(0, (1, 16))
    idx = check.indices(1, len(data.shape))
    axis = check.axis("axis", len(data.shape))
    # ONNX: every other axis of the indices fits inside the data's
    check.need(all(e <= d for i, (d, e) in enumerate(zip(data.shape, idx.shape)) if i != axis),
               1, f"indices {idx.shape} exceed data {data.shape} off axis {axis}")
    return [(idx.shape, data.dtype)]


@rule("GatherND")
def _gather_nd(check: LayerCheck) -> Expected:
    check.arity(2, 2)
    data = check.x(0, (1, 16))
    idx = check.indices(1, (1, 16))
    b = check.int_("batch_dims", 0, 0, min(len(data.shape), len(idx.shape)) - 1)
    k = idx.shape[-1]
    check.need(1 <= k <= len(data.shape) - b and data.shape[:b] == idx.shape[:b], 1,
               f"indices {idx.shape} do not address data {data.shape} (batch_dims {b})")
    return [(data.shape[:b] + idx.shape[b:-1] + data.shape[b + k:], data.dtype)]


@rule("ScatterND")
def _scatter_nd(check: LayerCheck) -> Expected:
    check.arity(3, 3)
    data = check.x(0, (1, 16))
    idx = check.indices(1, (1, 16))
    upd = check.x(2)
    check.choice("reduction", _REDUCTIONS, "none")
    k = idx.shape[-1]
    check.need(1 <= k <= len(data.shape), 1, f"indices {idx.shape} do not address data "
               f"{data.shape}")
    want = idx.shape[:-1] + data.shape[k:]
    check.need(upd.shape == want, 2, f"updates {upd.shape} are not {want}")
    check.need(upd.dtype is data.dtype, 2, "updates and data differ in type")
    return [(data.shape, data.dtype)]


@rule("ScatterElements")
def _scatter_elements(check: LayerCheck) -> Expected:
    check.arity(3, 3)
    data = check.x(0, (1, 16))
    idx = check.indices(1, len(data.shape))
    upd = check.x(2)
    axis = check.axis("axis", len(data.shape))
    check.choice("reduction", _REDUCTIONS, "none")
    check.need(upd.shape == idx.shape and upd.dtype is data.dtype, 2,
               f"updates {upd.shape} are not the indices' {idx.shape} in the data's type")
    check.need(all(e <= d for i, (d, e) in enumerate(zip(data.shape, idx.shape)) if i != axis),
               1, f"indices {idx.shape} exceed data {data.shape} off axis {axis}")
    return [(data.shape, data.dtype)]


@rule("OneHot")
def _one_hot(check: LayerCheck) -> Expected:
    check.arity(2, 2)
    idx = check.x(0, (0, 15))
    values = check.x(1, (1, 2))
    check.need(idx.dtype is not DType.BOOL, 0, "indices are bool")
    check.need(math.prod(values.shape) == 2, 1, f"values {values.shape} are not [off, on]")
    axis = check.axis("axis", len(idx.shape) + 1)
    depth = check.int_("depth", None, 1, _DIM)
    return [(idx.shape[:axis] + (depth,) + idx.shape[axis:], values.dtype)]


@rule("TopK")
def _top_k(check: LayerCheck) -> Expected:
    check.arity(1, 1, 2)
    x = check.x(0, (1, 16))
    axis = check.axis("axis", len(x.shape))
    k = check.int_("k", None, 0, x.shape[axis])
    check.flag("largest", 1)
    check.flag("sorted", 1)
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]
    return [(shape, x.dtype), (shape, DType.INT64)]


@rule("ReverseSequence")
def _reverse_sequence(check: LayerCheck) -> Expected:
    check.arity(2, 2)
    x = check.x(0, (2, 16))
    lens = check.indices(1, 1)
    batch = check.axis("batch_axis", len(x.shape), 1)
    time = check.axis("time_axis", len(x.shape), 0)
    if batch == time:
        raise check.fail(".attrs.time_axis", f"{time} is also the batch axis")
    check.need(lens.shape == (x.shape[batch],), 1, f"sequence_lens {lens.shape} is not one "
               f"length per batch entry of {x.shape}")
    return [(x.shape, x.dtype)]


@rule("TensorScatter")
def _tensor_scatter(check: LayerCheck) -> Expected:
    check.arity(2, 3)
    past = check.x(0, (2, 16))
    update = check.x(1, len(past.shape))
    rank = len(past.shape)
    axis = check.int_("axis", None, 1, rank - 1)  # never the batch axis
    check.choice("mode", ("linear", "circular"))
    fits = all(u == p if i != axis else u <= p
               for i, (u, p) in enumerate(zip(update.shape, past.shape)))
    check.need(fits and update.dtype is past.dtype, 1, f"update {update.shape} does not fit "
               f"the cache {past.shape}")
    if check.opt(2) is not None:
        where = check.indices(2, 1)
        check.need(where.shape == (past.shape[0],), 2, f"write_indices {where.shape} are not "
                   f"one per batch entry of {past.shape}")
    return [(past.shape, past.dtype)]
