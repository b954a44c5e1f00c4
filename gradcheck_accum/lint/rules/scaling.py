"""Loss normalisation (ACC2xx)."""

from __future__ import annotations

from typing import Iterator

from gradcheck_accum.lint.fixes import divide_loss
from gradcheck_accum.lint.model import Event, EventKind, Fact, FileModel, Framework, LossFacts, Window, WindowShape
from gradcheck_accum.lint.rule import Report, Rule


def _manual_windows(model: FileModel) -> Iterator[Window]:
    """Windows where the loop itself, not a framework, decides the boundary."""
    for window in model.windows:
        if window.of(EventKind.GRAD_SCALE):
            continue  # the summed gradient is rescaled after the backwards (`p.grad.div_(n)`)
        if window.shape is WindowShape.GUARDED and window.boundary.kind.counts_micro_batches and window.accumulates:
            yield window
        elif window.shape is WindowShape.NESTED and window.is_micro_batch_loop():
            yield window


class UnscaledAccumulatedLoss(Rule):
    code = "ACC201"
    name = "unscaled-accumulated-loss"
    summary = "An accumulated loss is backpropagated without being divided by the accumulation steps."
    # a training loop that steps, or a framework hook whose loss the framework's loop backpropagates
    requires = ((Fact.TRAINING_LOOP, Fact.HOOKS), (EventKind.STEP, Fact.HOOKS))
    # transformers: the compute_loss of any Trainer subclass; the callers of a loop's function or
    # constructors of its class: the criterion they hand it decides whether the loss is a mean
    reads_outside_windows = (Fact.HOOKS, Fact.CALLERS)

    def check(self, model: FileModel) -> Iterator[Report]:
        # one report per backward: a helper walked into several windows (its own caller's, and the
        # loop around that caller) is reported through the nearest one
        nearest: dict[int, tuple[int, Report]] = {}
        for window in _manual_windows(model):
            for backward in window.backwards:
                if backward.via_helper or model.framework_divides_loss(window, backward):
                    continue
                if window.cleared_between_backwards(backward):
                    continue  # nothing it adds is summed over the window: the clear is the bug
                if window.cleared_after(backward):
                    continue  # cleared before the step on its own micro-batch: it is summed into nothing
                if window.before_micro_steps(backward):
                    continue  # once per window, ahead of the micro-step loop: a term of no sum over it
                if _unnormalised(model, model.backward_facts(window, backward), window, backward) \
                        and not model.through_gradient_cache(window, backward):
                    hops = backward.frame.depth if backward.frame is not None else 0
                    if id(backward.node) not in nearest or hops < nearest[id(backward.node)][0]:
                        nearest[id(backward.node)] = hops, Report(
                            backward.node, "the accumulated loss is never divided by the accumulation steps, so the "
                                           "summed gradient is N times the big-batch gradient; divide the loss by N "
                                           "before backward",
                            divide_loss(backward, window.n, "Divide the loss by the accumulation steps"), backward.scope)
        yield from (report for _, report in nearest.values())
        reported = set()
        for scope, hook, facts, divided in model.hook_losses():
            if divided or id(scope) in reported or not _unnormalised(model, facts, None, None):
                continue
            reported.add(id(scope))
            yield Report(scope.node.name, f"{hook.framework.display} leaves the loss `{hook.name}` returns undivided "
                                          f"by the accumulation steps, because the model counts the labels of the "
                                          f"window and hands that count over as `{hook.count_parameter}`; this "
                                          f"per-micro-batch mean makes the window's gradient N times too large: sum "
                                          f"the loss and divide it by `{hook.count_parameter}`")


def _unnormalised(model: FileModel, facts: LossFacts, window: Window | None, backward: Event | None) -> bool:
    """A known loss, carrying its graph, that nothing normalises across the window. A summed loss is
    left alone (it may be normalised elsewhere) unless divided by its own micro-batch's count, which
    makes it a per-micro-batch mean."""
    if not facts.known or facts.detached or model.normalised(facts, window, backward):
        return False
    return not facts.sum_reduced or model.averaged_per_micro_batch(facts, window)


class DoubleScaledLoss(Rule):
    code = "ACC202"
    name = "double-scaled-loss"
    summary = "The loss is divided by the accumulation steps by hand although the framework already does it."
    requires = (Fact.FRAMEWORK_DIVIDES_LOSS,)  # accelerate, DeepSpeed, or a Lightning training_step (no loop)
    reads_outside_windows = (Fact.HOOKS,)  # Lightning: the training_step of any class

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            for backward in window.backwards:
                if backward.via_helper or not model.framework_divides_loss(window, backward):
                    continue
                for node in model.divisions_by_n(model.backward_facts(window, backward), window.scope, window):
                    yield Report(node, _double_message(backward.framework))
        for scope, hook, facts, divided in model.hook_losses():
            for node in model.divisions_by_n(facts, scope) if divided else ():
                yield Report(node, _double_message(hook.framework))


