"""What must happen once per optimizer step (ACC4xx)."""

from __future__ import annotations

from typing import Iterator

from gradcheck_accum.lint.fixes import Fix, move_statement
from gradcheck_accum.lint.model import (Boundary, BoundaryKind, Event, EventKind, Fact, FileModel, Framework,
                                        Placement, Role, Shift, TailFate, Window, WindowShape, exclusive)
from gradcheck_accum.lint.rule import Report, Rule

_EVERY, _BOUNDARY, _AFTER = Placement.EVERY, Placement.BOUNDARY, Placement.AFTER


def _stepping_windows(model: FileModel) -> Iterator[Window]:
    """Guarded or nested windows whose optimizer steps once per window."""
    for window in model.windows:
        if window.shape in (WindowShape.GUARDED, WindowShape.NESTED) and window.boundary_steps:
            yield window


class SchedulerEveryMicroBatch(Rule):
    code = "ACC401"
    name = "scheduler-every-micro-batch"
    summary = "The learning-rate scheduler steps on every micro-batch while the optimizer steps on the boundary."
    requires = (Fact.TRAINING_LOOP, EventKind.STEP, EventKind.SCHEDULER_STEP)
    reads_outside_windows = (EventKind.SCHEDULER_BUILT,)  # a length counted in micro-batches

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            accelerate = window.shape is WindowShape.FRAMEWORK and window.framework is Framework.ACCELERATE \
                and window.accumulates
            if not (accelerate or (window.shape in (WindowShape.GUARDED, WindowShape.NESTED)
                                   and window.boundary_steps)):
                continue
            for event in window.of(EventKind.SCHEDULER_STEP, direct=True):
                if window.placement(event) is not _EVERY or Role.PREPARED in event.roles:
                    continue
                # Inside accumulate() only a scheduler built here and never prepared is known to step
                # on every micro-batch; a prepared one skips the steps where gradients do not sync.
                if accelerate and not (model.constructed_unprepared(window.scope, event.target)
                                       or model.prepared_untied(window.scope, event.target)):
                    continue
                if model.schedule_counts_micro_batches(window.scope, event, window):
                    continue  # its length counts micro-batches: one step per micro-batch is its unit
                if model.scheduler_given_position(event):
                    continue  # the call sets the schedule's position: calling it more often moves nothing
                fix = move_statement(window, event, window.boundary_steps[-1], after=True,
                                     description="Step the scheduler after the optimizer step") \
                    if window.boundary_steps else None
                yield Report.on(event, "the scheduler steps on every micro-batch but the optimizer once per "
                                       "window, so warm-up and decay run N times too fast; step it with the "
                                       "optimizer, on the boundary", fix)


class ScheduleLengthIgnoresAccumulation(Rule):
    code = "ACC402"
    name = "schedule-length-ignores-accumulation"
    summary = "The scheduler's length counts micro-batches, not optimizer steps."
    requires = (Fact.TRAINING_LOOP, EventKind.STEP, EventKind.SCHEDULER_BUILT)
    reads_outside_windows = (EventKind.SCHEDULER_BUILT,)  # a scheduler built anywhere, stepped in a window

    def check(self, model: FileModel) -> Iterator[Report]:
        per_window: dict[str | None, list[Window]] = {}
        for w in model.windows:
            for e in _stepped_once_per_window(model, w):
                # under the names it is built and handed over by in this file (`Loop(sched=sched)`)
                for name in model.handed_names(e.scope or w.scope, e.target) if e.target else (None,):
                    per_window.setdefault(name, []).append(w)
        for scope, built in model.events(EventKind.SCHEDULER_BUILT):
            if built.target and built.target not in per_window:
                # handed to another module's training function or class (`run(model, loader, sched)`)
                handed = [w for w, there in model.windows_handed(scope, built.target)
                          if any(e.target == there for e in _stepped_once_per_window(model, w))]
                if handed:
                    per_window[built.target] = handed
        for _, built in reversed(model.events(EventKind.SCHEDULER_BUILT)):  # the composite after its parts
            for part in model.scheduler_parts(built) if built.target in per_window else ():
                per_window.setdefault(part, []).extend(per_window[built.target])
        for scope, built in model.events(EventKind.SCHEDULER_BUILT):
            if built.target not in per_window:
                continue
            length = model.schedule_length(scope, built)
            if length is not None and length.counts_data and not length.divided and not length.mentions_accumulation:
                yield Report.on(built, "the schedule length is counted in micro-batches (len(loader) x epochs) "
                                       "but the scheduler steps once per window, so it never finishes its decay; "
                                       "divide the length by the accumulation steps")
            elif any(model.length_is_run(scope, built, w) for w in per_window[built.target]):
                yield Report.on(built, "the schedule length is the number of micro-batches the training loop "
                                       "runs, but the scheduler steps once per window, so it never finishes its "
                                       "decay; divide the length by the accumulation steps")
            elif multiplied := [w for w in per_window[built.target]
                                if model.length_multiplies_windows(scope, built, w)]:
                prepared = " (accelerate's prepared scheduler: once per process)" \
                    if any(w.framework is Framework.ACCELERATE for w in multiplied) else ""
                yield Report.on(built, "the schedule length is the number of optimizer steps multiplied by the "
                                       f"accumulation steps, a count of micro-batches, but the scheduler steps once "
                                       f"per window{prepared}, so it stops a fraction of the way through its "
                                       "decay; do not multiply by N")


