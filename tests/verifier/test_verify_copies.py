"""What each run starts from: the prepared state, however the previous run left the working copy,
and how many forward passes a check costs."""

import pytest
import torch
from torch import nn

from gradcheck_accum import verify
from gradcheck_accum.verifier.prepare import prepare
from verifier_models import ce_mean, classification_batch, mlp


class Normalised(nn.Module):
    """Its running statistics change on every forward in training mode."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(6, 3)
        self.norm = nn.BatchNorm1d(3)

    def forward(self, x):
        return self.norm(self.fc(x))


def tensors(module):
    return {n: t.detach().clone() for n, t in [*module.named_parameters(), *module.named_buffers()]}


def test_every_run_starts_from_the_prepared_state():
    prepared = prepare(Normalised())
    pristine = tensors(prepared.module)
    first = prepared.copy(torch.device("cpu"), torch.float32)
    first(torch.randn(8, 6)).sum().backward()  # moves the running statistics, fills .grad
    with torch.no_grad():
        first.fc.weight.add_(1.0)
    again = prepared.copy(torch.device("cpu"), torch.float32)
    assert again is first and all(p.grad is None for p in again.parameters())
    assert all(torch.equal(t, tensors(again)[n]) for n, t in pristine.items())


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_conversions_start_from_the_prepared_precision(dtype):
    prepared = prepare(mlp())
    pristine = tensors(prepared.module)
    converted = prepared.copy(torch.device("cpu"), dtype)
    assert converted.fc1.weight.dtype == dtype
    assert torch.equal(converted.fc1.weight, pristine["fc1.weight"].to(dtype))
    back = prepared.copy(torch.device("cpu"), torch.float32)
    assert all(torch.equal(t, tensors(back)[n]) for n, t in pristine.items())  # no bf16 or float64 residue


def test_fresh_copies_are_independent_and_a_changed_module_is_copied_anew():
    class GrowsABuffer(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            self.register_buffer(f"seen{len(list(self.buffers()))}", x.detach().sum())
            return self.fc(x)

    prepared = prepare(GrowsABuffer())
    working = prepared.copy(torch.device("cpu"), torch.float32)
    assert prepared.copy(torch.device("cpu"), torch.float32, fresh=True) is not working
    working(torch.ones(1, 2))
    assert prepared.copy(torch.device("cpu"), torch.float32) is not working  # tensors no longer line up
    assert not list(prepared.module.buffers())


def test_a_match_runs_each_big_batch_once_and_a_mismatch_reruns_the_baseline():
    calls = []

    def counted(scale):
        def loss(model, batch):
            calls.append(len(batch[0]))
            return ce_mean(model, batch) * scale
        return loss

    batch = classification_batch(16)
    assert verify(mlp(), batch, counted(1.0), accumulation_steps=4, modes=("eager",)).ok
    assert sorted(calls) == [4, 4, 4, 4, 16, 16]  # float32 and float64 big batches, four micro-batches
    calls.clear()
    report = verify(mlp(), batch, counted(1.0), accumulation_steps=4, modes=("eager",), scaling="none")
    assert not report.ok and report.diagnosis.startswith("4.00x")
    assert sorted(calls) == [4, 4, 4, 4, 16, 16, 16]  # the baseline again, to rule out nondeterminism
