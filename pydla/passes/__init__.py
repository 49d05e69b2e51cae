"""Graph passes with contracts, run by a PassManager until nothing changes.

Order matters: folding and pattern recognition see the graph before pointwise fusion
swallows the ops they look for; epilogue fusion runs on the fused pointwise layers.
"""

from __future__ import annotations

from pydla.passes.base import Pass, PassContext
from pydla.passes.cse import EliminateCommonSubexpressions
from pydla.passes.eliminate_dead import EliminateDead
from pydla.passes.eliminate_identity import EliminateIdentity
from pydla.passes.fold_batchnorm import FoldBatchNorm
from pydla.passes.fold_constants import FoldConstants
from pydla.passes.fuse_pointwise import FuseEpilogue, FusePointwise
from pydla.passes.manager import PassManager


def default_passes() -> list[Pass]:
    return [
        EliminateDead(),
        EliminateIdentity(),
        FoldConstants(),
        EliminateCommonSubexpressions(),
        FoldBatchNorm(),
        FusePointwise(),
        FuseEpilogue(),
    ]


PASS_NAMES = tuple(p.name for p in default_passes())

__all__ = ["PASS_NAMES", "Pass", "PassContext", "PassManager", "default_passes"]