def _stepped_once_per_window(model: FileModel, w: Window) -> list[Event]:
    """The scheduler steps of an accumulating window that run once per window: on the boundary, or a
    prepared scheduler inside accelerate's window (unless the project's accelerate predates that)."""
    if not w.accumulates:
        return []
    prepared_steps_with_optimizer = not model.prepared_schedulers_step_every_micro_batch
    return [e for e in w.of(EventKind.SCHEDULER_STEP)
            if w.placement(e) is _BOUNDARY or (w.shape is WindowShape.FRAMEWORK and Role.PREPARED in e.roles
                                               and prepared_steps_with_optimizer)]


class ClipEveryMicroBatch(Rule):
    code = "ACC403"
    name = "clip-every-micro-batch"
    summary = "Gradients are clipped on every micro-batch or after the step instead of once before the step."
    requires = (Fact.TRAINING_LOOP, EventKind.CLIP)
    reads_outside_windows = ()

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            if window.framework is Framework.DEEPSPEED:
                continue
            if not window.accumulates:
                yield from _clips_after_every_step(window)
                continue
            steps = window.boundary_steps
            for clip in window.of(EventKind.CLIP, direct=True):
                placement = window.placement(clip)
                fix = _move_clip(window, clip, steps[0], "Clip once, before the step") if steps else None
                if placement is _EVERY and window.inside(clip):
                    yield Report.on(clip, "gradients are clipped on every micro-batch, so partial sums are "
                                          "clipped repeatedly; clip once on the boundary, before the step", fix)
                elif placement is _BOUNDARY and window.on_other_micro_batch(clip):
                    yield Report.on(clip, "gradients are clipped once per window, but on another micro-batch than "
                                          "the one the optimizer steps on, before the rest of the window adds its "
                                          "gradients: the summed gradient that is stepped is never clipped; clip "
                                          "on the boundary, before the step", fix)
                elif placement is _BOUNDARY and steps and all(s.order < clip.order for s in steps) \
                        and not window.inside_step(clip):
                    yield Report.on(clip, "gradients are clipped after the optimizer step, where clipping changes "
                                          "nothing; clip on the boundary before the step", fix)


def _clips_after_every_step(window: Window) -> Iterator[Report]:
    """A loop that steps on every micro-batch (no accumulation, or a path where N is 1) and clips after
    the step: the clipped gradients are never used, so the run is not clipped at all."""
    if window.shape not in (WindowShape.UNGUARDED, WindowShape.PLAIN):
        return
    steps = [s for s in window.steps if window.inside(s) and window.placement(s) is _EVERY]
    backwards = [b for b in window.backwards if window.inside(b)]
    if not steps or not backwards or max(b.order for b in backwards) > min(s.order for s in steps):
        return  # a backward after a step (a second model's update): not one gradient per iteration
    for clip in window.of(EventKind.CLIP, direct=True):
        if window.inside(clip) and window.placement(clip) is _EVERY and all(s.order < clip.order for s in steps) \
                and not window.inside_step(clip):
            yield Report.on(clip, "gradients are clipped after the optimizer step, where clipping changes "
                                  "nothing the optimizer uses; clip before the step",
                            _move_clip(window, clip, steps[0], "Clip before the step"))