def _double_message(framework: Framework) -> str:
    return (f"{framework.display} already divides the loss by the accumulation steps, so dividing it by hand "
            f"makes gradients N times too small; remove the manual division")


class MeanOfMeansTokenLoss(Rule):
    code = "ACC203"
    name = "mean-of-means-token-loss"
    summary = "A per-micro-batch mean over a variable number of valid tokens is divided by the accumulation steps."
    # by hand (the loss, or the summed gradients after the backwards), or by a framework: its loop
    # around a hook of the file
    requires = ((Fact.TRAINING_LOOP, Fact.HOOKS),
                (Fact.LOSS_DIVIDED, EventKind.GRAD_SCALE, Fact.FRAMEWORK_DIVIDES_LOSS))
    # the callers of a loop's function: the criterion or model they hand it decides the loss's mean;
    # transformers: the compute_loss of any Trainer subclass
    reads_outside_windows = (Fact.CALLERS, Fact.HOOKS)

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            if not window.accumulates and window.shape is not WindowShape.NESTED:
                continue
            gradients_divided = False
            for backward in window.backwards:
                if backward.via_helper:
                    continue
                facts = model.backward_facts(window, backward)
                if not facts.token_level:
                    continue
                for scale in () if gradients_divided else model.gradient_divisions_by_n(window):
                    gradients_divided = True  # `p.grad.div_(N)` after the backwards: the same mean of means
                    yield Report.on(scale, "the summed gradients of per-micro-batch means over a varying number "
                                           "of valid tokens are divided by N, which over-weights micro-batches "
                                           "with few tokens; sum each loss and divide by the valid-token count "
                                           "of the whole window")
                for node in model.divisions_by_n(facts, window.scope, window):
                    yield Report(node, "a per-micro-batch mean over a varying number of valid tokens divided by "
                                       "N over-weights micro-batches with few tokens; sum the loss and divide "
                                       "by the valid-token count of the whole window")
                if model.framework_divides_loss(window, backward) \
                        and not model.normalised(facts, window, backward, reweighs=True):
                    yield Report.on(backward, f"{backward.framework.display} divides this per-micro-batch mean "
                                              f"over a varying number of valid tokens by N, which over-weights "
                                              f"micro-batches with few tokens; sum the loss and divide it by the "
                                              f"window's valid-token count over N, since the framework divides by N "
                                              f"too")
        # a hook whose framework loop divides what it returns: Lightning's (walked in place, configured to
        # accumulate), or transformers' Trainer around a compute_loss that is not handed the window's count
        token_means = model.token_means_divided_by_driver()
        for scope, hook, facts, divided in model.hook_losses():
            if not divided:
                continue
            if hook.framework is Framework.LIGHTNING and model.class_name_of(scope) in token_means \
                    or hook.framework is Framework.TRANSFORMERS and facts.token_level \
                    and not model.normalised(facts, None, None, reweighs=True):
                yield Report(scope.node.name, f"{hook.framework.display} divides the per-micro-batch mean over a "
                                              f"varying number of valid tokens that `{hook.name}` returns by the "
                                              f"accumulation steps, which over-weights micro-batches with few "
                                              f"tokens; return the summed loss divided by the window's valid-token "
                                              f"count over N")


class LossGraphKeptAlive(Rule):
    code = "ACC204"
    name = "loss-graph-kept-alive"
    summary = "A loss that still carries autograd history is accumulated into a running total."
    severity = "warning"  # memory grows; the gradients are right
    requires = (Fact.TRAINING_LOOP, EventKind.LOSS_TOTAL)
    reads_outside_windows = ()

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            losses: set[str] = set()
            fed_backward: set[str] = set()
            for backward in window.backwards:
                if backward.via_helper:
                    continue
                fed_backward |= model.backward_facts(window, backward).names
                if backward.expr_name:
                    losses.add(backward.expr_name)
            for total in window.of(EventKind.LOSS_TOTAL):
                if not window.inside(total) or total.target in fed_backward:
                    continue
                if not model.keeps_what_is_added(window, total):
                    continue  # a meter's `append` that may detach what it is given
                summed = model.summed_loss_name(total)
                if summed not in losses or model.graph_freed_each_window(window, total, summed) \
                        or model.detached_in_place(window, total, summed):
                    continue
                facts = model.loss_facts(total.expr, window.scope, total.order)
                if facts.known and not facts.detached:
                    yield Report.on(total, "the loss still carries its autograd graph, so every micro-batch graph "
                                           "stays in memory; accumulate loss.item() or loss.detach() instead")
