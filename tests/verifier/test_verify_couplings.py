"""Couplings measured, not blamed: BatchNorm and auxiliary loss terms couple the items of a batch,
so accumulation cannot reproduce it; the check measures by how much and still checks the rest."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gradcheck_accum import verify, verify_loop
from gradcheck_accum.verifier.errors import VerifyError
from verifier_models import ce_mean, classification_batch, mlp

EAGER = {"modes": ("eager",)}


def batchnorm_mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))


@pytest.mark.parametrize("kwargs, verdict, phrase", [
    ({}, "inherent", "with it taken out (BatchNorm frozen) the rest matches"),
    ({"scaling": "none"}, "mismatch", "4.00x: loss not divided by the accumulation steps"),
    ({"splits": [2, 6, 8]}, "mismatch", "mean-of-means"),
], ids=["correct", "not divided", "mean of means"])
def test_batchnorm_is_frozen_for_a_second_pass_and_real_bugs_are_named(kwargs, verdict, phrase):
    report = verify(batchnorm_mlp, classification_batch(16), ce_mean, **kwargs, **EAGER)
    assert report.verdict == verdict and phrase in report.diagnosis, report.render()
    assert "BatchNorm1d" in report.diagnosis and "cosine" in report.diagnosis


class MoE(nn.Module):
    """Top-1 routing with a Switch-style load-balancing loss: experts * sum(fraction routed * mean
    router probability), statistics of the whole batch."""

    def __init__(self, width: int = 8, experts: int = 4) -> None:
        super().__init__()
        self.router = nn.Linear(width, experts)
        self.experts = nn.ModuleList(nn.Linear(width, width) for _ in range(experts))
        self.head = nn.Linear(width, 3)

    def forward(self, x):
        probs = self.router(x).softmax(-1)
        top = probs.argmax(-1)
        routed = torch.stack([e(x) for e in self.experts], 1)[torch.arange(len(x)), top]
        fraction = F.one_hot(top, len(self.experts)).to(x.dtype).mean(0)
        balance = len(self.experts) * (fraction * probs.mean(0)).sum()
        return self.head(routed * probs.gather(1, top[:, None])), balance


def moe():
    torch.manual_seed(0)
    return MoE()


def moe_terms(model, batch):
    logits, balance = model(batch[0])
    return {"ce": F.cross_entropy(logits, batch[1]), "aux": 0.01 * balance}


def test_a_named_auxiliary_loss_term_is_measured_and_the_rest_checked():
    batch = classification_batch(32, d_in=8)
    report = verify(moe, batch, moe_terms, **EAGER)
    assert report.verdict == "inherent", report.render()
    assert "the loss term 'aux' couples the items of a batch" in report.diagnosis
    assert "relative error" in report.diagnosis and "the rest matches" in report.diagnosis
    bad = verify(moe, batch, moe_terms, scaling="none", **EAGER)
    assert bad.verdict == "mismatch" and bad.diagnosis.startswith("4.00x"), bad.render()
    # Summed by hand, the term cannot be taken out: a mismatch that says how to name it.
    summed = verify(moe, batch, lambda m, b: sum(moe_terms(m, b).values()), **EAGER)
    assert summed.verdict == "mismatch" and "return the terms as a dict" in summed.diagnosis, summed.render()


def test_nan_in_the_data_is_one_line_naming_the_micro_batch():
    x, y = classification_batch(16)
    x[9, 2] = float("nan")
    with pytest.raises(VerifyError, match=r"^micro-batch 3 of 4 holds NaN in batch\[0\] \(row 1 of its 4\)"):
        verify(mlp, (x, y), ce_mean, **EAGER)

    def loop(model, optimizer, micro_batches, n):
        raise AssertionError("never runs")

    with pytest.raises(VerifyError, match=r"^micro-batch 2 of 3 holds NaN in batch\[0\] \(row 1 of its 8\)"):
        verify_loop(loop, mlp(), [(x[:8], y[:8]), (x[8:], y[8:]), (x[:8], y[:8])], ce_mean, 2)
