"""Interval arithmetic against a brute-force unit-grid computation on random sets."""

from __future__ import annotations

import numpy as np
import pytest

from stave.trace import intervals as iv

GRID = 200


def grid(ivs: iv.Intervals) -> np.ndarray:
    cover = np.zeros(GRID, dtype=bool)
    for s, e in zip(*ivs):
        cover[max(int(s), 0):max(int(e), 0)] = True
    return cover


def random_set(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    s = rng.integers(0, GRID - 1, n)
    e = s + rng.integers(0, 30, n)
    return s.astype(np.int64), np.minimum(e, GRID).astype(np.int64)


@pytest.mark.parametrize("seed", range(20))
def test_against_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = iv.merge(*random_set(rng, int(rng.integers(0, 15))))
    b = iv.merge(*random_set(rng, int(rng.integers(0, 15))))
    ga, gb = grid(a), grid(b)
    assert iv.total(a) == ga.sum()
    assert np.all(a[0][1:] > a[1][:-1])  # disjoint and sorted
    assert np.array_equal(grid(iv.union(a, b)), ga | gb)
    assert np.array_equal(grid(iv.intersect(a, b)), ga & gb)
    assert np.array_equal(grid(iv.subtract(a, b)), ga & ~gb)
    assert np.array_equal(grid(iv.gaps(a, 10, 150))[10:150], ~ga[10:150])
    ws = rng.integers(0, GRID, 6)
    we = ws + rng.integers(0, 50, 6)
    got = iv.measure_in(a, ws, we)
    want = [ga[s:min(e, GRID)].sum() for s, e in zip(ws, we)]
    assert got.tolist() == want


def test_empty_sets() -> None:
    e = iv.empty()
    assert iv.total(iv.union(e, e)) == 0
    assert iv.measure_in(e, np.array([0]), np.array([10])).tolist() == [0]
    assert iv.total(iv.subtract(e, iv.merge(np.array([1]), np.array([5])))) == 0
