"""What each run starts from: the prepared state, however the previous run left the working copy,
and how many forward passes a check costs (the rounding budget is measured only when needed, which
never changes a verdict)."""

import dataclasses
import math

import pytest
import torch
from torch import nn

from gradcheck_accum import verify
from gradcheck_accum.verifier import check
from gradcheck_accum.verifier.compare import Tolerance
from gradcheck_accum.verifier.prepare import prepare
from verifier_models import ce_mean, ce_sum, classification_batch, mlp, token_batch, token_mean, token_model, \
    token_sum, window_rows, window_tokens


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


@pytest.mark.parametrize("in_place", [False, True])
def test_every_run_starts_from_the_prepared_state(in_place):
    given = Normalised()
    prepared = prepare(given, in_place=in_place)
    pristine = tensors(prepared.module)
    first = prepared.copy(torch.device("cpu"), torch.float32)
    first(torch.randn(8, 6)).sum().backward()  # moves the running statistics, fills .grad
    with torch.no_grad():
        first.fc.weight.add_(1.0)
    again = prepared.copy(torch.device("cpu"), torch.float32)
    assert again is first and all(p.grad is None for p in again.parameters())
    assert all(torch.equal(t, tensors(again)[n]) for n, t in pristine.items())
    assert all(torch.equal(t, tensors(given)[n]) for n, t in pristine.items())  # never written to
    assert all(p.grad is None for p in given.parameters())


def test_in_place_runs_keep_the_prepared_modes_and_switches():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.BatchNorm1d(4))
    prepared = prepare(model, freeze_batchnorm=True, in_place=True)
    first = prepared.copy(torch.device("cpu"), torch.float32)
    assert first is prepared.module and not first[2].training and first[1].p == 0
    first.eval()  # a loss_fn that switches modes
    again = prepared.copy(torch.device("cpu"), torch.float32)
    assert again.training and again[1].training and not again[2].training
    assert model[1].p == 0.5 and model[2].training  # the model given keeps its own


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_conversions_start_from_the_prepared_precision(dtype):
    prepared = prepare(mlp())
    pristine = tensors(prepared.module)
    converted = prepared.copy(torch.device("cpu"), dtype)
    assert converted.fc1.weight.dtype == dtype
    assert torch.equal(converted.fc1.weight, pristine["fc1.weight"].to(dtype))
    back = prepared.copy(torch.device("cpu"), torch.float32)
    assert all(torch.equal(t, tensors(back)[n]) for n, t in pristine.items())  # no bf16 or float64 residue


