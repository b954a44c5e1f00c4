"""Over random micro-batch counts, window sizes, item counts and weights: correct loops never
fail, and each seeded loop bug is caught with its own name."""

from __future__ import annotations

import os
import warnings

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import verify_loop_cases as cases
from gradcheck_accum import verify_loop


def _batches(count, rows, seed):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(rows, 4, generator=g), torch.randn(rows, 2, generator=g)) for _ in range(count)]


def _model(seed, width):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.Tanh(), torch.nn.Linear(width, 2))


# As in tests/verifier: CI runs a fixed, derandomized set; ACCUMCHECK_PROPERTY_EXAMPLES=200 searches wider.
_EXAMPLES = int(os.environ.get("ACCUMCHECK_PROPERTY_EXAMPLES", "0"))


@settings(max_examples=_EXAMPLES or 15, derandomize=not _EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.integers(1, 5), extra=st.integers(0, 6), rows=st.integers(1, 4), seed=st.integers(0, 2**16),
       width=st.sampled_from([3, 8]))
def test_correct_loops_pass_and_bugs_are_named(steps, extra, rows, seed, width):
    count = steps + extra  # at least one full window
    batches = _batches(count, rows, seed)

    def check(train_fn):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return verify_loop(train_fn, _model(seed, width), batches, cases.micro_loss, steps, device="cpu")

    for good in (cases.guarded_with_flush, cases.nested_nanogpt, cases.scheduler_per_window):
        report = check(good)
        assert report.ok, report.render()

    first = lambda train_fn: check(train_fn).settings["findings"][:1]  # noqa: E731
    if steps > 1:
        assert first(cases.loss_not_divided) == ["loss-not-divided"]
        assert first(cases.zero_grad_every_micro_batch) == ["grad-cleared-every-micro-batch"]
        assert first(cases.step_every_micro_batch) == ["step-every-micro-batch"]
    if count > steps:  # a second window exists
        assert first(cases.never_cleared) == ["grad-leak"]
    assert first(cases.remainder_dropped) == (["remainder-dropped"] if count % steps else [])
