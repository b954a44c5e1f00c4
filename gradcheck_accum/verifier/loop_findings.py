"""What a recorded loop did wrong, each cause as a Finding with a stable kind and one sentence.

Structure first (how many steps, where the boundaries fell, what was never read), then the
gradient of a failing step: a fit that includes the previous step's gradient finds gradients never
cleared; otherwise diagnose.py names the pattern of the micro-batch weights, as it does for verify
(all N: loss not divided; only the last: cleared every micro-batch; 1/items: mean-of-means), then
clipping: the accumulated gradient is judged before the clip, and the clip on its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from gradcheck_accum.verifier.diagnose import diagnose
from gradcheck_accum.verifier.loop_recording import ClipCall, Grads, Recording, StepRecord

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


# The loop's stable finding kinds for diagnose.py's causes; a cause not listed is "grad-mismatch".
_KINDS = {
    "only_last": "grad-cleared-every-micro-batch",
    "not_divided": "loss-not-divided",
    "scaled_twice": "scaled-twice",
    "mean_of_means": "mean-of-means",
    "dropped": "micro-batches-dropped",
    "non_finite": "non-finite",
}


def name_gradient_bug(
    where: str, grads: Grads, contributions: list[Grads], reference: Grads, previous: Optional[Grads], shapes,
    counts: dict[str, list[int]], eps: float, steps: int,
) -> tuple[Finding, Optional[tuple[float, ...]]]:
    """Name what is wrong with a step's gradient. contributions: the reference loss's gradient on
    each micro-batch (or each rank's shard of it) of the window; counts: candidate item counts of
    those; steps: micro-batches in the window. A stale gradient from the previous step is looked
    for first (a fit that includes it); everything else is diagnose.py's, as verify gives it."""
    y = _flat(grads, shapes)
    if not bool(torch.isfinite(y).all()):
        return Finding("non-finite", f"the gradient of {where} is NaN/inf: a micro-batch's loss was NaN/inf "
                       "(a mean over zero valid items?)"), None
    if not bool(torch.any(y != 0)):
        return Finding("zero-grad-before-step", f"the optimizer stepped on zero gradients at {where}: "
                       "they were cleared between the last backward and the step"), None
    leak = _leak(y, contributions, previous, shapes, eps)
    if leak is not None:
        amount = f"{leak:.2f}x of it" if leak >= 0.01 else f"{leak:.3g}x of it, unscaled in place by a GradScaler"
        return Finding("grad-leak", f"gradients never cleared: the gradient of {where} still holds the "
                       f"previous window's gradient ({amount}); zero them after each step"), None
    d = diagnose(grads, contributions, reference, steps=steps, item_counts=counts)
    items = counts.get("items") or next((v for k, v in counts.items() if k != "rows" and len(set(v)) > 1), None)
    total = sum(items) if items else 0
    divisor = total / d.scale if items and math.isfinite(d.scale) and d.scale > 0 else 0.0
    if d.code == "uniform_scale" and len(set(items or ())) > 1 and divisor >= 1 and abs(divisor - round(divisor)) <= 0.02:
        # Every micro-batch weighted by its items (the uniform part), the window divided by a whole
        # count other than theirs (a uniform scale such as a binding clip's divides by no whole number).
        return Finding("wrong-item-count", f"each micro-batch is weighted by its items at {where}, but the window is "
                       f"divided by {divisor:.4g} instead of the {total} items the loss averages over "
                       f"({list(items)} per micro-batch): {d.scale:.3g}x the window's gradient; the count includes "
                       "items the loss ignores, or misses some"), d.weights
    return Finding(_KINDS.get(d.code, "grad-mismatch"), f"{where}: {d.cause}"), d.weights


def _leak(y: torch.Tensor, contributions: list[Grads], previous: Optional[Grads], shapes, eps: float) -> Optional[float]:
    """How much of the previous step's gradient the step's gradient still holds, when the step is
    exactly a weighted sum of its window's contributions and that gradient."""
    if previous is None:
        return None
    stale = _flat(previous, shapes)
    if not bool(torch.any(stale != 0)) or not bool(torch.isfinite(stale).all()):
        return None
    columns = [_flat(c, shapes) for c in contributions] + [stale]
    matrix = torch.stack(columns, dim=1)
    if not bool(torch.isfinite(matrix).all()):
        return None
    solution = torch.linalg.lstsq(matrix, y.unsqueeze(1)).solution.squeeze(1)
    residual = float(torch.linalg.vector_norm(matrix @ solution - y) / torch.linalg.vector_norm(y))
    leak = float(solution[-1])
    # Share of the step's gradient that is the previous step's: 1x for a plain leak, 1/scale when
    # a GradScaler unscaled the stale gradients in place before they were summed again.
    share = abs(leak) * float(torch.linalg.vector_norm(stale)) / float(torch.linalg.vector_norm(y))
    if residual < max(1e-3, 4 * eps) and (leak > 0.5 or (leak > 0 and share > 100 * eps)):
        return leak
    return None


def windows_of(recording: Recording, total: int, steps_n: int, *, check_remainder: bool = True) \
        -> tuple[list[tuple[int, int]], list[Finding], list[str]]:
    """The micro-batch range each step covered, and findings about where the boundaries fell
    (check_remainder: note when the micro-batch count cannot show a dropped remainder)."""
    expected = [(a, min(a + steps_n, total)) for a in range(0, total, steps_n)]
    findings, notes = [], []
    steps = recording.steps
    whole_windows = (total // steps_n) * steps_n
    if total % steps_n and recording.forwards == whole_windows and len(steps) == total // steps_n:
        # A loop over range(len(data) // N) windows: it never even reads the remainder.
        left = total - whole_windows
        findings.append(Finding("remainder-never-read", f"remainder never read: the loop ran {recording.forwards} of "
                                f"{total} micro-batches, whole windows of {steps_n} only, so the last {left} never "
                                "reach a step (a loop over range(len(data) // N) windows drops them); iterate over "
                                "the data and step on a partial last window"))
        windows = expected[: len(steps)]
    elif recording.forwards != total:
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


def clip_findings(where: str, step: StepRecord, reference: Grads, shapes, judged_ok: bool,
                  eps: float) -> tuple[list[Finding], str]:
    """Findings about the clip calls a step's window made, and a note on what the clip did. The
    accumulated gradient was judged as the last clip call saw it (judged_ok); here: was it clipped
    once, after the last micro-batch, after unscaling, and did the optimizer step on the result?"""
    if not step.clips:
        return [], ""
    last = step.clips[-1]
    early = [c for c in step.clips if c.forwards < step.forwards]
    if early:
        every = len(step.clips) > 1 and len({c.forwards for c in step.clips}) == len(step.clips)
        kind = "clip-every-micro-batch" if every else "clip-inside-window"
        how = "every micro-batch" if every else f"before micro-batch {early[0].forwards + 1}, inside the window"
        effect = ("so the partial sums were clipped and the accumulated gradient is wrong" if not judged_ok else
                  "harmless only while the clip does not bind, since it clips partial sums")
        return [Finding(kind, f"gradient clipping runs {how} at {where}: {effect}; clip once, after the last "
                        "micro-batch's backward (and after scaler.unscale_)", error=not judged_ok)], ""
    pre = _flat(last.grads, shapes)
    ref = _flat(reference, shapes)
    scale = float(pre @ ref) / float(ref @ ref) if float(ref @ ref) > 0 else math.nan
    cosine = float(pre @ ref) / math.sqrt(float(pre @ pre) * float(ref @ ref)) if float(pre @ pre) > 0 else math.nan
    if not judged_ok and scale >= 2 and cosine > 1 - 1e-4 and abs(math.log2(scale) - round(math.log2(scale))) < 1e-3 \
            and _unscaled_after(step, pre, last, scale, shapes):
        return [Finding("clip-before-unscale", f"gradients clipped before GradScaler.unscale_ at {where}: the clip "
                        f"saw them multiplied by the loss scale ({scale:.6g}), so its threshold applied to scaled "
                        "gradients; call scaler.unscale_(optimizer) before clipping")], ""
    if not judged_ok:
        return [], ""
    expected, factor = _clipped(pre, last)
    got = _flat(step.grads, shapes)
    error = float(torch.linalg.vector_norm(got - expected)) / max(float(torch.linalg.vector_norm(expected)), 1e-30)
    if last.kind == "value":
        what = f"clipped by clip_grad_value_({last.threshold:g})"
    elif factor < 1:
        what = f"clipped to {factor:.4g}x by clip_grad_norm_(max_norm={last.threshold:g})"
    else:
        what = f"clip_grad_norm_(max_norm={last.threshold:g}) did not bind"
    if error > max(1e-3, 1e3 * eps):
        return [Finding("clip-mismatch", f"the optimizer did not step on the clipped gradient at {where}: the "
                        f"accumulated gradient is right, but the step's gradient differs from it {what} (relative "
                        f"error {error:.3g})")], what
    return [], what


def _unscaled_after(step: StepRecord, pre: torch.Tensor, clip: ClipCall, scale: float, shapes) -> bool:
    """The step used the clipped gradient divided by `scale`: a GradScaler unscaled it after the clip
    (a loss not divided by a power-of-two N looks alike before the clip, but steps on the clip's result)."""
    expected = _clipped(pre, clip)[0] / scale
    got = _flat(step.grads, shapes)
    return float(torch.linalg.vector_norm(got - expected)) <= 1e-3 * float(torch.linalg.vector_norm(expected))


def _clipped(pre: torch.Tensor, clip: ClipCall) -> tuple[torch.Tensor, float]:
    """What torch's clip function makes of the flat gradient `pre` (and the factor, for norms)."""
    if clip.kind == "value":
        return pre.clamp(-clip.threshold, clip.threshold), math.nan
    total = float(pre.abs().max()) if math.isinf(clip.norm_type) else float(torch.linalg.vector_norm(pre, clip.norm_type))
    factor = min(1.0, clip.threshold / (total + 1e-6))
    return pre * factor, factor
