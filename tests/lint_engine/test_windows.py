"""The accumulation-window model: shapes, boundary predicates and where each call runs."""

import libcst as cst
import pytest

from gradcheck_accum.lint.model import EventKind, FileModel, Framework, Placement, TailFate, WindowShape

EVERY, BOUNDARY, AFTER, UNKNOWN = Placement.EVERY, Placement.BOUNDARY, Placement.AFTER, Placement.UNKNOWN
GUARDED, NESTED, FRAMEWORK, UNGUARDED, PLAIN = WindowShape


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
    helper_events = [e for e in window.events if e.frame is not None]
    assert {e.kind for e in helper_events} == {EventKind.STEP, EventKind.ZERO_GRAD}
    assert {window.placement(e) for e in helper_events} == {BOUNDARY}
    # the helper's events sit at its own lines and name the optimizer as the caller does
    assert {e.target for e in helper_events} == {"optimizer"}
    assert all(e.frame.call is not e.node for e in helper_events)


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


# -- paths: one window per way through the configuration tests ---------------------------------------

def windows_of(source: str):
    return FileModel(cst.parse_module(source)).windows


def test_a_test_comparing_n_with_one_makes_the_other_branch_a_plain_loop():
    source = (
        "for i, batch in enumerate(loader):\n"
        "    loss = model(batch)\n"
        "    if accum_steps > 1:\n"
        "        (loss / accum_steps).backward()\n"
        "        if (i + 1) % accum_steps == 0:\n"
        "            optimizer.step()\n"
        "            optimizer.zero_grad()\n"
        "    else:\n"
        "        optimizer.zero_grad()\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
    )
    shapes = sorted(w.shape.value for w in windows_of(source))
    assert shapes == ["guarded", "plain"]
    guarded = next(w for w in windows_of(source) if w.shape is GUARDED)
    assert [e.node.func.attr.value for e in guarded.of(EventKind.ZERO_GRAD)] == ["zero_grad"]
    assert placements(guarded, EventKind.ZERO_GRAD) == [BOUNDARY]


@pytest.mark.parametrize("plain_test", ["accum_steps == 1", "accum_steps <= 1", "not accumulate", "1 >= accum_steps"])
def test_every_spelling_of_n_is_one_gives_a_plain_path(plain_test):
    source = (
        "for i, batch in enumerate(loader):\n"
        "    loss = model(batch) / accum_steps\n"
        f"    if {plain_test}:\n"
        "        optimizer.zero_grad()\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
        "    else:\n"
        "        loss.backward()\n"
        "        if (i + 1) % accum_steps == 0:\n"
        "            optimizer.step()\n"
        "            optimizer.zero_grad()\n"
    )
    assert sorted(w.shape.value for w in windows_of(source)) == ["guarded", "plain"]


def test_a_configuration_branch_without_accumulation_stays_out_of_the_nested_window():
    source = (
        "for batch in loader:\n"
        "    if use_fused:\n"
        "        optimizer.zero_grad()\n"
        "        model(batch).backward()\n"
        "        optimizer.step()\n"
        "    else:\n"
        "        optimizer.zero_grad()\n"
        "        for micro in batch.chunk(accum_steps):\n"
        "            model(micro).backward()\n"
        "        optimizer.step()\n"
    )
    windows = windows_of(source)
    nested = [w for w in windows if w.shape is NESTED]
    assert len(nested) == 1 and len(nested[0].backwards) == 1
    assert {w.shape for w in windows} == {NESTED, UNGUARDED}


def test_a_test_the_loop_decides_is_not_a_path():
    source = (
        "for i, batch in enumerate(loader):\n"
        "    loss = model(batch) / accum\n"
        "    if torch.isfinite(loss):\n"
        "        loss.backward()\n"
        "    if (i + 1) % accum == 0:\n"
        "        optimizer.step()\n"
    )
    assert len(windows_of(source)) == 1


