"""Loss normalisation (ACC2xx)."""

from __future__ import annotations

from typing import Iterator

from gradcheck_accum.lint.lazy import cst

from gradcheck_accum.lint import bindings as b
from gradcheck_accum.lint import events as ev
from gradcheck_accum.lint.fixes import Fix, divide
from gradcheck_accum.lint.model import FileModel
from gradcheck_accum.lint.names import dotted, last_part
from gradcheck_accum.lint.rule import Report, Rule
from gradcheck_accum.lint.windows import EVERY, GUARDED, NESTED, Window


def _framework_scales(window: Window, backward: ev.Event) -> bool:
    """accelerator.backward under Accelerator(gradient_accumulation_steps=N), or a DeepSpeed engine that
    owns the window. An engine stepped only on a hand-written boundary is configured without
    accumulation (its `gradient_accumulation_steps` is 1), so its backward does not divide."""
    if backward.api == "deepspeed":
        steps = [s for s in window.steps if s.api == "deepspeed" and window.inside(s)]
        return bool(steps) and all(window.placement(s) == EVERY for s in steps)
    return backward.api == "accelerate" and b.ACCELERATOR_ACCUMULATES in backward.kinds


def _manual_windows(model: FileModel) -> Iterator[Window]:
    """Windows where the loop itself, not a framework, decides the boundary."""
    for window in model.windows:
        if window.of(ev.GRAD_SCALE):
            continue  # the summed gradient is rescaled after the backwards (`p.grad.div_(n)`)
        if window.shape == GUARDED and window.predicate.key.split(":")[0] in ("mod", "ge") and window.accumulates:
            yield window
        elif window.shape == NESTED and window.is_micro_batch_loop():
            yield window


class UnscaledAccumulatedLoss(Rule):
    code = "ACC201"
    name = "unscaled-accumulated-loss"
    summary = "An accumulated loss is backpropagated without being divided by the accumulation steps."
    tokens = ("backward(",)
    outside_windows = ()
    needs = ("backward(", "step(")

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in _manual_windows(model):
            for backward in window.backwards:
                if backward.via_helper or _framework_scales(window, backward):
                    continue
                facts = model.loss_facts(backward.expr, window.scope, backward.order)
                if facts.known and not facts.scaled and not facts.sum_reduced and not facts.detached:
                    yield Report(backward.node, "the accumulated loss is never divided by the accumulation steps, "
                                                "so the summed gradient is N times the big-batch gradient; divide "
                                                "the loss by N before backward", _divide_fix(window, backward))


def _divide_fix(window: Window, backward: ev.Event) -> Fix | None:
    if window.n is None or backward.expr is None:
        return None
    # `loss.backward()` needs parentheses around the division; an argument does not.
    receiver = isinstance(backward.node, cst.Call) and isinstance(backward.node.func, cst.Attribute) \
        and backward.node.func.value is backward.expr
    divided = divide(backward.expr, window.n, parenthesize=receiver)
    return Fix(False, "Divide the loss by the accumulation steps", ((backward.expr, divided),))


class DoubleScaledLoss(Rule):
    code = "ACC202"
    name = "double-scaled-loss"
    summary = "The loss is divided by the accumulation steps by hand although the framework already does it."
    # accelerate needs Accelerator(gradient_accumulation_steps=...), DeepSpeed an engine, Lightning a
    # LightningModule (whose training_step returns the loss: no backward call in the file)
    tokens = ("gradient_accumulation_steps", "deepspeed", "LightningModule")
    outside_windows = ("training_step", "automatic_optimization")  # Lightning: training_step of any class
    needs = ()

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            for backward in window.backwards:
                if backward.via_helper or not _framework_scales(window, backward):
                    continue
                facts = model.loss_facts(backward.expr, window.scope, backward.order)
                for node, divisor in facts.divisions:
                    if model.is_accumulation_count(divisor, None, window.scope):
                        yield Report(node, _double_message("accelerate" if backward.api == "accelerate"
                                                           else "DeepSpeed"))
        yield from self._lightning(model)

    def _lightning(self, model: FileModel) -> Iterator[Report]:
        manual = any(d.value is not None and isinstance(d.value, cst.Name) and d.value.value == "False"
                     for scope in model.scopes for d in scope.defs.get("self.automatic_optimization", []))
        if manual:
            return
        for scope in model.functions.get("training_step", []):
            if not any(last_part(base) == "LightningModule" for base in scope.class_bases):
                continue
            for event in scope.events:
                if event.kind != ev.RETURN:
                    continue
                facts = model.loss_facts(_returned_loss(event.expr), scope, event.order)
                for node, divisor in facts.divisions:
                    if model.is_accumulation_count(divisor, None, scope):
                        yield Report(node, _double_message("Lightning"))


def _returned_loss(expr: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """`return loss` or `return {"loss": loss, ...}`."""
    if isinstance(expr, cst.Dict):
        for element in expr.elements:
            if isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString) \
                    and element.key.evaluated_value == "loss":
                return element.value
        return None
    return expr


def _double_message(framework: str) -> str:
    return (f"{framework} already divides the loss by the accumulation steps, so dividing it by hand makes "
            f"gradients N times too small; remove the manual division")


class MeanOfMeansTokenLoss(Rule):
    code = "ACC203"
    name = "mean-of-means-token-loss"
    summary = "A per-micro-batch mean over a variable number of valid tokens is divided by the accumulation steps."
    tokens = ("/", "div")
    outside_windows = ()
    needs = ("backward(",)

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            if not window.accumulates and window.shape != NESTED:
                continue
            for backward in window.backwards:
                if backward.via_helper:
                    continue
                facts = model.loss_facts(backward.expr, window.scope, backward.order)
                if not facts.token_level:
                    continue
                for node, divisor in facts.divisions:
                    if model.is_accumulation_count(divisor, window, window.scope):
                        yield Report(node, "a per-micro-batch mean over a varying number of valid tokens divided by "
                                           "N over-weights micro-batches with few tokens; sum the loss and divide "
                                           "by the valid-token count of the whole window")


def _loss_name(expr: cst.BaseExpression | None) -> str | None:
    """`loss`, or `loss * inputs.size(0)` / `loss / n`: arithmetic keeps the graph just the same."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Multiply, cst.Divide)):
        return _loss_name(expr.left) or _loss_name(expr.right)
    return dotted(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None


class LossGraphKeptAlive(Rule):
    code = "ACC204"
    name = "loss-graph-kept-alive"
    summary = "A loss that still carries autograd history is accumulated into a running total."
    tokens = ("+=", "append(")
    outside_windows = ()
    needs = ("backward(",)

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            backwards = [e for e in window.backwards if not e.via_helper]
            losses: set[str] = set()
            fed_backward: set[str] = set()
            for backward in backwards:
                facts = model.loss_facts(backward.expr, window.scope, backward.order)
                fed_backward |= facts.names
                name = dotted(backward.expr) if backward.expr is not None else None
                if name:
                    losses.add(name)
            for event in window.of(ev.LOSS_TOTAL):
                if not window.inside(event) or event.target in fed_backward:
                    continue
                if _loss_name(event.expr) not in losses:
                    continue
                facts = model.loss_facts(event.expr, window.scope, event.order)
                if facts.known and not facts.detached:
                    yield Report(event.node, "the loss still carries its autograd graph, so every micro-batch graph "
                                             "stays in memory; accumulate loss.item() or loss.detach() instead")
