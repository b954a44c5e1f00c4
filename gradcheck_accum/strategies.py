"""Hypothesis strategies for micro-batch splits, to property-test loss functions and scaling:

    from hypothesis import given
    from gradcheck_accum.strategies import split_plans

    @given(split_plans(max_total=32, max_steps=6))
    def test_my_loss_accumulates(plan):
        total, splits = plan
        accumcheck(model, make_batch(total), loss_fn, splits=splits, modes=("eager",))

A split is a list of positive micro-batch sizes summing to the batch size, the `splits`
argument of `verify`.
"""

from __future__ import annotations

from typing import Union

from hypothesis import strategies as st

IntOrStrategy = Union[int, st.SearchStrategy[int]]


def _as_strategy(value: IntOrStrategy) -> st.SearchStrategy[int]:
    return st.just(value) if isinstance(value, int) else value


def _sizes_from_cuts(total: int, cuts: list[int]) -> list[int]:
    edges = [0, *sorted(cuts), total]
    return [b - a for a, b in zip(edges, edges[1:])]


@st.composite
def _uneven(draw: st.DrawFn, total: int, steps: int) -> list[int]:
    cuts = draw(st.lists(st.integers(1, total - 1), min_size=steps - 1, max_size=steps - 1, unique=True)) if steps > 1 else []
    return _sizes_from_cuts(total, cuts)


def uneven_splits(total: int, steps: int) -> st.SearchStrategy[list[int]]:
    """Any sizes: `steps` positive integers summing to `total` (needs steps <= total)."""
    if steps < 1 or total < steps:
        raise ValueError(f"cannot split {total} items into {steps} non-empty micro-batches")
    return _uneven(total, steps)


def even_splits(total: int, steps: int) -> list[int]:
    base, extra = divmod(total, steps)
    return [base + 1] * extra + [base] * (steps - extra)


@st.composite
def _ragged(draw: st.DrawFn, total: int, steps: int) -> list[int]:
    # Equal micro-batches and a shorter last one: the last window of an epoch whose length is
    # not a multiple of the micro-batch size.
    if steps == 1:
        return [total]
    low, high = -(-total // steps), (total - 1) // (steps - 1)
    if low > high:  # too few items for a tail shorter than the rest: as even as possible
        return even_splits(total, steps)
    size = draw(st.integers(low, high))
    return [size] * (steps - 1) + [total - size * (steps - 1)]


def ragged_tail_splits(total: int, steps: int) -> st.SearchStrategy[list[int]]:
    """`steps - 1` equal micro-batches and a tail of at most the same size (1 <= tail); when the
    items are too few for that, as even as possible."""
    if steps < 1 or total < steps:
        raise ValueError(f"cannot split {total} items into {steps} non-empty micro-batches")
    return _ragged(total, steps)


@st.composite
def split_plans(
    draw: st.DrawFn,
    total: IntOrStrategy = st.integers(1, 32),
    steps: IntOrStrategy = st.integers(1, 8),
    kind: str = "any",
) -> tuple[int, list[int]]:
    """(batch size, splits). kind: "even", "ragged" (equal plus a short tail), "uneven" (any
    sizes) or "any" (one of those, drawn)."""
    n_total = draw(_as_strategy(total))
    n_steps = min(draw(_as_strategy(steps)), n_total)
    if n_total < 1 or n_steps < 1:
        raise ValueError("total and steps must be positive")
    chosen = draw(st.sampled_from(["even", "ragged", "uneven"])) if kind == "any" else kind
    if chosen == "even":
        return n_total, even_splits(n_total, n_steps)
    if chosen == "ragged":
        return n_total, draw(ragged_tail_splits(n_total, n_steps))
    if chosen == "uneven":
        return n_total, draw(uneven_splits(n_total, n_steps))
    raise ValueError(f"kind must be 'any', 'even', 'ragged' or 'uneven', got {kind!r}")


def unequal_splits(total: IntOrStrategy = st.integers(4, 32), steps: IntOrStrategy = st.integers(2, 6)
                   ) -> st.SearchStrategy[tuple[int, list[int]]]:
    """Plans whose micro-batches do not all have the same size: where per-micro-batch means
    go wrong."""
    return split_plans(total, steps, kind="uneven").filter(lambda plan: len(set(plan[1])) > 1)
