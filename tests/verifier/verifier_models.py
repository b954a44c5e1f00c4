"""Small models, batches and losses shared by the verifier tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self, d_in: int = 6, hidden: int = 16, d_out: int = 3, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(torch.tanh(self.fc1(x))))


def mlp(seed: int = 0, **kwargs) -> MLP:
    torch.manual_seed(seed)
    return MLP(**kwargs)


def classification_batch(rows: int, d_in: int = 6, classes: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, d_in, generator=g), torch.randint(0, classes, (rows,), generator=g)


def ce_mean(model: nn.Module, batch) -> torch.Tensor:
    return F.cross_entropy(model(batch[0]), batch[1])


def ce_sum(model: nn.Module, batch) -> torch.Tensor:
    return F.cross_entropy(model(batch[0]), batch[1], reduction="sum")


def window_rows(micro_batch, window) -> int:
    return sum(len(mb[0]) for mb in window)


class TokenModel(nn.Module):
    def __init__(self, vocab: int = 12, width: int = 8) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.out = nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.emb(ids)))


def token_model(seed: int = 0) -> TokenModel:
    torch.manual_seed(seed)
    return TokenModel()


def token_batch(rows: int, length: int = 5, vocab: int = 12, seed: int = 0, keep: float = 0.6) -> dict:
    """Labels with -100 padding so micro-batches hold unequal numbers of valid tokens."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (rows, length), generator=g)
    labels = torch.randint(0, vocab, (rows, length), generator=g)
    labels[torch.rand(rows, length, generator=g) > keep] = -100
    labels[:, 0] = torch.randint(0, vocab, (rows,), generator=g)  # every row keeps at least one token
    return {"ids": ids, "labels": labels}


def token_mean(model: nn.Module, batch: dict) -> torch.Tensor:
    return F.cross_entropy(model(batch["ids"]).flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)


def token_sum(model: nn.Module, batch: dict) -> torch.Tensor:
    return F.cross_entropy(model(batch["ids"]).flatten(0, 1), batch["labels"].flatten(), ignore_index=-100,
                           reduction="sum")


def window_tokens(micro_batch: dict, window: list) -> int:
    return sum(int((mb["labels"] != -100).sum()) for mb in window)


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
