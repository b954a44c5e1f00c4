"""Update order inside the accumulation window (ACC1xx)."""

from __future__ import annotations

from typing import Iterator

from gradcheck_accum.lint.fixes import move_statement
from gradcheck_accum.lint.model import (Event, EventKind, Fact, FileModel, Framework, Placement, Repetition, Window,
                                        WindowShape, same_target)
from gradcheck_accum.lint.rule import Report, Rule


class ZeroGradEveryMicroBatch(Rule):
    code = "ACC101"
    name = "zero-grad-every-micro-batch"
    summary = "Gradients are cleared on every micro-batch while the optimizer steps only on the window boundary."
    requires = (Fact.TRAINING_LOOP, EventKind.STEP, EventKind.ZERO_GRAD)
    reads_outside_windows = ()

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            if window.shape is WindowShape.FRAMEWORK:
                for zero in window.of(EventKind.ZERO_GRAD, direct=True):
                    step = window.clears_last_micro_batch_first(zero)
                    if step is not None:
                        yield Report.on(zero, "inside accelerator.accumulate() the prepared optimizer clears "
                                              "gradients only on the window's last micro-batch, and here before "
                                              "its backward, so only that micro-batch reaches the step; clear "
                                              "them after the step",
                                        move_statement(window, zero, step, after=True,
                                                       description="Clear gradients after the step"))
                    if window.clears_accumulated_model(zero):
                        yield Report.on(zero, "inside accelerator.accumulate() the prepared optimizer clears "
                                              "gradients only on the window's last micro-batch, but the model's "
                                              "own zero_grad() runs on every micro-batch and wipes what the window "
                                              "has summed; call optimizer.zero_grad() instead")
            if window.shape not in (WindowShape.GUARDED, WindowShape.NESTED):
                continue
            steps = window.boundary_steps
            for zero in window.of(EventKind.ZERO_GRAD, direct=True):
                step = window.clears_boundary_micro_batch_first(zero)
                if step is not None:
                    yield Report.on(zero, "gradients are cleared on the window's last micro-batch, before its "
                                          "backward, so the earlier micro-batches' gradients are wiped and only "
                                          "that one reaches the step; clear them after the step",
                                    move_statement(window, zero, step, after=True,
                                                   description="Clear gradients after the step"))
                if window.placement(zero) is Placement.OFF_BOUNDARY and window.inside(zero) \
                        and any(same_target(zero, step, window.scope) for step in steps) \
                        and not any(s.order < zero.order and s.ctx.branches <= zero.ctx.branches
                                    for s in window.steps if window.placement(s) is Placement.OFF_BOUNDARY):
                    # the test read backwards (`if it % N != 0: zero_grad()`): every clear but the boundary's
                    # (not a flush's clear after its own step, `if last and (i + 1) % N != 0: step(); zero_grad()`)
                    yield Report.on(zero, "gradients are cleared on every micro-batch but the boundary one, so each "
                                          "clear wipes what the window has summed and only its last micro-batches "
                                          "reach the step; clear them right after the step, on the boundary")
                    continue
                if window.placement(zero) is not Placement.EVERY or not window.inside(zero):
                    continue
                if window.stepped_every_micro_batch(zero):
                    continue  # nothing accumulates for what it clears
                # (a step on gradients its own boundary makes, after clearing them, sums no window)
                same = [step for step in steps if same_target(zero, step, window.scope)
                        and not window.refreshed_on_boundary(step)]
                if same and window.clears_before_step(zero) is None and not window.clears_before_next_step(zero):
                    fix = move_statement(window, zero, same[0], after=True, description="Clear gradients after the step")
                    yield Report.on(zero, "gradients are cleared on every micro-batch but the optimizer steps once "
                                          "per window, so only the last micro-batch reaches the step; clear them "
                                          "right after the step, on the boundary", fix)


