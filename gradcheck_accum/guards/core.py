"""The guard: watch a real training job's accumulation windows and stop at the first wrong one.

Observation goes through the hooks PyTorch gives, and nothing in the training code is patched:
- post-accumulate-grad hooks mark backward passes. The first one to fire in a new autograd graph
  task begins a backward pass (one check of the window's state), and an engine callback queued there
  ends it (one record of the state it left). Each hook call costs a Python call and a GIL hand-off
  (about a microsecond), so hooks sit on every trained parameter only during the first window; from
  the first step on they stay on two sentinels that every backward of that window reached: the first
  and the last reached (near the loss and near the input). A backward that reaches neither goes
  uncounted, so when no parameter was reached by all of them, every parameter keeps its hook;
- optimizer step pre/post hooks close a window and open the next. GradScaler.step calls
  optimizer.step, so they fire there too; a step the scaler skips is seen through scaler.update(),
  which rewrites the scale tensor in place (its version counter moves);
- under DistributedDataParallel, a forward hook on the wrapper reads the flag DDP itself consults in
  its forward to decide whether the next backward all-reduces (`require_backward_grad_sync`);
- `watch_loss` puts a hook on the loss and reads the factor that reached it during backward.

"Cleared" and "modified" are read from a gradient's identity (set_to_none leaves None, so the
next backward creates a new tensor) and from its version counter (every in-place write bumps it,
accumulation by exactly one), never from its values: the guard adds no host-device synchronisation
while nothing is wrong. Values are read only to name a cause once something already is wrong, and
for a watched loss (copied asynchronously on CUDA and judged when the copy has landed).
"""

from __future__ import annotations

import functools
import gc
import warnings
import weakref
from typing import Any, Callable, Optional, Sequence, Union

import torch
from torch.amp.grad_scaler import OptState
from torch.autograd import Variable
from torch.nn.parallel import DistributedDataParallel

from gradcheck_accum.guards import violations as said
from gradcheck_accum.guards.violations import Violation

# The id of the autograd graph task running the current hook: one per backward() call, increasing.
_graph_task_id = torch._C._current_graph_task_id

OnError = Union[str, Callable[[Violation], Any]]


class GuardError(RuntimeError):
    """A wrong accumulation window; `violation` holds its kind, rule code and window."""

    def __init__(self, violation: Violation):
        super().__init__(str(violation))
        self.violation = violation


class GuardWarning(UserWarning):
    pass


def _lr_key(lr: Any) -> Any:
    # A tensor learning rate (capturable optimizers) is compared by identity and version: reading
    # its value would synchronise with the device.
    return (id(lr), lr._version) if isinstance(lr, torch.Tensor) else lr


def _lr_value(key: Any) -> float:
    return key if isinstance(key, float) else float("nan")


def _unwrap_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """accelerate's AcceleratedOptimizer (and similar wrappers) step an inner optimizer only on
    real steps; the guard hooks that one."""
    seen = set()
    while id(optimizer) not in seen:
        seen.add(id(optimizer))
        inner = getattr(optimizer, "optimizer", None) or getattr(optimizer, "_optimizer", None)
        if isinstance(inner, torch.optim.Optimizer):
            optimizer = inner
            continue
        break
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"guard needs a torch.optim.Optimizer, got {type(optimizer).__name__}")
    return optimizer


def _unwrap_scheduler(scheduler: Any) -> tuple[Any, int]:
    """The scheduler whose `last_epoch` counts its steps, and how many steps one optimizer step may
    take (accelerate's AcceleratedScheduler steps a per-sample schedule once per process)."""
    if scheduler is None:
        return None, 1
    inner = getattr(scheduler, "scheduler", None)
    if inner is not None and hasattr(inner, "last_epoch"):
        allowed = 1
        if getattr(scheduler, "step_with_optimizer", False) and not getattr(scheduler, "split_batches", True):
            from accelerate.state import AcceleratorState

            allowed = max(1, AcceleratorState().num_processes)
        return inner, allowed
    if not hasattr(scheduler, "last_epoch"):
        raise TypeError(f"scheduler {type(scheduler).__name__} has no last_epoch to count its steps")
    return scheduler, 1


