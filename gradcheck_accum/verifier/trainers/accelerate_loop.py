"""`verify_accelerate`: check a training loop written with accelerate's `Accelerator.accumulate()`.

What accelerate does (accelerate/accelerator.py, optimizer.py, scheduler.py; read in 1.0.1 and
1.15.0, alike): `accelerator.backward(loss)` divides every loss by `gradient_accumulation_steps` N, inside
`accumulate()` or not (DeepSpeed excepted: its engine scales); `accumulate(model)` counts calls and
sets `sync_gradients` on every N-th one, or on the last batch of a dataloader that went through
`accelerator.prepare` (it looks one batch ahead), and skips DDP's all-reduce otherwise; the
prepared optimizer's `step()` and `zero_grad()` and the prepared scheduler's `step()` do nothing
unless `sync_gradients` is set. So a last, partial window of k < N micro-batches steps with k/N of
its mean gradient (accepted, as for a loop dividing by N), and only when the dataloader is
prepared: an unprepared one never flags its end, and the remainder is never stepped.

The adapter builds the `Accelerator(gradient_accumulation_steps=N)` with accelerate's
process-wide state fresh (and the caller's restored afterwards) and a plain in-order DataLoader
over the micro-batches, and hands them to the loop, which prepares what it prepares.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch

from gradcheck_accum.verifier.errors import VerifyError
from gradcheck_accum.verifier.report import Report
from gradcheck_accum.verifier.trainers.common import (
    MicroBatchRows,
    check_micro_batches,
    framework_report,
    fresh_accelerate_state,
)


def verify_accelerate(
    train_fn: Callable,
    model: Any,
    micro_batches: Sequence[Any],
    loss_fn: Callable,
    accumulation_steps: int = 4,
    optimizer: Optional[Callable] = None,
    *,
    accelerator_kwargs: Optional[dict] = None,
    item_counts_fn: Optional[Callable[[Any], int]] = None,
    device: Optional[str] = None,
    dtype: Any = None,
) -> Report:
    """Run ``train_fn(accelerator, model, optimizer, dataloader)`` and check every optimizer step.

    train_fn is the loop as the project writes it: it prepares what it prepares and steps inside
    ``accelerator.accumulate(model)``. accelerator: ``Accelerator(gradient_accumulation_steps=
    accumulation_steps, cpu=..., **accelerator_kwargs)``; dataloader: an in-order DataLoader that
    yields ``micro_batches``; optimizer: factory(params), default SGD. loss_fn(model, batch) ->
    the objective of a whole window (the mean over its items), as for verify_loop.
    """
    try:
        import accelerate
    except ImportError:
        raise VerifyError("verify_accelerate needs accelerate (pip install accelerate)") from None
    if not callable(train_fn):
        raise VerifyError("train_fn must be callable as train_fn(accelerator, model, optimizer, dataloader)")
    if accelerator_kwargs is not None and not isinstance(accelerator_kwargs, dict):
        raise VerifyError(f"accelerator_kwargs must be a dict of Accelerator arguments, got {accelerator_kwargs!r}")
    micro_batches = check_micro_batches(micro_batches, "accelerate")

    from gradcheck_accum.verifier.loop import verify_loop

    run = _AccelerateRun(train_fn, dict(accelerator_kwargs or {}))
    report = verify_loop(run, model, micro_batches, loss_fn, accumulation_steps, optimizer, device=device,
                         dtype=dtype, item_counts_fn=item_counts_fn)
    ran = (f"ran train_fn with an Accelerator of accelerate {accelerate.__version__} (accelerator.backward "
           f"divides each loss by gradient_accumulation_steps={accumulation_steps})")
    return framework_report(report, f"accelerate {accelerate.__version__}", [ran])


class _AccelerateRun:
    """verify_loop's train_fn: a fresh Accelerator and an in-order loader, then the user's loop."""

    def __init__(self, train_fn: Callable, accelerator_kwargs: dict):
        self.train_fn = train_fn
        self.accelerator_kwargs = accelerator_kwargs

    def __call__(self, model, optimizer, micro_batches, steps) -> None:
        from accelerate import Accelerator

        rows = MicroBatchRows(micro_batches)
        loader = torch.utils.data.DataLoader(rows, batch_size=1, shuffle=False, collate_fn=rows.unwrap_rows)
        kwargs = {"cpu": next(model.parameters()).device.type == "cpu", **self.accelerator_kwargs}
        if "gradient_accumulation_plugin" not in kwargs:
            kwargs.setdefault("gradient_accumulation_steps", steps)
        with fresh_accelerate_state():
            try:
                accelerator = Accelerator(**kwargs)
            except Exception as exc:  # noqa: BLE001 - the user's accelerator arguments
                raise VerifyError(f"Accelerator({_shown(kwargs)}) raised {type(exc).__name__}: {exc}") from None
            self.train_fn(accelerator, model, optimizer, loader)
        rows.check_order("the dataloader")


def _shown(kwargs: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