class GradientsNeverCleared(Rule):
    code = "ACC102"
    name = "gradients-never-cleared"
    summary = "The loop steps the optimizer but never clears gradients between windows."
    requires = (Fact.TRAINING_LOOP, EventKind.STEP)
    reads_outside_windows = ()

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            if window.framework is Framework.DEEPSPEED:
                continue  # the engine's step clears the gradients
            steps = [s for s in window.steps if not s.via_helper and not s.api.clears_gradients
                     and window.placement(s) in (Placement.EVERY, Placement.BOUNDARY)]
            if not steps:
                continue
            # A clear counts when it runs between steps: inside the window, or once per window around a
            # nested micro-step loop. One before the micro-batch loop (once per epoch) does not.
            clears = window.of(EventKind.ZERO_GRAD)
            if any(window.placement(e) not in (Placement.AFTER, Placement.UNKNOWN) for e in clears):
                continue
            if any(window.placement(e) is Placement.UNKNOWN for e in clears) or window.cleared_earlier_in_block():
                continue  # cleared under a condition we cannot read, or maybe once before this window
            if window.repeats_fixed_input:
                continue  # steps on one batch built before the loop: no training loop
            if window.shape is WindowShape.NESTED and model.repetition(window) is not Repetition.REPEATED:
                continue  # one window per call, and no loop is known to call it again with that optimizer
            optimizers = {s.target for s in steps}
            # An optimizer built inside the loop (or in a function it calls) starts fresh every iteration
            # (often on fresh tensors).
            if any(window.built_per_iteration(s) for s in steps):
                continue
            # An unknown call that is handed the optimizer may clear it; stay silent then.
            if any(e.kind is EventKind.MODEL_CALL and optimizers & e.argument_names for e in window.nest_events):
                continue
            yield Report.on(steps[0], "the optimizer steps but gradients are never cleared, so every window adds "
                                      "to the gradients of all earlier ones; call zero_grad() after each step")


class ZeroGradBetweenBackwardAndStep(Rule):
    code = "ACC103"
    name = "zero-grad-between-backward-and-step"
    summary = "Gradients are cleared between the window's last backward and its optimizer step."
    # also outside loops: a train_step function or a framework hook runs once per micro-batch
    requires = (EventKind.BACKWARD, EventKind.STEP, EventKind.ZERO_GRAD)
    reads_outside_windows = (EventKind.ZERO_GRAD,)

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            if window.shape is WindowShape.FRAMEWORK:
                continue
            for zero in window.of(EventKind.ZERO_GRAD, direct=True):
                if window.clears_before_step(zero) is not None:
                    yield Report.on(zero, "gradients are cleared after the last backward and before the step, so "
                                          "the optimizer steps on zero gradients; clear them after the step")
        for _, zero, step in model.straight_line_clears():
            alias = f" (`{step.target}` is the same optimizer as `{zero.target}`)" \
                if zero.target and step.target and zero.target != step.target else ""
            yield Report.on(zero, f"gradients are cleared after the backward and before the step{alias}, so the "
                                  "optimizer steps on zero gradients; clear them after the step")