@pytest.mark.parametrize("in_place", [False, True])
def test_fresh_copies_are_independent_and_a_changed_module_is_copied_anew(in_place):
    class GrowsABuffer(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            self.register_buffer(f"seen{len(list(self.buffers()))}", x.detach().sum())
            return self.fc(x)

    prepared = prepare(GrowsABuffer(), in_place=in_place)
    working = prepared.copy(torch.device("cpu"), torch.float32)
    assert prepared.copy(torch.device("cpu"), torch.float32, fresh=True) is not working
    working(torch.ones(1, 2))
    assert prepared.copy(torch.device("cpu"), torch.float32) is not working  # tensors no longer line up
    assert not list(prepared.module.buffers())


def counted(calls: list, scale: float = 1.0):
    def loss(model, batch):
        calls.append(len(batch[0]))
        return ce_mean(model, batch) * scale
    return loss


def test_a_match_within_the_floor_runs_only_the_float64_big_batch():
    calls = []
    report = verify(mlp(), classification_batch(16), counted(calls), accumulation_steps=4, modes=("eager",))
    assert report.ok
    assert sorted(calls) == [4, 4, 4, 4, 16]  # four micro-batches and the float64 big batch
    assert all(math.isnan(row.reference_error) for row in report.rows)  # the budget was not needed


def test_beyond_the_floor_the_rounding_budget_is_measured(monkeypatch):
    no_floor = dataclasses.replace(Tolerance.for_dtype(torch.float32), floor=0.0)
    monkeypatch.setattr(check, "Tolerance", type("NoFloor", (), {"for_dtype": staticmethod(lambda dtype: no_floor)}))
    calls = []
    report = verify(mlp(), classification_batch(16), counted(calls), accumulation_steps=4, modes=("eager",))
    assert report.ok
    assert sorted(calls) == [4, 4, 4, 4, 16, 16]  # the float32 big batch measured the budget
    assert all(row.reference_error > 0 for row in report.rows if row.error > 0)


def test_a_named_mismatch_measures_the_budget_and_is_not_rerun():
    calls = []
    report = verify(mlp(), classification_batch(16), counted(calls), accumulation_steps=4, modes=("eager",),
                    scaling="none")
    assert not report.ok and report.diagnosis.startswith("4.00x")
    assert sorted(calls) == [4, 4, 4, 4, 16, 16]  # the budget; a named bug is not nondeterminism


def test_an_unexplained_mismatch_is_rerun_to_rule_out_nondeterminism():
    calls = []
    big, micro = counted(calls), counted(calls, scale=1.01)  # micro-batches off by an unnamed 1.01x

    def loss(model, batch):
        return (big if len(batch[0]) == 16 else micro)(model, batch)

    report = verify(mlp(), classification_batch(16), loss, accumulation_steps=4, modes=("eager",))
    assert not report.ok and "1.01" in report.diagnosis
    assert sorted(calls) == [4, 4, 4, 4, 16, 16, 16]  # the budget, then again to rule out nondeterminism


CASES = {
    "correct": dict(model=mlp, batch=classification_batch(16), loss_fn=ce_mean),
    "uneven splits": dict(model=mlp, batch=classification_batch(18), loss_fn=ce_sum, scaling=window_rows,
                          splits=[2, 9, 7]),
    "mean of uneven means": dict(model=mlp, batch=classification_batch(18), loss_fn=ce_mean, splits=[2, 9, 7]),
    "not divided": dict(model=mlp, batch=classification_batch(16), loss_fn=ce_mean, scaling="none"),
    "slightly scaled": dict(model=mlp, batch=classification_batch(16), loss_fn=lambda m, b: ce_mean(m, b) * 1.0001,
                            reference_loss_fn=ce_mean),
    "mean of means": dict(model=token_model, batch=token_batch(12), loss_fn=token_mean, splits=[2, 4, 6]),
    "token sums": dict(model=token_model, batch=token_batch(12), loss_fn=token_sum, scaling=window_tokens,
                       splits=[2, 4, 6]),
    "bfloat16": dict(model=mlp, batch=classification_batch(16), loss_fn=ce_mean, dtype="bfloat16"),
}


@pytest.mark.parametrize("name", CASES)
def test_measuring_the_budget_only_when_needed_never_changes_a_verdict(name, monkeypatch):
    def judged():
        report = verify(**{**CASES[name], "model": CASES[name]["model"]()}, modes=("eager",))
        return report.verdict, report.diagnosis, [(row.name, row.ok) for row in report.rows]

    lazy = judged()
    measured_first = check.compute_reference

    def upfront(*args, **kwargs):
        reference = measured_first(*args, **kwargs)
        reference.measure_exact()
        return reference

    monkeypatch.setattr(check, "compute_reference", upfront)
    assert judged() == lazy
    assert (lazy[0] == "match") == (name in ("correct", "uneven splits", "token sums", "bfloat16"))


def test_captured_contributions_leave_the_window_gradient_bit_for_bit_as_autograd_sums_it():
    from gradcheck_accum.verifier.accumulate import run_window
    from gradcheck_accum.verifier.batches import split_batch

    micro = split_batch(token_batch(12), [2, 4, 6])
    plain = run_window(token_model(), micro, token_sum, [1, 1, 1], label="plain", capture=False)
    captured = run_window(token_model(), micro, token_sum, [1, 1, 1], label="captured")
    assert all(torch.equal(plain.grads[n], captured.grads[n]) for n in plain.grads)
    summed = {n: sum(c[n] for c in captured.contributions) for n in plain.grads}
    assert all(torch.allclose(summed[n], plain.grads[n], rtol=1e-6, atol=1e-7) for n in plain.grads)
    assert len(captured.contributions) == 3


def test_a_mismatch_stops_judging_against_the_floor_at_its_first_failing_row(monkeypatch):
    from gradcheck_accum.verifier import judge

    judged = []
    against_floor = judge.within_floor
    monkeypatch.setattr(judge, "within_floor", lambda *a, **k: judged.append(1) or against_floor(*a, **k))
    model = mlp()
    report = verify(model, classification_batch(16), ce_mean, accumulation_steps=4, modes=("eager",), scaling="none")
    assert not report.ok and report.diagnosis.startswith("4.00x")
    assert len(judged) == 1  # the float64 run comes next, and every row is judged against it
    assert [row.name for row in report.rows] == [n for n, _ in model.named_parameters()]


class _Evidence:
    """A reference whose evidence runs are counted (judge's protocol, without gradients)."""

    def __init__(self, learns: bool) -> None:
        self.learns, self.asked = learns, []

    def measure_exact(self) -> bool:
        self.asked.append("measure_exact")
        return self.learns

    def recheck(self) -> bool:
        self.asked.append("recheck")
        return self.learns


@pytest.mark.parametrize("learns", [True, False])
def test_judge_returns_complete_rows_whatever_the_evidence_brings(learns):
    from gradcheck_accum.verifier.judge import judge
    from gradcheck_accum.verifier.report import Row

    def row(name, ok):
        return Row("eager", name, (1,), 0.0 if ok else 1.0, math.nan, 0.5, 1.0, 1.0, ok)

    asked = []

    def rows(partial):
        asked.append(partial)
        return [row("a", False)] if partial else [row("a", False), row("b", True)]

    reference = _Evidence(learns)
    judged = judge(rows, reference)
    assert [r.name for r in judged] == ["a", "b"]
    assert reference.asked == ["measure_exact", "recheck"]
    assert asked == ([True, True, False] if learns else [True, False])