@pytest.mark.parametrize("exit_", ["raise FloatingPointError(loss)", "continue", "break", "return"])
def test_guards_every_backward_runs_under_do_not_hide_the_boundary(exit_):
    source = (
        "def train():\n"
        "    for i, batch in enumerate(loader):\n"
        "        loss = model(batch) / accum\n"
        "        if not torch.isfinite(loss):\n"
        "            optimizer.zero_grad()\n"
        f"            {exit_}\n"
        "        loss.backward()\n"
        "        if (i + 1) % accum == 0:\n"
        "            optimizer.step()\n"
        "            optimizer.zero_grad()\n"
    )
    window = only_window(source)
    assert window.shape == GUARDED
    assert placements(window, EventKind.STEP) == [BOUNDARY]
    # the zero_grad of the skip path runs only when the loss is not finite
    assert placements(window, EventKind.ZERO_GRAD) == [UNKNOWN, BOUNDARY]


def test_an_exit_that_ends_the_run_between_backward_and_step_keeps_the_step_on_the_boundary():
    source = (
        "for i, batch in enumerate(loader):\n"
        "    (model(batch) / accum).backward()\n"
        "    if step >= max_steps:\n"
        "        break\n"
        "    if (i + 1) % accum == 0:\n"
        "        optimizer.step()\n"
    )
    assert placements(only_window(source), EventKind.STEP) == [BOUNDARY]


PREDICATE_TRAINER = """
import torch

class Trainer:
    def __init__(self, model, loader, accum):
        self.model, self.loader, self.accum = model, loader, accum
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        self.micro_steps = 0

    def _is_update_step(self, step):
        return (step + 1) % self.accum == 0

    @property
    def should_step(self):
        return self.micro_steps % self.accum == 0

    def epoch(self):
        for i, batch in enumerate(self.loader):
            loss = self.model(batch) / self.accum
            loss.backward()
            self.micro_steps += 1
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            if {test}:
                self.optimizer.step()
                self.optimizer.zero_grad()
"""


@pytest.mark.parametrize("test", ["self._is_update_step(i)", "not not self._is_update_step(i)", "self.should_step"])
def test_a_project_predicate_is_read_where_it_is_written(test):
    window = only_window(PREDICATE_TRAINER.format(test=test))
    assert window.shape == GUARDED
    assert placements(window, EventKind.STEP) == [BOUNDARY]
    assert placements(window, EventKind.CLIP) == [EVERY]


def test_a_predicates_counter_is_the_callers_argument():
    window = only_window(PREDICATE_TRAINER.format(test="self._is_update_step(i)"))
    assert cst.Module([]).code_for_node(window.counter) == "i"
    assert window.counter_start == 0


def test_a_property_that_is_no_boundary_is_no_setting_either():
    # `self.ready` reads what the loop changes: where the step runs is unknown, never "every micro-batch"
    source = PREDICATE_TRAINER.format(test="self.ready").replace(
        "    @property\n    def should_step", "    @property\n    def ready(self):\n"
        "        return self.micro_steps > 100\n\n    @property\n    def should_step")
    window = only_window(source)
    assert placements(window, EventKind.STEP) == [UNKNOWN]


def test_a_branch_fixed_by_the_call_is_decided():
    source = (
        "import torch\n"
        "def clip_grad_norm_(params, max_norm, clip=True):\n"
        "    grads = [p.grad for p in params if p.grad is not None]\n"
        "    norm = torch.norm(torch.stack([g.norm() for g in grads]))\n"
        "    if clip:\n"
        "        for g in grads:\n"
        "            g.detach().mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))\n"
        "    return norm\n"
        "opt = torch.optim.SGD(ps, lr=1)\n"
        "for i, batch in enumerate(loader):\n"
        "    (model(batch) / accum).backward()\n"
        "    clip_grad_norm_(model.parameters(), 1.0, clip=False)\n"
        "    if (i + 1) % accum == 0:\n"
        "        clip_grad_norm_(model.parameters(), 1.0)\n"
        "        opt.step()\n"
        "        opt.zero_grad()\n"
    )
    window = only_window(source)
    assert placements(window, EventKind.CLIP) == [BOUNDARY]


