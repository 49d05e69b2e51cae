"""Shape rules of control flow: the Loop layer and the body sub-program it runs.

A Loop layer's inputs are ``[carried initial values..., captured tensors..., M, cond]``
(M, the trip count, and cond, the condition, may be absent: -1), its outputs the carried
values' final states; attrs ``body`` (index into the loadable's ``subprograms``),
``num_carried`` and ``max_iterations``. The body sub-program takes ``[iteration, cond,
carried..., captured...]`` and returns ``[cond, carried...]``. Semantics are ONNX
Loop's: iterate while ``i < M`` (M given) and ``cond`` (cond given; the body's returned
condition is then the next one, else it is ignored). The runtime refuses to go past
``max_iterations`` (a KernelError), so no file makes it spin without end.

``loop`` below checks what the layer alone shows; ``check_loop_bodies`` (called by the
reader once every sub-program has passed the same checks as the main program) ties each
Loop layer's tensors to its body's inputs and outputs.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydla.dtypes import DType
from pydla.errors import LoadableError
from pydla.loadable.program import LayerInfo, ProgramBody, TensorInfo
from pydla.loadable.validate import Expected, LayerCheck, rule

# The most iterations a Loop may declare (an int32, as TensorRT's trip limit).
MAX_LOOP_ITERATIONS = 2**31 - 1
MAX_CARRIED = 4096


def _scalar(check: LayerCheck, k: int, dtype: DType, what: str) -> None:
    t = check.opt(k)
    if t is not None:
        check.need(_size(t.shape) == 1 and t.dtype is dtype, k, f"the {what} {t.name!r} is "
                   f"{t.dtype.name.lower()}{list(t.shape)}, a single {dtype.name.lower()} is "
                   "required")


@rule("Loop")
def loop(check: LayerCheck) -> Expected:
    n = check.int_("num_carried", lo=1, hi=MAX_CARRIED)
    check.int_("body", lo=0)
    check.int_("max_iterations", lo=0, hi=MAX_LOOP_ITERATIONS)
    check.arity(n + 2, n + 2 + MAX_CARRIED, n)
    k_m, k_cond = len(check.ins) - 2, len(check.ins) - 1
    _scalar(check, k_m, DType.INT64, "trip count")
    _scalar(check, k_cond, DType.BOOL, "condition")
    for k in range(k_m):
        check.x(k)  # carried and captured tensors are required
    return [(t.shape, t.dtype) for t in check.ins[:n]]  # type: ignore[union-attr]


_INDEX_TYPES = (DType.INT32, DType.INT64)
_RANGE_TYPES = (DType.INT32, DType.INT64, DType.FLOAT32, DType.FLOAT64)


@rule("DynamicSlice")
def dynamic_slice(check: LayerCheck) -> Expected:
    """A Slice whose starts and ends are tensors (pydla.backends.cpu.dynamic_params): each
    sliced axis at most as long as the input's; the kernel checks the values give it."""
    check.arity(3, 3)
    x = check.x(0)
    rank = len(x.shape)
    axes = check.axes("axes", rank)
    steps = check.ints("steps", len(axes))
    if 0 in steps:
        raise check.fail(".attrs.steps", "a step is 0")
    for k in (1, 2):
        t = check.indices(k, 1)
        check.need(t.shape == (len(axes),), k, f"{t.name!r} has shape {t.shape}, one value "
                   f"per axis of {axes} is required")
    out = check.outs[0]
    check.need(len(out.shape) == rank, 0, f"the output has rank {len(out.shape)}, the input "
               f"{rank}")
    shape = tuple(min(d, x.shape[a]) if a in axes else x.shape[a]
                  for a, d in enumerate(out.shape))
    return [(shape, x.dtype)]


@rule("DynamicRange")
def dynamic_range(check: LayerCheck) -> Expected:
    """A Range whose bounds are tensors: three single values of one type, a 1-D output
    whose length the kernel checks against them."""
    check.arity(3, 3)
    start = check.x(0)
    for k in range(3):
        t = check.x(k)
        check.need(_size(t.shape) == 1 and t.dtype is start.dtype
                   and t.dtype in _RANGE_TYPES, k, f"{t.name!r} is {t.dtype.name.lower()}"
                   f"{list(t.shape)}; Range takes three single values of one numeric type")
    out = check.outs[0]
    check.need(len(out.shape) == 1, 0, f"the output has shape {out.shape}, Range makes 1-D")
    return [(out.shape, start.dtype)]


def check_loop_bodies(layers: Sequence[LayerInfo], tensors: Sequence[TensorInfo],
                      bodies: Sequence[ProgramBody], meta_offset: int, prefix: str = "") -> None:
    """Each Loop layer of a program names a body whose inputs and outputs are the layer's
    tensors' types, in the order the runtime copies them (the layer passed ``loop``).
    Loops do not nest: a body holding a Loop layer is refused."""
    for k, body in enumerate(bodies):
        for lay in body.layers:
            if lay.op == "Loop":
                raise LoadableError(meta_offset, f"metadata {prefix}subprograms[{k}].layers["
                                    f"{lay.index}]: layer {lay.name!r} (Loop): a Loop body "
                                    "holds no Loop (loops do not nest)")
    for lay in layers:
        if lay.op != "Loop":
            continue
        path = f"{prefix}layers[{lay.index}]"

        def fail(where: str, reason: str, lay: LayerInfo = lay, path: str = path
                 ) -> LoadableError:
            return LoadableError(meta_offset, f"metadata {path}{where}: layer {lay.name!r} "
                                 f"(Loop): {reason}")

        index = lay.attrs["body"]
        if index >= len(bodies):
            raise fail(".attrs.body", f"sub-program {index} does not exist ({len(bodies)} "
                       "in the loadable)")
        body = bodies[index]
        where = f"subprograms[{index}]"
        n = lay.attrs["num_carried"]
        carried = [tensors[i] for i in lay.inputs[:n]]
        captured = [tensors[i] for i in lay.inputs[n:-2]]
        want_in = [((1,), DType.INT64), ((1,), DType.BOOL)]
        want_in += [(t.shape, t.dtype) for t in carried + captured]
        want_out = [((1,), DType.BOOL)] + [(t.shape, t.dtype) for t in carried]
        for kind, ios, want in (("inputs", body.inputs, want_in),
                                ("outputs", body.outputs, want_out)):
            if len(ios) != len(want):
                raise fail("", f"its body {where} has {len(ios)} {kind}, the layer needs "
                           f"{len(want)}")
            for k, (io, (shape, dtype)) in enumerate(zip(ios, want)):
                t = body.tensors[io.tensor]
                scalar = k == 0 or (kind == "inputs" and k == 1)
                fits = (_size(t.shape) == 1 if scalar else t.shape == shape)
                if not fits or t.dtype is not dtype or io.dtype is not t.dtype:
                    expect = f"a single {dtype.name.lower()}" if scalar else \
                        f"{dtype.name.lower()}{list(shape)}"
                    raise fail("", f"its body {where}.{kind}[{k}] {t.name!r} is "
                               f"{t.dtype.name.lower()}{list(t.shape)} (buffer "
                               f"{io.dtype.name.lower()}), the layer needs {expect}")


def _size(shape: Sequence[int]) -> int:
    size = 1
    for d in shape:
        size *= d
    return size
