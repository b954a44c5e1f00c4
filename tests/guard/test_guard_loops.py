"""The guard on plain training loops: verify_loop's seeded bugs raise at the window where they
happen, correct idioms run clean, and the loss factor is judged when the loss is handed over."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import gradcheck_accum
from gradcheck_accum.guards import GuardError, GuardWarning
from verifier_loop import verify_loop_cases as cases

N = 4


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def micro_batches(count=9, sizes=None):
    g = torch.Generator().manual_seed(1)
    sizes = sizes or [4] * count
    return [(torch.randn(s, 4, generator=g), torch.randn(s, 2, generator=g)) for s in sizes]


def run_guarded(train_fn, batches=None, n=N, **kwargs):
    """Run train_fn(model, optimizer, batches, n) under a guard; return (violation or None, guard)."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    g = gradcheck_accum.guard(optimizer, n, model=model, **kwargs)
    try:
        with g:
            train_fn(model, optimizer, micro_batches() if batches is None else batches, n)
    except GuardError as exc:
        return exc.violation, g
    return None, g


CORRECT = ["guarded_with_flush", "nested_nanogpt", "grad_scaler", "scheduler_per_window", "two_forwards_per_micro_batch"]


@pytest.mark.parametrize("name", CORRECT)
def test_correct_idioms_run_clean(name):
    violation, g = run_guarded(getattr(cases, name))
    assert violation is None and g.violations == []
    assert g.steps == 3  # 9 micro-batches, N=4: windows of 4, 4 and the flushed 1


# (case, kind, code, window, optimizer steps taken when the guard raised)
SEEDED = [
    ("zero_grad_every_micro_batch", "grad-cleared-every-micro-batch", "ACC101", 1, 0),
    ("never_cleared", "grad-leak", "ACC102", 2, 1),
    ("grad_scaler_never_cleared", "grad-leak", "ACC102", 2, 1),
    ("zero_grad_before_step", "zero-grad-before-step", "ACC103", 1, 0),
    ("step_every_micro_batch", "step-every-micro-batch", "ACC104", 2, 1),  # window 2 tells it from ACC407
    ("scheduler_every_micro_batch", "scheduler-every-micro-batch", "ACC401", 1, 0),
    ("manual_lr_every_micro_batch", "scheduler-every-micro-batch", "ACC401", 1, 0),
    ("remainder_dropped", "remainder-dropped", "ACC406", 3, 2),  # at the end of the run
    ("boundary_off_by_one", "boundary-off-by-one", "ACC407", 1, 1),
    ("weights_moved_inside_window", "moved-inside-window", None, 1, 0),
    ("own_optimizer", "window-too-long", None, 1, 0),
]


@pytest.mark.parametrize("name, kind, code, window, steps", SEEDED, ids=[s[0] for s in SEEDED])
def test_seeded_bug_raises_at_its_window(name, kind, code, window, steps):
    violation, g = run_guarded(getattr(cases, name))
    assert violation is not None, f"{name} ran clean"
    assert (violation.kind, violation.code, violation.window, g.steps) == (kind, code, window, steps), str(violation)
    text = str(violation)
    assert text.startswith(f"{code}: ") if code else ":" not in text.split(" ")[0]
    assert re.search(rf"windows? (\d+ and )?{window}\b", text) and "\n" not in text


def test_seeded_bugs_run_without_the_guard():
    # Negative control: the loops themselves never raise; the errors above are the guard's.
    for name, *_ in SEEDED:
        model = make_model()
        getattr(cases, name)(model, torch.optim.SGD(model.parameters(), lr=0.1), micro_batches(), N)


def test_sentence_shape_names_backward_and_window():
    violation, _ = run_guarded(cases.zero_grad_every_micro_batch)
    assert str(violation).startswith("ACC101: gradients were cleared between backward 1 and 2 of window 1")


# --- more correct idioms -------------------------------------------------------------------------


def clip_and_set_to_none_false(model, optimizer, micro_batches, n):
    for i, batch in enumerate(micro_batches):
        (cases.micro_loss(model, batch) / n).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
            optimizer.step()
            optimizer.zero_grad(set_to_none=False)