@pytest.mark.parametrize("factor, clips", [("coef", True), ("0.5", False), ("1.0 / accum", False)])
def test_gradients_rescaled_by_a_norm_derived_factor_are_clipped(factor, clips):
    source = (
        "import torch\nopt = torch.optim.SGD(ps, lr=1)\n"
        "for i, batch in enumerate(loader):\n"
        "    (model(batch) / accum).backward()\n"
        "    for p in model.parameters():\n"
        "        if p.grad is not None:\n"
        "            coef = max_norm / (p.grad.data.norm(2) + 1e-6)\n"
        "            if coef < 1:\n"
        f"                p.grad.data.mul_({factor})\n"
        "    if (i + 1) % accum == 0:\n"
        "        opt.step()\n"
        "        opt.zero_grad()\n"
    )
    window = only_window(source)
    assert placements(window, EventKind.CLIP) == ([EVERY] if clips else [])
    assert placements(window, EventKind.GRAD_SCALE) == ([] if clips else [EVERY])


def test_clip_in_another_branch_than_the_gradscaler_backward_is_not_clipped_before_unscale():
    # five configuration tests: the last ones are not split into paths (paths.MAX_SPLIT_TESTS), so
    # the apex branch and the GradScaler branch share a window; ACC405 must read each clip with the
    # backward of its own branch
    from gradcheck_accum.lint.rules.once_per_step import ClipBeforeUnscale
    source = (
        "import torch\nfrom apex import amp\n"
        "scaler = torch.cuda.amp.GradScaler()\nopt = torch.optim.SGD(ps, lr=1)\n"
        "for i, batch in enumerate(loader):\n"
        "    loss = model(batch) / accum\n"
        "    if a:\n        opt.step()\n"
        "    if b:\n        opt.step()\n"
        "    if c:\n        opt.step()\n"
        "    if d:\n        opt.step()\n"
        "    if use_apex:\n"
        "        with amp.scale_loss(loss, opt) as scaled:\n"
        "            scaled.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(ps, 1.0)\n"
        "    else:\n"
        "        scaler.scale(loss).backward()\n"
        "        scaler.unscale_(opt)\n"
        "        torch.nn.utils.clip_grad_norm_(ps, 1.0)\n"
    )
    model = FileModel(cst.parse_module(source))
    assert not list(ClipBeforeUnscale().check(model))
    unscaled = source.replace("        scaler.unscale_(opt)\n", "")
    assert len(list(ClipBeforeUnscale().check(FileModel(cst.parse_module(unscaled))))) >= 1


@pytest.mark.parametrize("test, fixed", [("self.trainer.is_last_batch", False),
                                         ("accelerator.gradient_state.end_of_dataloader", False),
                                         ("self.global_step < self.warmup_steps", True), ("use_amp", True)])
def test_framework_state_true_on_some_batches_is_no_setting(test, fixed):
    from gradcheck_accum.lint.paths import invariant
    assert invariant(cst.parse_expression(test), set()) is fixed


EPOCH_LOOP = """
import argparse, torch
def parse_args():
    parser = argparse.ArgumentParser()
{options}
    return parser.parse_args()
def train({parameters}):
{binding}
    opt = torch.optim.SGD(ps, lr=1)
    for epoch in range(args.start_epoch, 10):
        for i, batch in enumerate(loader):
            ni = i + epoch * len(loader)
            (model(batch) / 4).backward()
            if ni % 4 == 0:
                opt.step()
                opt.zero_grad()
"""


