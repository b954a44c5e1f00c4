"""Run the user's training loop unmodified and record what it does.

Nothing in `train_fn` is patched. Observation goes through public hooks only:
- a forward pre-hook on the model counts micro-batches (one top-level forward each) and notes the
  learning rate, the DDP all-reduce count and whether the parameters moved since the window began;
- optimizer step pre/post hooks (`Optimizer.register_step_pre_hook`) record the gradients each step
  uses and the weights it leaves. `GradScaler.step` calls `optimizer.step`, so they fire there too,
  after the scaler has unscaled the gradients.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch

from gradcheck_accum.verifier.accumulate import seeded
from gradcheck_accum.verifier.errors import VerifyError
from gradcheck_accum.verifier.user_errors import one_line, user_frame

Grads = dict[str, Optional[torch.Tensor]]
Weights = dict[str, torch.Tensor]


@dataclass
class StepRecord:
    forwards: int  # micro-batches run before this step
    grads: Grads  # what the optimizer stepped on
    lrs: tuple[float, ...]  # learning rate of each param group used by this step
    syncs: Optional[int]  # DDP all-reduce calls so far (None outside DDP)
    scheduler_steps: Optional[int]  # the scheduler's step count so far (None: no scheduler seen)


@dataclass
class Recording:
    start: Weights
    steps: list[StepRecord] = field(default_factory=list)
    after_step: list[Weights] = field(default_factory=list)  # weights after each step: the next window's start
    forward_lrs: list[tuple[float, ...]] = field(default_factory=list)
    forward_syncs: list[int] = field(default_factory=list)
    moved_before: list[int] = field(default_factory=list)  # micro-batch indices met with weights moved mid-window
    leftover: Grads = field(default_factory=dict)  # gradients still held when train_fn returned
    final_weights: Weights = field(default_factory=dict)
    final_syncs: Optional[int] = None
    final_scheduler_steps: Optional[int] = None
    training: bool = True  # the mode train_fn left the model in; references run in it

    @property
    def forwards(self) -> int:
        return len(self.forward_lrs)


def _snapshot(params: dict[str, torch.nn.Parameter]) -> Weights:
    return {name: p.detach().clone() for name, p in params.items()}


def _lrs(optimizer: torch.optim.Optimizer) -> tuple[float, ...]:
    return tuple(float(group.get("lr", float("nan"))) for group in optimizer.param_groups)


def _schedulers_of(optimizer: torch.optim.Optimizer) -> list[Any]:
    # train_fn owns its scheduler; the only handle on it from outside is its reference to the optimizer.
    base = torch.optim.lr_scheduler.LRScheduler
    found = []
    for obj in gc.get_referrers(optimizer):
        if isinstance(obj, base):
            found.append(obj)
        elif isinstance(obj, dict) and obj.get("optimizer") is optimizer:
            # Python 3.10 reports the instance's __dict__ rather than the instance.
            found.extend(o for o in gc.get_referrers(obj) if isinstance(o, base))
    return list({id(s): s for s in found}.values())


def _scheduler_steps(schedulers: list[Any]) -> Optional[int]:
    if not schedulers:
        return None
    return max(int(getattr(s, "last_epoch", 0)) for s in schedulers)


def make_optimizer(factory: Optional[Callable], params: Sequence[torch.nn.Parameter]) -> torch.optim.Optimizer:
    if factory is None:
        return torch.optim.SGD(params, lr=0.1)
    if not callable(factory):
        raise VerifyError(f"optimizer must be a factory(params) -> torch.optim.Optimizer, got {type(factory).__name__}")
    optimizer = factory(params)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise VerifyError(
            f"the optimizer factory returned {type(optimizer).__name__}, not a torch.optim.Optimizer"
        )
    return optimizer


def record_loop(
    train_fn: Callable,
    module: torch.nn.Module,
    micro_batches: list[Any],
    accumulation_steps: int,
    optimizer_factory: Optional[Callable],
    *,
    wrapped: Optional[torch.nn.Module] = None,
    sync_count: Optional[Callable[[], int]] = None,
    seed: int = 0,
) -> Recording:
    """Run ``train_fn(wrapped or module, optimizer, micro_batches, accumulation_steps)`` and record it.

    ``module`` is the private copy whose parameters the optimizer owns; ``wrapped`` is what
    train_fn receives when it differs (a DistributedDataParallel around ``module``, or a compiled
    module): forwards are counted on it, outside any compiled code. Random ops start from ``seed``.
    """
    params = dict(module.named_parameters())
    optimizer = make_optimizer(optimizer_factory, list(params.values()))
    rec = Recording(start=_snapshot(params))
    window_start = [rec.start]
    schedulers: list[Any] = []
    scans = [0]

    def before_forward(_module, _args):
        moved = any(not torch.equal(p, window_start[0][n]) for n, p in params.items())
        if moved:
            rec.moved_before.append(rec.forwards)
            window_start[0] = _snapshot(params)
        rec.forward_syncs.append(sync_count() if sync_count else 0)
        rec.forward_lrs.append(_lrs(optimizer))

    def before_step(_optimizer, _args, _kwargs):
        # A scheduler is built before the first steps, if at all, and its constructor marks the
        # param groups with "initial_lr"; scanning the heap for it is slow, so only then.
        scheduled = any("initial_lr" in group for group in optimizer.param_groups)
        if scheduled and not schedulers and scans[0] < 2:
            scans[0] += 1
            schedulers.extend(_schedulers_of(optimizer))
        grads = {n: (None if p.grad is None else p.grad.detach().clone()) for n, p in params.items()}
        rec.steps.append(
            StepRecord(
                forwards=rec.forwards,
                grads=grads,
                lrs=_lrs(optimizer),
                syncs=sync_count() if sync_count else None,
                scheduler_steps=_scheduler_steps(schedulers),
            )
        )

    def after_step(_optimizer, _args, _kwargs):
        weights = _snapshot(params)
        rec.after_step.append(weights)
        window_start[0] = weights

    handles = [
        (wrapped if wrapped is not None else module).register_forward_pre_hook(before_forward),
        optimizer.register_step_pre_hook(before_step),
        optimizer.register_step_post_hook(after_step),
    ]
    try:
        with seeded(seed):
            train_fn(wrapped if wrapped is not None else module, optimizer, micro_batches, accumulation_steps)
    except VerifyError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code: report it in one line
        hint = ""
        if "find_unused_parameters" in str(exc):
            hint = " (pass find_unused_parameters=True to verify_loop)"
        raise VerifyError(f"train_fn raised {type(exc).__name__}: {one_line(str(exc))}{hint}{user_frame(exc)}") from exc
    finally:
        for handle in handles:
            handle.remove()
    rec.leftover = {n: (None if p.grad is None else p.grad.detach().clone()) for n, p in params.items()}
    rec.final_weights = _snapshot(params)
    rec.final_syncs = sync_count() if sync_count else None
    rec.final_scheduler_steps = _scheduler_steps(schedulers)
    rec.training = module.training
    return rec