class StepEveryMicroBatch(Rule):
    code = "ACC104"
    name = "step-every-micro-batch"
    summary = "The loop declares accumulation but steps the optimizer on every micro-batch."
    requires = (Fact.TRAINING_LOOP, EventKind.STEP)
    reads_outside_windows = ()

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            for step in window.inverted_steps:
                if not step.via_helper:
                    yield Report.on(step, "the step runs when the boundary test is false, on N - 1 of every N "
                                          "micro-batches, so parameters change inside the window; the test is "
                                          "inverted: step when `(i + 1) % N == 0`")
            for step in window.steps_beside_boundary:
                if not step.via_helper:
                    yield Report.on(step, "this step runs on every micro-batch where the boundary test is false, "
                                          "and the boundary's own step on the others, so the optimizer steps on "
                                          "every micro-batch and nothing accumulates; a step for the last, partial "
                                          "window belongs after the loop")
            for step in window.steps_besides_boundary_step:
                yield Report.on(step, "this step runs on every micro-batch, and the boundary test's step of the "
                                      "same optimizer once more on the window's last one, so parameters change "
                                      "inside the window and nothing accumulates; remove it: the boundary's step "
                                      "is the window's")
            counter, steps = window.steps_on_outer_counter()
            for step in steps:
                yield Report.on(step, f"the boundary test counts `{counter}`, the index of an enclosing loop, "
                                      "which stays the same on every micro-batch of the loop inside: where it "
                                      "holds the optimizer steps on every micro-batch, elsewhere gradients pile "
                                      "up over whole passes; count the micro-batches instead")
            entered = window.accumulate_entries_per_micro_batch()
            if window.framework is Framework.ACCELERATE and entered > 1:
                step = next((s for s in window.steps if not s.via_helper), None)
                if step is not None:
                    yield Report.on(step, f"accelerator.accumulate() is entered {entered} times for each "
                                          "micro-batch, and each entry counts one in accelerate's step counter, "
                                          f"so gradients sync every N/{entered} entries, not every N "
                                          "micro-batches (an entry may never meet the boundary); enter it once "
                                          "per micro-batch with all the models: "
                                          "`accelerator.accumulate(model_a, model_b)`")
            if window.shape is not WindowShape.UNGUARDED:
                continue
            if any(model.micro_step_loss(window, b) for b in window.backwards):
                continue  # the micro-batches are the inner loop's (ACC105 when only the last loss is left)
            every = [s for s in window.steps if not s.via_helper and window.placement(s) is Placement.EVERY]
            steps = [s for s in every if model.declares_accumulation(window, s)]
            if steps and _backward_only_with_step(window, steps[0]):
                yield Report.on(steps[0], "the loop is prepared for accumulation, but the loss is backpropagated "
                                          "only under the test the step runs under: the other micro-batches' "
                                          "losses are computed and dropped, and each step sees one micro-batch; "
                                          "backpropagate every micro-batch's loss and step when the window is "
                                          "complete")
            elif steps:
                yield Report.on(steps[0], "the loop is prepared for accumulation but the optimizer steps on every "
                                          "micro-batch, so parameters change inside the window; step only when "
                                          "the window is complete")
            elif every and any(model.accelerator_divides_outside_accumulate(b) for b in window.backwards):
                yield Report.on(every[0], "the Accelerator is built to accumulate, so accelerator.backward divides "
                                          "each loss by N, but outside `with accelerator.accumulate(model):` "
                                          "gradients sync on every micro-batch and the prepared optimizer steps on "
                                          "each: no window forms, and every step sees one micro-batch divided by "
                                          "N; wrap the forward, backward and step in accelerator.accumulate(model)")


class BackwardAfterMicroStepLoop(Rule):
    code = "ACC105"
    name = "backward-after-micro-step-loop"
    summary = "The backward call runs once after a micro-step loop, on the last micro-batch's loss only."
    requires = (Fact.TRAINING_LOOP, EventKind.STEP)
    reads_outside_windows = ()

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            for backward in window.backwards:
                if not backward.via_helper and model.loss_of_last_micro_step(window, backward):
                    yield Report.on(backward, "the loss is computed on every micro-step of the loop above but "
                                              "backpropagated once after it, so only the last micro-batch "
                                              "reaches the gradient; call backward inside the loop")


def _backward_only_with_step(window: Window, step: Event) -> bool:
    """Does every backward of the loop body run only under a test of the body that the step also runs
    under (`if seen < 128: ... else: loss.backward(); optimizer.step()`)? Then the micro-batches where
    it fails make a loss that is never backpropagated."""
    body = len(window.outer) + 1
    shared = {id(g.owner): g.positive for g in step.ctx.guards if g.depth >= body}
    backwards = [b for b in window.backwards if window.inside(b)]
    return bool(shared) and bool(backwards) and all(
        any(shared.get(id(g.owner)) is g.positive for g in b.ctx.guards) for b in backwards)
