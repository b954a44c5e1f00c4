"""verify_loop on real loops: the common correct idioms pass, each seeded loop bug is caught and named."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

import verify_loop_cases as cases
from gradcheck_accum import verify_loop
from gradcheck_accum.verifier.errors import VerifyError

N = 4


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def micro_batches(count=9, size=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, 4, generator=g), torch.randn(size, 2, generator=g)) for _ in range(count)]


def run(train_fn, batches=None, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about scheduler order in the seeded scheduler bug
        return verify_loop(train_fn, make_model(), batches or micro_batches(), cases.micro_loss, N, **kwargs)


@pytest.mark.parametrize(
    "train_fn",
    [cases.guarded_with_flush, cases.nested_nanogpt, cases.grad_scaler, cases.scheduler_per_window],
    ids=lambda f: f.__name__,
)
def test_correct_idioms_pass(train_fn):
    report = run(train_fn)
    assert report.ok, report.render()
    assert report.settings["findings"] == []
    assert report.settings["optimizer_steps"] == 3 == report.settings["expected_steps"]
    report.assert_ok()


@pytest.mark.parametrize(
    "train_fn, kind, phrase",
    [
        (cases.zero_grad_every_micro_batch, "grad-cleared-every-micro-batch", "gradients cleared every micro-batch"),
        (cases.never_cleared, "grad-leak", "gradients never cleared"),
        (cases.grad_scaler_never_cleared, "grad-leak", "gradients never cleared"),
        (cases.step_every_micro_batch, "step-every-micro-batch", "stepped on every micro-batch: 9 steps"),
        (cases.loss_not_divided, "loss-not-divided", "loss not divided by the accumulation steps"),
        (cases.remainder_dropped, "remainder-dropped", "remainder dropped: the last 1 micro-batch"),
        (cases.scheduler_every_micro_batch, "scheduler-every-micro-batch", "scheduler advanced per micro-batch"),
        (cases.boundary_off_by_one, "window-boundaries", "expected [4, 4, 1]"),
        (cases.zero_grad_before_step, "zero-grad-before-step", "stepped on zero gradients"),
        (cases.weights_moved_inside_window, "moved-inside-window", "parameters changed inside an accumulation window"),
        (cases.manual_lr_every_micro_batch, "scheduler-every-micro-batch", "learning rate changed"),
        (cases.own_optimizer, "no-steps", "steps an optimizer of its own"),
    ],
    ids=lambda v: v.__name__ if callable(v) else "",
)
def test_seeded_loop_bugs_are_named(train_fn, kind, phrase):
    report = run(train_fn)
    assert not report.ok
    assert report.verdict == "mismatch"
    assert report.settings["findings"][0] == kind, report.render()
    assert phrase in report.diagnosis, report.diagnosis
    with pytest.raises(AssertionError, match="accumcheck verify: MISMATCH"):
        report.assert_ok()


def test_loss_not_divided_counts_every_micro_batch_n_times():
    # Weights are relative to what the big batch gives each micro-batch (1 = right), as in verify.
    report = run(cases.loss_not_divided)
    step = report.mode("step 1")
    assert step.scale == pytest.approx(4.0, rel=1e-4)
    assert step.weights == pytest.approx((4.0,) * N, rel=1e-3)
    assert run(cases.guarded_with_flush).mode("step 1").weights is None  # a match needs no fit


def test_mean_of_means_with_unequal_micro_batches():
    g = torch.Generator().manual_seed(3)
    sizes = [1, 5, 2, 4]
    batches = [(torch.randn(s, 4, generator=g), torch.randn(s, 2, generator=g)) for s in sizes]
    report = run(cases.mean_of_means, batches)
    assert report.settings["findings"][0] == "mean-of-means", report.render()
    # The same loop over equal micro-batches is correct: the bug is the weighting, not the loop.
    assert run(cases.mean_of_means, micro_batches(count=4)).ok


def test_partial_last_window_divided_by_n_is_accepted_and_said():
    report = run(cases.guarded_with_flush)  # 9 micro-batches: the last window holds 1 of 4
    assert any("last window of 1/4 micro-batches, divided by 4" in n for n in report.notes)
    exact = run(cases.nested_nanogpt)  # divides the last window by its own length: exact mean
    assert not any("last window" in n for n in exact.notes)


def test_learning_rate_recorded_per_step():
    report = run(cases.scheduler_per_window)
    assert [lrs[0] for lrs in report.settings["learning_rates"]] == pytest.approx([0.1, 0.05, 0.1 / 3])


def test_multiple_of_n_warns_that_remainder_cannot_show():
    report = run(cases.remainder_dropped, micro_batches(count=8))
    assert report.ok  # nothing to drop
    assert any("cannot show" in n for n in report.notes)


def test_caller_model_untouched_and_report_is_json():
    model = make_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = verify_loop(cases.never_cleared, model, micro_batches(), cases.micro_loss, N)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    data = json.loads(json.dumps(report.to_dict()))
    assert data["verdict"] == "mismatch" and data["settings"]["findings"][0] == "grad-leak"


def test_model_factory_and_optimizer_factory():
    report = verify_loop(cases.guarded_with_flush, make_model, micro_batches(), cases.micro_loss, N,
                         optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3))
    assert report.ok, report.render()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"train_fn": cases.raises}, "train_fn raised RuntimeError: data loader exhausted"),
        ({"micro_batches": []}, "micro_batches must be a non-empty list"),
        ({"accumulation_steps": 0}, "accumulation_steps must be a positive integer"),
        ({"optimizer": lambda params: object()}, "not a torch.optim.Optimizer"),
        ({"loss_fn": lambda model, batch: model(batch[0])}, "loss_fn must return a scalar tensor"),
    ],
)
def test_bad_input_gets_one_line_error(kwargs, message):
    args = {"train_fn": cases.guarded_with_flush, "model": make_model(), "micro_batches": micro_batches(),
            "loss_fn": cases.micro_loss, "accumulation_steps": N, **kwargs}
    with pytest.raises(VerifyError, match=message) as info:
        verify_loop(**args)
    assert "\n" not in str(info.value)


def test_batchnorm_is_inherent_and_a_4x_bug_under_it_is_named():
    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))

    report = verify_loop(cases.guarded_with_flush, model, micro_batches(), cases.micro_loss, N)
    assert report.verdict == "inherent", report.render()
    assert "BatchNorm" in report.diagnosis and "with BatchNorm frozen the rest of the loop matches" in report.diagnosis
    # BatchNorm hides no bug: named at once when it leaves its own trace (only the last micro-batch
    # contributes), else by a second pass with BatchNorm frozen (a 4x scale looks like a coupling).
    for buggy, kind, phrase in [(cases.loss_not_divided, "loss-not-divided",
                                 ("4.00x: loss not divided by the accumulation steps (every micro-batch counts 4.00 "
                                  "times) (found with BatchNorm frozen")),
                                (cases.zero_grad_every_micro_batch, "grad-cleared-every-micro-batch",
                                 "gradients cleared every micro-batch")]:
        bad = verify_loop(buggy, model, micro_batches(), cases.micro_loss, N)
        assert bad.verdict == "mismatch" and bad.settings["findings"][0] == kind, bad.render()
        assert phrase in bad.diagnosis, bad.render()
    # Frozen on running statistics (although the loop calls model.train()), the loop checks exactly.
    frozen = verify_loop(cases.guarded_with_flush, model, micro_batches(), cases.micro_loss, N, freeze_batchnorm=True)
    assert frozen.ok, frozen.render()


def test_dropout_switched_off_and_said():
    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 2))

    report = verify_loop(cases.guarded_with_flush, model, micro_batches(), cases.micro_loss, N)
    assert report.ok, report.render()
    assert any("dropout switched off" in n for n in report.notes)


def test_dict_micro_batches():
    def loss(model, batch):
        return torch.nn.functional.mse_loss(model(batch["x"]), batch["y"])

    def train(model, optimizer, batches, n):
        for i, batch in enumerate(batches):
            (loss(model, batch) / n).backward()
            if (i + 1) % n == 0 or i + 1 == len(batches):
                optimizer.step()
                optimizer.zero_grad()

    batches = [{"x": x, "y": y, "tag": "train"} for x, y in micro_batches()]
    assert verify_loop(train, make_model(), batches, loss, N).ok


def test_two_forwards_per_micro_batch_match_steps_in_order():
    report = run(cases.two_forwards_per_micro_batch)
    assert report.ok, report.render()
    assert any("ran the model 18 times for 9 micro-batches" in n for n in report.notes)
