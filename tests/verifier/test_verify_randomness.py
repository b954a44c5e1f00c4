"""Random ops in the loss: draws are recorded in the float64 big batch and replayed in every other
run, so the check stays exact (a match is a match within rounding) or says it cannot be made."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gradcheck_accum import verify
from verifier_models import denoiser, diffusion_loss

EAGER = {"modes": ("eager",)}


def images(rows: int = 16) -> torch.Tensor:
    return torch.randn(rows, 6, generator=torch.Generator().manual_seed(1))


def test_diffusion_noise_is_replayed_and_the_check_stays_exact():
    report = verify(denoiser, images(), diffusion_loss, **EAGER)
    assert report.ok, report.render()
    assert any("random draws (randint, randn_like) recorded" in n for n in report.notes)
    assert report.mode("eager").cosine > 1 - 1e-9
    # The same loss with unequal micro-batches is a mean of means: named, not excused by the noise.
    uneven = verify(denoiser, images(), diffusion_loss, splits=[2, 6, 8], **EAGER)
    assert uneven.verdict == "mismatch" and "mean-of-means" in uneven.diagnosis, uneven.render()
    # A scaling error far below the noise's own size is still caught: the budget is rounding's.
    off = verify(denoiser, images(), lambda m, x: diffusion_loss(m, x) * (1 + 1e-4),
                 reference_loss_fn=diffusion_loss, **EAGER)
    assert off.verdict == "mismatch", off.render()


def test_noise_whose_dim_0_is_not_the_batch_is_declared_uncheckable_never_matched():
    def transposed_noise(model, x):
        noise = torch.randn(x.shape[1], x.shape[0]).T  # drawn features-first: rows of it are not the batch's
        return F.mse_loss(model(x + noise, torch.zeros(len(x))), x)

    report = verify(denoiser, images(), transposed_noise, **EAGER)
    assert report.verdict == "uncheckable" and not report.ok, report.render()
    assert "its dim 0 is not the batch" in report.diagnosis and "pass the noise in the batch" in report.diagnosis


def test_noise_passed_in_the_batch_needs_no_replay():
    def noise_in_batch(model, batch):
        x, noise, t = batch
        keep = (1 - t.to(x.dtype) / 100)[:, None]
        return F.mse_loss(model(keep * x + (1 - keep) * noise, t), noise)

    g = torch.Generator().manual_seed(2)
    batch = (images(), torch.randn(16, 6, generator=g), torch.randint(0, 100, (16,), generator=g))
    report = verify(denoiser, batch, noise_in_batch, **EAGER)
    assert report.ok, report.render()
    assert not any("random draws" in n for n in report.notes)


def test_per_row_generators_are_replayed_row_by_row():
    def per_row_noise(model, batch):
        x, seeds = batch
        noise = torch.stack([torch.randn(x.shape[1], generator=torch.Generator().manual_seed(int(s))) for s in seeds])
        return F.mse_loss(model(x + noise.to(x.dtype), torch.zeros(len(x))), x)

    batch = (images(12), torch.arange(12))
    report = verify(denoiser, batch, per_row_noise, **EAGER)
    assert report.ok, report.render()
    bad = verify(denoiser, batch, per_row_noise, scaling="none", **EAGER)
    assert bad.diagnosis.startswith("4.00x"), bad.render()


def test_compiled_mode_is_not_run_on_draws_it_cannot_replay():
    report = verify(denoiser, images(), diffusion_loss, modes=("eager", "compiled"), compile_backend="aot_eager")
    assert report.ok and [m.mode for m in report.modes] == ["eager"], report.render()
    assert any("compiled mode not run" in n for n in report.notes)


def test_attention_without_dropout_draws_nothing_even_with_a_padding_mask():
    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(8, 24)

        def forward(self, x, mask):
            q, k, v = self.qkv(x).unflatten(-1, (3, 2, 4)).permute(2, 0, 3, 1, 4)
            keep = mask[:, None, None, :].bool()
            return F.scaled_dot_product_attention(q, k, v, attn_mask=keep).sum((1, 3))

    def factory():
        torch.manual_seed(0)
        return Attention()

    g = torch.Generator().manual_seed(3)
    x, mask = torch.randn(8, 5, 8, generator=g), torch.ones(8, 5, dtype=torch.long)
    mask[::2, 3:] = 0
    report = verify(factory, (x, mask), lambda m, b: m(*b).pow(2).mean(), **EAGER)
    assert report.ok and not any("random draws" in n for n in report.notes), report.render()


class NoiseInjection(nn.Module):
    """Gaussian noise added to a hidden layer while training (a regulariser, drawn in forward)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(6, 16), nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.a(x))
        if self.training:
            h = h + 0.3 * torch.randn_like(h)
        return self.b(h)


