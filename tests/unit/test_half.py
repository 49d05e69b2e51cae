"""pydla.backends.cpu.half: vector float16 <-> float32 conversion equals numpy's astype bit for
bit (round to nearest even, ±inf on overflow, NaN kept), tails included."""

import numpy as np
import pytest

from pydla.backends.cpu.half import round_into, widen_into


def test_every_half_widens_exactly():
    every = np.arange(65536, dtype=np.uint16).view(np.float16)
    got = np.empty(every.size, np.float32)
    widen_into(got, every)
    want = every.astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])


@pytest.mark.parametrize("n", [1, 15, 16, 33, 4099])
def test_rounding_matches_numpy(n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 3e4).astype(np.float32)
    # NaN, -inf, an overflow, and a tie (1 + 2**-11: halfway between two float16 values)
    specials = np.array([np.nan, -np.inf, 7e4, 1 + 2 ** -11], np.float32)
    x[:min(n, 4)] = specials[:min(n, 4)]
    x[-1] = specials[-1]  # the vector blocks and the tail both see a tie
    got = np.empty(n, np.float16)
    round_into(got, x.reshape(1, n))
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got.view(np.uint16)[~nan], want.view(np.uint16)[~nan])
