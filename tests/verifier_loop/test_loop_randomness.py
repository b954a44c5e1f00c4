"""verify_loop on training loops whose loss draws random numbers (diffusion timesteps and noise):
the draws the loop made are given to each window's big batch, so a correct loop matches exactly and
a bug is named; draws that cannot be handed over make the check 'uncheckable', never a match."""

from __future__ import annotations

import pytest
import torch

from gradcheck_accum import verify_loop
from verifier.verifier_models import denoiser, diffusion_loss

N = 4


def images(sizes=(4,) * 9, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(rows, 6, generator=g) for rows in sizes]


def divided(model, optimizer, micro_batches, n):
    for i, x in enumerate(micro_batches):
        (diffusion_loss(model, x) / n).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()
            optimizer.zero_grad()


def not_divided(model, optimizer, micro_batches, n):
    for i, x in enumerate(micro_batches):
        diffusion_loss(model, x).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()
            optimizer.zero_grad()


def random_weight_per_window(model, optimizer, micro_batches, n):
    """Draws one more number per window (a random loss weight): the micro-batches' draws no longer
    line up with what the window's big batch draws."""
    for start in range(0, len(micro_batches), n):
        weight = 0.5 + torch.rand(())
        for x in micro_batches[start:start + n]:
            (weight * diffusion_loss(model, x) / n).backward()
        optimizer.step()
        optimizer.zero_grad()


@pytest.mark.parametrize("train_fn, sizes, verdict, finding, phrase", [
    (divided, (4,) * 9, "match", None, "every optimizer step used its window's big-batch gradient"),
    (not_divided, (4,) * 9, "mismatch", "loss-not-divided", "4.00x: loss not divided by the accumulation steps"),
    (divided, (2, 6, 3, 5, 4, 4, 1, 7), "mismatch", "mean-of-means", "mean-of-means; rows = [2, 6, 3, 5]"),
], ids=["correct", "not divided", "mean of means"])
def test_the_loops_draws_are_given_to_each_windows_big_batch(train_fn, sizes, verdict, finding, phrase):
    report = verify_loop(train_fn, denoiser(), images(sizes), diffusion_loss, N)
    assert report.verdict == verdict and phrase in report.diagnosis, report.render()
    assert report.settings["findings"][:1] == ([finding] if finding else []), report.render()
    assert any("random draws (randint, randn_like) the loop made recorded" in n for n in report.notes)
    if verdict == "match":
        assert all(m.cosine > 1 - 1e-6 for m in report.modes), [m.cosine for m in report.modes]


def test_draws_that_do_not_line_up_with_the_micro_batches_are_uncheckable_never_a_match():
    report = verify_loop(random_weight_per_window, denoiser(), images(), diffusion_loss, N)
    assert report.verdict == "uncheckable" and not report.ok, report.render()
    assert "the loop made 21 random draw(s) over 9 forward(s) of 9 micro-batches" in report.diagnosis, report.render()
