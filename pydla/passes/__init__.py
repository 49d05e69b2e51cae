"""Graph passes with contracts, run by a PassManager until nothing changes.

Order matters: quantized layers fold before constant folding dequantizes their weights;
folding and pattern recognition see the graph before pointwise fusion
swallows the ops they look for; epilogue fusion runs on the fused pointwise layers.
Shuffles are simplified and pads folded first, so the patterns see direct producers;
MatMul+bias becomes Gemm before fold_batchnorm, which folds scales into Gemm weights.
"""

from __future__ import annotations

from pydla.passes.base import Pass, PassContext
from pydla.passes.cancel_transposes import CancelTransposes
from pydla.passes.cse import EliminateCommonSubexpressions
from pydla.passes.eliminate_dead import EliminateDead
from pydla.passes.eliminate_identity import EliminateIdentity
from pydla.passes.fold_batchnorm import FoldBatchNorm, LowerBatchNorm
from pydla.passes.fold_constants import FoldConstants
from pydla.passes.fold_pad import FoldPad
from pydla.passes.fold_qdq import FoldQDQ
from pydla.passes.fold_qdq_moves import FoldQDQMoves
from pydla.passes.fold_qdq_pointwise import FoldQDQPointwise
from pydla.passes.fuse_pointwise import FuseEpilogue, FusePointwise
from pydla.passes.lower_conv_transpose import LowerConvTranspose
from pydla.passes.manager import PassManager
from pydla.passes.matmul_to_gemm import MatMulToGemm
from pydla.passes.recognize_gelu import RecognizeGelu
from pydla.passes.recognize_layernorm import RecognizeLayerNorm
from pydla.passes.recognize_softmax import RecognizeSoftmax


def default_passes() -> list[Pass]:
    return [
        EliminateDead(),
        EliminateIdentity(),
        FoldQDQMoves(),
        FoldQDQPointwise(),
        FoldQDQ(),
        FoldConstants(),
        EliminateCommonSubexpressions(),
        CancelTransposes(),
        FoldPad(),
        MatMulToGemm(),
        FoldBatchNorm(),
        LowerBatchNorm(),
        LowerConvTranspose(),
        RecognizeLayerNorm(),
        RecognizeGelu(),
        RecognizeSoftmax(),
        FusePointwise(),
        FuseEpilogue(),
    ]


PASS_NAMES = tuple(p.name for p in default_passes())

__all__ = ["PASS_NAMES", "Pass", "PassContext", "PassManager", "default_passes"]
