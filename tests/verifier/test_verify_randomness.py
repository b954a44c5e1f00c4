"""Random ops in the loss: draws are recorded in the float64 big batch and replayed in every other
run, so the check stays exact (a match is a match within rounding) or says it cannot be made."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gradcheck_accum import verify

EAGER = {"modes": ("eager",)}


class Denoiser(nn.Module):
    """A diffusion-style noise predictor: input x_t and the timestep, output the noise."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(7, 32), nn.Tanh(), nn.Linear(32, 6))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([x, t[:, None].float() / 100], 1))


def denoiser() -> Denoiser:
    torch.manual_seed(0)
    return Denoiser()


def diffusion_loss(model, x):
    # As DDPM training code writes it: timesteps and noise drawn inside the loss, one per row.
    t = torch.randint(0, 100, (x.shape[0],), device=x.device)
    noise = torch.randn_like(x)
    keep = (1 - t.to(x.dtype) / 100)[:, None]
    return F.mse_loss(model(keep * x + (1 - keep) * noise, t), noise)


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
