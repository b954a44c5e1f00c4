"""What must happen once per optimizer step (ACC4xx)."""

from __future__ import annotations

from typing import Iterator

from gradcheck_accum.lint.lazy import cst

from gradcheck_accum.lint import bindings as b
from gradcheck_accum.lint import events as ev
from gradcheck_accum.lint.fixes import Fix, move_statement
from gradcheck_accum.lint.model import FileModel
from gradcheck_accum.lint.names import call_receiver, children, dotted, full_names, iter_calls, keyword, positional
from gradcheck_accum.lint.rule import Report, Rule
from gradcheck_accum.lint.windows import AFTER, BOUNDARY, EVERY, FRAMEWORK, GUARDED, NESTED, Window


def _stepping_windows(model: FileModel) -> Iterator[Window]:
    """Guarded or nested windows whose optimizer steps once per window."""
    for window in model.windows:
        if window.shape in (GUARDED, NESTED) and window.boundary_steps:
            yield window


class SchedulerEveryMicroBatch(Rule):
    code = "ACC401"
    name = "scheduler-every-micro-batch"
    summary = "The learning-rate scheduler steps on every micro-batch while the optimizer steps on the boundary."
    tokens = ("step(",)
    outside_windows = ()
    needs = ("backward(", "step(")

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            accelerate = window.shape == FRAMEWORK and window.framework == "accelerate" and window.accumulates
            if not (accelerate or (window.shape in (GUARDED, NESTED) and window.boundary_steps)):
                continue
            for event in window.of(ev.SCHED_STEP, direct=True):
                if window.placement(event) != EVERY or b.PREPARED in event.kinds:
                    continue
                # Inside accumulate() only a scheduler built here and never prepared is known to step
                # on every micro-batch; a prepared one skips the steps where gradients do not sync.
                if accelerate and not model.constructed_unprepared(window.scope, event.target):
                    continue
                fix = move_statement(event, window.boundary_steps[-1], after=True,
                                     description="Step the scheduler after the optimizer step") \
                    if window.boundary_steps else None
                yield Report(event.node, "the scheduler steps on every micro-batch but the optimizer once per "
                                         "window, so warm-up and decay run N times too fast; step it with the "
                                         "optimizer, on the boundary", fix)


_LENGTH_KEYWORDS = ("T_max", "num_training_steps", "total_steps", "total_iters", "steps_per_epoch")


class ScheduleLengthIgnoresAccumulation(Rule):
    code = "ACC402"
    name = "schedule-length-ignores-accumulation"
    summary = "The scheduler's length counts micro-batches, not optimizer steps."
    tokens = ("len(",)
    outside_windows = _LENGTH_KEYWORDS + ("schedule",)  # a scheduler built anywhere, stepped in a window
    needs = ("backward(", "step(")

    def check(self, model: FileModel) -> Iterator[Report]:
        per_window = {e.target for w in model.windows if w.accumulates for e in w.of(ev.SCHED_STEP)
                      if w.placement(e) == BOUNDARY or (w.shape == FRAMEWORK and b.PREPARED in e.kinds)}
        for scope, event in model.events(ev.SCHED_CTOR):
            if event.target not in per_window:
                continue
            length = _length_argument(event.node)
            if length is None:
                continue
            facts = _LengthFacts()
            facts.collect(length, scope, 0)
            if facts.has_len and not facts.divided and not facts.mentions_accumulation:
                yield Report(event.node, "the schedule length is counted in micro-batches (len(loader) x epochs) "
                                         "but the scheduler steps once per window, so it never finishes its decay; "
                                         "divide the length by the accumulation steps")


def _length_argument(call: cst.Call) -> cst.BaseExpression | None:
    for name in _LENGTH_KEYWORDS:
        value = keyword(call, name)
        if value is not None:
            return value
    _, method = call_receiver(call)
    if method and method.startswith("get_") and "schedule" in method:
        return positional(call, 2)
    return None


