"""Micro-batches follow rank speed, respect memory caps, and always add up to the global batch."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.planner import split_micro_batches


def test_it_splits_in_proportion_to_speed():
    assert split_micro_batches(70, [1.0, 2.0, 4.0]) == [10, 20, 40]


def test_it_rounds_by_largest_remainder():
    # Shares 1.43, 2.86, 5.71: floors 1 + 2 + 5 = 8, the two largest remainders (.86, .71) get one more.
    assert split_micro_batches(10, [1.0, 2.0, 4.0]) == [1, 3, 6]


def test_it_gives_ties_to_the_earlier_rank():
    assert split_micro_batches(7, [1.0, 1.0, 1.0]) == [3, 2, 2]


def test_a_rank_at_its_memory_cap_passes_its_excess_to_the_others():
    assert split_micro_batches(100, [1.0, 2.0, 4.0], caps=[100, 100, 30]) == [23, 47, 30]


def test_a_very_slow_rank_still_gets_one_sample():
    assert split_micro_batches(4, [1.0, 1000.0, 1000.0]) == [1, 2, 1]


@pytest.mark.parametrize(("total", "caps"), [(2, [4, 4, 4]), (13, [4, 4, 4])])
def test_it_refuses_a_batch_that_cannot_be_split(total, caps):
    with pytest.raises(ValueError, match="cannot split"):
        split_micro_batches(total, [1.0, 2.0, 3.0], caps=caps)


ranks = st.lists(st.tuples(st.floats(0.01, 1e6), st.integers(1, 64)), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(ranks, st.data())
def test_any_split_preserves_the_sum_and_the_bounds(pairs, data):
    speeds, caps = [p[0] for p in pairs], [p[1] for p in pairs]
    total = data.draw(st.integers(len(pairs), sum(caps)))
    split = split_micro_batches(total, speeds, caps)
    assert sum(split) == total
    assert all(1 <= m <= cap for m, cap in zip(split, caps, strict=True))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0.1, 100.0), min_size=1, max_size=30), st.integers(1, 20))
def test_without_caps_each_rank_is_within_one_sample_of_its_exact_share(speeds, per_rank):
    total = per_rank * len(speeds) * 4
    split = split_micro_batches(total, speeds)
    exact = [max(total * s / sum(speeds), 1.0) for s in speeds]
    if all(e > 1.0 for e in exact):
        assert all(abs(m - e) < 1.0 for m, e in zip(split, exact, strict=True))
    faster_first = sorted(zip(speeds, split, strict=True), key=lambda p: -p[0])
    assert all(a[1] >= b[1] for a, b in itertools.pairwise(faster_first))
