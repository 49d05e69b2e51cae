"""Which int8 path the kernels bound now use: the CPU's features, or PYDLA_CPU_ISA.

Read at every bind (never at import), so that a test or a user can force the AVX2 path on
a VNNI machine — the CI machine is AVX2 only, and the AVX2 path must be covered wherever
the suite runs.
"""

from __future__ import annotations

import os
from functools import cache

from pydla.errors import KernelError

ENV_VAR = "PYDLA_CPU_ISA"
PATHS = ("avx512_vnni", "avx2", "generic")


@cache
def _host_features() -> frozenset[str]:
    """The features numba compiles for: NUMBA_CPU_FEATURES where set, else the host's."""
    from numba import config  # noqa: PLC0415  (numba's config is final once it is used)

    if config.CPU_FEATURES:
        return frozenset(f[1:] for f in str(config.CPU_FEATURES).split(",") if f.startswith("+"))
    import llvmlite.binding as llvm  # noqa: PLC0415

    return frozenset(name for name, on in llvm.get_host_cpu_features().items() if on)


def supported(path: str) -> bool:
    """Whether this CPU can run ``path``."""
    features = _host_features()
    if path == "avx512_vnni":
        return {"avx512f", "avx512bw", "avx512vnni"} <= features
    if path == "avx2":
        return "avx2" in features
    return path == "generic"


def isa() -> str:
    """The best path this CPU supports, or PYDLA_CPU_ISA's (refused if unsupported)."""
    wanted = os.environ.get(ENV_VAR, "").strip().lower()
    if wanted:
        if wanted not in PATHS:
            raise KernelError("int8", "isa", f"{ENV_VAR}={wanted!r}: expected one of {PATHS}")
        if not supported(wanted):
            raise KernelError("int8", "isa", f"{ENV_VAR}={wanted!r}: this CPU lacks its "
                              "instructions")
        return wanted
    return next(path for path in PATHS if supported(path))
