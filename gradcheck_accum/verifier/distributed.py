"""world_size > 1: run the loop under DistributedDataParallel and compare with one process.

Each micro-batch is split evenly across the ranks (rank r gets the r-th slice of every
micro-batch), so with mean losses the DDP-averaged gradient of a window equals the gradient of
the whole window in one process: that is what each step is compared with. A communication hook
counts the all-reduce calls, which shows whether `no_sync` kept the non-boundary micro-batches
local. Process start-up, failures and hangs are handled by processes.py.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from contextlib import nullcontext
from typing import Any, Callable, Optional, Sequence

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

from gradcheck_accum.verifier.batches import batch_size, check_splits, even_splits, map_batch, split_batch
from gradcheck_accum.verifier.errors import VerifyError
from gradcheck_accum.verifier.loop_recording import Recording, record_loop
from gradcheck_accum.verifier.processes import default_start_method, run_ranks
from gradcheck_accum.verifier.report import Report


def shard(micro_batch: Any, world_size: int, index: int) -> list[Any]:
    """Split one micro-batch into world_size equal slices; unequal slices would make DDP's average
    of per-rank means differ from the global mean, which is not an accumulation bug."""
    items = batch_size(micro_batch)
    if items % world_size:
        raise VerifyError(
            f"micro-batch {index} has {items} items, which world_size={world_size} cannot split evenly; "
            "use micro-batch sizes divisible by the world size"
        )
    return split_batch(micro_batch, [items // world_size] * world_size)


def _counting_allreduce(calls: list[int], bucket):
    """DDP's default all-reduce (average over the default group), counted."""
    calls[0] += 1
    return allreduce_hook(None, bucket)


def _loop_rank(rank, world_size, train_fn, module, shards, steps, optimizer, device, find_unused) -> Recording:
    if device.startswith("cuda"):
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    # Each rank trains weights of its own: a storage shared with another rank (torch.multiprocessing
    # moves tensors to shared memory when it pickles them) would take every rank's update.
    module = copy.deepcopy(module).to(device)
    ddp = DistributedDataParallel(
        module,
        device_ids=[rank] if device.startswith("cuda") else None,
        find_unused_parameters=find_unused,
    )
    calls = [0]
    ddp.register_comm_hook(calls, _counting_allreduce)
    micro_batches = [map_batch(mb, lambda t: t.to(device).clone()) for mb in shards[rank]]
    recording = record_loop(train_fn, module, micro_batches, steps, optimizer, wrapped=ddp, sync_count=lambda: calls[0])
    return _to_cpu(recording)


def _to_cpu(recording: Recording) -> Recording:
    def move(d):
        return {n: (None if t is None else t.cpu()) for n, t in d.items()}

    recording.start = move(recording.start)
    recording.after_step = [move(w) for w in recording.after_step]
    recording.leftover = move(recording.leftover)
    recording.final_weights = move(recording.final_weights)
    for step in recording.steps:
        step.grads = move(step.grads)
    return recording


def _backend_for(device: str, world_size: int) -> str:
    if device.startswith("cuda"):
        if not dist.is_nccl_available():
            raise VerifyError("device='cuda' with world_size > 1 needs the NCCL backend, which this torch lacks")
        if torch.cuda.device_count() < world_size:
            raise VerifyError(f"world_size={world_size} needs {world_size} GPUs, found {torch.cuda.device_count()}")
        return "nccl"
    if not dist.is_gloo_available():
        raise VerifyError("world_size > 1 on CPU needs the gloo backend, which this torch lacks")
    return "gloo"


def record_loop_distributed(
    train_fn: Callable,
    module: torch.nn.Module,
    micro_batches: list[Any],
    steps: int,
    optimizer: Optional[Callable],
    *,
    world_size: int,
    device: str,
    timeout: float,
    start_method: Optional[str],
    find_unused_parameters: bool,
) -> list[Recording]:
    """Run train_fn on every rank under DDP; return each rank's recording (rank order)."""
    if not dist.is_available():
        raise VerifyError("torch.distributed is not available in this torch build")
    backend = _backend_for(device, world_size)
    per_mb = [shard(mb, world_size, i) for i, mb in enumerate(micro_batches)]
    shards = [[pieces[rank] for pieces in per_mb] for rank in range(world_size)]
    method = start_method or default_start_method("cuda" if device.startswith("cuda") else "cpu")
    if method == "fork":
        # DistributedDataParallel imports torch._dynamo (seconds); import it once here, not per rank.
        import torch._dynamo  # noqa: F401
    args = (train_fn, module.cpu(), shards, steps, optimizer, device, find_unused_parameters)
    return run_ranks(_loop_rank, args, world_size, backend=backend, timeout=timeout, start_method=method)


def accumulate_with_no_sync(loss_fn: Callable, scaling: Any, model, optimizer, micro_batches, steps) -> None:
    """The loop `verify(..., world_size>1)` runs: one window, no_sync on all but the last
    micro-batch, each loss scaled as `verify`'s `scaling` says."""
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
    accumulation_steps: int = 4,
    scaling: Any = "steps",
    reference_loss_fn: Optional[Callable] = None,
    splits: Optional[Sequence[int]] = None,
    modes: Sequence[str] = ("eager",),
    device: Any = None,
    dtype: Any = None,
    *,
    world_size: int = 2,
    timeout: float = 120.0,
    start_method: Optional[str] = None,
    freeze_batchnorm: bool = False,
) -> Report:
    """`verify(..., world_size=k)`: the batch is accumulated in N micro-batches under DDP (no_sync
    on all but the last, each micro-batch split across the ranks) and the averaged gradient is
    compared with the single-process big batch. Eager only. A callable `scaling` sees each rank's
    slice of the micro-batch and of the window, as it would in a DDP training loop."""
    from gradcheck_accum.verifier.loop import verify_loop

    if scaling not in ("steps", "none") and not callable(scaling):
        raise VerifyError(f"scaling must be 'steps', 'none' or callable(micro_batch, window), got {scaling!r}")
    total = batch_size(batch)
    sizes = check_splits(splits, total) if splits is not None else even_splits(total, accumulation_steps)
    reference = functools.partial(_reference_loss, loss_fn if reference_loss_fn is None else reference_loss_fn, scaling)
    report = verify_loop(
        functools.partial(accumulate_with_no_sync, loss_fn, scaling),
        model,
        split_batch(batch, sizes),
        reference,
        accumulation_steps=len(sizes),
        world_size=world_size,
        device=device,
        dtype=dtype,
        timeout=timeout,
        start_method=start_method,
        freeze_batchnorm=freeze_batchnorm,
    )
    report.rows = [dataclasses.replace(r, mode="ddp") for r in report.rows]
    report.modes = [dataclasses.replace(m, mode="ddp") for m in report.modes]
    report.modes = [dataclasses.replace(m, diagnosis=m.diagnosis.replace("step 1", "the accumulated step"))
                    for m in report.modes]
    report.diagnosis = report.diagnosis.replace("step 1", "the accumulated step")
    if report.ok:
        report.diagnosis = (f"the gradient accumulated over {len(sizes)} micro-batches on {world_size} DDP ranks "
                            "(no_sync on all but the last) matches the single-process big batch")
    report.notes = [n for n in report.notes if "dropped remainder" not in n]
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    if "compiled" in modes:
        report.notes.append("compiled mode is not run with world_size > 1 (eager DDP only)")
    report.settings.update(splits=sizes, scaling=scaling if isinstance(scaling, str) else "callable", modes=["ddp"])
    return report
