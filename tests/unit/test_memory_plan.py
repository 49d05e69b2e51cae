import numpy as np

from pydla.plan.memory import Lifetime, plan_memory


def overlaps(a: Lifetime, b: Lifetime) -> bool:
    return not (a.last < b.first or b.last < a.first)


def test_chain_reuses_memory():
    # a -> b -> c -> d: only two neighbours are alive at a time.
    lts = [Lifetime(1000, i, i + 1) for i in range(4)]
    offsets, arena = plan_memory(lts)
    assert arena <= 2 * 1024
    assert offsets[0] != offsets[1]


def test_random_plans_never_collide():
    rng = np.random.default_rng(0)
    for _ in range(50):
        lts = []
        for _ in range(30):
            first = int(rng.integers(-1, 20))
            lts.append(Lifetime(int(rng.integers(1, 5000)), first, first + int(rng.integers(0, 6))))
        offsets, arena = plan_memory(lts, alignment=64)
        for i, a in enumerate(lts):
            assert offsets[i] % 64 == 0
            assert offsets[i] + a.size <= arena
            for j in range(i):
                b = lts[j]
                if overlaps(a, b):
                    assert (offsets[i] + a.size <= offsets[j]
                            or offsets[j] + b.size <= offsets[i])
        assert arena <= sum(-(-lt.size // 64) * 64 for lt in lts)


def test_empty():
    assert plan_memory([]) == ([], 0)