def _move_clip(window: Window, clip: Event, step: Event, description: str) -> Fix | None:
    """The clip moved before the step, unless that would leave a condition of its own behind
    (`if max_grad_norm is not None:`: clipping with no threshold fails)."""
    kept = {(id(guard.owner), guard.positive) for guard in step.ctx.guards}
    if any((id(guard.owner), guard.positive) not in kept for guard in clip.ctx.guards):
        return None
    return move_statement(window, clip, step, after=False, description=description)


class ScalerEveryMicroBatch(Rule):
    code = "ACC404"
    name = "scaler-every-micro-batch"
    summary = "GradScaler step, update or unscale_ runs on every micro-batch while the window steps on the boundary."
    requires = (Fact.TRAINING_LOOP, EventKind.STEP, (Role.SCALER, EventKind.UNSCALE))
    reads_outside_windows = ()

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in _stepping_windows(model):
            calls = [e for e in window.of(EventKind.STEP, EventKind.SCALER_UPDATE, EventKind.UNSCALE, direct=True)
                     if e.kind is not EventKind.STEP or e.api.receiver is Role.SCALER]
            for event in calls:
                if window.placement(event) is _EVERY and window.inside(event):
                    yield Report.on(event, "the GradScaler call runs on every micro-batch but the window steps "
                                           "once; call unscale_, step and update once, on the boundary",
                                    _scaler_fix(window, event))


def _scaler_fix(window: Window, event: Event) -> Fix | None:
    """unscale_ moves before the boundary clip (or step), update after the boundary step."""
    steps = window.boundary_steps
    if not steps or event.kind is EventKind.STEP:
        return None
    if event.kind is EventKind.SCALER_UPDATE:
        return move_statement(window, event, steps[-1], after=True, description="Update the scaler after the step")
    clips = [c for c in window.of(EventKind.CLIP, direct=True) if window.placement(c) is _BOUNDARY]
    anchor = clips[0] if clips and clips[0].order < steps[0].order else steps[0]
    return move_statement(window, event, anchor, after=False, description="Unscale once, on the boundary")


class ClipBeforeUnscale(Rule):
    code = "ACC405"
    name = "clip-before-unscale"
    summary = "Gradients are clipped while still multiplied by the GradScaler's scale."
    requires = (Fact.TRAINING_LOOP, EventKind.CLIP, Fact.AMP_SCALED_LOSS)
    reads_outside_windows = ()

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            if not any(e.scaler for e in window.backwards):
                continue
            unscales = window.of(EventKind.UNSCALE)
            for clip in window.of(EventKind.CLIP, direct=True):
                if clip.api.unscales_first or window.placement(clip) is _AFTER:
                    continue
                if not window.accumulates and not any(b.order < clip.order for b in window.backwards if b.scaler):
                    continue  # before the backward of a loop that steps every batch: it clips cleared gradients
                if all(exclusive(b, clip) or model.scaler_off(b.scope or window.scope, b, clip)
                       for b in window.backwards if b.scaler):
                    # the GradScaler's backward is another branch's (`if use_apex: ... else: ...`), or the
                    # clip runs where the scaler is built disabled (`enabled=use_amp`, under `if not use_amp:`)
                    continue
                earlier = [u for u in unscales
                           if u.order < clip.order and window.placement(u) in (window.placement(clip), _EVERY)]
                decided = tuple(g for u in earlier for g in u.ctx.guards if window.path.holds(g))
                scaled = [b for b in window.backwards if b.scaler]
                if any(model.unscaled_where_clipped(b.scope or window.scope, b, earlier, clip, decided)
                       for b in scaled):
                    continue
                if all(b.framework is Framework.ACCELERATE for b in scaled):
                    yield Report.on(clip, "the Accelerator is built with mixed_precision=\"fp16\", so "
                                          "accelerator.backward scales the loss and these gradients are clipped "
                                          "while still multiplied by the loss scale; clip with "
                                          "accelerator.clip_grad_norm_, which unscales first")
                else:
                    yield Report.on(clip, "gradients are clipped while still multiplied by the GradScaler's scale, "
                                          "so the threshold almost always triggers; call scaler.unscale_(optimizer) "
                                          "before clipping")


