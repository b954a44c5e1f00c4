"""world_size > 1: run the loop under DistributedDataParallel or FSDP2, one process per rank.

Each micro-batch is split evenly across the ranks (rank r gets the r-th slice of every
micro-batch), so with mean losses the averaged gradient of a window equals the gradient of the
whole window in one process: that is what each step is compared with.

- DDP: a communication hook counts the all-reduce calls, which shows whether `no_sync` kept the
  non-boundary micro-batches local.
- FSDP2 (`fully_shard` on every child module that holds parameters, then on the root): a
  counting reduce-scatter (`set_custom_reduce_scatter`, the default collective, counted) shows
  whether `set_requires_gradient_sync(False)` kept them local. Parameters and gradients are
  DTensors sharded along dim 0; each rank returns its shards and the parent concatenates them, so
  the analysis sees whole tensors and no collective runs outside the loop.

Process start-up, failures and hangs are handled by processes.py.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

from gradcheck_accum.verifier.batches import map_batch, shard
from gradcheck_accum.verifier.errors import VerifyError
from gradcheck_accum.verifier.loop_recording import Recording, record_loop
from gradcheck_accum.verifier.processes import default_start_method, run_ranks


def _counting_allreduce(calls: list[int], bucket):
    """DDP's default all-reduce (average over the default group), counted."""
    calls[0] += 1
    return allreduce_hook(None, bucket)


def _rank_copy(rank: int, module: torch.nn.Module, device: str) -> tuple[torch.nn.Module, str]:
    """This rank's device (one GPU per rank) and its own copy of the module on it. Each rank trains
    weights of its own: a storage shared with another rank (torch.multiprocessing moves tensors to
    shared memory when it pickles them) would take every rank's update."""
    if device.startswith("cuda"):
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    return copy.deepcopy(module).to(device), device


def _loop_rank(rank, world_size, train_fn, module, shards, steps, optimizer, device, find_unused, seed,
               compile_backend) -> Recording:
    module, device = _rank_copy(rank, module, device)
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


def _fsdp_rank(rank, world_size, train_fn, module, shards, steps, optimizer, device, find_unused, seed,
               compile_backend) -> Recording:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, fully_shard

    module, device = _rank_copy(rank, module, device)
    mesh = init_device_mesh(torch.device(device).type, (world_size,))
    # As large models are sharded: each block its own parameter group, then the root.
    for child in module.children():
        if any(True for _ in child.parameters()):
            fully_shard(child, mesh=mesh)
    fully_shard(module, mesh=mesh)
    calls = [0]
    for sub in module.modules():
        if isinstance(sub, FSDPModule):
            sub.set_custom_reduce_scatter(_counting_reduce_scatter(calls))
    micro_batches = [map_batch(mb, lambda t: t.to(device).clone()) for mb in shards[rank]]
    recording = record_loop(train_fn, module, micro_batches, steps, optimizer, sync_count=lambda: calls[0], seed=seed)
    return _to_cpu(_local_shards(recording))


def _counting_reduce_scatter(calls: list[int]):
    """FSDP2's default reduce-scatter, counted (the twin of DDP's counted all-reduce hook)."""
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultReduceScatter

    class CountingReduceScatter(DefaultReduceScatter):
        def __call__(self, *args, **kwargs):
            calls[0] += 1
            return super().__call__(*args, **kwargs)

    return CountingReduceScatter()


def _each_tensor_map(recording: Recording, fn: Callable[[torch.Tensor], torch.Tensor]) -> Recording:
    def move(d):
        return {n: (None if t is None else fn(t)) for n, t in d.items()}

    recording.start = move(recording.start)
    recording.after_step = [move(w) for w in recording.after_step]
    recording.leftover = move(recording.leftover)
    recording.final_weights = move(recording.final_weights)
    for step in recording.steps:
        step.grads = move(step.grads)
    return recording


def _local_shards(recording: Recording) -> Recording:
    from torch.distributed.tensor import DTensor, Shard

    def local(t):
        if isinstance(t, DTensor):
            if tuple(t.placements) != (Shard(0),):
                raise VerifyError(f"FSDP placed a tensor as {t.placements}, expected one shard along dim 0")
            return t.to_local()
        return t

    return _each_tensor_map(recording, local)


def merge_shards(ranks: list[Recording]) -> Recording:
    """One recording whose tensors are the ranks' dim-0 shards concatenated in rank order."""
    base = ranks[0]
    if any(len(r.steps) != len(base.steps) for r in ranks):
        raise VerifyError("FSDP ranks stepped " + ", ".join(str(len(r.steps)) for r in ranks) + " times: every rank "
                          "must step on the same micro-batches")

    def joined(dicts):
        return {n: (None if t is None else torch.cat([d[n] for d in dicts])) for n, t in dicts[0].items()}

    base.start = joined([r.start for r in ranks])
    base.after_step = [joined([r.after_step[i] for r in ranks]) for i in range(len(base.after_step))]
    base.leftover = joined([r.leftover for r in ranks])
    base.final_weights = joined([r.final_weights for r in ranks])
    for j, step in enumerate(base.steps):
        step.grads = joined([r.steps[j].grads for r in ranks])
    return base


def _to_cpu(recording: Recording) -> Recording:
    return _each_tensor_map(recording, lambda t: t.cpu())


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
    parallel: str = "ddp",
) -> list[Recording]:
    """Run train_fn on every rank under DDP (compiled with compile_backend when given) or FSDP2
    (parallel="fsdp"); return each rank's recording (rank order; under FSDP one recording of the
    merged shards)."""
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
    if parallel == "fsdp":
        if compile_backend is not None:
            raise VerifyError("compiled mode is not run under FSDP (eager FSDP2 only)")
        return [merge_shards(run_ranks(_fsdp_rank, args, world_size, backend=backend, timeout=timeout,
                                       start_method=method))]
    return run_ranks(_loop_rank, args, world_size, backend=backend, timeout=timeout, start_method=method)
