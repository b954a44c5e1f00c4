"""The accumulation-window model: shapes, boundary predicates and where each call runs."""

import libcst as cst
import pytest

from gradcheck_accum.lint.model import EventKind, FileModel, Framework, Placement, WindowShape

EVERY, BOUNDARY, AFTER, UNKNOWN = Placement.EVERY, Placement.BOUNDARY, Placement.AFTER, Placement.UNKNOWN
GUARDED, NESTED, FRAMEWORK, UNGUARDED = WindowShape


def only_window(source: str):
    windows = FileModel(cst.parse_module(source)).windows
    assert len(windows) == 1
    return windows[0]


def placements(window, kind):
    return [window.placement(e) for e in window.events if e.kind == kind]


GUARDED_FORMS = [
    "if (i + 1) % accum == 0:",
    "if i % accum == accum - 1:",
    "if (i + 1) % accum == 0 or i + 1 == len(loader):",
    "if not (i + 1) % accum != 0:",
    "if ready:",  # a flag computed from the test
    "if not is_accumulating:",
    "if ni - last_opt_step >= accumulate:",
]


@pytest.mark.parametrize("test", GUARDED_FORMS)
def test_guarded_window_shapes(test):
    source = (
        "import torch\nopt = torch.optim.SGD(ps, lr=1)\n"
        "for i, batch in enumerate(loader):\n"
        "    ready = (i + 1) % accum == 0\n"
        "    is_accumulating = (i + 1) % accum != 0\n"
        "    loss = model(batch) / accum\n"
        "    loss.backward()\n"
        f"    {test}\n"
        "        opt.step()\n"
        "        opt.zero_grad()\n"
    )
    window = only_window(source)
    assert window.shape == GUARDED
    assert placements(window, EventKind.STEP) == [BOUNDARY]
    assert placements(window, EventKind.ZERO_GRAD) == [BOUNDARY]
    assert placements(window, EventKind.BACKWARD) == [EVERY]


def test_early_continue_guards_the_rest_of_the_body():
    source = (
        "for i, batch in enumerate(loader):\n"
        "    need_update = (i + 1) % accum == 0\n"
        "    loss = model(batch) / accum\n"
        "    loss.backward()\n"
        "    if not need_update:\n"
        "        continue\n"
        "    optimizer.step()\n"
        "    optimizer.zero_grad()\n"
    )
    window = only_window(source)
    assert window.shape == GUARDED
    assert placements(window, EventKind.ZERO_GRAD) == [BOUNDARY]


def test_nested_window_places_outer_calls_once_per_window():
    source = (
        "while True:\n"
        "    optimizer.zero_grad()\n"
        "    for micro_step in range(grad_accum):\n"
        "        loss = model(x) / grad_accum\n"
        "        loss.backward()\n"
        "        optimizer.zero_grad()\n"
        "    if grad_clip:\n"
        "        clip_grad_norm_(model.parameters(), 1.0)\n"
        "    optimizer.step()\n"
    )
    window = only_window(source)
    assert window.shape == NESTED
    assert cst.Module([]).code_for_node(window.n) == "grad_accum"
    assert placements(window, EventKind.ZERO_GRAD) == [BOUNDARY, EVERY]
    assert placements(window, EventKind.CLIP) == [BOUNDARY]
    assert placements(window, EventKind.STEP) == [BOUNDARY]


def test_framework_window_and_unguarded_loop():
    accelerate = (
        "from accelerate import Accelerator\naccelerator = Accelerator(gradient_accumulation_steps=2)\n"
        "for batch in loader:\n"
        "    with accelerator.accumulate(model):\n"
        "        accelerator.backward(model(batch))\n"
        "        optimizer.step()\n"
    )
    window = only_window(accelerate)
    assert (window.shape, window.framework, window.accumulates) == (FRAMEWORK, Framework.ACCELERATE, True)
    plain = "for batch in loader:\n    model(batch).backward()\n    optimizer.step()\n    optimizer.zero_grad()\n"
    assert only_window(plain).shape == UNGUARDED


def test_step_after_the_loop_is_placed_after():
    source = (
        "for i, batch in enumerate(loader):\n"
        "    (model(batch) / n).backward()\n"
        "    if (i + 1) % n == 0:\n"
        "        optimizer.step()\n"
        "optimizer.step()\n"
    )
    window = only_window(source)
    assert placements(window, EventKind.STEP) == [BOUNDARY, AFTER]


def test_helper_function_effects_appear_at_the_call_site():
    source = (
        "def update(opt):\n    opt.step()\n    opt.zero_grad()\n"
        "for i, batch in enumerate(loader):\n"
        "    (model(batch) / n).backward()\n"
        "    if (i + 1) % n == 0:\n"
        "        update(optimizer)\n"
    )
    window = only_window(source)
    assert window.shape == GUARDED
    helper_events = [e for e in window.events if e.via_helper == "update"]
    assert {e.kind for e in helper_events} == {EventKind.STEP, EventKind.ZERO_GRAD}
    assert {window.placement(e) for e in helper_events} == {BOUNDARY}


def test_loop_invariant_conditions_do_not_hide_every_micro_batch_calls():
    source = (
        "for i, batch in enumerate(loader):\n"
        "    (model(batch) / n).backward()\n"
        "    if args.clip > 0:\n"
        "        clip_grad_norm_(model.parameters(), args.clip)\n"
        "    if i % log_every == 0:\n"
        "        clip_grad_norm_(model.parameters(), args.clip)\n"
        "    if (i + 1) % n == 0:\n"
        "        optimizer.step()\n"
    )
    window = only_window(source)
    assert placements(window, EventKind.CLIP) == [EVERY, UNKNOWN]
