"""`verify`: one big batch against N accumulated micro-batches, eager and compiled, judged
against a float64 reference."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Optional, Sequence

import torch

from gradcheck_accum.verifier.accumulate import (
    LossFn,
    WindowRun,
    compiled_runs,
    divisors,
    run_window,
    to_device,
)
from gradcheck_accum.verifier.batches import batch_size, check_splits, even_splits, item_counts, split_batch
from gradcheck_accum.verifier.compare import Tolerance, global_scale_cosine
from gradcheck_accum.verifier.diagnose import Diagnosis, diagnose
from gradcheck_accum.verifier.errors import VerifyError
from gradcheck_accum.verifier.prepare import (
    ModelLike,
    PreparedModel,
    exact_numerics,
    prepare,
    resolve_device,
    resolve_dtype,
)
from gradcheck_accum.verifier.judge import compare_rows, judge, magnitudes
from gradcheck_accum.verifier.reference import BigBatch, Reference
from gradcheck_accum.verifier.report import ModeResult, Report, Row

MODES = ("eager", "compiled")


def _scaling_label(scaling: Any) -> str:
    if isinstance(scaling, str) or scaling is None:
        return str(scaling)
    return f"callable {getattr(scaling, '__qualname__', type(scaling).__name__)}"


def verify(
    model: ModelLike,
    batch: Any,
    loss_fn: LossFn,
    accumulation_steps: int = 4,
    scaling: Any = "steps",
    reference_loss_fn: Optional[LossFn] = None,
    splits: Optional[Sequence[int]] = None,
    modes: Sequence[str] = MODES,
    device: Any = None,
    dtype: Any = None,
    *,
    freeze_batchnorm: bool = False,
    compile_backend: Any = "inductor",
    item_counts_fn: Optional[Callable[[Any], int]] = None,
    seed: int = 0,
    world_size: int = 1,
) -> Report:
    """Check that accumulating `accumulation_steps` micro-batches reproduces the big-batch gradient.

    model: nn.Module (copied, never modified) or zero-argument factory. batch: Tensor or nested
    tuple/list/dict of tensors sharing dim 0. loss_fn(model, micro_batch) -> scalar, as the loop
    computes it; scaling: what the loop divides that by ("steps": N, "none", or
    callable(micro_batch, window) -> divisor). reference_loss_fn: the intended big-batch
    objective (default loss_fn), scaled as a window of one micro-batch. splits: explicit
    micro-batch sizes (then N = len(splits)). freeze_batchnorm: put BatchNorm layers in eval mode
    (running statistics) so the rest of the model can be checked exactly. compile_backend: the
    torch.compile backend for mode "compiled". item_counts_fn(micro_batch) -> int: how many items
    a micro-batch holds, to recognise mean-of-means weighting (rows, valid labels and mask entries
    are tried by default). world_size > 1: accumulate under DistributedDataParallel in that many
    processes (gloo on CPU, NCCL on GPUs) and compare with the single-process big batch; "compiled"
    then wraps the DDP module in torch.compile(backend=compile_backend). seed: every run's random
    ops start from it.
    """
    modes = tuple(modes) if not isinstance(modes, str) else (modes,)
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise VerifyError(f"modes must be a non-empty subset of {MODES}, got {list(modes)!r}")
    if not callable(loss_fn):
        raise VerifyError(f"loss_fn must be callable(model, micro_batch), got {type(loss_fn).__name__}")
    reference_loss_fn = loss_fn if reference_loss_fn is None else reference_loss_fn
    if not callable(reference_loss_fn):
        raise VerifyError("reference_loss_fn must be callable(model, batch)")
    if scaling not in ("steps", "none", None) and not callable(scaling):
        raise VerifyError(f"scaling must be 'steps', 'none' or a callable(micro_batch, window), got {scaling!r}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise VerifyError(f"world_size must be a positive integer, got {world_size!r}")
    total = batch_size(batch)
    sizes = check_splits(splits, total) if splits is not None else even_splits(total, accumulation_steps)
    if world_size > 1:
        # DDP: the N micro-batches with no_sync, each split across world_size processes.
        from gradcheck_accum.verifier.ddp_window import verify_distributed

        return verify_distributed(model, batch, loss_fn, sizes, scaling, reference_loss_fn, modes, device, dtype,
                                  world_size=world_size, freeze_batchnorm=freeze_batchnorm, seed=seed,
                                  compile_backend=compile_backend, item_counts_fn=item_counts_fn,
                                  scaling_label=_scaling_label(scaling))
    run_device = resolve_device(device)
    run_dtype = resolve_dtype(dtype)
    steps = len(sizes)
    prepared = prepare(model, freeze_batchnorm=freeze_batchnorm)
    tol = Tolerance.for_dtype(run_dtype)

    started = time.perf_counter()
    with exact_numerics():
        big = to_device(batch, run_device, run_dtype)
        micro = split_batch(big, sizes)
        divs = divisors(scaling, micro)
        reference_div = divisors(scaling, [big])[0] if callable(scaling) else 1
        reference = compute_reference(prepared, batch, reference_loss_fn, reference_div,
                                      device=run_device, dtype=run_dtype, seed=seed)
        _check_reference(reference)
        shapes = {n: tuple(p.shape) for n, p in prepared.module.named_parameters()}
        window = compiled = None
        if "eager" in modes:
            window = run_window(prepared.copy(run_device, run_dtype), micro, loss_fn, divs, label="eager", seed=seed)
        if "compiled" in modes:
            compiled = compiled_runs(prepared.copy(run_device, run_dtype, fresh=True), big, micro, loss_fn,
                                     reference_loss_fn, divs, reference_div, backend=compile_backend, seed=seed)

        def rows_now() -> list[Row]:
            rows = []
            for mode, run in _accumulated(window, compiled):
                rows += compare_rows(mode, run.grads, reference, tol, shapes, steps=steps,
                                     magnitude=magnitudes(run.contributions, list(shapes)))
            if compiled is not None:
                rows += compare_rows("compiled big batch", compiled[0].grads, reference, tol, shapes)
            return rows

        rows = judge(rows_now, reference)
        counts = _counts(batch, sizes, item_counts_fn) if not all(r.ok for r in rows) else {}
        results, diagnoses = _mode_results(rows, window, compiled, reference, steps, counts)

    elapsed = time.perf_counter() - started
    verdict, sentence = _verdict(results, diagnoses, prepared, reference)
    notes = _notes(prepared, reference)
    if compiled is not None and compiled[2].fallback_wrapper:
        notes.append("Module.compile traced no graph (forward defined in torch.nn); used torch.compile(model) instead")
    if reference.random_ops and verdict != "match":
        # Every run is seeded alike, so random draws line up when micro-batches consume the
        # stream in the big batch's order; when they do not, they cannot match.
        notes.append(f"random ops run in the forward pass: {', '.join(reference.random_ops)}")
    settings = {
        "accumulation_steps": steps,
        "splits": sizes,
        "scaling": _scaling_label(scaling),
        "dtype": str(run_dtype).removeprefix("torch."),
        "device": str(run_device),
        "modes": list(modes),
        "compile_backend": compile_backend if isinstance(compile_backend, str) else repr(compile_backend),
        "seed": seed,
        "torch": torch.__version__,
        "tolerance": tol.to_dict(),
        "seconds": round(elapsed, 3),
    }
    return Report(verdict, sentence, rows, results, notes, settings)


def compute_reference(prepared: PreparedModel, batch: Any, reference_loss_fn: LossFn, reference_div: Any, *,
                      device: torch.device, dtype: torch.dtype, seed: int) -> Reference:
    return BigBatch(prepared, reference_loss_fn, device=device, dtype=dtype, divisor=reference_div,
                    seed=seed).reference(batch)


def _accumulated(window: Optional[WindowRun], compiled: Optional[tuple]) -> list[tuple[str, WindowRun]]:
    runs = [] if window is None else [("eager", window)]
    return runs + ([] if compiled is None else [("compiled", compiled[1])])


def _counts(batch: Any, sizes: Sequence[int], item_counts_fn: Optional[Callable[[Any], int]]) -> dict:
    """Candidate item counts per micro-batch, for naming mean-of-means weighting."""
    pieces = split_batch(batch, sizes)
    counts = item_counts(pieces)
    if item_counts_fn is not None:
        try:
            counts = {"items": [int(item_counts_fn(mb)) for mb in pieces], **counts}
        except Exception as exc:
            raise VerifyError(f"item_counts_fn raised {type(exc).__name__}: {exc}") from None
    return counts


def _mode_results(rows: list[Row], window: Optional[WindowRun], compiled: Optional[tuple], reference: Reference,
                  steps: int, counts: dict) -> tuple[list[ModeResult], dict[str, Diagnosis]]:
    results: list[ModeResult] = []
    diagnoses: dict[str, Diagnosis] = {}
    for mode, run in _accumulated(window, compiled):
        mode_rows = [r for r in rows if r.mode == mode]
        result = _mode_result(mode, run, mode_rows, reference, steps, counts, diagnoses)
        if mode == "compiled":
            stats = compiled[2]
            result = dataclasses.replace(result, compilations=stats.compilations,
                                         recompilations=stats.recompilations, graph_breaks=stats.graph_breaks)
        results.append(result)
    if compiled is not None:
        big_ok = all(r.ok for r in rows if r.mode == "compiled big batch")
        results.append(ModeResult("compiled big batch", big_ok, diagnosis="" if big_ok else
                                  "compiled big batch differs from the float64 reference", seconds=compiled[0].seconds))
    return results, diagnoses


def _check_reference(reference: Reference) -> None:
    for name, g in reference.exact.items():
        if g is not None and not bool(torch.isfinite(g).all()):
            raise VerifyError(f"the big-batch gradient of {name!r} is NaN/inf even in float64: "
                              "fix the loss (it cannot be compared)")
    if all(g is None for g in reference.exact.values()):
        raise VerifyError("no parameter received a gradient from the big batch: does loss_fn use the model?")


def _mode_result(mode: str, window: WindowRun, rows: list[Row], reference: Reference, steps: int,
                 counts: dict, diagnoses: dict[str, Diagnosis]) -> ModeResult:
    if all(r.ok for r in rows):
        # A match needs no explanation (fitting micro-batch weights costs about a training step on a
        # large model): scale and cosine say how close it came.
        scale, cosine = global_scale_cosine(window.grads, reference.exact)
        return ModeResult(mode, True, scale, cosine, None, "matches", window.seconds)
    d = diagnose(window.grads, window.contributions, reference.exact, steps=steps, item_counts=counts,
                 losses=window.losses)
    diagnoses[mode] = d
    return ModeResult(mode, False, d.scale, d.cosine, d.weights, d.cause, window.seconds)


def _verdict(results: list[ModeResult], diagnoses: dict[str, Diagnosis], prepared: PreparedModel,
             reference: Reference) -> tuple[str, str]:
    by_mode = {r.mode: r for r in results}
    if all(r.ok for r in results):
        ran = ", ".join(r.mode for r in results if r.mode in MODES)
        return "match", f"accumulated gradients match the big-batch gradient within rounding ({ran})"
    eager = by_mode.get("eager")
    primary = "eager" if eager is not None and not eager.ok else "compiled"
    d = diagnoses[primary]
    confident_bug = d.code in ("not_divided", "scaled_twice", "only_last", "dropped", "non_finite")
    if prepared.batch_stat_layers and not confident_bug:
        layers = ", ".join(prepared.batch_stat_layers[:3]) + (" ..." if len(prepared.batch_stat_layers) > 3 else "")
        return "inherent", (f"batch-statistic layers ({layers}) normalise each micro-batch with its own statistics, "
                            f"so accumulation cannot reproduce the big batch (measured: cosine {d.cosine:.4f}, "
                            f"relative error {d.error:.3g}); pass freeze_batchnorm=True to check the rest")
    if reference.random_ops and not confident_bug:
        return "inherent", (f"the forward pass draws random numbers ({', '.join(reference.random_ops)}), and "
                            "the micro-batches' draws differ from the big batch's (measured: cosine "
                            f"{d.cosine:.4f}, relative error {d.error:.3g}); switch those ops off for the check")
    if primary == "eager" and d.code == "coupled":
        return "inherent", d.cause
    if primary == "compiled" and eager is not None:
        big = by_mode.get("compiled big batch")
        if big is not None and not big.ok:
            return "mismatch", ("mismatch only when compiled: the compiled big batch already differs from the "
                                "float64 reference (compiler numerics, not accumulation)")
        return "mismatch", f"mismatch only when compiled: {d.cause}"
    return "mismatch", d.cause


def _notes(prepared: PreparedModel, reference: Reference) -> list[str]:
    notes = []
    if prepared.unwrapped:
        notes.append(f"checked the module inside {' > '.join(prepared.unwrapped)}; compiled mode compiles its own copy")
    if prepared.dropout_layers:
        shown = ", ".join(prepared.dropout_layers[:4]) + (" ..." if len(prepared.dropout_layers) > 4 else "")
        notes.append(f"dropout switched off for the check in {len(prepared.dropout_layers)} layer(s) ({shown}); "
                     "other random ops are seeded identically in every run")
    if prepared.frozen_batch_stat_layers:
        notes.append(f"{len(prepared.frozen_batch_stat_layers)} BatchNorm layer(s) frozen (eval mode, running "
                     "statistics) as requested")
    if prepared.frozen_parameters:
        notes.append(f"{len(prepared.frozen_parameters)} parameter(s) with requires_grad=False skipped")
    unused = [n for n, g in reference.exact.items() if g is None]
    if unused:
        notes.append(f"{len(unused)} trainable parameter(s) receive no gradient from loss_fn: "
                     + ", ".join(unused[:5]) + (" ..." if len(unused) > 5 else ""))
    if reference.nondeterministic:
        worst = max(reference.nondeterminism.values())
        notes.append(f"the big-batch gradient is nondeterministic (two identical runs differ, up to {worst:.3g} in "
                     "L2); that difference is added to the rounding budget")
    return notes