class _LengthFacts:
    def __init__(self) -> None:
        self.has_len = self.divided = self.mentions_accumulation = False

    def collect(self, node: cst.CSTNode, scope: ev.Scope, depth: int) -> None:
        if depth > 3:
            return
        for call in iter_calls(node):
            if call_receiver(call)[1] == "len":
                self.has_len = True
        stack = [node]
        while stack:
            current = stack.pop()
            if isinstance(current, cst.BinaryOperation) and isinstance(current.operator,
                                                                       (cst.Divide, cst.FloorDivide)):
                self.divided = True
            stack.extend(children(current))
        for name in full_names(node):
            if b.ACCUM_NAME.search(name):
                self.mentions_accumulation = True
            for d in scope.defs_of(name):
                if d.value is not None and d.op == "=":
                    self.collect(d.value, scope, depth + 1)


class ClipEveryMicroBatch(Rule):
    code = "ACC403"
    name = "clip-every-micro-batch"
    summary = "Gradients are clipped on every micro-batch or after the step instead of once before the step."
    tokens = ("clip_grad", "clip_gradients")
    outside_windows = ()

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            if window.framework == "deepspeed" or not window.accumulates:
                continue
            steps = window.boundary_steps
            for clip in window.of(ev.CLIP, direct=True):
                placement = window.placement(clip)
                fix = move_statement(clip, steps[0], after=False, description="Clip once, before the step") \
                    if steps else None
                if placement == EVERY and window.inside(clip):
                    yield Report(clip.node, "gradients are clipped on every micro-batch, so partial sums are "
                                            "clipped repeatedly; clip once on the boundary, before the step", fix)
                elif placement == BOUNDARY and steps and all(s.order < clip.order for s in steps):
                    yield Report(clip.node, "gradients are clipped after the optimizer step, where clipping changes "
                                            "nothing; clip on the boundary before the step", fix)


class ScalerEveryMicroBatch(Rule):
    code = "ACC404"
    name = "scaler-every-micro-batch"
    summary = "GradScaler step, update or unscale_ runs on every micro-batch while the window steps on the boundary."
    tokens = ("scaler", "Scaler", "unscale_")
    outside_windows = ()
    needs = ("backward(", "step(")

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in _stepping_windows(model):
            calls = [e for e in window.of(ev.STEP, ev.SCALER_UPDATE, ev.UNSCALE, direct=True)
                     if e.kind != ev.STEP or e.api == "scaler"]
            for event in calls:
                if window.placement(event) == EVERY and window.inside(event):
                    yield Report(event.node, "the GradScaler call runs on every micro-batch but the window steps "
                                             "once; call unscale_, step and update once, on the boundary",
                                 _scaler_fix(window, event))


def _scaler_fix(window: Window, event: ev.Event) -> Fix | None:
    """unscale_ moves before the boundary clip (or step), update after the boundary step."""
    steps = window.boundary_steps
    if not steps or event.kind == ev.STEP:
        return None
    if event.kind == ev.SCALER_UPDATE:
        return move_statement(event, steps[-1], after=True, description="Update the scaler after the step")
    clips = [c for c in window.of(ev.CLIP, direct=True) if window.placement(c) == BOUNDARY]
    anchor = clips[0] if clips and clips[0].order < steps[0].order else steps[0]
    return move_statement(event, anchor, after=False, description="Unscale once, on the boundary")


class ClipBeforeUnscale(Rule):
    code = "ACC405"
    name = "clip-before-unscale"
    summary = "Gradients are clipped while still multiplied by the GradScaler's scale."
    tokens = ("clip_grad",)
    outside_windows = ()
    needs = ("backward(", "scale(")

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            if not any(e.extra.get("scaler") for e in window.backwards):
                continue
            unscales = window.of(ev.UNSCALE)
            for clip in window.of(ev.CLIP, direct=True):
                if clip.api != "torch" or window.placement(clip) == AFTER:
                    continue
                if not any(u.order < clip.order and window.placement(u) in (window.placement(clip), EVERY)
                           for u in unscales):
                    yield Report(clip.node, "gradients are clipped while still multiplied by the GradScaler's scale, "
                                            "so the threshold almost always triggers; call scaler.unscale_(optimizer) "
                                            "before clipping")


class RemainderDropped(Rule):
    code = "ACC406"
    name = "remainder-dropped"
    summary = "The last micro-batches of an epoch that do not fill a window are never stepped."
    tokens = ("%",)
    outside_windows = ("drop_last",)  # any DataLoader of the file
    needs = ("backward(", "step(")

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            predicate = window.predicate
            if window.shape != GUARDED or not predicate.key.startswith("mod:") or predicate.flush:
                continue
            if model.drop_last or not window.iterates_sized_data() or not _steps_after_backward(window):
                continue
            if any(window.placement(s) == AFTER for s in window.steps):
                continue
            yield Report(window.boundary_steps[0].node,
                         "the window closes only on `% N`, so the last len(loader) % N micro-batches of each epoch "
                         "are never stepped and leak into the next epoch; also step on the last batch")