@pytest.mark.parametrize("options, parameters, binding, start", [
    ('    parser.add_argument("--start-epoch", type=int, default=0)', "", "    args = parse_args()", 0),
    ('    parser.add_argument("--start_epoch", type=int, default=1)', "", "    args = parse_args()", None),
    ('    parser.add_argument("--resume-from", dest="start_epoch", default=0)', "", "    args = parse_args()", 0),
    ('    parser.add_argument("-s", type=int, default=0)\n    parser.add_argument("--start-epoch", type=int, default=0)',
     "args", "    pass", 0),
    # declared by two parsers: which one ran is not known
    ('    parser.add_argument("--start-epoch", default=0)\n    other.add_argument("--start-epoch", default=5)', "",
     "    args = parse_args()", None),
    ('    parser.add_argument("--start-epoch", type=int)', "", "    args = parse_args()", None),  # default None
    # `args` is not the parsed command line, or the option is set whatever the command line says
    ('    parser.add_argument("--start-epoch", type=int, default=0)', "", "    args = load_config()", None),
    ('    parser.add_argument("--start-epoch", type=int, default=0)', "", "    args = parse_args()\n    args.start_epoch = 5",
     None),
    ('    parser.add_argument("--start-epoch", type=int, default=0)', "",
     "    args = parse_args()\n    if args.resume:\n        args.start_epoch = 5", 0),
])
def test_counter_start_through_a_command_line_default(options, parameters, binding, start):
    """A range that starts at a command-line option starts, in a fresh run, at the option's declared
    default: `ni = i + epoch * len(loader)` is then 0-based, or of unknown start."""
    window = only_window(EPOCH_LOOP.format(options=options, parameters=parameters, binding=binding))
    assert window.counter_start == start


@pytest.mark.parametrize("binding, start", [
    ("    start_epoch = 0", 0),
    ("    start_epoch = args.start_epoch", 0),
    ("    start_epoch = 0\n    if resume:\n        start_epoch = load_epoch() + 1", None),  # bound twice
    ("    if fresh:\n        start_epoch = 0", None),  # bound only under a condition
    ("    start_epoch = 2", None),
])
def test_counter_start_through_a_name_bound_once(binding, start):
    """A range that starts at a name bound once, unconditionally, starts at what it was bound to (a
    literal, or a command-line option's default)."""
    source = EPOCH_LOOP.format(options='    parser.add_argument("--start-epoch", type=int, default=0)',
                               parameters="", binding="    args = parse_args()\n" + binding)
    window = only_window(source.replace("range(args.start_epoch, 10)", "range(start_epoch, 10)"))
    assert window.counter_start == start


@pytest.mark.parametrize("parameters, binding, start", [
    ("start_epoch=0", "", 0),  # a fresh run leaves the default
    ("start_epoch=0", "    start_epoch = 0", 0),  # every binding agrees
    ("start_epoch=0", "    start_epoch = resume_epoch()", None),
    ("start_epoch", "", None),  # no default: what the caller passes
])
def test_counter_start_through_a_parameter_default(parameters, binding, start):
    source = EPOCH_LOOP.format(options="", parameters=parameters, binding=binding or "    pass")
    window = only_window(source.replace("range(args.start_epoch, 10)", "range(start_epoch, 10)"))
    assert window.counter_start == start


@pytest.mark.parametrize("leave", ["break", "raise SystemExit('time budget spent')"])
def test_the_way_past_an_exit_that_ends_the_run_is_no_boundary(leave):
    # `elapsed > max_time` compares a growing value with a limit, as a distance boundary does: read as
    # the step's boundary, the step would run on its wrong side and the loop would hold no window
    source = (
        "import time\n"
        "start = time.perf_counter()\n"
        "for i, batch in enumerate(loader):\n"
        "    now = time.perf_counter()\n"
        "    if now - start > max_time:\n"
        f"        {leave}\n"
        "    loss = model(batch) / accum\n"
        "    loss.backward()\n"
        "    if (i + 1) % accum == 0:\n"
        "        opt.step()\n"
        "        opt.zero_grad()\n"
    )
    window = only_window(source)
    assert window.shape == GUARDED and window.accumulates
    assert placements(window, EventKind.STEP) == [BOUNDARY]


def test_a_helpers_early_return_before_its_step_is_the_boundary():
    source = (
        "def train_step(batch, i):\n"
        "    loss = model(batch) / accum\n"
        "    loss.backward()\n"
        "    if (i + 1) % accum != 0:\n"
        "        return\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n"
        "\n"
        "for i, batch in enumerate(loader):\n"
        "    train_step(batch, i)\n"
    )
    window = only_window(source)
    assert window.shape == GUARDED and window.accumulates
    assert placements(window, EventKind.STEP) == [BOUNDARY]


