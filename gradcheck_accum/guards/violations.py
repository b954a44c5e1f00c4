"""What the guard can say: one constructor per cause, each a sentence with the rule code.

The kinds are the verifier's (`verifier/loop_findings.py`) and the codes the linter's
(`/work/shared/RULES.md`), so the three halves name a bug the same way. Torch-free: the sentences
are built from plain numbers the guard has already counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence


@dataclass(frozen=True)
class Violation:
    kind: str  # stable key shared with the verifier, e.g. "grad-leak"
    code: Optional[str]  # the lint rule with the same cause, when one exists
    window: int  # 1-based accumulation window where it happened
    sentence: str
    error: bool = True  # False: costs time, not correctness (raised only as a warning)

    def __str__(self) -> str:
        return f"{self.code}: {self.sentence}" if self.code else self.sentence


def _passes(k: int) -> str:
    return f"{k} backward pass" + ("" if k == 1 else "es")


def _between(a: int, window: int) -> str:
    return f"between backward {a} and {a + 1} of window {window}"


def cleared_inside_window(window: int, before: int, in_place: bool = False) -> Violation:
    how = "zeroed in place" if in_place else "cleared"
    return Violation("grad-cleared-every-micro-batch", "ACC101", window,
                     f"gradients were {how} {_between(before, window)}: only the micro-batches after the clear "
                     "reach the step (zero_grad inside the window)")


def never_cleared(window: int) -> Violation:
    return Violation("grad-leak", "ACC102", window,
                     f"gradients were not cleared after the step of window {window - 1}: window {window} adds "
                     "to the gradients the optimizer already used; zero them after each step")


def cleared_before_step(window: int, last: int) -> Violation:
    return Violation("zero-grad-before-step", "ACC103", window,
                     f"gradients were cleared between backward {last} and the optimizer step of window {window}: "
                     "the optimizer stepped on no gradients")


def step_every_micro_batch(window: int, steps_n: int) -> Violation:
    return Violation("step-every-micro-batch", "ACC104", window,
                     f"the optimizer stepped after every backward pass: windows {window - 1} and {window} had "
                     f"1 backward pass each, expected {steps_n}")


def loss_factor(window: int, backward: int, factor: float, steps_n: int, *, items: Optional[Sequence[int]] = None) -> Violation:
    """The loss reached backward multiplied by `factor` where 1/N (or items/total) was expected."""
    where = f"backward {backward} of window {window}"
    if items is not None:
        return Violation("mean-of-means", "ACC203", window,
                         f"every micro-batch of window {window} was weighted 1/{len(items)} although they hold "
                         f"{list(items)} items: per-micro-batch mean divided by N (mean-of-means); weight by items")
    if steps_n > 1 and abs(factor - 1) <= 0.02:
        return Violation("loss-not-divided", "ACC201", window,
                         f"loss not divided by the accumulation steps: {where} backpropagated the whole loss, "
                         f"expected 1/{steps_n} of it")
    if steps_n > 1 and abs(factor * steps_n * steps_n - 1) <= 0.02:
        return Violation("scaled-twice", "ACC202", window,
                         f"loss divided by the accumulation steps twice: {where} backpropagated 1/{steps_n * steps_n} "
                         f"of the loss, expected 1/{steps_n}")
    return Violation("loss-scale", None, window,
                     f"{where} backpropagated {factor:.4g}x the loss, expected 1/{steps_n}")


def scheduler_inside_window(window: int, before: int) -> Violation:
    return Violation("scheduler-every-micro-batch", "ACC401", window,
                     f"the scheduler stepped {_between(before, window)}: warm-up and decay run up to N times too "
                     "fast; step it once per optimizer step")


def lr_changed_inside_window(window: int, before: int, old: float, new: float) -> Violation:
    return Violation("scheduler-every-micro-batch", "ACC401", window,
                     f"the learning rate changed {_between(before, window)} ({old:.4g} -> {new:.4g}): the "
                     "schedule advances per micro-batch; change it once per optimizer step")


def scheduler_steps_per_step(window: int, count: int, allowed: int) -> Violation:
    return Violation("scheduler-every-micro-batch", "ACC401", window,
                     f"the scheduler stepped {count} times for the optimizer step of window {window}, expected "
                     f"at most {allowed}: warm-up and decay run {count // max(allowed, 1)}x too fast")


def rescaled_inside_window(window: int, before: int) -> Violation:
    return Violation("clip-every-micro-batch", "ACC403", window,
                     f"gradients were rescaled in place {_between(before, window)} (clip_grad_norm_ or a manual "
                     "rescale of a partial sum): clip once, after the window's last backward")


def modified_inside_window(window: int, before: int) -> Violation:
    # Only the first-reached parameter was watched, so zeroing and rescaling cannot be told apart.
    return Violation("grad-modified-inside-window", None, window,
                     f"gradients were modified in place {_between(before, window)} (zeroed, clipped or rescaled "
                     "inside the window)")


def scaler_inside_window(window: int, before: int, what: str) -> Violation:
    return Violation("scaler-every-micro-batch", "ACC404", window,
                     f"scaler.{what} ran {_between(before, window)}: GradScaler must unscale, step and update "
                     "once per window, after its last backward")


def remainder_dropped(window: int, pending: int, where: str) -> Violation:
    return Violation("remainder-dropped", "ACC406", window,
                     f"remainder dropped: the last {_passes(pending)} (window {window}) "
                     f"{'was' if pending == 1 else 'were'} never stepped before the end of {where}; "
                     f"{'its' if pending == 1 else 'their'} gradients are lost or leak into the next window")


def first_window_off_by_one(steps_n: int) -> Violation:
    return Violation("boundary-off-by-one", "ACC407", 1,
                     f"window boundary off by one: window 1 stepped after 1 backward pass and window 2 after "
                     f"{steps_n}: the boundary test fires on the first micro-batch (i % N == 0 with a 0-based i)")


def short_windows(window: int, sizes: tuple[int, int], steps_n: int) -> Violation:
    return Violation("window-boundaries", None, window,
                     f"window boundaries are off: windows {window - 1} and {window} stepped after {sizes[0]} and "
                     f"{sizes[1]} backward passes, expected {steps_n}; a shorter window is right only at the end "
                     "of an epoch or run")


def short_window_mid_epoch(window: int, size: int, steps_n: int) -> Violation:
    return Violation("window-boundaries", None, window,
                     f"window boundaries are off: window {window} stepped after {_passes(size)}, expected "
                     f"{steps_n}, and the epoch went on; a shorter window is right only at the end of an epoch")


def window_too_long(window: int, steps_n: int) -> Violation:
    return Violation("window-too-long", None, window,
                     f"window {window} reached backward {steps_n + 1} without an optimizer step, expected a step "
                     f"every {steps_n} backward passes (a missed boundary, or an earlier remainder never stepped)")


def weights_moved(window: int, before: int) -> Violation:
    return Violation("moved-inside-window", None, window,
                     f"parameters changed {_between(before, window)} without an optimizer step: the window's "
                     "gradients no longer belong to one set of weights")


def ddp_synced_inside_window(window: int, backward: int) -> Violation:
    return Violation("ddp-sync-every-micro-batch", "ACC501", window,
                     f"DDP all-reduced on backward {backward} of window {window}, which is not the window's last: "
                     "wrap the forward and backward of non-boundary micro-batches in model.no_sync()", error=False)


def no_sync_missed_forward(window: int, backward: int) -> Violation:
    return Violation("no-sync-misses-forward", "ACC502", window,
                     f"model.no_sync() wrapped backward {backward} of window {window} but not its forward: DDP "
                     "armed the all-reduce in forward, so it synced anyway", error=False)


def window_without_sync(window: int) -> Violation:
    return Violation("ranks-diverged", None, window,
                     f"window {window} ended without an all-reduce: its last backward ran under no_sync() (or "
                     "bypassed DDP), so each rank steps on its own gradients")
