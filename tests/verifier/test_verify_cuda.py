"""verify and verify_loop on a CUDA device (skipped without one; run on a GPU machine): the device
path picks cuda, compiles there, replays random draws there, and still names the bugs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gradcheck_accum import verify, verify_loop

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def ce(model, batch):
    return F.cross_entropy(model(batch[0]), batch[1])


def noisy(model, batch):
    return F.cross_entropy(model(batch[0] + 0.1 * torch.randn_like(batch[0])), batch[1])


BATCH = (torch.randn(16, 6, generator=torch.Generator().manual_seed(0)), torch.arange(16) % 3)


@pytest.mark.parametrize("kwargs, verdict, phrase", [
    ({"modes": ("eager", "compiled")}, "match", "eager, compiled"),
    ({"scaling": "none"}, "mismatch", "4.00x: loss not divided"),
    ({"dtype": "bfloat16"}, "match", "within rounding"),
    ({"loss_fn": noisy}, "match", "within rounding"),
    ({"loss_fn": noisy, "splits": [2, 6, 8]}, "mismatch", "mean-of-means"),
], ids=["compiled", "not divided", "bfloat16", "replayed noise", "noise and mean of means"])
def test_verify_on_cuda(kwargs, verdict, phrase):
    report = verify(mlp, BATCH, **{"loss_fn": ce, "modes": ("eager",), **kwargs})
    assert report.settings["device"].startswith("cuda")
    assert report.verdict == verdict and phrase in report.diagnosis, report.render()


def clipped_loop(model, optimizer, micro_batches, n, divide=True):
    for i, batch in enumerate(micro_batches):
        (ce(model, batch) / (n if divide else 1)).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            optimizer.step()
            optimizer.zero_grad()


def test_verify_loop_on_cuda_with_a_binding_clip():
    g = torch.Generator().manual_seed(1)
    micro_batches = [(torch.randn(3, 6, generator=g), torch.arange(3)) for _ in range(9)]
    report = verify_loop(clipped_loop, mlp(), micro_batches, ce, 4)
    assert report.settings["device"].startswith("cuda") and report.ok, report.render()
    assert "clipped to" in report.mode("step 1").diagnosis
    bad = verify_loop(lambda *a: clipped_loop(*a, divide=False), mlp(), micro_batches, ce, 4)
    assert bad.settings["findings"][0] == "loss-not-divided", bad.render()


def noisy_loop(model, optimizer, micro_batches, n, divide=True):
    for i, batch in enumerate(micro_batches):
        (noisy(model, batch) / (n if divide else 1)).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()
            optimizer.zero_grad()


def test_verify_loop_on_cuda_gives_the_loops_draws_to_each_window():
    g = torch.Generator().manual_seed(2)
    micro_batches = [(torch.randn(3, 6, generator=g), torch.arange(3)) for _ in range(9)]
    report = verify_loop(noisy_loop, mlp(), micro_batches, noisy, 4)
    assert report.settings["device"].startswith("cuda") and report.ok, report.render()
    assert any("the loop made recorded" in n for n in report.notes)
    bad = verify_loop(lambda *a: noisy_loop(*a, divide=False), mlp(), micro_batches, noisy, 4)
    assert bad.settings["findings"][0] == "loss-not-divided", bad.render()
