"""The CPU engine's one thread pool: numba's threads, with BLAS kept single-threaded.

Two pools on the same cores (numba's workers and OpenBLAS's) thrash each other: a numba
parallel region whose workers call a multi-threaded BLAS ran ~20× slower on this project's
2-core machine. So parallelism lives in one place — the numba kernels split their work into
``num_threads()`` parts — and every BLAS call runs on the thread that makes it.

The thread count, in order of precedence:

1. ``set_num_threads(n)`` (``None`` goes back to the default);
2. the environment variable ``PYDLA_NUM_THREADS``, read when a program is bound;
3. the cores this process may run on.

It is capped by numba's pool size (``NUMBA_NUM_THREADS``, fixed when numba starts its
workers) and takes effect for programs bound after the change: kernels size their per-thread
scratch when they are bound. ``configure()`` runs at every bind; the BLAS limit it sets
(through threadpoolctl) stays for the life of the process, or until ``release_blas()``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import numba

ENV_VAR = "PYDLA_NUM_THREADS"

_lock = threading.Lock()
_requested: int | None = None
_blas_limit: object | None = None  # threadpoolctl's limiter, kept so the limit can be undone


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))  # respects taskset / container CPU sets
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _from_env() -> int | None:
    raw = os.environ.get(ENV_VAR, "").strip()
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"{ENV_VAR}={raw!r} is not a thread count") from None
    if n < 1:
        raise ValueError(f"{ENV_VAR}={raw!r}: the thread count must be at least 1")
    return n


def set_num_threads(n: int | None) -> None:
    """Use ``n`` threads for CPU programs bound from now on (``None``: the default)."""
    global _requested
    if n is not None and int(n) < 1:
        raise ValueError(f"thread count must be at least 1, got {n}")
    _requested = None if n is None else int(n)


def num_threads() -> int:
    """The thread count the next bound program will use."""
    wanted = _requested if _requested is not None else _from_env()
    if wanted is None:
        wanted = cores()
    return max(1, min(wanted, numba.config.NUMBA_NUM_THREADS))


# Below this many elements a memory-bound kernel (reorder, pool over the plane, broadcast
# scaling) runs on the calling thread: starting a numba parallel region costs ≈ 1 µs more
# than a plain call, as much as the whole work of a squeeze-excitation gate's reorder
# (576 values: 1.6 µs forked, 0.8 µs not) — MobileNetV3-small runs dozens. Measured here:
# a reduction over 49×576 values 1.9 µs forked vs 1.3, a broadcast scaling of 196×240
# 3.1 vs 3.5.
PARALLEL_MIN_ELEMENTS = 1 << 15


def parallel_pays(elements: int) -> bool:
    """Whether a kernel over ``elements`` values should fork onto the pool."""
    return num_threads() > 1 and elements >= PARALLEL_MIN_ELEMENTS


# Below this many flops a compute-bound layer (a convolution) runs on the calling thread:
# forking the pool and meeting at its barrier cost more than the split saves. Measured on
# this project's 2-core machine, a 1×1 conv of 0.03 MFLOP took 2.7 µs on one thread and 7.4
# on two, 0.13 MFLOP 6.0 vs 9.1 µs (a busy machine makes the fork dearer still); above
# ~0.5 MFLOP two threads win on a quiet machine.
PARALLEL_MIN_FLOPS = 1 << 18


def threads_for_flops(flops: int) -> int:
    """The thread count a layer of ``flops`` should split into (1: run it unforked)."""
    return num_threads() if flops >= PARALLEL_MIN_FLOPS else 1


def _limit_blas() -> None:
    global _blas_limit
    if _blas_limit is not None:
        return
    from threadpoolctl import threadpool_limits

    # numpy's BLAS is loaded by now (numpy is); the limit covers every BLAS in the process.
    _blas_limit = threadpool_limits(limits=1, user_api="blas")


def configure() -> int:
    """Bind-time setup: BLAS single-threaded, numba sized; returns the thread count."""
    n = num_threads()
    with _lock:
        _limit_blas()
    # numba's count is per calling thread; kernels also split their work into n parts, so a
    # program run from another thread (a stream's worker) still uses n threads at most.
    if numba.get_num_threads() != n:
        numba.set_num_threads(n)
    return n


_raw_count: Callable[[], int] | None = None


def current_count() -> int:
    """numba's thread count for the calling thread. numba.get_num_threads checks that the
    pool is launched, then makes one ctypes call: 1.4 µs against 0.15 for the call alone,
    and a program reads the count at every run."""
    global _raw_count
    if _raw_count is None:
        numba.get_num_threads()  # launches the pool, which defines the call
        from numba.np.ufunc import parallel  # noqa: PLC0415

        _raw_count = getattr(parallel, "_get_num_threads", None) or numba.get_num_threads
    return _raw_count()


def release_blas() -> None:
    """Give BLAS back its own thread count (for code that runs numpy after pydla)."""
    global _blas_limit
    with _lock:
        if _blas_limit is not None:
            _blas_limit.restore_original_limits()  # type: ignore[attr-defined]
            _blas_limit = None
