"""`verify_loop`: check the project's own training loop by running it.

The loop (`train_fn`) runs unmodified on a private copy of the model; loop_recording.py records
the gradients of every optimizer step and the weights each step leaves. Each step is then
compared with the big-batch gradient of its window: `loss_fn` on the window's micro-batches
concatenated, from the weights the window started with, in float32 and float64 (compare.py's
criterion). Around that sit the checks that only a loop can fail: the number of steps, where
the window boundaries fall, weights moving inside a window, gradients leaking between windows,
a scheduler stepped per micro-batch, and (under DDP) all-reduces per window.

What counts as correct for a last, partial window of k < N micro-batches: the common idiom
divides every micro-batch loss by N, which gives k/N of that window's mean gradient; dividing
by k gives the mean exactly. Both are accepted (the row says which); anything else fails.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch

from gradcheck_accum.verifier.batches import batch_size, map_batch
from gradcheck_accum.verifier.compare import Tolerance, compare, global_scale_cosine
from gradcheck_accum.verifier.errors import VerifyError
from gradcheck_accum.verifier.loop_recording import Grads, Recording, Weights, record_loop
from gradcheck_accum.verifier.prepare import PreparedModel, exact_numerics, prepare, resolve_device, resolve_dtype
from gradcheck_accum.verifier.report import ModeResult, Report, Row

# A fitted micro-batch weight "equals" a pattern within this relative distance.
_FIT_TOL = 0.05


@dataclass
class Finding:
    kind: str  # stable key, e.g. "grad-leak"; tests and tools match on it
    sentence: str
    error: bool = True


def verify_loop(
    train_fn: Callable,
    model: Any,
    micro_batches: Sequence[Any],
    loss_fn: Callable,
    accumulation_steps: int = 4,
    optimizer: Optional[Callable] = None,
    *,
    world_size: int = 1,
    device: Optional[str] = None,
    dtype: Any = None,
    timeout: float = 120.0,
    start_method: Optional[str] = None,
    find_unused_parameters: bool = False,
) -> Report:
    """Run ``train_fn(model, optimizer, micro_batches, accumulation_steps)`` and check every step.

    model: nn.Module (never modified) or zero-argument factory. loss_fn(model, batch) -> scalar:
    the reference loss of a whole window, i.e. the mean over the window's items. optimizer:
    factory(params) -> torch.optim.Optimizer, default SGD(lr=0.1). world_size > 1 runs the loop
    in that many processes under DistributedDataParallel (each micro-batch split evenly across
    the ranks) and compares the averaged gradients with the single-process big batch.
    """
    steps = _check_args(train_fn, micro_batches, loss_fn, accumulation_steps, world_size)
    micro_batches = list(micro_batches)
    sizes = [batch_size(mb) for mb in micro_batches]
    prepared = prepare(model)
    module, notes = prepared.module, _model_notes(prepared)
    if device is None and world_size > 1 and torch.cuda.device_count() < world_size:
        device = "cpu"  # one process per GPU: too few GPUs, so the ranks share the CPU (gloo)
    device = str(resolve_device(device))
    if dtype is not None:
        low = resolve_dtype(dtype)
        module.to(low)
        micro_batches = [map_batch(mb, lambda t: t.to(low) if t.is_floating_point() else t) for mb in micro_batches]
    with exact_numerics():
        report = _run_and_analyse(train_fn, module, micro_batches, sizes, loss_fn, steps, optimizer, device,
                                  world_size, timeout, start_method, find_unused_parameters, prepared)
    report.notes[:0] = notes
    if world_size > 1 and report.diagnosis.startswith("every optimizer step"):
        report.diagnosis = f"on {world_size} DDP ranks, " + report.diagnosis
    report.settings.update(world_size=world_size, device=device,
                           dtype=str(next(module.parameters()).dtype).removeprefix("torch."))
    return report


def _run_and_analyse(train_fn, module, micro_batches, sizes, loss_fn, steps, optimizer, device, world_size,
                     timeout, start_method, find_unused_parameters, prepared) -> Report:
    ranks: list[Recording] = []
    if world_size > 1:
        from gradcheck_accum.verifier.distributed import record_loop_distributed

        ranks = record_loop_distributed(
            train_fn, module, micro_batches, steps, optimizer, world_size=world_size, device=device,
            timeout=timeout, start_method=start_method, find_unused_parameters=find_unused_parameters,
        )
        recording = ranks[0]
    else:
        run_copy = copy.deepcopy(module).to(device)
        on_device = [map_batch(mb, lambda t: t.to(device)) for mb in micro_batches]
        recording = record_loop(train_fn, run_copy, on_device, steps, optimizer)
    module.train(recording.training)  # references run in the mode the loop left the model in
    batch_stats = bool(prepared.batch_stat_layers) and recording.training
    return analyse(recording, module, micro_batches, sizes, loss_fn, steps, device, ranks=ranks,
                   batch_stats=batch_stats)


def _check_args(train_fn, micro_batches, loss_fn, steps, world_size) -> int:
    if not callable(train_fn):
        raise VerifyError("train_fn must be callable as train_fn(model, optimizer, micro_batches, accumulation_steps)")
    if not callable(loss_fn):
        raise VerifyError("loss_fn must be callable as loss_fn(model, batch) -> scalar tensor")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise VerifyError(f"accumulation_steps must be a positive integer, got {steps!r}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise VerifyError(f"world_size must be a positive integer, got {world_size!r}")
    if isinstance(micro_batches, (torch.Tensor, dict)) or not isinstance(micro_batches, Sequence) or not micro_batches:
        raise VerifyError("micro_batches must be a non-empty list of micro-batches")
    return steps


def _model_notes(prepared: PreparedModel) -> list[str]:
    notes = []
    if prepared.dropout_layers:
        notes.append(f"dropout switched off for the check: {', '.join(prepared.dropout_layers)}")
    if prepared.batch_stat_layers:
        notes.append(f"batch-statistic layers in training mode: {', '.join(prepared.batch_stat_layers)}")
    return notes


def concat_batches(batches: Sequence[Any]) -> Any:
    """Inverse of splitting: concatenate tensor leaves along dim 0; other leaves come from the first."""
    first = batches[0]
    if isinstance(first, dict):
        joined = {key: concat_batches([b[key] for b in batches]) for key in first}
        return joined if type(first) is dict else type(first)(joined)
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(concat_batches([b[i] for b in batches]) for i in range(len(first))))
    if isinstance(first, (tuple, list)):
        return type(first)(concat_batches([b[i] for b in batches]) for i in range(len(first)))
    if isinstance(first, torch.Tensor) and first.dim() > 0:
        return torch.cat(list(batches), dim=0)
    return first


class _References:
    """Big-batch gradients at given weights, in the model's precision and in float64 (on CPU)."""

    def __init__(self, module: torch.nn.Module, loss_fn: Callable, device: str):
        self.loss_fn = loss_fn
        self.device = device
        self.low = copy.deepcopy(module).to(device)
        self.f64 = copy.deepcopy(module).to("cpu", torch.float64)

    def grads(self, weights: Weights, batch: Any, *, float64: bool) -> Grads:
        model = self.f64 if float64 else self.low
        if float64:
            batch = map_batch(batch, lambda t: t.to("cpu", torch.float64) if t.is_floating_point() else t.to("cpu"))
        else:
            batch = map_batch(batch, lambda t: t.to(self.device))
        params = dict(model.named_parameters())
        with torch.no_grad():
            for name, value in weights.items():
                params[name].copy_(value)
        for p in params.values():
            p.grad = None
        try:
            loss = self.loss_fn(model, batch)
        except Exception as exc:  # noqa: BLE001 - user code: report it in one line
            raise VerifyError(f"loss_fn raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise VerifyError("loss_fn must return a scalar tensor")
        if loss.requires_grad:
            loss.backward()
        return {n: (None if p.grad is None else p.grad.detach().clone()) for n, p in params.items()}


def _flat(grads: Grads, shapes: dict[str, torch.Size]) -> torch.Tensor:
    parts = [
        torch.zeros(shape, dtype=torch.float64) if grads.get(n) is None else grads[n].detach().to("cpu", torch.float64)
        for n, shape in shapes.items()
    ]
    return torch.cat([p.flatten() for p in parts])


def _scaled(grads: Grads, factor: float) -> Grads:
    return {n: (None if g is None else g * factor) for n, g in grads.items()}


def _close(values: Sequence[float], target: float) -> bool:
    return all(abs(v - target) <= _FIT_TOL * abs(target) for v in values)


def _name_gradient_bug(
    step: int, grads: Grads, contributions: list[Grads], previous: Optional[Grads], shapes, items: list[int],
    steps_n: int, scale: float, cosine: float, eps: float,
) -> tuple[Finding, tuple[float, ...]]:
    """Fit the step's gradient as a weighted sum of the window's per-micro-batch gradients (plus
    the previous step's gradient, to see a leak) and name the pattern of the weights."""
    y = _flat(grads, shapes)
    where = f"step {step}"
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
    total = sum(items)
    expected = [n / total for n in items]
    k = len(weights)
    if residual < max(1e-3, 4 * eps):  # the step is exactly such a weighted sum, up to rounding
        if leak > 0.5:
            return Finding("grad-leak", f"gradients never cleared: the gradient of {where} still holds the "
                           f"previous window's gradient (fitted {leak:.2f}x of it); zero them after each step"), weights
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
    shown = ", ".join(f"{w:.3g}" for w in weights)
    wanted = ", ".join(f"{w:.3g}" for w in expected)
    return Finding("grad-mismatch", f"{where} gradient is {scale:.3g}x the window's big-batch gradient (cosine "
                   f"{cosine:.4f}); fitted micro-batch weights [{shown}], expected [{wanted}]"), weights


def _windows(recording: Recording, total: int, steps_n: int) -> tuple[list[tuple[int, int]], list[Finding], list[str]]:
    """The micro-batch range each step covered, and findings about where the boundaries fell."""
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
    if total % steps_n == 0:
        notes.append(f"{total} micro-batches is a multiple of {steps_n}, so a dropped remainder cannot show; "
                     f"pass {total + 1} to check the end-of-data flush")
    return windows, findings, notes


def _schedule_findings(recording: Recording, windows: list[tuple[int, int]]) -> list[Finding]:
    findings = []
    counts = [s.scheduler_steps for s in recording.steps] + [recording.final_scheduler_steps]
    if counts[0] is not None and counts[-1] is not None:
        per_step = [b - a for a, b in zip(counts, counts[1:])]
        if per_step and max(per_step) > 1:
            findings.append(Finding("scheduler-every-micro-batch", f"scheduler advanced per micro-batch: it stepped "
                                    f"{max(per_step)} times between optimizer steps, so warm-up and decay run "
                                    f"{max(per_step)}x too fast; step it once per optimizer step"))
    starts = {a for a, _ in windows} | {b for _, b in windows}
    lrs = recording.forward_lrs
    inside = sum(1 for f in range(1, len(lrs)) if f not in starts and lrs[f] != lrs[f - 1])
    if inside and not findings:
        findings.append(Finding("scheduler-every-micro-batch", f"scheduler advanced per micro-batch: the learning "
                                f"rate changed {inside} time(s) between micro-batches of one window; change it once "
                                "per optimizer step"))
    return findings


def _sync_findings(recording: Recording, windows: list[tuple[int, int]], steps_n: int) -> tuple[list[Finding], list[int]]:
    """DDP: how many micro-batches of each window all-reduced (a comm hook counted the calls)."""
    syncs = recording.forward_syncs + [recording.final_syncs]
    per_window = []
    for a, b in windows:
        per_window.append(sum(1 for f in range(a, b) if syncs[f + 1] > syncs[f]))
    findings = []
    sizes = [b - a for a, b in windows]
    if steps_n > 1 and any(k > 1 and n == k for n, k in zip(per_window, sizes)):
        findings.append(Finding("ddp-sync-every-micro-batch", f"DDP all-reduced on every micro-batch ({per_window} "
                                f"of {sizes} per window): wrap the forward and backward of non-boundary micro-batches "
                                "in model.no_sync() (dynamic twin of ACC501)", error=False))
    return findings, per_window


def _rank_findings(ranks: list[Recording]) -> list[Finding]:
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


def analyse(
    recording: Recording,
    module: torch.nn.Module,
    micro_batches: list[Any],
    sizes: list[int],
    loss_fn: Callable,
    steps_n: int,
    device: str,
    *,
    ranks: Sequence[Recording] = (),
    batch_stats: bool = False,
) -> Report:
    total = len(micro_batches)
    windows, findings, notes = _windows(recording, total, steps_n)
    if recording.moved_before:
        findings.append(Finding("moved-inside-window", "parameters changed inside an accumulation window without "
                                f"an optimizer step (before micro-batch {recording.moved_before[0]})"))
    refs = _References(module, loss_fn, device)
    shapes = {n: p.shape for n, p in module.named_parameters()}
    tol = Tolerance.for_dtype(next(module.parameters()).dtype)
    rows: list[Row] = []
    modes: list[ModeResult] = []
    grad_findings: list[Finding] = []
    for j, ((a, b), step) in enumerate(zip(windows, recording.steps)):
        if a == b:
            continue
        weights = recording.start if j == 0 else recording.after_step[j - 1]
        window = micro_batches[a:b]
        big = concat_batches(window)
        ref_low, ref64 = refs.grads(weights, big, float64=False), refs.grads(weights, big, float64=True)
        contributions = [refs.grads(weights, mb, float64=True) for mb in window] if len(window) > 1 else [ref64]
        items = sizes[a:b]
        share = [n / sum(items) for n in items]
        magnitude = {
            n: math.sqrt(sum(float(torch.linalg.vector_norm(c[n])) ** 2 * s**2 for c, s in zip(contributions, share) if c[n] is not None))
            for n in shapes
        }
        label = f"step {j + 1}"
        row_note = ""
        step_rows = _rows(label, step.grads, ref_low, ref64, tol, magnitude, shapes, len(window), "")
        partial = b == total and len(window) < steps_n and len(window) == total % steps_n
        if partial and not all(r.ok for r in step_rows):
            factor = len(window) / steps_n
            row_note = f"last window of {len(window)}/{steps_n} micro-batches, divided by {steps_n}"
            scaled_rows = _rows(label, step.grads, _scaled(ref_low, factor), _scaled(ref64, factor), tol,
                                {n: m * factor for n, m in magnitude.items()}, shapes, len(window), row_note)
            if all(r.ok for r in scaled_rows):
                step_rows = scaled_rows
                ref64 = _scaled(ref64, factor)
                notes.append(f"{label}: {row_note}, gives {len(window)}/{steps_n} of its mean gradient (accepted)")
        rows += step_rows
        ok = all(r.ok for r in step_rows)
        scale, cosine = global_scale_cosine(step.grads, ref64)
        diagnosis, fitted = "", None
        if not ok:
            previous = recording.steps[j - 1].grads if j > 0 else None
            finding, fitted = _name_gradient_bug(j + 1, step.grads, contributions, previous, shapes, items,
                                                 steps_n, scale, cosine, tol.eps)
            grad_findings.append(finding)
            diagnosis = finding.sentence
        lr = "lr " + ", ".join(f"{v:.4g}" for v in step.lrs)
        modes.append(ModeResult(mode=label, ok=ok, scale=scale, cosine=cosine, weights=fitted,
                                diagnosis=diagnosis or lr))
    # One named gradient cause is enough; the per-step table keeps the rest.
    if grad_findings:
        findings.append(grad_findings[0])
    findings += _schedule_findings(recording, windows)
    per_window: list[int] = []
    if recording.final_syncs is not None:
        sync_findings, per_window = _sync_findings(recording, windows, steps_n)
        findings = _rank_findings(list(ranks)) + findings + sync_findings if ranks else findings + sync_findings
        notes.append(f"DDP all-reduces per window (micro-batches that synchronised): {per_window}")
    return _report(findings, notes, rows, modes, batch_stats, recording, total, steps_n, per_window)


def _rows(label, grads, ref_low, ref64, tol, magnitude, shapes, summed, note) -> list[Row]:
    rows = []
    for name, shape in shapes.items():
        c = compare(grads.get(name), ref_low.get(name), ref64.get(name), tol, magnitude=magnitude[name], steps=summed)
        rows.append(Row(mode=label, name=name, shape=tuple(shape), error=c.error, reference_error=c.reference_error,
                        tolerance=c.tolerance, scale=c.scale, cosine=c.cosine, ok=c.ok, note=c.note or note))
    return rows


def _report(findings, notes, rows, modes, batch_stats, recording, total, steps_n, per_window) -> Report:
    errors = [f for f in findings if f.error]
    warnings = [f for f in findings if not f.error]
    steps = len(recording.steps)
    if errors:
        only_gradients = all(f.kind == "grad-mismatch" for f in errors)
        verdict = "inherent" if batch_stats and only_gradients else "mismatch"
        diagnosis = errors[0].sentence
        if verdict == "inherent":
            diagnosis = "batch-statistic layers (BatchNorm) in training mode couple the items of a batch, so " \
                        "accumulation cannot reproduce the big batch: " + diagnosis
    else:
        verdict = "match"
        diagnosis = (f"every optimizer step used its window's big-batch gradient ({steps} step(s) for {total} "
                     f"micro-batch(es), windows of {steps_n})")
        if warnings:
            diagnosis = "gradients match, but " + warnings[0].sentence
    extra = [f.sentence for f in findings if f.sentence != diagnosis and not diagnosis.endswith(f.sentence)]
    lrs = [list(s.lrs) for s in recording.steps]
    return Report(
        verdict=verdict,
        diagnosis=diagnosis,
        rows=rows,
        modes=modes,
        notes=extra + notes,
        settings={
            "accumulation_steps": steps_n,
            "micro_batches": total,
            "optimizer_steps": steps,
            "expected_steps": -(-total // steps_n),
            "findings": [f.kind for f in findings],
            "learning_rates": lrs,
            "allreduces_per_window": per_window,
        },
    )