def grads_set_to_none_by_hand(model, optimizer, micro_batches, n):
    for i, batch in enumerate(micro_batches):
        (cases.micro_loss(model, batch) / n).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()
            for p in model.parameters():
                p.grad = None


def zero_before_each_window(model, optimizer, micro_batches, n):
    """Lightning's order: clear at the start of a window rather than after the step."""
    for i, batch in enumerate(micro_batches):
        if i % n == 0:
            model.zero_grad()
        (cases.micro_loss(model, batch) / n).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()


def reentrant_checkpoint(model, optimizer, micro_batches, n):
    from torch.utils.checkpoint import checkpoint

    for i, (x, y) in enumerate(micro_batches):
        # The reentrant form runs the segment's backward as a nested graph task; it needs an input
        # that requires grad to reach the segment's parameters at all.
        hidden = checkpoint(lambda t: model[1](model[0](t)), x.requires_grad_(), use_reentrant=True)
        (F.mse_loss(model[2](hidden), y) / n).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()
            optimizer.zero_grad()


@pytest.mark.parametrize("train_fn", [clip_and_set_to_none_false, grads_set_to_none_by_hand, zero_before_each_window,
                                      reentrant_checkpoint])
def test_more_correct_idioms_run_clean(train_fn):
    violation, g = run_guarded(train_fn)
    assert violation is None and g.steps == 3


def test_epochs_with_a_flushed_remainder_run_clean():
    def epochs(model, optimizer, micro_batches, n):
        for _ in range(3):
            cases.guarded_with_flush(model, optimizer, micro_batches, n)
            g.end_epoch()

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradcheck_accum.guard(optimizer, N, model=model) as g:
        epochs(model, optimizer, micro_batches(), N)
    assert g.violations == [] and g.steps == 9


def test_remainder_dropped_is_named_at_the_end_of_its_epoch():
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    g = gradcheck_accum.guard(optimizer, N, model=model)
    cases.remainder_dropped(model, optimizer, micro_batches(), N)
    with pytest.raises(GuardError, match=r"^ACC406: .*window 3.* end of epoch 1"):
        g.end_epoch()
    g.close(check=False)


def test_short_window_inside_an_epoch_is_named_once_epochs_are_marked():
    def short_then_full(model, optimizer, micro_batches, n):
        for window in ([4, 4, 1], [2, 4, 3]):  # epoch 1 is right; epoch 2 steps after 2 micro-batches mid-epoch
            start = 0
            for size in window:
                for batch in micro_batches[start:start + size]:
                    (cases.micro_loss(model, batch) / n).backward()
                optimizer.step()
                optimizer.zero_grad()
                start += size
            g.end_epoch()

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    g = gradcheck_accum.guard(optimizer, N, model=model)
    with pytest.raises(GuardError) as info:
        short_then_full(model, optimizer, micro_batches(), N)
    assert info.value.violation.kind == "window-boundaries" and info.value.violation.window == 4
    assert g.steps == 4  # raised at the step of window 5, the full one after it
    g.close(check=False)


def test_conditional_branches_keep_the_count():
    """MoE-like: each micro-batch uses one of two experts over a shared trunk; the sentinels are
    chosen among parameters every backward reached."""

    class Routed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.trunk, self.experts = torch.nn.Linear(4, 8), torch.nn.ModuleList(torch.nn.Linear(8, 2) for _ in range(2))
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            return self.experts[self.calls % 2](torch.tanh(self.trunk(x)))

    model = Routed()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradcheck_accum.guard(optimizer, N, model=model) as g:
        cases.guarded_with_flush(model, optimizer, micro_batches(17), N)
    assert g.violations == [] and g.steps == 5


def test_disjoint_towers_keep_every_hook():
    """Two towers trained alternately share no parameter: every parameter keeps its hook."""
    towers = torch.nn.ModuleList(torch.nn.Linear(4, 2) for _ in range(2))
    optimizer = torch.optim.SGD(towers.parameters(), lr=0.1)
    batches = micro_batches(9)
    with gradcheck_accum.guard(optimizer, N) as g:
        for i, (x, y) in enumerate(batches):
            (F.mse_loss(towers[i % 2](x), y) / N).backward()
            if (i + 1) % N == 0 or i + 1 == len(batches):
                optimizer.step()
                optimizer.zero_grad()
    assert g.violations == [] and g.steps == 3


