"""`verify(..., world_size=k)`: one window of N micro-batches accumulated under
DistributedDataParallel (no_sync on all but the last micro-batch, each micro-batch split across
the ranks), compared with the single-process big batch by the loop checker (loop.py).

It sits above loop.py, which sits above distributed.py: the loop checker starts the ranks, this
module only says which loop they run and how the result reads.
"""

from __future__ import annotations

import functools
from contextlib import nullcontext
from typing import Any, Callable, Optional, Sequence

from gradcheck_accum.verifier.batches import split_batch
from gradcheck_accum.verifier.loop import LoopOutcome, LoopRun
from gradcheck_accum.verifier.report import Report

WHERE = "the accumulated step"


def accumulate_with_no_sync(loss_fn: Callable, scaling: Any, model, optimizer, micro_batches, steps) -> None:
    """The loop each rank runs: one window, no_sync on all but the last micro-batch, each loss
    scaled as `verify`'s `scaling` says."""
    window = list(micro_batches)
    for i, micro_batch in enumerate(window):
        last = i == len(window) - 1
        with nullcontext() if last else model.no_sync():
            loss = loss_fn(model, micro_batch)
            if scaling == "steps":
                loss = loss / steps
            elif callable(scaling):
                loss = loss / scaling(micro_batch, window)
            loss.backward()
    optimizer.step()


def _reference_loss(reference_loss_fn: Callable, scaling: Any, model, batch):
    """verify's reference: the big batch scaled as a window of one micro-batch would be."""
    loss = reference_loss_fn(model, batch)
    return loss / scaling(batch, [batch]) if callable(scaling) else loss


def verify_distributed(
    model: Any,
    batch: Any,
    loss_fn: Callable,
    sizes: Sequence[int],
    scaling: Any,
    reference_loss_fn: Callable,
    modes: Sequence[str],
    device: Any,
    dtype: Any,
    *,
    world_size: int,
    freeze_batchnorm: bool,
    seed: int,
    compile_backend: Any,
    item_counts_fn: Optional[Callable[[Any], int]],
    scaling_label: str,
    timeout: float = 120.0,
    start_method: Optional[str] = None,
) -> Report:
    """Arguments as `verify` validated them. Each mode is one run of the ranks: "eager" as "ddp",
    "compiled" as "ddp compiled" (torch.compile around the DDP module, with compile_backend)."""
    run = LoopRun.prepare(model, split_batch(batch, sizes), device=device, dtype=dtype, world_size=world_size,
                          freeze_batchnorm=freeze_batchnorm)
    train_fn = functools.partial(accumulate_with_no_sync, loss_fn, scaling)
    reference = functools.partial(_reference_loss, reference_loss_fn, scaling)
    outcomes: dict[str, LoopOutcome] = {}
    for mode in modes:
        label = "ddp" if mode == "eager" else "ddp compiled"
        outcomes[label] = run.check(
            train_fn, reference, len(sizes), None, world_size=world_size, timeout=timeout, start_method=start_method,
            find_unused_parameters=False, seed=seed, compile_backend=compile_backend if mode == "compiled" else None,
            where=lambda _j: WHERE, mode=label, item_counts_fn=item_counts_fn, check_remainder=False)
    verdict, diagnosis = _verdict(outcomes, len(sizes), world_size)
    notes = list(run.notes)
    for outcome in outcomes.values():
        notes += [n for n in outcome.notes if n not in notes and n != diagnosis and not diagnosis.endswith(n)]
    first = next(iter(outcomes.values()))
    settings = {**first.settings, **run.settings(world_size), "splits": list(sizes), "scaling": scaling_label,
                "modes": list(outcomes), "seed": seed,
                "compile_backend": compile_backend if isinstance(compile_backend, str) else repr(compile_backend)}
    rows = [row for outcome in outcomes.values() for row in outcome.rows]
    results = [result for outcome in outcomes.values() for result in outcome.modes]
    return Report(verdict, diagnosis, rows, results, notes, settings)


def _verdict(outcomes: dict[str, LoopOutcome], steps: int, world_size: int) -> tuple[str, str]:
    eager, compiled = outcomes.get("ddp"), outcomes.get("ddp compiled")
    if all(o.verdict == "match" for o in outcomes.values()):
        how = " and ".join("compiled" if label.endswith("compiled") else "eager" for label in outcomes)
        return "match", (f"the gradient accumulated over {steps} micro-batches on {world_size} DDP ranks (no_sync "
                         f"on all but the last; {how}) matches the single-process big batch")
    if eager is None or eager.verdict != "match":
        failed = eager or compiled
        return failed.verdict, failed.diagnosis
    return compiled.verdict, f"mismatch only when compiled: {compiled.diagnosis}"
