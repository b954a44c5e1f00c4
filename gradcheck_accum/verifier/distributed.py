"""world_size > 1: run the loop under DistributedDataParallel, one process per rank.

Each micro-batch is split evenly across the ranks (rank r gets the r-th slice of every
micro-batch), so with mean losses the DDP-averaged gradient of a window equals the gradient of
the whole window in one process: that is what each step is compared with. A communication hook
counts the all-reduce calls, which shows whether `no_sync` kept the non-boundary micro-batches
local. Process start-up, failures and hangs are handled by processes.py.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

from gradcheck_accum.verifier.batches import batch_size, map_batch, split_batch
from gradcheck_accum.verifier.errors import VerifyError
from gradcheck_accum.verifier.loop_recording import Recording, record_loop
from gradcheck_accum.verifier.processes import default_start_method, run_ranks


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


def _loop_rank(rank, world_size, train_fn, module, shards, steps, optimizer, device, find_unused, seed,
               compile_backend) -> Recording:
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
    # Compiled: torch.compile around DDP, as DDP's documentation recommends (dynamo splits the graph
    # at bucket boundaries so all-reduces still overlap the backward).
    wrapped = ddp if compile_backend is None else torch.compile(ddp, backend=compile_backend)
    micro_batches = [map_batch(mb, lambda t: t.to(device).clone()) for mb in shards[rank]]
    recording = record_loop(train_fn, module, micro_batches, steps, optimizer, wrapped=wrapped,
                            sync_count=lambda: calls[0], seed=seed)
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
    seed: int = 0,
    compile_backend: Any = None,
) -> list[Recording]:
    """Run train_fn on every rank under DDP (compiled with compile_backend when given); return each
    rank's recording (rank order)."""
    if not dist.is_available():
        raise VerifyError("torch.distributed is not available in this torch build")
    backend = _backend_for(device, world_size)
    per_mb = [shard(mb, world_size, i) for i, mb in enumerate(micro_batches)]
    shards = [[pieces[rank] for pieces in per_mb] for rank in range(world_size)]
    method = start_method or default_start_method("cuda" if device.startswith("cuda") else "cpu")
    if method == "fork":
        # DistributedDataParallel imports torch._dynamo (seconds); import it once here, not per rank.
        import torch._dynamo  # noqa: F401
    args = (train_fn, module.cpu(), shards, steps, optimizer, device, find_unused_parameters, seed, compile_backend)
    return run_ranks(_loop_rank, args, world_size, backend=backend, timeout=timeout, start_method=method)
