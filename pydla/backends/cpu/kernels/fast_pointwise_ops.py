"""The scalar expression of each pointwise op, for the pointwise-program compiler.

``EXPRESSIONS[op](args, attrs, k)`` returns Python source computing one element from the
operand expressions ``args`` (already in the op's compute type); ``k(value)`` names a
float32 constant. Only float32 arithmetic is compiled (float16 layers are widened at the
edges); integer and bool registers take part through Cast, comparisons, logic and Where.
An op missing here, or used with other types, leaves the layer to its reference kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

Const = Callable[[float], str]
Emit = Callable[[Sequence[str], Mapping[str, Any], Const], str]

FLOAT = "float32"
INTS = ("int64", "int32")
BOOL = "bool"
# numba scalar constructor of each register type.
SCALAR = {"float32": "np.float32", "int64": "np.int64", "int32": "np.int32", "bool": "np.bool_"}


def _relu(a: Sequence[str], attrs: Mapping[str, Any], k: Const) -> str:
    return f"at_least({a[0]}, {k(0)})"


def _clamp(x: str, lo: str | None, hi: str | None) -> str:
    """ONNX Clip: Min(hi, Max(x, lo)); NaN passes, lo > hi gives hi."""
    if lo is not None:
        x = f"at_least({x}, {lo})"
    if hi is not None:
        x = f"at_most({x}, {hi})"
    return x


def _clip(a: Sequence[str], attrs: Mapping[str, Any], k: Const) -> str:
    lo = a[1] if len(a) > 1 else (None if attrs.get("min") is None else k(attrs["min"]))
    hi = a[2] if len(a) > 2 else (None if attrs.get("max") is None else k(attrs["max"]))
    return _clamp(a[0], lo, hi)


def _hard_sigmoid(x: str, alpha: float, beta: float, k: Const) -> str:
    return _clamp(f"({k(alpha)} * {x} + {k(beta)})", k(0), k(1))


def _exp_linear(a: Sequence[str], k: Const, alpha: float, gamma: float = 1.0,
                inner: float = 1.0) -> str:
    """gamma·(x ≥ 0 ? x : alpha·expm1(x/inner)); expm1 keeps small negatives accurate."""
    neg = f"{k(alpha)} * np.float32(math.expm1({a[0]} / {k(inner)}))"
    return f"{k(gamma)} * ({a[0]} if {a[0]} >= {k(0)} else {neg})"


def _variadic(sep: str) -> Emit:
    return lambda a, attrs, k: "(" + f" {sep} ".join(a) + ")"


def _extreme(pick: str) -> Emit:
    def emit(a: Sequence[str], attrs: Mapping[str, Any], k: Const) -> str:
        out = a[0]
        for b in a[1:]:
            out = f"{pick}({out}, {b})"
        return out

    return emit


def _unary(fmt: str) -> Emit:
    return lambda a, attrs, k: fmt.format(x=a[0])


FLOAT_OPS: dict[str, Emit] = {
    "Add": _variadic("+"), "Sub": lambda a, attrs, k: f"({a[0]} - {a[1]})",
    "Mul": _variadic("*"), "Div": lambda a, attrs, k: f"({a[0]} / {a[1]})",
    "Pow": lambda a, attrs, k: f"pow32({a[0]}, {a[1]})",
    "Sum": _variadic("+"),
    "Mean": lambda a, attrs, k: "(" + " + ".join(a) + f") / {k(len(a))}",
    "Max": _extreme("nan_max"), "Min": _extreme("nan_min"),
    "PRelu": lambda a, attrs, k: f"({a[0]} if {a[0]} >= {k(0)} else {a[1]} * {a[0]})",
    "Relu": _relu, "Clip": _clip,
    "Neg": _unary("(-{x})"), "Abs": _unary("abs({x})"),
    "Exp": _unary("exp32({x})"), "Sigmoid": _unary("sigmoid32({x})"),
    "Tanh": _unary("tanh32({x})"), "Erf": _unary("erf32({x})"),
    "Softplus": _unary("softplus32({x})"),
    "Mish": _unary("({x} * tanh32(softplus32({x})))"),
    "Sqrt": _unary("math.sqrt({x})"), "Log": _unary("math.log({x})"),
    "Sin": _unary("math.sin({x})"), "Cos": _unary("math.cos({x})"),
    "Floor": _unary("np.floor({x})"), "Ceil": _unary("np.ceil({x})"),
    "Round": _unary("np.rint({x})"),
    "Reciprocal": lambda a, attrs, k: f"({k(1)} / {a[0]})",
    "Softsign": lambda a, attrs, k: f"({a[0]} / ({k(1)} + abs({a[0]})))",
    "HardSigmoid": lambda a, attrs, k: _hard_sigmoid(a[0], attrs["alpha"], attrs["beta"], k),
    "HardSwish": lambda a, attrs, k: f"({a[0]} * {_hard_sigmoid(a[0], 1 / 6, 0.5, k)})",
    "LeakyRelu": lambda a, attrs, k: (f"({a[0]} if {a[0]} >= {k(0)} "
                                      f"else {k(attrs['alpha'])} * {a[0]})"),
    "ThresholdedRelu": lambda a, attrs, k: (f"({a[0]} if {a[0]} > {k(attrs['alpha'])} "
                                            f"else {k(0)})"),
    "Elu": lambda a, attrs, k: _exp_linear(a, k, attrs["alpha"]),
    "Selu": lambda a, attrs, k: _exp_linear(a, k, attrs["alpha"], attrs["gamma"]),
    "Celu": lambda a, attrs, k: _exp_linear(a, k, attrs["alpha"], inner=attrs["alpha"]),
    "Swish": lambda a, attrs, k: f"({a[0]} * sigmoid32({k(attrs['alpha'])} * {a[0]}))",
    "Gelu": lambda a, attrs, k: (f"gelu32({a[0]})" if attrs["approximate"] == "none"
                                 else f"gelu_tanh32({a[0]})"),
}
# Integer arithmetic wraps (numba computes in int64 and the store truncates).
INT_OPS: dict[str, Emit] = {
    "Add": _variadic("+"), "Sub": lambda a, attrs, k: f"({a[0]} - {a[1]})",
    "Mul": _variadic("*"), "Neg": _unary("(-{x})"), "Abs": _unary("abs({x})"),
    "Max": _extreme("nan_max"), "Min": _extreme("nan_min"), "Sum": _variadic("+"),
}
COMPARISONS = {"Equal": "==", "Less": "<", "Greater": ">", "LessOrEqual": "<=",
               "GreaterOrEqual": ">="}
LOGIC: dict[str, Emit] = {
    "Not": _unary("(not {x})"), "And": _variadic("and"), "Or": _variadic("or"),
    "Xor": lambda a, attrs, k: f"({a[0]} != {a[1]})",
}


def expression(op: str, args: Sequence[str], arg_types: Sequence[str], out_type: str,
               attrs: Mapping[str, Any], k: Const) -> str | None:
    """Source of one step's value in ``out_type``, or None when it is not compiled."""
    if op == "Cast":
        if arg_types[0] not in SCALAR:
            return None
        if out_type == BOOL:
            return f"({args[0]} != 0)"
        return f"{SCALAR[out_type]}({args[0]})"
    if op == "Where":
        if arg_types[0] != BOOL or arg_types[1] != out_type or arg_types[2] != out_type:
            return None
        return f"({args[1]} if {args[0]} else {args[2]})"
    if op in COMPARISONS:
        if out_type != BOOL or len(set(arg_types)) != 1 or arg_types[0] == BOOL:
            return None
        return f"({args[0]} {COMPARISONS[op]} {args[1]})"
    if op in LOGIC:
        if out_type != BOOL or any(t != BOOL for t in arg_types):
            return None
        return LOGIC[op](args, attrs, k)
    if any(t != out_type for t in arg_types):
        return None
    table = FLOAT_OPS if out_type == FLOAT else INT_OPS if out_type in INTS else {}
    emit = table.get(op)
    if emit is None:
        return None
    return f"{SCALAR[out_type]}({emit(args, attrs, k)})"
