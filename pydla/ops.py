"""Semantic tables of pydla's op set shared by the builder and the runtime (no imports).

``POINTWISE`` ops compute each output element from the same (broadcast) element of their
inputs, so chains of them fuse into one layer and can run in place.
"""

from __future__ import annotations

UNARY_POINTWISE = frozenset({
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Celu", "Cos", "Cosh",
    "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish", "IsInf", "IsNaN",
    "LeakyRelu", "Log", "Mish", "Neg", "Not", "Reciprocal", "Relu", "Round", "Selu", "Shrink",
    "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Tan", "Tanh",
    "ThresholdedRelu", "Swish", "Cast", "BitwiseNot",
})
BINARY_POINTWISE = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "PRelu", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "BitShift", "BitwiseAnd",
    "BitwiseOr", "BitwiseXor",
})
# Variadic or ternary, still elementwise with broadcasting.
OTHER_POINTWISE = frozenset({"Clip", "Where", "Min", "Max", "Sum", "Mean"})
POINTWISE = UNARY_POINTWISE | BINARY_POINTWISE | OTHER_POINTWISE

# Layers whose kernel accepts a pointwise epilogue after its main computation.
EPILOGUE_HOSTS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})

# Pointwise ops whose CPU kernel may write over its first input (one ufunc pass, each
# element read before it is written); the builder runs them in place. Pinned by a test.
INPLACE_SAFE = frozenset({
    "Relu", "Add", "Sub", "Mul", "Div", "Abs", "Neg", "Exp", "Log", "Sqrt", "Tanh", "Sin",
    "Cos", "Floor", "Ceil", "Reciprocal", "Sigmoid", "Clip",
})

# The int8 layers (pydla.passes.fold_qdq, QLinearConv/QLinearMatMul/ConvInteger/MatMulInteger
# importers). Their inputs, by position (absent optional ones are None): QConv's x is an
# image and w its (M, C/group, *kernel) weights; QGemm multiplies x (..., M, K) by w
# (..., K, N). Scales and zero points are per tensor, w's per output channel too; bias is
# int32 with scale x_scale·w_scale; residual: a folded Add's other operand, of the output's
# shape. Attribute ``clip``: a folded Relu/Clip, [lo, hi] in the real domain. Semantics:
# pydla.backends.cpu.kernels.qlinear_reference.
QUANTIZED_INPUTS = ("x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point",
                    "y_scale", "y_zero_point", "bias", "residual")
QUANTIZED_LAYERS = frozenset({"QConv", "QGemm"})