def noise_injection() -> NoiseInjection:
    torch.manual_seed(0)
    return NoiseInjection()


def labelled(rows: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(4)
    return torch.randn(rows, 6, generator=g), torch.randint(0, 3, (rows,), generator=g)


def ce(model, batch):
    return F.cross_entropy(model(batch[0]), batch[1])


@pytest.mark.parametrize("kwargs, verdict, phrase", [
    ({}, "match", "within rounding"),
    ({"scaling": "none"}, "mismatch", "4.00x: loss not divided by the accumulation steps"),
    ({"splits": [2, 6, 8]}, "mismatch", "mean-of-means; rows = [2, 6, 8]"),
], ids=["correct", "not divided", "mean of means"])
def test_noise_injected_in_forward_is_replayed_and_bugs_are_named(kwargs, verdict, phrase):
    report = verify(noise_injection, labelled(), ce, **kwargs, **EAGER)
    assert report.verdict == verdict and phrase in report.diagnosis, report.render()
    assert any("random draws (randn_like) recorded" in n for n in report.notes)


def mixup(model, batch):
    # Rows mixed with other rows of the same batch: a micro-batch cannot draw the big batch's pairs.
    x, y = batch
    perm = torch.randperm(len(x))
    out = model(0.7 * x + 0.3 * x[perm])
    return 0.7 * F.cross_entropy(out, y) + 0.3 * F.cross_entropy(out, y[perm])


def flattened_token_noise(model, batch):
    # Noise drawn over (rows * tokens) flattened: its dim 0 is not the batch's.
    x, y = batch
    tokens = x.unflatten(1, (3, 2)).flatten(0, 1)
    jitter = torch.empty_like(tokens).uniform_(0.9, 1.1)
    return F.cross_entropy(model((tokens * jitter).unflatten(0, (len(x), 3)).flatten(1)), y)


def numpy_draws():
    """A loss weighted by a draw the check cannot see (numpy's generator): the big batch differs
    from run to run. Seeded here, so the test draws the same numbers every time it runs."""
    rng = np.random.default_rng(0)

    def loss(model, batch):
        return float(rng.uniform(0.5, 1.5)) * ce(model, batch)

    return loss


@pytest.mark.parametrize("make_loss, why", [
    (lambda: mixup, "randperm draws shape (4,) in a micro-batch of 4 rows but (16,)"),
    (lambda: flattened_token_noise, "uniform_ draws shape (12, 2) in a micro-batch of 4 rows but (48, 2)"),
    (numpy_draws, "far beyond rounding"),
], ids=["mixup", "flattened tokens", "numpy"])
@pytest.mark.parametrize("scaling", ["steps", "none"], ids=["correct", "not divided"])
def test_draws_that_cannot_be_lined_up_are_uncheckable_never_a_match(make_loss, why, scaling):
    report = verify(noise_injection, labelled(), make_loss(), scaling=scaling, **EAGER)
    assert report.verdict == "uncheckable" and not report.ok, report.render()
    assert report.diagnosis.startswith("the check cannot be made") and why in report.diagnosis, report.render()
