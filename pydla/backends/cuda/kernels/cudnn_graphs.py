"""cuDNN frontend graphs: a convolution (or a GEMM seen as a 1×1 convolution) with its
bias and as much of its epilogue as cuDNN fuses, on raw device pointers.

An epilogue program is split at a step p: steps before p run inside the cuDNN graph, the
rest in an NVRTC kernel that updates the output in place. The backend times every split
that builds and keeps the fastest (``relu6`` as a clipped ReLU, for instance, only builds
on cuDNN's slow fallback engine; conv+bias+ReLU fused plus a clip pass can win).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydla.backends.cuda.context import BindContext
from pydla.backends.cuda.layout import Placement
from pydla.backends.cuda.plan_cache import conv_spec
from pydla.backends.cuda.registry import Launch
from pydla.dtypes import DType


@dataclass(frozen=True)
class ConvGeometry:
    pre_padding: tuple[int, int]
    post_padding: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]


def data_type(cudnn: Any, dtype: DType) -> Any:
    return {DType.FLOAT32: cudnn.data_type.FLOAT, DType.FLOAT16: cudnn.data_type.HALF,
            DType.BFLOAT16: cudnn.data_type.BFLOAT16}[dtype]


# Epilogue steps cuDNN can take inside the graph, and how.
_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh"}
_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul"}


def fusable_prefix(program: Sequence[Mapping[str, Any]], extras: Sequence[Placement],
                   out: Placement) -> int:
    """How many leading steps cuDNN could take (each then still has to build)."""
    n_regs = 1 + len(extras)
    for i, step in enumerate(program):
        op, regs = step["op"], [int(r) for r in step["in"]]
        if op in _UNARY and len(regs) == 1:
            continue
        if op == "Clip" and len(regs) == 1 and step["attrs"].get("min") is not None:
            continue
        if op in _BINARY and len(regs) == 2:
            others = [r for r in regs if 1 <= r < n_regs]
            if all(extras[r - 1].shape == out.shape for r in others):
                continue
        return i
    return len(program)


def expand_relu_clip(program: Sequence[Mapping[str, Any]], n_extra: int
                     ) -> list[dict[str, Any]]:
    """Clip(x, 0, hi) as Relu then Clip: cuDNN's fast engines fuse the ReLU but not the
    upper clip, so this opens a split where only the clip runs outside cuDNN."""
    out: list[dict[str, Any]] = []
    shift: dict[int, int] = {}  # old register → new register

    def reg(r: int) -> int:
        return shift.get(r, r)

    for i, step in enumerate(program):
        old_result = n_extra + 1 + i
        ins = [reg(int(r)) for r in step["in"]]
        attrs = step.get("attrs", {})
        if step["op"] == "Clip" and len(ins) == 1 and attrs.get("min") == 0:
            out.append(dict(step, op="Relu", attrs={}, **{"in": ins}))
            ins = [n_extra + len(out)]
        out.append(dict(step, **{"in": ins}))
        shift[old_result] = n_extra + len(out)
    return out


def split_is_valid(program: Sequence[Mapping[str, Any]], n_extra: int, p: int) -> bool:
    """The in-place rest (steps p…) may read only the prefix's result (held in the output),
    the extra inputs, and its own registers."""
    if p == len(program):
        return True
    result = n_extra + p if p else 0  # register holding what cuDNN wrote
    allowed = set(range(1, n_extra + 1)) | {result}
    for i, step in enumerate(program[p:], start=p):
        if any(int(r) not in allowed for r in step["in"]):
            return False
        allowed.add(n_extra + 1 + i)
    return True


def suffix_program(program: Sequence[Mapping[str, Any]], n_extra: int, p: int
                   ) -> list[dict[str, Any]]:
    """Steps p… renumbered for a kernel whose operand 0 is the output as cuDNN left it and
    operands 1…n_extra the extra inputs."""
    result = n_extra + p if p else 0

    def renumber(r: int) -> int:
        if r == result:
            return 0
        if 1 <= r <= n_extra:
            return r
        return r - p

    return [dict(step, **{"in": [renumber(int(r)) for r in step["in"]]}) for step in program[p:]]


# Tensor uids: a deserialized plan binds its tensors by uid, so the built graph names them.
_X, _W, _B, _Y, _EXTRA = 1, 2, 3, 4, 10
_HEURISTICS = ("A", "FALLBACK")


def conv_graph(ctx: BindContext, x: Placement, w_ptr: int, w_dims: Sequence[int],
               w_strides: Sequence[int], w_dtype: DType, bias: Placement | None,
               program: Sequence[Mapping[str, Any]], extras: Sequence[Placement],
               out: Placement, geometry: ConvGeometry) -> Launch:
    """Build and return the launch of conv (+bias) (+program) as one cuDNN graph; raises
    if cuDNN has no engine for it. The built plan comes from the plan cache when it holds
    one for this graph, GPU and cuDNN (``plan_cache``), and is stored there otherwise."""
    cudnn = ctx.cudnn
    if cudnn is None:
        raise RuntimeError("the cuDNN frontend (nvidia-cudnn-frontend) is not installed")
    handle = ctx.cudnn_handle
    no_tf32 = bool(ctx.program.build.get("no_tf32"))
    spec = conv_spec(x, w_dims, w_strides, w_dtype, bias, program, extras, out,
                     (geometry.pre_padding, geometry.post_padding, geometry.stride,
                      geometry.dilation), _HEURISTICS, no_tf32)

    def build() -> Any:
        return _build_conv_graph(cudnn, handle, x, w_dims, w_strides, w_dtype, bias, program,
                                 extras, out, geometry, no_tf32)

    def restore(blob: bytes) -> Any:
        g = cudnn.pygraph(handle=handle)
        g.deserialize(blob)
        int(g.get_workspace_size())  # a plan that cannot answer this is refused here
        return g

    g = ctx.plans.load_or_build(spec, restore, build,
                                lambda built: bytes(built.serialize(as_bytes=True)))
    ctx.need_workspace(int(g.get_workspace_size()))
    ctx.keep.append(g)
    pack: dict[int, int] = {_X: x.ptr, _W: w_ptr, _Y: out.ptr}
    if bias is not None:
        pack[_B] = bias.ptr
    used = {int(r) for step in program for r in step["in"]}
    for e, extra in enumerate(extras):
        if e + 1 in used:
            pack[_EXTRA + e] = extra.ptr

    def launch(stream: Any) -> None:
        cudnn.set_stream(handle, int(stream.ptr))
        g.execute(pack, ctx.workspace_ptr, handle=handle)

    return launch


def _build_conv_graph(cudnn: Any, handle: Any, x: Placement, w_dims: Sequence[int],
                      w_strides: Sequence[int], w_dtype: DType, bias: Placement | None,
                      program: Sequence[Mapping[str, Any]], extras: Sequence[Placement],
                      out: Placement, geometry: ConvGeometry, no_tf32: bool) -> Any:
    io = data_type(cudnn, out.dtype)
    f32 = cudnn.data_type.FLOAT
    g = cudnn.pygraph(io_data_type=io, intermediate_data_type=f32, compute_data_type=f32,
                      handle=handle)
    X = g.tensor(name="x", dim=list(x.shape), stride=list(x.strides),
                 data_type=data_type(cudnn, x.dtype))
    W = g.tensor(name="w", dim=list(w_dims), stride=list(w_strides),
                 data_type=data_type(cudnn, w_dtype))
    X.set_uid(_X)
    W.set_uid(_W)
    if geometry.pre_padding == geometry.post_padding:
        pads: dict[str, Any] = {"padding": list(geometry.pre_padding)}
    else:
        pads = {"pre_padding": list(geometry.pre_padding),
                "post_padding": list(geometry.post_padding)}
    y = g.conv_fprop(image=X, weight=W, stride=list(geometry.stride),
                     dilation=list(geometry.dilation), compute_data_type=f32, **pads)
    if bias is not None:
        k = bias.size
        B = g.tensor(name="b", dim=[1, k, 1, 1], stride=[k, 1, k, k],
                     data_type=data_type(cudnn, bias.dtype))
        B.set_uid(_B)
        y = g.bias(input=y, bias=B)
    regs: list[Any] = [y]
    used = {int(r) for step in program for r in step["in"]}
    for e, extra in enumerate(extras):
        if e + 1 not in used:
            regs.append(None)
            continue
        T = g.tensor(name=f"e{e}", dim=list(extra.shape), stride=list(extra.strides),
                     data_type=data_type(cudnn, extra.dtype))
        T.set_uid(_EXTRA + e)
        regs.append(T)
    for step in program:
        args = [regs[int(r)] for r in step["in"]]
        op = step["op"]
        if op in _UNARY:
            y = getattr(g, _UNARY[op])(input=args[0])
        elif op == "Clip":
            hi = step["attrs"].get("max")
            y = g.relu(input=args[0], lower_clip=float(step["attrs"]["min"]),
                       upper_clip=None if hi is None else float(hi))
        else:
            y = getattr(g, _BINARY[op])(a=args[0], b=args[1])
        regs.append(y)
    y.set_output(True).set_data_type(io)
    y.set_dim(list(out.shape)).set_stride(list(out.strides))
    y.set_uid(_Y)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([getattr(cudnn.heur_mode, m) for m in _HEURISTICS])
    if out.dtype is DType.FLOAT32 and no_tf32:
        # --noTF32: cuDNN's tensor-core engines run float32 data as TF32 (10-bit mantissa);
        # without them the convolution computes in strict FP32.
        g.deselect_numeric_notes([cudnn.numerical_note.TENSOR_CORE])
    g.check_support()
    g.build_plans()
    return g
