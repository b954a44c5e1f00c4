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
from typing import Any, Callable, Optional, Sequence

import torch

from gradcheck_accum.verifier.batches import batch_size, map_batch
from gradcheck_accum.verifier.compare import Tolerance, compare, global_scale_cosine
from gradcheck_accum.verifier.errors import VerifyError
from gradcheck_accum.verifier.loop_findings import (
    Finding,
    name_gradient_bug,
    rank_findings,
    schedule_findings,
    sync_findings,
    windows_of,
)
from gradcheck_accum.verifier.loop_recording import Grads, Recording, Weights, record_loop
from gradcheck_accum.verifier.prepare import PreparedModel, exact_numerics, prepare, resolve_device, resolve_dtype
from gradcheck_accum.verifier.report import ModeResult, Report, Row

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
    freeze_batchnorm: bool = False,
) -> Report:
    """Run ``train_fn(model, optimizer, micro_batches, accumulation_steps)`` and check every step.

    model: nn.Module (never modified) or zero-argument factory. loss_fn(model, batch) -> scalar:
    the reference loss of a whole window, i.e. the mean over the window's items. optimizer:
    factory(params) -> torch.optim.Optimizer, default SGD(lr=0.1). world_size > 1 runs the loop
    in that many processes under DistributedDataParallel (each micro-batch split evenly across
    the ranks) and compares the averaged gradients with the single-process big batch.
    freeze_batchnorm: keep BatchNorm layers on running statistics (eval) even when train_fn
    calls model.train(), so the rest of the loop can be checked exactly.
    """
    steps = _check_args(train_fn, micro_batches, loss_fn, accumulation_steps, world_size)
    micro_batches = list(micro_batches)
    sizes = [batch_size(mb) for mb in micro_batches]
    prepared = prepare(model, freeze_batchnorm=freeze_batchnorm)
    _keep_frozen_layers_in_eval(prepared)
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


def _stay_in_eval(layer: torch.nn.Module, _args: Any) -> None:
    layer.training = False


def _keep_frozen_layers_in_eval(prepared: PreparedModel) -> None:
    """train_fn usually calls model.train(), which would unfreeze them: a forward pre-hook (a
    module-level function, so it survives deepcopy and pickling) puts them back before each use."""
    for layer in prepared.module.modules():
        if isinstance(layer, torch.nn.modules.batchnorm._BatchNorm) and not layer.training:
            layer.register_forward_pre_hook(_stay_in_eval)


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
    windows, findings, notes = windows_of(recording, total, steps_n)
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
        try:
            big = concat_batches(window)
        except RuntimeError as exc:
            raise VerifyError(f"micro-batches {a}..{b - 1} cannot be concatenated into one window batch "
                              f"(the reference needs it): {str(exc).splitlines()[0]}") from None
        ref_low, ref64 = refs.grads(weights, big, float64=False), refs.grads(weights, big, float64=True)
        if all(g is None for g in ref64.values()):
            raise VerifyError("no parameter received a gradient from loss_fn on the window: does loss_fn use the model?")
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
            finding, fitted = name_gradient_bug(j + 1, step.grads, contributions, previous, shapes, items,
                                                 steps_n, scale, cosine, tol.eps)
            grad_findings.append(finding)
            diagnosis = finding.sentence
        lr = "lr " + ", ".join(f"{v:.4g}" for v in step.lrs)
        modes.append(ModeResult(mode=label, ok=ok, scale=scale, cosine=cosine, weights=fitted,
                                diagnosis=diagnosis or lr))
    # One named gradient cause is enough; the per-step table keeps the rest.
    if grad_findings:
        findings.append(grad_findings[0])
    # Per-micro-batch observations (learning rate, all-reduces) are indexed by forward call, so
    # they map onto windows only when the loop ran the model once per micro-batch.
    aligned = recording.forwards == total
    findings += schedule_findings(recording, windows, per_micro_batch=aligned)
    per_window: list[int] = []
    if ranks:
        findings = rank_findings(list(ranks)) + findings
    if recording.final_syncs is not None and aligned:
        sync, per_window = sync_findings(recording, windows, steps_n)
        findings += sync
        notes.append(f"DDP all-reduces per window (micro-batches that synchronised): {per_window}")
    report = _report(findings, notes, rows, modes, batch_stats, recording, total, steps_n, per_window)
    if recording.final_syncs is not None:
        calls = [s.syncs for s in recording.steps]
        report.settings["allreduce_calls_per_window"] = [b - a for a, b in zip([0] + calls, calls)]
    return report


def _scaled(grads: Grads, factor: float) -> Grads:
    return {n: (None if g is None else g * factor) for n, g in grads.items()}


def _rows(label, grads, ref_low, ref64, tol, magnitude, shapes, summed, note) -> list[Row]:
    rows = []
    for name, shape in shapes.items():
        c = compare(grads.get(name), ref_low.get(name), ref64.get(name), tol, magnitude=magnitude[name], steps=summed)
        rows.append(Row.from_comparison(label, name, shape, c, note))
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
