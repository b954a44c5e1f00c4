"""Update order inside the accumulation window (ACC1xx)."""

from __future__ import annotations

from typing import Iterator

from gradcheck_accum.lint import events as ev
from gradcheck_accum.lint.fixes import move_statement
from gradcheck_accum.lint.model import FileModel
from gradcheck_accum.lint.predicates import analyze
from gradcheck_accum.lint.rule import Report, Rule
from gradcheck_accum.lint.windows import AFTER, BOUNDARY, EVERY, UNKNOWN, FRAMEWORK, GUARDED, NESTED, UNGUARDED, same_target, Window


class ZeroGradEveryMicroBatch(Rule):
    code = "ACC101"
    name = "zero-grad-every-micro-batch"
    summary = "Gradients are cleared on every micro-batch while the optimizer steps only on the window boundary."
    tokens = ("zero_grad", ".grad")
    outside_windows = ()
    needs = ("backward(", "step(")

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            if window.shape not in (GUARDED, NESTED):
                continue
            steps = window.boundary_steps
            for zero in window.of(ev.ZERO_GRAD, direct=True):
                if window.placement(zero) != EVERY or not window.inside(zero):
                    continue
                same = [step for step in steps if same_target(zero, step)]
                if same and window.clears_before_step(zero) is None:
                    fix = move_statement(zero, same[0], after=True, description="Clear gradients after the step")
                    yield Report(zero.node, "gradients are cleared on every micro-batch but the optimizer steps once "
                                            "per window, so only the last micro-batch reaches the step; clear them "
                                            "right after the step, on the boundary", fix)


class GradientsNeverCleared(Rule):
    code = "ACC102"
    name = "gradients-never-cleared"
    summary = "The loop steps the optimizer but never clears gradients between windows."
    tokens = ("step(",)
    outside_windows = ()
    needs = ("backward(", "step(")

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            if window.framework == "deepspeed":
                continue
            steps = [s for s in window.steps if not s.via_helper and s.api in ("optimizer", "scaler")
                     and window.placement(s) in (EVERY, BOUNDARY)]
            if not steps:
                continue
            nest = window.loop_nest
            in_nest = window.nest_events
            # A clear counts when it runs between steps: inside the window, or once per window around a
            # nested micro-step loop. One before the micro-batch loop (once per epoch) does not.
            if any(e.kind == ev.ZERO_GRAD and window.placement(e) not in (AFTER, UNKNOWN) for e in window.events):
                continue
            if any(e.kind == ev.ZERO_GRAD and window.placement(e) == UNKNOWN for e in window.events):
                continue  # cleared under a condition we cannot read: stay silent
            optimizers = {s.target for s in steps}
            # An optimizer built inside the loop starts fresh every iteration (often on fresh tensors).
            if any(loop in d.ctx.loops for name in optimizers if name for d in window.scope.defs_of(name)
                   for loop in nest):
                continue
            # An unknown call that is handed the optimizer may clear it; stay silent then.
            if any(e.kind == ev.MODEL_CALL and optimizers & e.extra.get("args", set()) for e in in_nest):
                continue
            yield Report(steps[0].node, "the optimizer steps but gradients are never cleared, so every window adds "
                                        "to the gradients of all earlier ones; call zero_grad() after each step")


class ZeroGradBetweenBackwardAndStep(Rule):
    code = "ACC103"
    name = "zero-grad-between-backward-and-step"
    summary = "Gradients are cleared between the window's last backward and its optimizer step."
    tokens = ("zero_grad", ".grad")
    outside_windows = ()
    needs = ("backward(", "step(")

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            if window.shape == FRAMEWORK:
                continue
            for zero in window.of(ev.ZERO_GRAD, direct=True):
                if window.clears_before_step(zero) is not None:
                    yield Report(zero.node, "gradients are cleared after the last backward and before the step, so "
                                            "the optimizer steps on zero gradients; clear them after the step")


class StepEveryMicroBatch(Rule):
    code = "ACC104"
    name = "step-every-micro-batch"
    summary = "The loop declares accumulation but steps the optimizer on every micro-batch."
    tokens = ("step(",)
    outside_windows = ()
    needs = ("backward(", "step(")

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            if window.shape != UNGUARDED:
                continue
            steps = [s for s in window.steps if not s.via_helper and window.placement(s) == EVERY]
            steps = [s for s in steps if _declares_accumulation(model, window, s)]
            if not steps:
                continue
            yield Report(steps[0].node, "the loss is prepared for accumulation but the optimizer steps on every "
                                        "micro-batch, so parameters change inside the window; step only when "
                                        "the window is complete")


def _declares_accumulation(model: FileModel, window: Window, step: ev.Event) -> bool:
    """The loss is divided by N, or the step's gradients are cleared on a `% N` boundary."""
    for backward in window.backwards:
        facts = model.loss_facts(backward.expr, window.scope, backward.order)
        if any(model.is_accumulation_count(divisor, None, window.scope) for _, divisor in facts.divisions):
            return True
    for zero in window.of(ev.ZERO_GRAD):
        if not same_target(zero, step):
            continue
        for guard in zero.ctx.guards:
            predicate = analyze(guard.test, window.scope)
            if predicate is not None and predicate.key.startswith("mod:"):
                return True
    return False
