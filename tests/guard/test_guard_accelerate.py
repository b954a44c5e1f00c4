"""The guard in a real accelerate loop: `guard(optimizer, accelerator.gradient_accumulation_steps, ...)`
on the prepared objects, unchanged. accelerate gates the step, zero_grad and a prepared scheduler
outside sync steps and divides the loss by N in `backward`; the guard must see through that."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("accelerate")
from accelerate import Accelerator  # noqa: E402

import gradcheck_accum  # noqa: E402
from gradcheck_accum.guards import GuardError  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fresh_accelerate_state")]  # an Accelerator per test

N = 3


def setup(prepare_scheduler=True):
    accelerator = Accelerator(gradient_accumulation_steps=N, cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(14, 4, generator=g), torch.randn(14, 2, generator=g))
    loader = torch.utils.data.DataLoader(data, batch_size=2)  # 7 micro-batches: windows of 3, 3, 1
    if prepare_scheduler:
        model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    else:
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    return accelerator, model, optimizer, loader, scheduler


def run(body, prepare_scheduler=True, epochs=2):
    accelerator, model, optimizer, loader, scheduler = setup(prepare_scheduler)
    guard = gradcheck_accum.guard(optimizer, accelerator.gradient_accumulation_steps, model=model, scheduler=scheduler)
    try:
        with guard:
            for _ in range(epochs):
                for x, y in loader:
                    body(accelerator, model, optimizer, scheduler, guard, x, y)
    except GuardError as exc:
        return exc.violation, guard
    return None, guard


def correct(accelerator, model, optimizer, scheduler, guard, x, y):
    with accelerator.accumulate(model):
        loss = guard.watch_loss(F.mse_loss(model(x), y))
        accelerator.backward(loss)  # divides by N
        if accelerator.sync_gradients:
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()  # gated: steps on sync micro-batches only
        scheduler.step()  # gated too (prepared)
        optimizer.zero_grad()  # gated too


def test_accumulate_loop_runs_clean():
    violation, guard = run(correct)
    assert violation is None and guard.steps == 6


def divided_by_hand_too(accelerator, model, optimizer, scheduler, guard, x, y):
    with accelerator.accumulate(model):
        accelerator.backward(guard.watch_loss(F.mse_loss(model(x), y)) / N)
        optimizer.step()
        optimizer.zero_grad()


def model_zero_grad(accelerator, model, optimizer, scheduler, guard, x, y):
    with accelerator.accumulate(model):
        model.zero_grad()  # not gated by accelerate, unlike optimizer.zero_grad()
        accelerator.backward(F.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()


def no_accumulate_context(accelerator, model, optimizer, scheduler, guard, x, y):
    accelerator.backward(F.mse_loss(model(x), y))  # sync_gradients stays True: a step every micro-batch
    optimizer.step()
    optimizer.zero_grad()


def raw_scheduler(accelerator, model, optimizer, scheduler, guard, x, y):
    with accelerator.accumulate(model):
        accelerator.backward(F.mse_loss(model(x), y))
        optimizer.step()
        scheduler.step()  # not prepared: steps on every micro-batch
        optimizer.zero_grad()


@pytest.mark.parametrize("body, prepare_scheduler, code, window, steps", [
    (divided_by_hand_too, True, "ACC202", 1, 0),  # judged before the window's step (on CUDA: a step or two later)
    (model_zero_grad, True, "ACC101", 1, 0),
    (no_accumulate_context, True, "ACC104", 2, 1),
    (raw_scheduler, False, "ACC401", 1, 0),
], ids=["divided twice", "model.zero_grad", "no accumulate()", "unprepared scheduler"])
def test_accelerate_bug_raises_at_its_window(body, prepare_scheduler, code, window, steps):
    violation, guard = run(body, prepare_scheduler)
    assert violation is not None
    assert (violation.code, violation.window, guard.steps) == (code, window, steps), str(violation)