def _is_scaler(scaler: Any) -> bool:
    return hasattr(scaler, "_per_optimizer_states") and hasattr(scaler, "_scale")


def ddp_wrapper_of(module: Optional[torch.nn.Module]) -> Optional[torch.nn.Module]:
    """The DistributedDataParallel wrapping `module`, for frameworks that hand callbacks the bare
    model (the HF Trainer). Found through the wrapper's reference to it; only in a process group."""
    if module is None or isinstance(module, DistributedDataParallel):
        return module
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return module
    for holder in gc.get_referrers(module):
        if isinstance(holder, dict):  # the wrapper's _modules
            for owner in gc.get_referrers(holder):
                if isinstance(owner, DistributedDataParallel) and owner.module is module:
                    return owner
    return module


class Guard:
    """Watch the accumulation windows of `optimizer` and stop at the first wrong one.

    Attach it before the first backward of a window (usually before the loop); it stays attached
    until `close()`, or use it as a context manager: ``with guard(optimizer, N, model=model):``.
    `model` is needed only to check DistributedDataParallel's no_sync; `scheduler` and `scaler`
    (a GradScaler) are checked when given (accelerate's wrappers are unwrapped, and its optimizer's
    scaler is picked up). `on_error`: "raise" (GuardError), "warn" (GuardWarning, once per kind),
    or a callable receiving each Violation. Causes that only cost time (DDP syncing every
    micro-batch) warn even under "raise"; a guard that raised is closed. `epoch_ends`: the caller
    will call `end_epoch()` at every epoch's end (otherwise short windows are judged from the run
    alone: a window of one followed by full ones, or two short windows in a row). A GradScaler not
    handed over is looked for once, when a window runs long: a step it skipped is no error.
    """

    def __init__(
        self,
        optimizer: Any,
        accumulation_steps: int,
        *,
        model: Optional[torch.nn.Module] = None,
        scheduler: Any = None,
        scaler: Any = None,
        on_error: OnError = "raise",
        epoch_ends: bool = False,
    ):
        if isinstance(accumulation_steps, bool) or not isinstance(accumulation_steps, int) or accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be a positive int, got {accumulation_steps!r}")
        if not callable(on_error) and on_error not in ("raise", "warn"):
            raise ValueError(f"on_error must be 'raise', 'warn' or a callable, got {on_error!r}")
        self.steps_n = accumulation_steps
        self.on_error = on_error
        self.optimizer = _unwrap_optimizer(optimizer)
        if scaler is None and _is_scaler(getattr(optimizer, "scaler", None)):
            scaler = optimizer.scaler  # accelerate keeps the GradScaler on its optimizer wrapper
        if scaler is not None and not _is_scaler(scaler):
            raise TypeError(f"scaler must be a torch.amp.GradScaler, got {type(scaler).__name__}")
        self.scaler = scaler
        self.scheduler, self._scheduler_allowance = _unwrap_scheduler(scheduler)
        self.ddp = model if isinstance(model, DistributedDataParallel) else None
        self.violations: list[Violation] = []
        self.window = 1  # the window now accumulating, 1-based
        self.steps = 0  # optimizer steps seen
        self._warned: set[str] = set()
        self._closed = False
        # backward-pass tracking
        self._count = 0  # backward passes in the current window
        self._task = -1  # graph task of the last hook call
        self._newest_task = -1
        self._open = False  # a backward pass is running (its end callback is queued)
        self._last: Optional[torch.Tensor] = None  # last parameter reached in the current backward
        self._watch: tuple = (None, None, None)  # (param, weakref to its grad, version) as the last backward left it
        self._stepped: Optional[tuple] = None  # the same, as the last optimizer step left it
        self._closure_step = False  # the step in progress was handed a closure
        self._window_weights: tuple = (None, 0)  # (param, version) when the window's first backward began
        self._window_lrs: list = []
        self._window_scheduler: Optional[int] = None
        self._scheduler_at_step: Optional[int] = None
        self._scale_version: Optional[int] = None
        self._searched_scaler = scaler is not None
        self._short: Optional[tuple[int, int, int]] = None  # (window, size, epoch) of a short window not yet excused
        self._epochs = 0
        self._epochs_known = epoch_ends  # end_epoch() is called, so short windows must sit right before it
        # DDP
        self._armed: Optional[bool] = None  # the last grad-enabled forward prepared an all-reduce
        self._synced_last = False
        self._nosync_backward_only = False
        # watched losses: (grad, items) of this window, and device copies not yet judged
        self._losses: list[tuple[torch.Tensor, Any]] = []
        self._reads: list[tuple[tuple, torch.Tensor, Any]] = []
        self._handles: list[Any] = []
        self._param_handles: list[Any] = []
        # First window: the parameters the current and the last backward reached, in order, and
        # those every backward reached (the sentinels are chosen among them).
        self._calibrated = False
        self._reached: list[torch.Tensor] = []
        self._reached_order: list[torch.Tensor] = []
        self._always: Optional[dict[int, torch.Tensor]] = None
        self._attach()

    # -- public API ------------------------------------------------------------------------------

    def watch_loss(self, loss: torch.Tensor, items: Union[int, torch.Tensor, None] = None) -> torch.Tensor:
        """Check the factor this micro-batch loss reaches backward with (1/N, or items/window total
        when `items`, the count the loss averages over, is given: an int or a tensor such as
        `mask.sum()`). Hand the loss before any division by N; returns it unchanged. On CUDA the
        factors (and tensor counts) are copied without blocking and judged a step or two later."""
        if isinstance(loss, torch.Tensor) and loss.requires_grad:
            loss.register_hook(functools.partial(self._loss_reached, items))
        return loss

    def end_epoch(self) -> None:
        """Mark the end of an epoch: backward passes not yet stepped are a dropped remainder, and
        from now on a short window is accepted only right before an epoch end."""
        if self._count:
            count, self._count = self._count, 0
            window, self.window = self.window, self.window + 1
            self._report(said.remainder_dropped(window, count, f"epoch {self._epochs + 1}"))
        self._epochs += 1
        self._epochs_known = True

    def close(self, check: bool = True) -> None:
        """Detach the hooks; with `check`, report backward passes never stepped (end of the run)."""
        if self._closed:
            return
        self._closed = True
        for handle in self._handles + self._param_handles:
            handle.remove()
        self._handles.clear()
        self._param_handles.clear()
        if not check:
            return
        self._poll(wait=True)
        if self._count:
            self._report(said.remainder_dropped(self.window, self._count, "the run"))

    def __enter__(self) -> "Guard":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(check=exc_type is None)

    # -- reporting -------------------------------------------------------------------------------

    def _report(self, violation: Violation) -> None:
        self.violations.append(violation)
        if callable(self.on_error):
            self.on_error(violation)
        elif violation.error and self.on_error == "raise":
            # The run is over: detach, so that a model trained again in the same process (a
            # notebook, a framework retrying) is not watched by this guard's stale state.
            self.close(check=False)
            raise GuardError(violation)
        elif violation.kind not in self._warned:
            self._warned.add(violation.kind)
            warnings.warn(str(violation), GuardWarning, stacklevel=3)

    # -- hooks -----------------------------------------------------------------------------------

    def _trained(self) -> dict[int, torch.Tensor]:
        return {id(p): p for group in self.optimizer.param_groups for p in group["params"] if p.requires_grad}

    def _attach(self) -> None:
        params = self._trained()
        if not params:
            raise ValueError("the optimizer holds no parameter that requires grad")
        self._param_handles = [p.register_post_accumulate_grad_hook(self._calibrating) for p in params.values()]
        self._handles.append(self.optimizer.register_step_pre_hook(self._before_step))
        self._handles.append(self.optimizer.register_step_post_hook(self._after_step))
        if self.ddp is not None:
            self._handles.append(self.ddp.register_forward_hook(self._ddp_forward))

    def _accumulated(self, param: torch.Tensor) -> None:
        # Hot path: runs once per parameter per backward pass.
        task = _graph_task_id()
        if task != self._task:
            self._enter_task(task, param)
        self._last = param

    def _calibrating(self, param: torch.Tensor) -> None:
        # First window: also note which parameters each backward reaches, to choose the sentinels.
        task = _graph_task_id()
        if task != self._task:
            self._enter_task(task, param)
        self._last = param
        self._reached.append(param)

    def _choose_sentinels(self) -> None:
        """After the first window: keep hooks on the first and last parameter, in backward order,
        that every backward reached; on every trained parameter when none was always reached."""
        always, order = self._always, self._reached_order
        if always is None:
            return  # no backward has finished yet: keep calibrating
        common = [p for p in order if id(p) in always]
        if common:
            keep = common[:1] if len(common) == 1 else [common[0], common[-1]]
        else:
            keep = list(self._trained().values())
        for handle in self._param_handles:
            handle.remove()
        self._param_handles = [p.register_post_accumulate_grad_hook(self._accumulated) for p in keep]
        self._calibrated = True
        self._always, self._reached_order = None, []

    def _enter_task(self, task: int, param: torch.Tensor) -> None:
        self._task = task
        if self._open or task < self._newest_task:
            # A reentrant checkpoint runs its segment's backward as a nested graph task inside the
            # running one; the outer task's later hooks carry an older id. Both are one pass.
            if not self._open:
                self._open = True
                Variable._execution_engine.queue_callback(self._end_backward)
            self._newest_task = max(task, self._newest_task)
            return
        self._newest_task = task
        self._begin_backward(param)
        self._open = True
        Variable._execution_engine.queue_callback(self._end_backward)

    def _end_backward(self) -> None:
        self._open = False
        if self._reached:
            reached = {id(p): p for p in self._reached}
            self._always = reached if self._always is None else {k: p for k, p in self._always.items() if k in reached}
            self._reached_order, self._reached = self._reached, []
        q = self._last
        g = None if q is None else q.grad
        self._watch = (q, None, None) if g is None else (q, weakref.ref(g), g._version)
        if self.ddp is not None:
            self._synced_last = bool(self._armed)
            self._nosync_backward_only = bool(self._armed) and not self.ddp.require_backward_grad_sync

    def _ddp_forward(self, module, args, output) -> None:
        self._armed = torch.is_grad_enabled() and module.require_backward_grad_sync

    def _loss_reached(self, items: Any, grad: torch.Tensor) -> None:
        self._losses.append((grad, items))

    # -- a backward pass begins ------------------------------------------------------------------

    def _begin_backward(self, param: torch.Tensor) -> None:
        count = self._count
        if count and self.scaler is not None and self._scaler_updated():
            count = self._skipped_step(count, param, update_seen=True)
        if count == self.steps_n and self.scaler is None and self._adopt_scaler():
            count = self._skipped_step(count, param, update_seen=False)
        self._count = count + 1
        if count == self.steps_n:  # first: a window that never ends explains what follows
            self._report(said.window_too_long(self.window, self.steps_n))
        if count == 0:
            self._window_opened(param)
        else:
            self._between_backwards(count, param)

    def _window_opened(self, param: torch.Tensor) -> None:
        stepped, self._stepped = self._stepped, None
        if stepped is not None:
            q, ref, version = stepped
            g = q.grad
            # Untouched since the step: the same tensor, bumped only by this backward's accumulation.
            if g is not None and ref() is g and g._version == version + (q is param):
                self._report(said.never_cleared(self.window))
        self._window_weights = (param, param._version)
        self._window_lrs = self._lrs()
        if self.scheduler is not None:
            self._window_scheduler = self.scheduler.last_epoch
        if self.scaler is not None:
            self._scaler_updated()  # an update after the previous step belongs to that step

    def _between_backwards(self, before: int, param: torch.Tensor) -> None:
        """Checks between backward `before` and `before + 1` of the current window."""
        window = self.window
        if self.ddp is not None and self._synced_last:
            made = said.no_sync_missed_forward if self._nosync_backward_only else said.ddp_synced_inside_window
            self._report(made(window, before))
        unscaled = self.scaler is not None and self._scaler_stage() is OptState.UNSCALED
        if unscaled:
            self._report(said.scaler_inside_window(window, before, "unscale_()"))
        q, ref, version = self._watch
        if ref is not None:
            g = q.grad
            if g is None:
                self._report(said.cleared_inside_window(window, before))
            elif ref() is not g:
                # A new tensor: assigned by hand, or (for the parameter that has just accumulated)
                # an out-of-place accumulation of a sparse or double-backward gradient.
                if q is not param:
                    self._report(said.cleared_inside_window(window, before))
            elif g._version != version + (q is param) and not self._synced_last and not unscaled:
                self._name_in_place_change(window, before, q, param)
        weights, version = self._window_weights
        if weights._version != version:
            self._window_weights = (weights, weights._version)
            self._report(said.weights_moved(window, before))
        if self.scheduler is not None and self.scheduler.last_epoch != self._window_scheduler:
            self._window_scheduler = self.scheduler.last_epoch
            self._scheduler_at_step = None  # already reported for this window
            self._report(said.scheduler_inside_window(window, before))
        lrs = self._lrs()
        if lrs != self._window_lrs:
            old, self._window_lrs = self._window_lrs, lrs
            a, b = next(((a, b) for a, b in zip(old, lrs) if a != b), (None, None))
            self._report(said.lr_changed_inside_window(window, before, _lr_value(a), _lr_value(b)))

    def _name_in_place_change(self, window: int, before: int, q: torch.Tensor, param: torch.Tensor) -> None:
        if q is param:  # it has accumulated again since: zeroing and rescaling look alike
            self._report(said.modified_inside_window(window, before))
            return
        # Something is already wrong, so reading the values (a device sync) is affordable here.
        zeroed = not bool(q.grad.any())
        self._report(said.cleared_inside_window(window, before, in_place=True) if zeroed
                     else said.rescaled_inside_window(window, before))

    def _lrs(self) -> list:
        return [_lr_key(group.get("lr")) for group in self.optimizer.param_groups]

    # -- GradScaler ------------------------------------------------------------------------------

    def _scaler_stage(self) -> Any:
        if self.scaler is None:
            return None
        state = self.scaler._per_optimizer_states.get(id(self.optimizer))
        return None if state is None else state["stage"]

    def _adopt_scaler(self) -> bool:
        """About to call a window too long: a GradScaler the guard was not handed may have skipped
        the step. Searching the heap is slow, so only here, and once."""
        if self._searched_scaler:
            return False
        self._searched_scaler = True
        # type() rather than isinstance(): some lazy module proxies warn when asked for __class__.
        scalers = [o for o in gc.get_objects() if issubclass(type(o), torch.amp.GradScaler) and o.is_enabled()]
        if len(scalers) != 1:
            return False
        self.scaler = scalers[0]
        return True

    def _scaler_updated(self) -> bool:
        """scaler.update() ran since the last look (it rewrites the scale tensor in place)."""
        scale = getattr(self.scaler, "_scale", None)
        version = None if scale is None else scale._version
        updated = version != self._scale_version and self._scale_version is not None
        self._scale_version = version
        return updated

    def _skipped_step(self, count: int, param: torch.Tensor, update_seen: bool) -> int:
        """update() ran after backward `count` with no optimizer step (or, with `update_seen` False,
        a GradScaler exists and the window is full): a step GradScaler skipped for inf/NaN
        gradients when the gradients were cleared since, else an update inside the window.
        Returns the count the new backward continues from."""
        q, ref, version = self._watch
        g = None if q is None else q.grad
        if g is None or ref is None or ref() is not g:
            cleared = True
        elif q is param:
            cleared = g._version != version + 1
        else:
            cleared = g._version != version and not bool(g.any())
        if not cleared:
            if update_seen:
                self._report(said.scaler_inside_window(self.window, count, "update()"))
            return count
        self._window_closed(count)
        self.window += 1
        self._stepped = None
        return 0

    # -- an optimizer step -----------------------------------------------------------------------

    def _before_step(self, optimizer, args, kwargs) -> None:
        if kwargs.get("closure", args[0] if args else None) is not None:
            # The closure runs inside step (Lightning's boundary micro-batch does its forward and
            # backward there), so the window ends after it: judged in the post-hook.
            self._closure_step = True
            return
        self._closure_step = False
        if self._count:
            self._step_checks()

    def _after_step(self, optimizer, args, kwargs) -> None:
        if self._count == 0:
            return
        if self._closure_step:
            self._step_checks()
        if not self._calibrated:
            self._choose_sentinels()
        self.steps += 1
        self.window += 1
        self._count = 0

    def _step_checks(self) -> None:
        count, window = self._count, self.window
        if self.ddp is not None and not self._synced_last:
            self._report(said.window_without_sync(window))
        q = self._watch[0]
        if q is not None and q.grad is None:  # (no optimizer clears gradients in its update)
            self._report(said.cleared_before_step(window, count))
        self._window_closed(count)
        if self.scheduler is not None:
            now = self.scheduler.last_epoch
            if self._scheduler_at_step is not None and now - self._scheduler_at_step > self._scheduler_allowance:
                self._report(said.scheduler_steps_per_step(window, now - self._scheduler_at_step,
                                                           self._scheduler_allowance))
            self._scheduler_at_step = now
        if self._losses:
            self._read_losses(count)
        g = None if q is None else q.grad
        self._stepped = None if g is None else (q, weakref.ref(g), g._version)

    def _window_closed(self, count: int) -> None:
        """Window sizes: N backward passes each, a shorter one only at the end of an epoch or run."""
        n, window, short = self.steps_n, self.window, self._short
        pending = short is not None and short[2] == self._epochs  # no epoch ended since it
        if count < n:
            if pending:
                self._short = None
                self._report(said.step_every_micro_batch(window, n) if short[1] == 1 and count == 1
                             else said.short_windows(window, (short[1], count), n))
            else:
                self._short = (window, count, self._epochs)
            return
        self._short = None
        if pending and count == n:
            if short[0] == 1 and short[1] == 1:
                self._report(said.first_window_off_by_one(n))
            elif self._epochs_known:
                self._report(said.short_window_mid_epoch(short[0], short[1], n))

    # -- watched losses --------------------------------------------------------------------------

    def _read_losses(self, count: int) -> None:
        """The window's loss factors (unscaled by the GradScaler's factor) and item counts, as one
        device vector [factors..., counts...]: judged now on CPU, after an asynchronous copy on CUDA."""
        losses, self._losses = self._losses, []
        factors = torch.stack([g.detach().reshape(()).float() for g, _ in losses])
        scale = getattr(self.scaler, "_scale", None) if self.scaler is not None and self.scaler.is_enabled() else None
        if scale is not None:
            factors = factors / scale.to(factors.device)
        counted = all(items is not None for _, items in losses)
        if counted:  # a Python count becomes a fill kernel, not a copy from the host
            counts = [i.detach().reshape(()).float().to(factors.device) if isinstance(i, torch.Tensor)
                      else torch.full((), float(i), device=factors.device) for _, i in losses]
            factors = torch.cat([factors, torch.stack(counts)])
        job = (self.window, count, counted)
        if factors.device.type == "cpu":
            self._judge_losses(job, factors.tolist())
            return
        host = torch.empty(factors.shape, dtype=factors.dtype, pin_memory=True)
        host.copy_(factors, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._reads.append((job, host, event))
        self._poll()

    def _poll(self, wait: bool = False) -> None:
        while self._reads:
            job, host, event = self._reads[0]
            if wait:
                event.synchronize()
            elif not event.query():
                return
            self._reads.pop(0)
            self._judge_losses(job, host.tolist())

    def _judge_losses(self, job: tuple, values: Sequence[float]) -> None:
        window, count, counted = job
        n = self.steps_n
        if counted:
            half = len(values) // 2
            factors, items = values[:half], [round(v) for v in values[half:]]
        else:
            factors, items = values, []

        def near(x: float, target: float) -> bool:
            return abs(x - target) <= 0.02 * abs(target)

        if len(set(items)) > 1:
            total = sum(items)
            if all(near(f, i / total) for f, i in zip(factors, items)):
                return
            if all(near(f, factors[0]) for f in factors):
                self._report(said.loss_factor(window, 1, factors[0], n, items=items))
                return
        for backward, f in enumerate(factors, start=1):
            if near(f, 1 / n) or (count < n and near(f, 1 / count)):
                continue
            self._report(said.loss_factor(window, backward, f, n))
            return


# The public spelling: `gradcheck_accum.guard(optimizer, N, model=model)`.
guard = Guard
