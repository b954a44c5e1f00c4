"""What a recorded loop did wrong, each cause as a Finding with a stable kind and one sentence.

Structure first (how many steps, where the boundaries fell), then the gradient of a failing
step: it is fitted as a weighted sum of its window's per-micro-batch gradients plus the previous
step's gradient, and the pattern of the fitted weights names the bug (all 1: loss not divided;
only the last: cleared every micro-batch; the previous step's gradient included: never cleared).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from gradcheck_accum.verifier.loop_recording import Grads, Recording

# A fitted micro-batch weight "equals" a pattern within this relative distance.
_FIT_TOL = 0.05


@dataclass
class Finding:
    kind: str  # stable key, e.g. "grad-leak"; tests and tools match on it
    sentence: str
    error: bool = True


def _flat(grads: Grads, shapes: dict[str, torch.Size]) -> torch.Tensor:
    parts = [
        torch.zeros(shape, dtype=torch.float64) if grads.get(n) is None else grads[n].detach().to("cpu", torch.float64)
        for n, shape in shapes.items()
    ]
    return torch.cat([p.flatten() for p in parts])


def _close(values: Sequence[float], target: float) -> bool:
    return all(abs(v - target) <= _FIT_TOL * abs(target) for v in values)


def name_gradient_bug(
    where: str, grads: Grads, contributions: list[Grads], previous: Optional[Grads], shapes, items: list[int],
    steps_n: int, scale: float, cosine: float, eps: float,
) -> tuple[Finding, tuple[float, ...]]:
    """Fit the step's gradient as a weighted sum of the window's per-micro-batch gradients (plus
    the previous step's gradient, to see a leak) and name the pattern of the weights."""
    y = _flat(grads, shapes)
    if not bool(torch.any(y != 0)):
        return Finding("zero-grad-before-step", f"the optimizer stepped on zero gradients at {where}: "
                       "they were cleared between the last backward and the step"), ()
    columns = [_flat(c, shapes) for c in contributions]
    leak_column = previous is not None and bool(torch.any(_flat(previous, shapes) != 0))
    if leak_column:
        columns.append(_flat(previous, shapes))
    matrix = torch.stack(columns, dim=1)
    solution = torch.linalg.lstsq(matrix, y.unsqueeze(1)).solution.squeeze(1)
    residual = float(torch.linalg.vector_norm(matrix @ solution - y) / torch.linalg.vector_norm(y))
    weights = tuple(float(w) for w in solution[: len(contributions)])
    leak = float(solution[-1]) if leak_column else 0.0
    # Share of the step's gradient that is the previous step's: 1x for a plain leak, 1/scale when
    # a GradScaler unscaled the stale gradients in place before they were summed again.
    leak_share = abs(leak) * float(torch.linalg.vector_norm(columns[-1])) / float(torch.linalg.vector_norm(y)) if leak_column else 0.0
    total = sum(items)
    expected = [n / total for n in items]
    k = len(weights)
    if residual < max(1e-3, 4 * eps):  # the step is exactly such a weighted sum, up to rounding
        if leak > 0.5 or (leak > 0 and leak_share > 100 * eps):
            amount = f"{leak:.2f}x of it" if leak >= 0.01 else f"{leak:.3g}x of it, unscaled in place by a GradScaler"
            return Finding("grad-leak", f"gradients never cleared: the gradient of {where} still holds the "
                           f"previous window's gradient ({amount}); zero them after each step"), weights
        if k > 1 and all(abs(w) <= _FIT_TOL * abs(weights[-1]) for w in weights[:-1]) and weights[-1] > 0:
            return Finding("grad-cleared-every-micro-batch", "gradients cleared every micro-batch: only the last "
                           f"micro-batch of the window reaches {where} (zero_grad inside the window)"), weights
        if steps_n > 1 and _close(weights, 1.0):
            return Finding("loss-not-divided", f"loss not divided by the accumulation steps: {where} uses "
                           f"{scale:.2f}x the window's gradient"), weights
        if steps_n > 1 and _close(weights, 1.0 / steps_n**2):
            return Finding("scaled-twice", f"loss divided by the accumulation steps twice: {where} uses "
                           f"{scale:.3g}x the window's gradient"), weights
        if len(set(items)) > 1 and _close(weights, weights[0]) and not _close(expected, expected[0]):
            return Finding("mean-of-means", f"every micro-batch weighted equally at {where} although they hold "
                           f"{items} items: per-micro-batch mean divided by N (mean-of-means); weight by items"), weights
        divisor = total / sum(weights) if sum(weights) else 0.0
        # Weighted by items and divided by a whole count other than the items': a count of other
        # things (a uniform scale, e.g. a binding clip, divides by no whole number).
        if len(set(items)) > 1 and min(items) > 0 and divisor >= 1 and abs(divisor - round(divisor)) <= 0.02 \
                and _close([w / n for w, n in zip(weights, items)], weights[0] / items[0]):
            if steps_n > 1 and abs(divisor / (total * steps_n) - 1) <= _FIT_TOL:
                return Finding("scaled-twice", f"loss divided by the accumulation steps on top of a normalisation by "
                               f"the window's {total} items: {where} uses {scale:.3g}x the window's gradient"), weights
            return Finding("wrong-item-count", f"each micro-batch is weighted by its items at {where}, but the window is "
                           f"divided by {divisor:.4g} instead of the {total} items the loss averages over ({items} per "
                           f"micro-batch): {scale:.3g}x the window's gradient; the count includes items the loss "
                           "ignores, or misses some"), weights
    shown = ", ".join(f"{w:.3g}" for w in weights)
    wanted = ", ".join(f"{w:.3g}" for w in expected)
    return Finding("grad-mismatch", f"{where} gradient is {scale:.3g}x the window's big-batch gradient (cosine "
                   f"{cosine:.4f}); fitted micro-batch weights [{shown}], expected [{wanted}]"), weights


def windows_of(recording: Recording, total: int, steps_n: int, *, check_remainder: bool = True) \
        -> tuple[list[tuple[int, int]], list[Finding], list[str]]:
    """The micro-batch range each step covered, and findings about where the boundaries fell
    (check_remainder: note when the micro-batch count cannot show a dropped remainder)."""
    expected = [(a, min(a + steps_n, total)) for a in range(0, total, steps_n)]
    findings, notes = [], []
    steps = recording.steps
    if recording.forwards != total:
        notes.append(f"train_fn ran the model {recording.forwards} times for {total} micro-batches, so steps "
                     "are matched to windows in order")
        windows = expected[: len(steps)]
    else:
        bounds = [0] + [s.forwards for s in steps]
        windows = list(zip(bounds, bounds[1:]))
    sizes = [b - a for a, b in windows]
    wanted = [b - a for a, b in expected]
    if not steps:
        moved = any(not torch.equal(recording.start[n], w) for n, w in recording.final_weights.items())
        how = (": the weights changed anyway, so train_fn steps an optimizer of its own instead of the one "
               "it was given" if moved else "")
        findings.append(Finding("no-steps", f"the optimizer never stepped over {total} micro-batches{how}"))
    elif recording.forwards == total and sizes != wanted:
        if steps_n > 1 and len(sizes) == total and all(s == 1 for s in sizes):
            findings.append(Finding("step-every-micro-batch", f"optimizer stepped on every micro-batch: {len(steps)} "
                                    f"steps for {total} micro-batches, expected {len(expected)} (one per {steps_n})"))
        elif total % steps_n and sizes == wanted[:-1]:
            left = total % steps_n
            held = any(g is not None and bool(torch.any(g != 0)) for g in recording.leftover.values())
            tail = "; their gradients were still held when train_fn returned and would leak into the next epoch" if held else ""
            findings.append(Finding("remainder-dropped", f"remainder dropped: the last {left} micro-batch(es) were "
                                    f"never stepped ({len(steps)} steps, expected {len(expected)}){tail}"))
        else:
            findings.append(Finding("window-boundaries", f"window boundaries are off: the optimizer stepped after "
                                    f"windows of {sizes} micro-batches, expected {wanted}"))
    if check_remainder and total % steps_n == 0:
        notes.append(f"{total} micro-batches is a multiple of {steps_n}, so a dropped remainder cannot show; "
                     f"pass {total + 1} to check the end-of-data flush")
    return windows, findings, notes


def schedule_findings(recording: Recording, windows: list[tuple[int, int]], *, per_micro_batch: bool) -> list[Finding]:
    findings = []
    counts = [s.scheduler_steps for s in recording.steps] + [recording.final_scheduler_steps]
    if counts[0] is not None and counts[-1] is not None:
        per_step = [b - a for a, b in zip(counts, counts[1:])]
        if per_step and max(per_step) > 1:
            findings.append(Finding("scheduler-every-micro-batch", f"scheduler advanced per micro-batch: it stepped "
                                    f"{max(per_step)} times between optimizer steps, so warm-up and decay run "
                                    f"{max(per_step)}x too fast; step it once per optimizer step"))
    if not per_micro_batch:
        return findings
    starts = {a for a, _ in windows} | {b for _, b in windows}
    lrs = recording.forward_lrs
    inside = sum(1 for f in range(1, len(lrs)) if f not in starts and lrs[f] != lrs[f - 1])
    if inside and not findings:
        findings.append(Finding("scheduler-every-micro-batch", f"scheduler advanced per micro-batch: the learning "
                                f"rate changed {inside} time(s) between micro-batches of one window; change it once "
                                "per optimizer step"))
    return findings


@dataclass(frozen=True)
class Sync:
    """How a data-parallel wrapper synchronises gradients, in the words of its findings."""

    wrapper: str  # "DDP"
    collective: str  # "all-reduce"
    done: str  # "all-reduced"
    key: str  # report.settings key stem: "allreduces"
    skip: str  # how a loop keeps non-boundary micro-batches local


SYNCS = {
    "ddp": Sync("DDP", "all-reduce", "all-reduced", "allreduces", "wrap the forward and backward of non-boundary micro-batches in "
                "model.no_sync() (dynamic twin of ACC501)"),
    "fsdp": Sync("FSDP", "reduce-scatter", "reduce-scattered", "reduce_scatters", "call model.set_requires_gradient_sync(False) before "
                 "the forward and backward of non-boundary micro-batches, and True before the boundary one"),
}


def sync_findings(recording: Recording, windows: list[tuple[int, int]], steps_n: int,
                  parallel: str = "ddp") -> tuple[list[Finding], list[int]]:
    """How many micro-batches of each window synchronised (a counting collective saw the calls)."""
    sync = SYNCS[parallel]
    syncs = recording.forward_syncs + [recording.final_syncs]
    per_window = []
    for a, b in windows:
        per_window.append(sum(1 for f in range(a, b) if syncs[f + 1] > syncs[f]))
    findings = []
    sizes = [b - a for a, b in windows]
    if parallel == "fsdp" and 0 in per_window:
        # DDP ranks would diverge; FSDP's sharded gradients are simply never written.
        findings.append(Finding("fsdp-never-synced", f"FSDP never reduce-scattered in window {per_window.index(0) + 1} "
                                f"({per_window} micro-batches synchronised per window), so the optimizer stepped "
                                "without that window's gradients: call model.set_requires_gradient_sync(True) "
                                "before the boundary micro-batch's backward"))
    if steps_n > 1 and any(k > 1 and n == k for n, k in zip(per_window, sizes)):
        findings.append(Finding(f"{parallel}-sync-every-micro-batch", f"{sync.wrapper} {sync.done} on every "
                                f"micro-batch ({per_window} of {sizes} per window): {sync.skip}", error=False))
    return findings, per_window


def rank_findings(ranks: list[Recording]) -> list[Finding]:
    base = ranks[0]
    for rank, other in enumerate(ranks[1:], start=1):
        if len(other.steps) != len(base.steps):
            return [Finding("ranks-diverged", f"rank {rank} stepped {len(other.steps)} times, rank 0 {len(base.steps)} times")]
        for j, (mine, theirs) in enumerate(zip(base.steps, other.steps), start=1):
            for name, g in mine.grads.items():
                h = theirs.grads.get(name)
                same = (g is None and h is None) or (g is not None and h is not None and torch.allclose(g, h, rtol=1e-5, atol=1e-7))
                if not same:
                    return [Finding("ranks-diverged", f"ranks stepped on different gradients (rank {rank}, step {j}, "
                                    f"{name}): the window ended without an all-reduce (no_sync around the boundary micro-batch?)")]
    return []
