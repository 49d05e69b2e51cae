"""Shape rules of the linear-quantization layers QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear and QLinearSoftmax (canonical attributes:
pydla.frontend.onnx.ops.quantize and quantize_contrib).

The granularity is proved here as the importer fixed it: a one-element scale is per
tensor; otherwise ``axis`` picks a per-axis scale of the input's dimension, or, with
``block_size``, one scale per block of that axis. The kernels expand scales by it.
"""

from __future__ import annotations

import math

from pydla.dtypes import DType
from pydla.loadable.validate import Expected, LayerCheck, broadcast, rule
from pydla.ops import POINTWISE

_QUANT = (DType.INT8, DType.UINT8, DType.INT16, DType.UINT16)
_FLOATS = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)
_PRECISIONS = tuple(int(t) for t in (*_FLOATS, DType.FLOAT64))


def _granularity(check: LayerCheck) -> None:
    """The scale (input 1) and zero point (input 2) fit the input by axis and block_size."""
    x, scale, zp = check.x(0, (0, 16)).shape, check.x(1, (0, 16)), check.opt(2)
    block = check.int_("block_size", 0, 0, 1 << 31)
    per_tensor = math.prod(scale.shape) == 1
    if zp is not None and zp.shape != scale.shape and not (
            per_tensor and math.prod(zp.shape) == 1):
        raise check.fail(".inputs[2]", f"zero point {zp.shape} is not the scale's "
                         f"{scale.shape}")
    axis = check.axis("axis", len(x), 0)
    if per_tensor:  # axis and block_size are moot
        return
    if block:
        want = tuple(-(-d // block) if i == axis else d for i, d in enumerate(x))
    else:
        want = (x[axis],)
    check.need(scale.shape == want, 1, f"scale {scale.shape} is not {want} for input {x} "
               f"(axis {axis}, block_size {block})")


@rule("QuantizeLinear")
def _quantize(check: LayerCheck) -> Expected:
    check.arity(2, 3)
    x = check.x(0)
    _granularity(check)
    check.choice("precision", _PRECISIONS)
    zp = check.opt(2)
    out = check.outs[0].dtype if check.outs else None
    if out not in _QUANT:
        raise check.fail(".outputs[0]", f"quantization to {out and out.name.lower()}")
    if zp is not None:
        check.need(zp.dtype is out, 2, "the zero point's type is not the output's")
    return [(x.shape, out)]


@rule("DequantizeLinear")
def _dequantize(check: LayerCheck) -> Expected:
    check.arity(2, 3)
    x = check.x(0)
    check.need(x.dtype in (*_QUANT, DType.INT32), 0, f"dequantization of "
               f"{x.dtype.name.lower()}")
    _granularity(check)
    zp = check.opt(2)
    if zp is not None:
        check.need(zp.dtype is x.dtype, 2, "the zero point's type is not the input's")
    out = check.outs[0].dtype if check.outs else None
    if out not in _FLOATS:
        raise check.fail(".outputs[0]", f"dequantization to {out and out.name.lower()}")
    return [(x.shape, out)]


@rule("DynamicQuantizeLinear")
def _dynamic_quantize(check: LayerCheck) -> Expected:
    check.arity(1, 1, 3)
    x = check.x(0)
    # the scale is float32, or the half type --autocast gave it
    scale = check.outs[1].dtype if len(check.outs) > 1 else DType.FLOAT32
    if not scale.is_float:
        raise check.fail(".outputs[1]", f"the scale is {scale.name.lower()}")
    return [(x.shape, DType.UINT8), ((), scale), ((), DType.UINT8)]


@rule("QLinearSoftmax")
def _qlinear_softmax(check: LayerCheck) -> Expected:
    check.arity(4, 5)
    x = check.x(0, (1, 16))
    # the kernel's exp table has 256 entries, indexed by the input's 8-bit values
    check.need(x.dtype in (DType.INT8, DType.UINT8), 0, f"x is {x.dtype.name.lower()}, not "
               "int8 or uint8")
    for k in (1, 3):
        s = check.x(k)
        check.need(math.prod(s.shape) == 1 and s.dtype.is_float, k,
                   "a scale is one floating-point value")
    for k in (2, 4):
        zp = check.opt(k)
        if zp is not None:
            check.need(math.prod(zp.shape) == 1 and zp.dtype is x.dtype, k,
                       f"a zero point is one {x.dtype.name.lower()} value")
    axes = check.axes("axes", len(x.shape))
    if not axes:
        raise check.fail(".attrs.axes", "no axis to normalize over")
    return [(x.shape, x.dtype)]


_QPOINTWISE_TYPES = {"QuantizeLinear": ((DType.FLOAT32,), (DType.INT8, DType.UINT8)),
                     "DequantizeLinear": ((DType.INT8, DType.UINT8), (DType.FLOAT32,))}


@rule("QPointwise")
def _qpointwise(check: LayerCheck) -> Expected:
    """A pointwise program over float32 with Q/DQ steps between it and 8-bit registers
    (pydla.backends.cpu.kernels.qlinear_pointwise): operands are earlier registers of the
    types the step takes, shapes broadcast, Q/DQ parameters finite and in range."""
    check.arity(1, 4096)
    program = check.attrs.get("program")
    if not isinstance(program, list) or not 0 < len(program) <= 4096:
        raise check.fail(".attrs.program", "a program is a non-empty list of steps")
    regs = [(check.x(k).shape, check.x(k).dtype) for k in range(len(check.ins))]
    for i, step in enumerate(program):
        path = f".attrs.program[{i}]"
        op = step.get("op") if isinstance(step, dict) else None
        if op not in POINTWISE and op not in _QPOINTWISE_TYPES:
            raise check.fail(path, "a step is an object naming a pointwise op, "
                             "QuantizeLinear or DequantizeLinear")
        ins, shape = step.get("in"), step.get("shape")
        if not isinstance(ins, list) or not ins or any(
                isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < len(regs)
                for r in ins):
            raise check.fail(f"{path}.in", f"{ins!r} are not registers in [0, {len(regs)})")
        try:
            dtype = DType.from_name(step.get("dtype"))
        except (ValueError, TypeError):
            raise check.fail(f"{path}.dtype", f"unknown dtype {step.get('dtype')!r}") from None
        takes, gives = _QPOINTWISE_TYPES.get(op, ((DType.FLOAT32,), (DType.FLOAT32,)))
        if any(regs[r][1] not in takes for r in ins) or dtype not in gives or \
                (op in _QPOINTWISE_TYPES and len(ins) != 1):
            raise check.fail(path, f"{op} of {[regs[r][1].name.lower() for r in ins]} "
                             f"giving {dtype.name.lower()}")
        if op in _QPOINTWISE_TYPES:
            attrs = step.get("attrs")
            scale = attrs.get("scale") if isinstance(attrs, dict) else None
            zp = attrs.get("zero_point") if isinstance(attrs, dict) else None
            eight = dtype if op == "QuantizeLinear" else regs[ins[0]][1]
            lo, hi = (-128, 127) if eight is DType.INT8 else (0, 255)
            if isinstance(scale, bool) or not isinstance(scale, (int, float)) or \
                    not math.isfinite(scale) or scale <= 0 or isinstance(zp, bool) or \
                    not isinstance(zp, int) or not lo <= zp <= hi:
                raise check.fail(f"{path}.attrs", f"scale {scale!r} and zero point {zp!r}: "
                                 f"a positive finite scale, a zero point in [{lo}, {hi}]")
        want = broadcast(check, [regs[r][0] for r in ins], path)
        if not isinstance(shape, list) or tuple(shape) != want:
            raise check.fail(f"{path}.shape", f"{shape!r} is not the broadcast {want} of its "
                             "operands")
        regs.append((want, dtype))
    return [regs[-1]]