FIRST_MICRO_BATCH_CLEAR = """
import torch

def train_epoch(loader, model, optimizer, num_iters):
    for cur_iter, (x, y) in enumerate(loader):
        if cur_iter == {first}:
            optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y) / num_iters
        loss.backward()
        if (cur_iter + 1) % num_iters == 0:
            optimizer.step()
            optimizer.zero_grad()

def train(loader, model, optimizer, epochs, num_iters):
    for epoch in range(epochs):
        train_epoch(loader, model, optimizer, num_iters)
"""


@pytest.mark.parametrize("first, fate", [("0", TailFate.DISCARDED), ("-1", TailFate.LEAKS)])
def test_a_clear_on_the_first_micro_batch_of_each_pass_discards_the_last_pass_tail(first, fate):
    """`if cur_iter == 0: optimizer.zero_grad()` runs where each epoch starts: the last epoch's unstepped
    micro-batches are thrown away there, not carried into the next window (under a test that never
    holds, they leak)."""
    model = FileModel(cst.parse_module(FIRST_MICRO_BATCH_CLEAR.format(first=first)))
    tails = [model.unstepped_tail(w) for w in model.windows]  # train_epoch's, and train's walking it in place
    assert tails and {t.fate for t in tails if t is not None} == {fate}


AWP_CLEARING = """
import torch

class AWP:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def attack_backward(self, batch):
        adv_loss = self.model(batch).mean()
        self.optimizer.zero_grad()
        adv_loss.backward()

def train(model, optimizer, loader, accum):
    awp = AWP(model, optimizer)
    for step, batch in enumerate(loader):
        {before}
        loss = model(batch).mean() / accum
        loss.backward()
        {after}
        if (step + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
"""


@pytest.mark.parametrize("before, after, cleared", [
    ("pass", "awp.attack_backward(batch)", [False, True]),  # AWP's clear wipes the loss's gradients each time
    ("optimizer.zero_grad()", "pass", [False]),  # a clear before every backward: ACC101's, not this
])
def test_a_clear_between_two_backwards_of_a_micro_batch_leaves_the_second_unsummed(before, after, cleared):
    """What a backward adds after a clear that runs on every micro-batch, after that micro-batch's first
    backward, is never summed over the window (ACC201 has nothing to say of its scale)."""
    window = only_window(AWP_CLEARING.format(before=before, after=after))
    assert [window.cleared_between_backwards(b) for b in window.backwards] == cleared


EPOCH_START_CLEAR = """
def train(model, optimizer, loader, epochs, accum):
    for epoch in range(epochs):
        {skip}
        optimizer.zero_grad()
        for i, data in enumerate(loader):
            loss = model(data) / accum
            loss.backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
"""


@pytest.mark.parametrize("skip", ["pass", "if epoch < 1:\n            continue"])
def test_an_epoch_start_clear_past_a_skip_of_the_whole_pass_discards_the_tail(skip):
    """A test that skips the clear skips the pass's backwards too: on every pass that makes gradients
    the clear runs first, so the last pass's tail is thrown away there."""
    model = FileModel(cst.parse_module(EPOCH_START_CLEAR.format(skip=skip)))
    assert [model.unstepped_tail(w).fate for w in model.windows] == [TailFate.DISCARDED]


@pytest.mark.parametrize("test", ["i % accum == 0 and i > 0", "i != 0 and (i + 1 == len(loader) or i % accum == 0)"])
def test_a_test_that_excludes_the_first_index_skips_the_first_boundary(test):
    window = only_window(
        "import torch\nopt = torch.optim.SGD(ps, lr=1)\n"
        "for i, batch in enumerate(loader):\n"
        "    (model(batch) / accum).backward()\n"
        f"    if {test}:\n"
        "        opt.step()\n"
        "        opt.zero_grad()\n")
    assert window.boundary_skips_first()


def test_a_test_that_admits_the_first_index_does_not_skip_it():
    window = only_window(
        "import torch\nopt = torch.optim.SGD(ps, lr=1)\n"
        "for i, batch in enumerate(loader):\n"
        "    (model(batch) / accum).backward()\n"
        "    if i + 1 == len(loader) or i % accum == 0:\n"
        "        opt.step()\n"
        "        opt.zero_grad()\n")
    assert not window.boundary_skips_first()