# --- gradients touched inside the window ---------------------------------------------------------


def zero_in_place_every_micro_batch(model, optimizer, micro_batches, n):
    for i, batch in enumerate(micro_batches):
        (cases.micro_loss(model, batch) / n).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()
        optimizer.zero_grad(set_to_none=False)


def clip_every_micro_batch(model, optimizer, micro_batches, n):
    for i, batch in enumerate(micro_batches):
        (cases.micro_loss(model, batch) / n).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()
            optimizer.zero_grad()


def scheduler_stepped_n_times_at_the_boundary(model, optimizer, micro_batches, n):
    for i, batch in enumerate(micro_batches):
        (cases.micro_loss(model, batch) / n).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()
            for _ in range(n):  # "the schedule was built per micro-batch"
                scheduler.step()
            optimizer.zero_grad()


@pytest.mark.parametrize("train_fn, kind, code, window", [
    (zero_in_place_every_micro_batch, "grad-cleared-every-micro-batch", "ACC101", 1),
    (clip_every_micro_batch, "clip-every-micro-batch", "ACC403", 1),
])
def test_in_place_changes_inside_a_window(train_fn, kind, code, window):
    violation, _ = run_guarded(train_fn)
    assert (violation.kind, violation.code, violation.window) == (kind, code, window)


def test_scheduler_handed_over_is_counted_per_step():
    global scheduler
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1000)
    with pytest.raises(GuardError, match=r"^ACC401: the scheduler stepped 4 times for the optimizer step of window 2"):
        with gradcheck_accum.guard(optimizer, N, model=model, scheduler=scheduler):
            scheduler_stepped_n_times_at_the_boundary(model, optimizer, micro_batches(), N)


# --- GradScaler ----------------------------------------------------------------------------------


def scaled_loop(model, optimizer, micro_batches, n, scaler, *, unscale_each=False, inf_window=None):
    for i, batch in enumerate(micro_batches):
        loss = cases.micro_loss(model, batch) / n
        if inf_window is not None and i // n == inf_window:
            loss = loss * float("inf")
        scaler.scale(loss).backward()
        if unscale_each:
            scaler.unscale_(optimizer)
            scaler.update()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()


def run_scaled(pass_scaler=True, **kwargs):
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    g = gradcheck_accum.guard(optimizer, N, model=model, scaler=scaler if pass_scaler else None)
    try:
        with g:
            scaled_loop(model, optimizer, micro_batches(), N, scaler, **kwargs)
    except GuardError as exc:
        return exc.violation, g, scaler
    return None, g, scaler


@pytest.mark.parametrize("pass_scaler", [True, False])
def test_a_step_the_scaler_skips_closes_its_window(pass_scaler):
    violation, g, scaler = run_scaled(pass_scaler, inf_window=1)
    assert violation is None and g.steps == 2 and g.window == 4  # window 2 was skipped, not stepped
    assert scaler.get_scale() == 2.0**9  # it really did skip (backed off once)


def test_unscale_and_update_every_micro_batch():
    violation, g, _ = run_scaled(unscale_each=True)
    assert (violation.code, violation.window, g.steps) == ("ACC404", 1, 0)
    assert "scaler.unscale_() ran between backward 1 and 2 of window 1" in str(violation) or "scaler.update()" in str(violation)


# --- the loss, handed over -----------------------------------------------------------------------


def watched_loop(g, *, divide, items=None, sizes=None):
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = micro_batches(sizes=sizes) if sizes else micro_batches()
    g = g(optimizer, model)
    with g:
        for start in range(0, len(batches), N):
            window = batches[start:start + N]
            total = sum(len(x) for x, _ in window)
            for x, y in window:
                count = {None: None, "int": len(x), "tensor": torch.tensor(len(x))}[items]
                loss = g.watch_loss(F.mse_loss(model(x), y), items=count)
                loss = divide(loss, len(window), len(x), total)
                loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    return g