def _steps_after_backward(window: Window) -> bool:
    steps = window.boundary_steps
    backwards = [e.order for e in window.backwards if window.inside(e)]
    return bool(steps and backwards) and min(s.order for s in steps) > min(backwards)


class BoundaryOffByOne(Rule):
    code = "ACC407"
    name = "boundary-off-by-one"
    summary = "The boundary test is shifted by one: the first window has the wrong number of micro-batches."
    tokens = ("%",)
    outside_windows = ()
    needs = ("backward(", "step(")

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            predicate = window.predicate
            if window.shape != GUARDED or not predicate.key.startswith("mod:") or predicate.offset is None:
                continue
            if not predicate.positive or not _steps_after_backward(window):
                continue
            base = _counter_base(window, predicate.counter)
            if base is None or predicate.offset != base:
                continue
            if base == 0:
                message = ("a 0-based index tested with `% N == 0` closes the first window after one micro-batch; "
                           "test `(i + 1) % N == 0`")
            else:
                message = ("a 1-based counter tested with `(i + 1) % N` closes windows one micro-batch early; "
                           "test `i % N == 0`")
            yield Report(predicate.comparison, message)


def _counter_base(window: Window, counter: cst.BaseExpression | None) -> int | None:
    """0 or 1: the counter's value on the first micro-batch, when the code makes it certain."""
    name = dotted(counter)
    if name is None:
        return None
    loop = window.loop
    defs = window.scope.defs_of(name)
    loop_target = [d for d in defs if d.op == "for" and d.node is loop]
    if loop_target:
        return _enumerate_start(loop, loop_target[0].index, window.scope)
    inside = [d for d in defs if loop in d.ctx.loops]
    before = [d for d in defs if loop not in d.ctx.loops and d.order < window.scope.loop_start.get(id(loop), 0)]
    if len(inside) != 1 or inside[0].op != "+=" or not before:
        return None
    init, step = before[-1].value, inside[0]
    if not (isinstance(init, cst.Integer) and init.value == "0" and isinstance(step.value, cst.Integer)
            and step.value.value == "1" and not step.ctx.guards):
        return None
    first_step = min(s.order for s in window.boundary_steps)
    return 1 if step.order < first_step else 0


def _enumerate_start(loop: ev.Loop, index: int | None, scope: ev.Scope) -> int | None:
    """The first value of the loop's index target, following `it = tqdm(enumerate(x)) if a else enumerate(x)`."""
    if not isinstance(loop, cst.For) or index != 0:
        return None
    starts = {_start_of(source) for source in _sources(loop.iter, scope, 0)}
    return starts.pop() if len(starts) == 1 else None


def _sources(node: cst.BaseExpression, scope: ev.Scope, depth: int) -> list[cst.BaseExpression]:
    if depth > 3:
        return [node]
    if isinstance(node, cst.IfExp):
        return _sources(node.body, scope, depth + 1) + _sources(node.orelse, scope, depth + 1)
    if isinstance(node, cst.Call) and call_receiver(node)[1] == "tqdm" and node.args:
        return _sources(node.args[0].value, scope, depth + 1)
    if isinstance(node, cst.Name):
        defs = [d for d in scope.defs_of(node.value) if d.value is not None]
        if len(defs) == 1 and defs[0].op == "=":
            return _sources(defs[0].value, scope, depth + 1)
    return [node]


def _start_of(source: cst.BaseExpression) -> int | None:
    if not isinstance(source, cst.Call):
        return None
    _, name = call_receiver(source)
    if name == "enumerate":
        start = keyword(source, "start") or positional(source, 1)
        if start is None:
            return 0
        return int(start.value) if isinstance(start, cst.Integer) and start.value in ("0", "1") else None
    if name == "range":
        args = [a.value for a in source.args]
        if len(args) == 1:
            return 0
        if isinstance(args[0], cst.Integer) and args[0].value in ("0", "1"):
            return int(args[0].value)
    return None