class RemainderDropped(Rule):
    code = "ACC406"
    name = "remainder-dropped"
    summary = "The last micro-batches of an epoch that do not fill a window are never stepped."
    requires = (Fact.TRAINING_LOOP, EventKind.STEP, (BoundaryKind.MODULO, BoundaryKind.DISTANCE))
    # the callers of the window's function (is the pass repeated?), a clear at the epoch start
    reads_outside_windows = (Fact.CALLERS,)

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            tail = model.unstepped_tail(window)
            if tail is None:
                continue
            dead, run_bound = model.dead_flush_text(window), model.run_bound_flush_text(window)
            lost = (f"backpropagated and thrown away by `{tail.clear_text}` between epochs"
                    if tail.fate is TailFate.DISCARDED
                    else "never stepped: they leak into the next epoch's first window")
            if dead is not None:
                message = (f"`{dead}` never holds, since the 0-based index ends at len - 1: the end-of-data step "
                           f"never runs, and the micro-batches after the last full window of each epoch are {lost}; "
                           f"test the index plus one")
            elif run_bound is not None:
                message = (f"`{run_bound}` compares the epoch's index with the length of the whole run, so it does "
                           f"not hold at the end of each epoch: the micro-batches after the last full window of each "
                           f"epoch are {lost}; test the index against the epoch's length")
            elif tail.fate is TailFate.NEVER_BACKPROPAGATED:
                message = ("the losses are summed and backpropagated on the boundary only, so the losses of the "
                           "micro-batches after the last full window of each epoch are never backpropagated and "
                           "the epoch's total starts anew: those micro-batches do not train; also backpropagate "
                           "and step on the last batch of the epoch")
            elif tail.fate is TailFate.DISCARDED:
                message = (f"the micro-batches after the last full window of each epoch are backpropagated but never "
                           f"stepped, and `{tail.clear_text}` between epochs throws them away; also "
                           f"step on the last batch of the epoch")
            else:
                message = ("the window counter restarts every epoch and the window closes only on the boundary, so "
                           "the last micro-batches of each epoch that do not fill a window are never stepped: they "
                           "leak into the next epoch's first window; also step on the last batch of the epoch")
            yield Report.on(window.boundary_steps[0], message)