UNEVEN = [3, 5, 4, 4, 2, 6, 4, 4, 5]
LOSS_CASES = [
    ("divided by N", lambda loss, k, m, total: loss / N, None, None, None),
    ("divided by the window length (nanoGPT)", lambda loss, k, m, total: loss / k, None, None, None),
    ("not divided", lambda loss, k, m, total: loss, "ACC201", None, None),
    ("divided twice", lambda loss, k, m, total: loss / N / N, "ACC202", None, None),
    ("weighted by items", lambda loss, k, m, total: loss * m / total, None, UNEVEN, "int"),
    ("weighted by items counted in tensors", lambda loss, k, m, total: loss * m / total, None, UNEVEN, "tensor"),
    ("mean of means", lambda loss, k, m, total: loss / k, "ACC203", UNEVEN, "int"),
    ("mean of means counted in tensors", lambda loss, k, m, total: loss / k, "ACC203", UNEVEN, "tensor"),
]


@pytest.mark.parametrize("label, divide, code, sizes, items", LOSS_CASES, ids=[c[0] for c in LOSS_CASES])
def test_watched_loss_factor(label, divide, code, sizes, items):
    made = lambda optimizer, model: gradcheck_accum.guard(optimizer, N, model=model)  # noqa: E731
    if code is None:
        g = watched_loop(made, divide=divide, items=items, sizes=sizes)
        assert g.violations == []
        return
    with pytest.raises(GuardError) as info:
        watched_loop(made, divide=divide, items=items, sizes=sizes)
    assert (info.value.violation.code, info.value.violation.window) == (code, 1)


def test_watched_loss_under_a_grad_scaler_is_read_unscaled():
    violation, g, _ = run_scaled()
    assert violation is None
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    with gradcheck_accum.guard(optimizer, N, scaler=scaler) as g:
        for i, batch in enumerate(micro_batches(8)):
            scaler.scale(g.watch_loss(cases.micro_loss(model, batch)) / N).backward()
            if (i + 1) % N == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
    assert g.violations == []


# --- reporting -----------------------------------------------------------------------------------


def test_warn_mode_warns_once_per_kind_and_keeps_every_violation():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        violation, g = run_guarded(cases.zero_grad_every_micro_batch, on_error="warn")
    assert violation is None
    assert [v.code for v in g.violations].count("ACC101") >= 4
    mine = [w for w in caught if issubclass(w.category, GuardWarning)]
    assert len(mine) == 1 and str(mine[0].message).startswith("ACC101: ")


def test_callable_receives_each_violation():
    seen = []
    run_guarded(cases.never_cleared, on_error=seen.append)
    assert [v.window for v in seen] == [2, 3]


def test_closed_guard_detaches():
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradcheck_accum.guard(optimizer, N, model=model):
        pass
    cases.zero_grad_every_micro_batch(model, optimizer, micro_batches(), N)  # no longer watched


def test_an_error_inside_the_block_is_not_masked():
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(KeyError):
        with gradcheck_accum.guard(optimizer, N, model=model):
            (cases.micro_loss(model, micro_batches(1)[0]) / N).backward()  # a pending window, then:
            raise KeyError("the user's own error")


@pytest.mark.parametrize("kwargs, error", [
    (dict(accumulation_steps=0), ValueError),
    (dict(accumulation_steps=2.0), ValueError),
    (dict(accumulation_steps=2, on_error="ignore"), ValueError),
    (dict(accumulation_steps=2, scaler=object()), TypeError),
    (dict(accumulation_steps=2, scheduler=object()), TypeError),
])
def test_bad_arguments_say_so(kwargs, error):
    model = make_model()
    with pytest.raises(error):
        gradcheck_accum.guard(torch.optim.SGD(model.parameters(), lr=0.1), **kwargs)
    with pytest.raises(TypeError, match="torch.optim.Optimizer"):
        gradcheck_accum.guard(object(), 2)


def test_importing_the_package_does_not_import_torch():
    code = "import sys, gradcheck_accum, gradcheck_accum.lint\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr
