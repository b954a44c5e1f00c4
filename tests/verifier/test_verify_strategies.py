import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradcheck_accum.strategies import ragged_tail_splits, split_plans, unequal_splits, uneven_splits


@settings(max_examples=200, derandomize=True)
@given(split_plans(total=st.integers(1, 50), steps=st.integers(1, 10)))
def test_plans_are_valid_splits(plan):
    total, splits = plan
    assert sum(splits) == total and all(s >= 1 for s in splits) and len(splits) <= 10


@settings(max_examples=100, derandomize=True)
@given(st.data(), st.integers(2, 40), st.integers(2, 8))
def test_ragged_tails_are_equal_then_shorter(data, total, steps):
    steps = min(steps, total)
    splits = data.draw(ragged_tail_splits(total, steps))
    assert sum(splits) == total and len(splits) == steps
    if steps * 2 <= total and max(splits) - min(splits) > 1:
        assert len(set(splits[:-1])) == 1 and splits[-1] <= splits[0]


@settings(max_examples=100, derandomize=True)
@given(unequal_splits())
def test_unequal_splits_are_unequal(plan):
    assert len(set(plan[1])) > 1


def test_impossible_requests_are_rejected():
    with pytest.raises(ValueError):
        uneven_splits(2, 3)
    with pytest.raises(ValueError):
        ragged_tail_splits(3, 0)
