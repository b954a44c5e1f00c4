"""verify_accelerate against the installed accelerate: loops written with Accelerator.accumulate()."""

from __future__ import annotations

import pytest
import torch

accelerate = pytest.importorskip("accelerate")
pytestmark = pytest.mark.slow  # an Accelerator per test

from trainer_cases import micro_batches, mse  # noqa: E402

from gradcheck_accum.verifier.trainers.accelerate_loop import verify_accelerate  # noqa: E402
from gradcheck_accum.verifier.trainers.common import fresh_accelerate_state  # noqa: E402

N = 4


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def accumulate_loop(accelerator, model, optimizer, dataloader, extra_division=1, prepare=("optimizer", "loader")):
    """The documented idiom: everything prepared, step and zero_grad inside accumulate()."""
    model = accelerator.prepare(model)
    if "optimizer" in prepare:
        optimizer = accelerator.prepare(optimizer)
    if "loader" in prepare:
        dataloader = accelerator.prepare(dataloader)
    for batch in dataloader:
        with accelerator.accumulate(model):
            accelerator.backward(mse(model, batch) / extra_division)
            optimizer.step()
            optimizer.zero_grad()


def divides_again(accelerator, model, optimizer, dataloader):
    accumulate_loop(accelerator, model, optimizer, dataloader, extra_division=accelerator.gradient_accumulation_steps)


def loader_not_prepared(accelerator, model, optimizer, dataloader):
    accumulate_loop(accelerator, model, optimizer, dataloader, prepare=("optimizer",))


def optimizer_not_prepared(accelerator, model, optimizer, dataloader):
    accumulate_loop(accelerator, model, optimizer, dataloader, prepare=("loader",))


def check(train_fn, **kwargs):
    return verify_accelerate(train_fn, make_model(), micro_batches(), mse, N, device="cpu", **kwargs)


def test_accumulate_idiom_matches_and_its_partial_window_is_k_over_n():
    report = check(accumulate_loop)
    assert report.ok, report.render()
    assert report.settings["optimizer_steps"] == 3
    assert any("last window of 1/4 micro-batches, divided by 4" in n for n in report.notes)
    assert report.settings["framework"] == f"accelerate {accelerate.__version__}"


def test_manual_division_on_top_of_accelerate_is_scaled_twice():
    assert check(divides_again).settings["findings"][0] == "scaled-twice"


def test_unprepared_dataloader_never_steps_the_remainder():
    report = check(loader_not_prepared)
    assert report.settings["findings"][0] == "remainder-dropped", report.render()


def test_unprepared_optimizer_steps_every_micro_batch():
    report = check(optimizer_not_prepared)
    assert report.settings["findings"][0] == "step-every-micro-batch", report.render()


def test_callers_accelerator_state_is_left_as_it_was():
    from accelerate.state import GradientState

    with fresh_accelerate_state():  # and this test leaves none behind for the next
        mine = accelerate.Accelerator(gradient_accumulation_steps=7, cpu=True)
        report = check(accumulate_loop)
        assert report.ok, report.render()  # the run used N=4, not the caller's 7
        assert GradientState().num_steps == 7 and mine.gradient_accumulation_steps == 7
