"""Property tests over random shapes and splits, driven by gradcheck_accum.strategies: correct
configurations never fail, seeded bugs are always caught and named."""

import os

import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from gradcheck_accum import verify
from gradcheck_accum.strategies import split_plans, unequal_splits
from verifier_models import token_mean, token_model, token_sum, window_tokens

# CI runs a fixed set of examples (derandomized, so a run cannot flake); set
# ACCUMCHECK_PROPERTY_EXAMPLES=500 for a wider random search.
_EXAMPLES = int(os.environ.get("ACCUMCHECK_PROPERTY_EXAMPLES", "0"))
SETTINGS = settings(max_examples=_EXAMPLES or 30, derandomize=not _EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
shapes = st.tuples(st.integers(1, 8), st.integers(1, 24), st.integers(1, 5), st.integers(0, 10_000))


def _model(d_in, hidden, d_out, seed, norm=False):
    torch.manual_seed(seed)
    layers = [nn.Linear(d_in, hidden), nn.LayerNorm(hidden) if norm else nn.Identity(), nn.GELU(),
              nn.Linear(hidden, d_out)]
    return nn.Sequential(*layers)


def _batch(rows, d_in, d_out, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, d_in, generator=g), torch.randn(rows, d_out, generator=g)


def _mse_sum(model, batch):
    return F.mse_loss(model(batch[0]), batch[1], reduction="sum")


def _mse_mean(model, batch):
    return F.mse_loss(model(batch[0]), batch[1])


def _rows(micro_batch, window):
    return sum(len(mb[0]) for mb in window)


@SETTINGS
@given(shapes, split_plans(total=st.integers(1, 40), steps=st.integers(1, 8)), st.booleans())
def test_sum_loss_over_window_rows_always_matches(shape, plan, norm):
    d_in, hidden, d_out, seed = shape
    rows, splits = plan
    report = verify(_model(d_in, hidden, d_out, seed, norm), _batch(rows, d_in, d_out, seed), _mse_sum,
                    splits=splits, scaling=_rows, modes=("eager",))
    assert report.ok, report.render()


@SETTINGS
@given(shapes, st.integers(1, 6), st.integers(1, 6))
def test_mean_loss_with_equal_micro_batches_always_matches(shape, steps, per_step):
    d_in, hidden, d_out, seed = shape
    report = verify(_model(d_in, hidden, d_out, seed), _batch(steps * per_step, d_in, d_out, seed), _mse_mean,
                    accumulation_steps=steps, modes=("eager",))
    assert report.ok, report.render()


@SETTINGS
@given(shapes, st.integers(2, 6), st.integers(1, 6))
def test_missing_scaling_is_always_caught_and_named(shape, steps, per_step):
    d_in, hidden, d_out, seed = shape
    report = verify(_model(d_in, hidden, d_out, seed), _batch(steps * per_step, d_in, d_out, seed), _mse_mean,
                    accumulation_steps=steps, scaling="none", modes=("eager",))
    assert report.verdict == "mismatch"
    assert report.diagnosis.startswith(f"{steps:.2f}x: loss not divided"), report.diagnosis


@SETTINGS
@given(shapes, st.integers(2, 6), st.integers(1, 6))
def test_double_scaling_is_always_caught_and_named(shape, steps, per_step):
    d_in, hidden, d_out, seed = shape
    report = verify(_model(d_in, hidden, d_out, seed), _batch(steps * per_step, d_in, d_out, seed),
                    lambda m, b: _mse_mean(m, b) / steps, reference_loss_fn=_mse_mean,
                    accumulation_steps=steps, modes=("eager",))
    assert report.verdict == "mismatch"
    assert report.diagnosis.startswith(f"{1 / steps:.2f}x: scaled twice"), report.diagnosis


@SETTINGS
@given(shapes, unequal_splits(total=st.integers(4, 40), steps=st.integers(2, 6)))
def test_mean_of_means_over_unequal_rows_is_always_named(shape, plan):
    d_in, hidden, d_out, seed = shape
    rows, splits = plan
    report = verify(_model(d_in, hidden, d_out, seed), _batch(rows, d_in, d_out, seed), _mse_mean,
                    splits=splits, modes=("eager",))
    assert report.verdict == "mismatch"
    assert "weights proportional to 1/items" in report.diagnosis, report.diagnosis


@SETTINGS
@given(st.integers(2, 5), st.integers(0, 10_000))
def test_token_losses(steps, seed):
    from verifier_models import token_batch

    batch = token_batch(steps * 3, seed=seed)
    counts = [int((batch["labels"][i * 3:(i + 1) * 3] != -100).sum()) for i in range(steps)]
    good = verify(token_model(seed), batch, token_sum, scaling=window_tokens, accumulation_steps=steps,
                  modes=("eager",))
    assert good.ok, good.render()
    bad = verify(token_model(seed), batch, token_mean, accumulation_steps=steps, modes=("eager",))
    if len(set(counts)) > 1:
        assert "mean-of-means" in bad.diagnosis, bad.diagnosis
    else:
        assert bad.ok


@SETTINGS
@given(st.integers(2, 5), st.integers(1, 4), st.integers(0, 10_000))
def test_batchnorm_is_always_inherent(steps, per_step, seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 2))
    rows = steps * max(per_step, 2)  # BatchNorm needs 2 rows per micro-batch
    report = verify(model, _batch(rows, 4, 2, seed), _mse_mean, accumulation_steps=steps, modes=("eager",))
    assert report.verdict == "inherent", report.render()
    assert "BatchNorm1d" in report.diagnosis
