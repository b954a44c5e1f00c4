"""Run the user's training loop unmodified and record what it does.

Nothing in `train_fn` is patched. Observation goes through public hooks only:
- a forward pre-hook on the model counts micro-batches (one top-level forward each; a forward
  nested in another, as Lightning's redirected training_step calling self(x), is not one) and notes the
  learning rate, the DDP all-reduce count and whether the parameters moved since the window began;
- optimizer step pre/post hooks (`Optimizer.register_step_pre_hook`) record the gradients each step
  uses and the weights it leaves. `GradScaler.step` calls `optimizer.step`, so they fire there too,
  after the scaler has unscaled the gradients. A step given a closure (LBFGS, Lightning's automatic
  optimisation) runs the last backward inside the step: its gradient is recorded when the closure's
  first evaluation returns, and forwards of later evaluations (line search) are not micro-batches.
- gradient clipping has no hook, so torch.nn.utils' clip functions are wrapped while train_fn runs:
  each call records the gradient it was given and its threshold, which lets the check judge the
  accumulated gradient before clipping and then the clip itself.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Sequence

import torch

from gradcheck_accum.verifier.accumulate import seeded
from gradcheck_accum.verifier.draws import DrawMode, Draws
from gradcheck_accum.verifier.errors import VerifyError
from gradcheck_accum.verifier.user_errors import one_line, user_frame

Grads = dict[str, Optional[torch.Tensor]]
Weights = dict[str, torch.Tensor]


@dataclass
class ClipCall:
    forwards: int  # micro-batches run before the call
    grads: Grads  # the gradient it was given (before clipping)
    kind: str  # "norm" (clip_grad_norm_) or "value" (clip_grad_value_)
    threshold: float  # max_norm or clip_value
    norm_type: float = 2.0


@dataclass
class StepRecord:
    forwards: int  # micro-batches run before this step
    grads: Grads  # what the optimizer stepped on
    lrs: tuple[float, ...]  # learning rate of each param group used by this step
    syncs: Optional[int]  # DDP all-reduce calls so far (None outside DDP)
    scheduler_steps: Optional[int]  # the scheduler's step count so far (None: no scheduler seen)
    clips: list[ClipCall] = field(default_factory=list)  # clip calls since the previous step
    closure: bool = False  # recorded after the closure given to step() ran


@dataclass
class Recording:
    start: Weights
    steps: list[StepRecord] = field(default_factory=list)
    after_step: list[Weights] = field(default_factory=list)  # weights after each step: the next window's start
    forward_lrs: list[tuple[float, ...]] = field(default_factory=list)
    forward_syncs: list[int] = field(default_factory=list)
    reevaluations: int = 0  # forwards of a closure's later evaluations inside a step (not micro-batches)
    moved_before: list[int] = field(default_factory=list)  # micro-batch indices met with weights moved mid-window
    leftover: Grads = field(default_factory=dict)  # gradients still held when train_fn returned
    final_weights: Weights = field(default_factory=dict)
    final_syncs: Optional[int] = None
    final_scheduler_steps: Optional[int] = None
    training: bool = True  # the mode train_fn left the model in; references run in it
    trailing_clips: list[ClipCall] = field(default_factory=list)  # clip calls after the last step
    draws: Optional[Draws] = None  # the random draws train_fn made, in order (when asked to record them)

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
    record_draws: bool = False,
) -> Recording:
    """Run ``train_fn(wrapped or module, optimizer, micro_batches, accumulation_steps)`` and record it.

    ``module`` is the private copy whose parameters the optimizer owns; ``wrapped`` is what
    train_fn receives when it differs (a DistributedDataParallel around ``module``, or a compiled
    module): forwards are counted on it, outside any compiled code. Random ops start from ``seed``;
    record_draws: keep every random draw train_fn makes (the windows' big batches replay them).
    """
    params = dict(module.named_parameters())
    optimizer = make_optimizer(optimizer_factory, list(params.values()))
    rec = Recording(start=_snapshot(params))
    window_start = [rec.start]
    schedulers: list[Any] = []
    scans = [0]
    clips: list[ClipCall] = []
    stepping = {"in_step": False, "evaluated": False}

    def grads_now() -> Grads:
        return {n: (None if p.grad is None else p.grad.detach().clone()) for n, p in params.items()}

    running = [0]  # forwards of the model now running: one nested in another is no new micro-batch

    def before_forward(_module, _args):
        running[0] += 1
        if running[0] > 1:
            return
        if stepping["in_step"] and stepping["evaluated"]:
            rec.reevaluations += 1  # a closure evaluated again at moved weights (LBFGS line search)
            return
        moved = any(not torch.equal(p, window_start[0][n]) for n, p in params.items())
        if moved:
            rec.moved_before.append(rec.forwards)
            window_start[0] = _snapshot(params)
        rec.forward_syncs.append(sync_count() if sync_count else 0)
        rec.forward_lrs.append(_lrs(optimizer))

    def record_step(closure: bool) -> None:
        # A scheduler is built before the first steps, if at all, and its constructor marks the
        # param groups with "initial_lr"; scanning the heap for it is slow, so only then.
        scheduled = any("initial_lr" in group for group in optimizer.param_groups)
        if scheduled and not schedulers and scans[0] < 2:
            scans[0] += 1
            schedulers.extend(_schedulers_of(optimizer))
        rec.steps.append(
            StepRecord(
                forwards=rec.forwards,
                grads=grads_now(),
                lrs=_lrs(optimizer),
                syncs=sync_count() if sync_count else None,
                scheduler_steps=_scheduler_steps(schedulers),
                clips=list(clips),
                closure=closure,
            )
        )
        clips.clear()

    def recorded_closure(closure: Callable) -> Callable:
        def evaluate(*args: Any, **kwargs: Any) -> Any:
            result = closure(*args, **kwargs)
            if not stepping["evaluated"]:
                stepping["evaluated"] = True
                record_step(closure=True)
            return result

        return evaluate

    def before_step(_optimizer, args, kwargs):
        # args[0] is the optimizer itself; a closure is the next argument or the keyword.
        stepping.update(in_step=True, evaluated=False)
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
        if not callable(closure):
            stepping["evaluated"] = True
            record_step(closure=False)
            return None
        if "closure" in kwargs:
            return args, {**kwargs, "closure": recorded_closure(closure)}
        return (args[0], recorded_closure(closure), *args[2:]), kwargs

    def after_step(_optimizer, _args, _kwargs):
        if not stepping["evaluated"]:  # a closure the optimizer never called
            record_step(closure=True)
        if stepping.pop("clipped_after_closure", False):
            rec.steps[-1].grads = grads_now()
        stepping.update(in_step=False, evaluated=False)
        weights = _snapshot(params)
        rec.after_step.append(weights)
        window_start[0] = weights

    def on_clip(kind: str, parameters: list, threshold: Any, norm_type: Any = 2.0) -> None:
        ours = {id(p) for p in params.values()}
        if not any(id(p) in ours for p in parameters):
            return
        call = ClipCall(rec.forwards, grads_now(), kind, float(threshold), float(norm_type))
        if stepping["in_step"] and stepping["evaluated"] and rec.steps and rec.steps[-1].closure:
            # Clipped after the closure ran, inside step() (Lightning): the step uses what comes out.
            rec.steps[-1].clips.append(call)
            stepping["clipped_after_closure"] = True
        else:
            clips.append(call)

    def after_forward(_module, _args, _output):
        running[0] -= 1

    watched = wrapped if wrapped is not None else module
    draws = DrawMode() if record_draws else contextlib.nullcontext()
    handles = [
        watched.register_forward_pre_hook(before_forward),
        watched.register_forward_hook(after_forward, always_call=True),
        optimizer.register_step_pre_hook(before_step),
        optimizer.register_step_post_hook(after_step),
    ]
    try:
        with seeded(seed), watching_clips(on_clip), draws:
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
    rec.trailing_clips = list(clips)
    rec.draws = draws.drawn if record_draws else None
    rec.leftover = {n: (None if p.grad is None else p.grad.detach().clone()) for n, p in params.items()}
    rec.final_weights = _snapshot(params)
    rec.final_syncs = sync_count() if sync_count else None
    rec.final_scheduler_steps = _scheduler_steps(schedulers)
    rec.training = module.training
    return rec


_CLIP_FUNCTIONS = ("clip_grad_norm_", "clip_grad_norm", "clip_grad_value_")


@contextlib.contextmanager
def watching_clips(on_clip: Callable[..., None]) -> Iterator[None]:
    """While inside, torch.nn.utils' clip functions (looked up by attribute, as training code and
    accelerate, Lightning and the HF Trainer call them) tell on_clip what they were given first."""
    import torch.nn.utils as utils
    import torch.nn.utils.clip_grad as clip_grad

    saved = [(owner, name, getattr(owner, name)) for owner in (utils, clip_grad) for name in _CLIP_FUNCTIONS
             if hasattr(owner, name)]

    def wrap(name: str, original: Callable) -> Callable:
        kind = "value" if "value" in name else "norm"

        @functools.wraps(original)
        def clip(parameters: Any, *args: Any, **kwargs: Any) -> Any:
            listed = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
            threshold = kwargs.get("clip_value" if kind == "value" else "max_norm", args[0] if args else None)
            norm_type = kwargs.get("norm_type", args[1] if kind == "norm" and len(args) > 1 else 2.0)
            if threshold is not None:
                on_clip(kind, listed, threshold, norm_type)
            return original(listed, *args, **kwargs)

        return clip

    try:
        for owner, name, original in saved:
            setattr(owner, name, wrap(name, original))
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
