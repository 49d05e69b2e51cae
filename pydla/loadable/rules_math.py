"""Shape rules of the remaining numeric layers: DFT and STFT, the two losses, Det, BitCast,
ConstantOfShape and Einsum (canonical attributes: pydla.frontend.onnx.ops.signal, losses,
misc_ops, shape and matmul).

Loss targets are runtime class indices the kernel bounds (checked_indices).
"""

from __future__ import annotations

import math

import numpy as np

from pydla.dtypes import DType
from pydla.loadable.validate import Expected, LayerCheck, broadcast, rule

_DIM = 1 << 31


@rule("DFT")
def _dft(check: LayerCheck) -> Expected:
    check.arity(1, 1)
    x = check.x(0, (2, 16))
    rank = len(x.shape)
    check.need(x.shape[-1] in (1, 2) and x.dtype.is_float, 0, f"{x.shape} of "
               f"{x.dtype.name.lower()} does not end in a real or complex axis")
    axis = check.int_("axis", None, 0, rank - 2)  # never the complex axis
    length = check.int_("length", None, 1, _DIM)
    inverse, onesided = check.flag("inverse"), check.flag("onesided")
    if onesided and x.shape[-1] != (2 if inverse else 1):
        raise check.fail(".attrs.onesided", f"a one-sided {'inverse' if inverse else 'forward'}"
                         f" DFT of {x.shape}")
    shape = list(x.shape)
    shape[axis] = length // 2 + 1 if onesided and not inverse else length
    shape[-1] = 1 if onesided and inverse else 2
    return [(tuple(shape), x.dtype)]