class BoundaryOffByOne(Rule):
    code = "ACC407"
    name = "boundary-off-by-one"
    summary = "The boundary test is shifted by one: the first window has the wrong number of micro-batches."
    requires = (Fact.TRAINING_LOOP, EventKind.STEP, (BoundaryKind.MODULO, BoundaryKind.DISTANCE))
    reads_outside_windows = ()

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            boundary = window.boundary
            if window.shape is not WindowShape.GUARDED or not boundary.positive or not window.steps_after_backward:
                continue
            if boundary.literal_modulo:
                where = "only where the `or` clause holds (the end of the data)" if boundary.flush else "never"
                yield Report(boundary.comparison, f"`%` binds tighter than `+`, so this tests `i + (1 % N)`, which is "
                                                  f"not 0 for any N > 1: the optimizer steps {where}, on a window of "
                                                  f"every micro-batch before it; bracket the sum, `(i + 1) % N`")
                continue
            shrunk = window.n_shrunk_to_remainder()
            if shrunk is not None and boundary.kind is BoundaryKind.MODULO:
                yield Report(boundary.comparison, f"`{shrunk.name}` is set to the epoch's remainder for its last "
                                                  "partial window, but this test still counts the index from the "
                                                  "start of the epoch: unless the remainder divides where the tail "
                                                  "starts, the tail is cut wherever the index is a multiple of it, "
                                                  "several updates instead of one (7 batches, N 4: [4, 5] and [6]); "
                                                  "step on the last batch instead, or count from where the tail "
                                                  "starts")
                continue
            if window.n_varies:
                continue  # N changes during the run (a warm-up ramp): a short first window may be meant
            yield from _sync_off_boundary(window, boundary)
            if boundary.kind is BoundaryKind.DISTANCE:
                message = _distance_message(model.distance_shift(window), boundary)
                if message:
                    yield Report(boundary.comparison, message)
                continue
            if boundary.kind is not BoundaryKind.MODULO or boundary.offset is None:
                continue
            start = window.counter_start
            if start is None or start + boundary.offset == 1:
                continue  # the first tested value that closes a window is the N-th micro-batch's
            if start + boundary.offset == 2 and boundary.offset == 0:
                message = (f"the counter is already {start} on the first micro-batch, so `% N == 0` closes the "
                           "first window after N - 1 micro-batches; start the count one lower")
            elif start == 0 and window.boundary_skips_first():
                message = ("a 0-based counter tested with `% N == 0` and `> 0` skips the first micro-batch's "
                           "boundary, so the first window holds N + 1 micro-batches; test `(i + 1) % N == 0`")
            elif start == 0 and boundary.offset == 0:
                message = ("a 0-based index tested with `% N == 0` closes the first window after one micro-batch; "
                           "test `(i + 1) % N == 0`")
            elif start == 1 and boundary.offset == 1:
                message = ("a 1-based counter tested with `(i + 1) % N` closes windows one micro-batch early; "
                           "test `i % N == 0`")
            elif start + boundary.offset in (0, -1):
                first = 1 - (start + boundary.offset)
                message = (f"the counter starts at {start} and the test is shifted by {boundary.offset}, so the "
                           f"first window closes after {first} micro-batch{'es' if first > 1 else ''}; test "
                           f"`{'(i + 1) % N == 0' if start == 0 else 'i % N == 0'}`")
            else:
                continue  # further off: how far depends on N
            yield Report(boundary.comparison, message)


def _sync_off_boundary(window: Window, boundary: Boundary) -> Iterator[Report]:
    """DDP all-reduces on the micro-batches its sync test selects: they must be the stepping ones."""
    if boundary.kind is not BoundaryKind.MODULO or boundary.offset is None:
        return
    for switch, sync in window.sync_boundaries():
        if not sync.same_count(boundary) or sync.offset is None:
            continue
        if sync.positive and sync.offset != boundary.offset:
            yield Report(sync.comparison, "this test lets the model sync gradients on a different micro-batch than "
                                          "the one the optimizer steps on, so the window's last gradients are "
                                          "stepped without being synchronised across ranks; choose the sync switch "
                                          "(no_sync(), the sync flag) with the step's own boundary test")
        elif not sync.positive and sync.offset == boundary.offset:
            # synced everywhere but on the boundary: the switch is read backwards
            yield Report.on(switch, "gradient syncing is turned off on the very micro-batch the optimizer steps "
                                    "on (and on for the others), so every step applies gradients the ranks never "
                                    "all-reduced; turn it off where the step's boundary test is false")


def _distance_message(shift: Shift | None, boundary: Boundary) -> str | None:
    if shift is None:
        return None
    if shift.later:
        return (f"`>` closes every window after N + {shift.later} micro-batches (the count since the last step "
                f"must reach N, not exceed it); test `>=`")
    if not shift.first:
        return None
    size = "one micro-batch more than N" if shift.first == 1 else (
        f"{shift.first} micro-batches more than N" if shift.first > 0 else f"{-shift.first} fewer than N")
    if shift.reference_start is not None:
        return (f"the first window holds {size}: the counter starts at {shift.counter_start} and the last-step "
                f"marker at {shift.reference_start}; start the marker at {shift.counter_start - 1}")
    return (f"the first window holds {size}: the count is tested before it is incremented; increment it "
            f"before the test")
