"""fork.fork_call: a task run on every thread, called by address with its arguments."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from pydla.backends.cpu import fork
from pydla.backends.cpu.steps import Fixed, kernel_call


@njit(cache=True, error_model="numpy")
def _share(t: int, nthreads: int, x: np.ndarray, scale: np.float32, flip: bool,
           out: np.ndarray, grid: np.ndarray) -> None:
    """Thread t's rows of out = x · scale (negated when ``flip``); grid[t] = t."""
    per = -(-x.shape[0] // nthreads)
    for r in range(t * per, min(x.shape[0], (t + 1) * per)):
        for c in range(x.shape[1]):
            out[r, c] = -x[r, c] * scale if flip else x[r, c] * scale
    grid[t, :] = t


def _arrays(rows: int, threads: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = np.arange(rows * 5, dtype=np.float32).reshape(rows, 5)
    return x, np.zeros_like(x), np.full((threads, 3), -1, np.int64)


def test_every_thread_runs_its_share() -> None:
    # More tasks than the pool has threads, and a ragged last share.
    x, out, grid = _arrays(11, 4)
    fork.fork_call(_share, 4, 4, x, np.float32(1.5), False, out, grid)()
    np.testing.assert_array_equal(out, x * np.float32(1.5))
    np.testing.assert_array_equal(grid, np.arange(4)[:, None].repeat(3, 1))


def test_same_as_the_task_run_serially() -> None:
    x, out, grid = _arrays(7, 3)
    fork.fork_call(_share, 3, 3, x, np.float32(-2), True, out, grid)()
    want, want_grid = np.zeros_like(out), np.full_like(grid, -1)
    for t in range(3):
        kernel_call(_share, t, 3, x, np.float32(-2), True, want, want_grid)()
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(grid, want_grid)


def test_fixed_flags_compile_the_task_not_the_loop_again() -> None:
    """A Fixed argument is a literal in the task; the entry that passes the arguments on
    is compiled for the plain type, once for both values."""
    x, out, grid = _arrays(6, 2)
    fork.fork_call(_share, 2, 2, x, np.float32(1), Fixed(True), out, grid)()
    np.testing.assert_array_equal(out, -x)
    entries = len(fork._prepare.overloads)
    tasks = len(_share.overloads)
    fork.fork_call(_share, 2, 2, x, np.float32(1), Fixed(False), out, grid)()
    np.testing.assert_array_equal(out, x)
    assert len(fork._prepare.overloads) == entries
    assert len(_share.overloads) == tasks + 1


def test_bound_call_reads_the_arrays_it_was_given() -> None:
    """The call holds its arguments: running it again sees the arrays' new contents."""
    x, out, grid = _arrays(4, 2)
    call = fork.fork_call(_share, 2, 2, x, np.float32(1), False, out, grid)
    call()
    x += 1
    call()
    np.testing.assert_array_equal(out, x)


def test_bound_call_keeps_its_arrays_alive() -> None:
    """The arguments are stored once, borrowed: the call keeps the arrays alive after the
    caller dropped its own references."""
    import gc

    x, out, grid = _arrays(5, 2)
    call = fork.fork_call(_share, 2, 2, x.copy(), np.float32(3), False, out, grid)
    del grid
    gc.collect()
    junk = [np.full((5, 5), 7.0, np.float32) for _ in range(50)]  # reuse freed memory
    call()
    np.testing.assert_array_equal(out, x * np.float32(3))
    assert len(junk) == 50


@njit(cache=True)
def _returns(t: int, x: np.ndarray) -> float:
    return x[t]


def test_a_task_that_returns_a_value_is_refused() -> None:
    with pytest.raises(TypeError, match="returns nothing"):
        fork.fork_call(_returns, 2, np.zeros(2))