@rule("STFT")
def _stft(check: LayerCheck) -> Expected:
    check.arity(1, 2)
    signal = check.x(0, 3)
    batch, n, parts = signal.shape
    check.need(parts in (1, 2) and signal.dtype.is_float, 0, f"signal {signal.shape} is not "
               "(batch, length, 1|2)")
    step = check.int_("frame_step", None, 1, _DIM)
    length = check.int_("frame_length", None, 1, n)
    onesided = check.flag("onesided", 1)
    window = check.opt(1)
    if window is not None:
        check.need(window.shape == (length,), 1, f"window {window.shape} is not "
                   f"({length},)")
    bins = length // 2 + 1 if onesided else length
    return [((batch, (n - length) // step + 1, bins, 2), signal.dtype)]


@rule("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss")
def _loss(check: LayerCheck) -> Expected:
    sce = check.layer.op == "SoftmaxCrossEntropyLoss"
    check.arity(2, 3, (1, 2 if sce else 1))
    x = check.x(0, (2, 16))
    target = check.indices(1)
    check.need(target.shape == (x.shape[0],) + x.shape[2:], 1, f"target {target.shape} is "
               f"not one class per position of scores {x.shape}")
    weight = check.opt(2)
    if weight is not None:
        check.need(weight.shape == (x.shape[1],), 2, f"weight {weight.shape} is not one per "
                   f"class ({x.shape[1]})")
    reduction = check.choice("reduction", ("none", "sum", "mean"))
    if check.attrs.get("ignore_index") is not None:
        check.int_("ignore_index")
    loss = target.shape if reduction == "none" else ()
    return [(loss, x.dtype), (x.shape, x.dtype)][:len(check.outs)]


@rule("Det")
def _det(check: LayerCheck) -> Expected:
    check.arity(1, 1)
    x = check.x(0, (2, 16))
    check.need(x.shape[-1] == x.shape[-2] and x.dtype.is_float, 0, f"{x.shape} of "
               f"{x.dtype.name.lower()} are not floating-point square matrices")
    return [(x.shape[:-2], x.dtype)]


def _dtype(check: LayerCheck, name: str) -> DType:
    code = check.int_(name, None, 0, 255)
    try:
        return DType(code)
    except ValueError:
        raise check.fail(f".attrs.{name}", f"{code} is not a tensor type") from None


@rule("BitCast")
def _bit_cast(check: LayerCheck) -> Expected:
    check.arity(1, 1)
    x = check.x(0)
    src, dst = _dtype(check, "from"), _dtype(check, "to")
    # --autocast may run the float side in a half type: the kernel widens what it reads and
    # writes to float32 anyway, and reinterprets bits only in ``from`` and ``to``
    check.need(src is x.dtype or (src.is_float and x.dtype.is_float), 0, f"{x.name!r} is "
               f"{x.dtype.name.lower()}, the cast reads {src.name.lower()}")
    if src.itemsize != dst.itemsize:
        raise check.fail(".attrs.to", f"{src.name.lower()} and {dst.name.lower()} differ in "
                         "width")
    out = check.outs[0].dtype if check.outs else dst
    return [(x.shape, out if dst.is_float and out.is_float else dst)]


@rule("ConstantOfShape")
def _constant_of_shape(check: LayerCheck) -> Expected:
    # The shape is the output tensor's own (the reader proved it fits its buffer); the
    # value must be a number that fills it.
    check.arity(0, 0)
    v = check.attrs.get("value")
    if isinstance(v, bool):
        v = int(v)
    if not isinstance(v, (int, float)) or not math.isfinite(v):
        raise check.fail(".attrs.value", f"{v!r} is not a finite number")
    out = check.outs[0]
    if out.dtype.is_float:
        ok = out.dtype is DType.FLOAT64 or abs(v) <= float(np.finfo(np.float32).max)
    elif out.dtype is DType.BOOL:
        ok = v in (0, 1)
    else:
        info = np.iinfo(out.dtype.np)
        ok = v == int(v) and info.min <= v <= info.max
    if not ok:
        raise check.fail(".attrs.value", f"{v!r} is not a {out.dtype.name.lower()} value")
    return [(out.shape, None)]


_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _terms(check: LayerCheck, equation: str) -> tuple[list[str], str | None]:
    """The equation's input terms and its output term (None: implicit)."""
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    for term in terms + ([rhs] if arrow else []):
        letters = term.replace("...", "")
        if term.count("...") > 1 or any(c not in _LETTERS for c in letters):
            raise check.fail(".attrs.equation", f"{equation!r}: bad term {term!r}")
    return terms, (rhs if arrow else None)


@rule("Einsum")
def _einsum(check: LayerCheck) -> Expected:
    eq = check.attrs.get("equation")
    if not isinstance(eq, str) or not 0 < len(eq) <= 1024:
        raise check.fail(".attrs.equation", f"{eq!r} is not an equation")
    terms, out = _terms(check, eq)
    check.arity(len(terms), len(terms))
    sizes: dict[str, int] = {}
    ell: list[tuple[int, ...]] = []
    for k, term in enumerate(terms):
        shape = check.x(k).shape
        head, dots, tail = term.partition("...")
        n_ell = len(shape) - len(head) - len(tail)
        if n_ell < 0 or (n_ell and not dots):
            raise check.fail(f".inputs[{k}]", f"shape {shape} does not fit term {term!r}")
        ell.append(shape[len(head):len(head) + n_ell])
        for c, d in zip(head + tail, shape[:len(head)] + shape[len(shape) - len(tail):]):
            if sizes.get(c, d) != d and 1 not in (sizes[c], d):
                raise check.fail(f".inputs[{k}]", f"label {c!r} is {sizes[c]} and {d}")
            sizes[c] = max(sizes.get(c, d), d) if 1 in (sizes.get(c, d), d) else d
    ell_shape = broadcast(check, ell, ".inputs")
    if out is None:  # implicit: the ellipsis, then the labels seen once, in order
        counts = "".join(t.replace("...", "") for t in terms)
        out = "..." + "".join(sorted(c for c in set(counts) if counts.count(c) == 1))
    letters = out.replace("...", "")
    if len(set(letters)) != len(letters) or any(c not in sizes for c in letters):
        raise check.fail(".attrs.equation", f"output term {out!r} repeats or invents a label")
    head, dots, tail = out.partition("...")
    if not dots and any(ell):
        raise check.fail(".attrs.equation", f"output term {out!r} drops the ellipsis")
    shape = tuple(sizes[c] for c in head) + (ell_shape if dots else ()) + \
        tuple(sizes[c] for c in tail)
    return [(shape, None)]
