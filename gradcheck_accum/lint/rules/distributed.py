"""Distributed training (ACC5xx)."""

from __future__ import annotations

from typing import Iterator

from gradcheck_accum.lint.model import DDP_NO_SYNC, Event, EventKind, Fact, FileModel, Role, WindowShape
from gradcheck_accum.lint.rule import Report, Rule


class DdpSyncEveryMicroBatch(Rule):
    code = "ACC501"
    name = "ddp-sync-every-micro-batch"
    summary = "A DistributedDataParallel model all-reduces gradients on every micro-batch of a window."
    severity = "warning"  # redundant all-reduces cost time; the gradients are right
    requires = (Fact.TRAINING_LOOP, EventKind.STEP, (Role.DDP, Role.ACCELERATOR))
    reads_outside_windows = ()

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            if window.shape not in (WindowShape.GUARDED, WindowShape.NESTED) or not window.boundary_steps:
                continue
            in_nest = window.nest_events
            # a DDP wrapper: built here, or handed back by accelerator.prepare (DDP under a multi-process
            # launch), called or handed whole to what calls it (`self.imagen(x, unet=self.unet)`)
            forwards = [e for e in in_nest if e.kind is EventKind.MODEL_CALL and window.inside(e)
                        and (_is_ddp_model(e.roles) or not e.roles and _is_ddp_model(e.argument_roles))]
            if not forwards or any(e.kind is EventKind.SYNC_CONTROL for e in in_nest):
                continue
            backwards = [e for e in window.backwards if not e.via_helper]
            if not backwards:
                continue
            if not any(Role.PREPARED in e.roles | e.argument_roles for e in forwards):
                yield Report(backwards[0].node, "the DDP model all-reduces gradients on every micro-batch; wrap the "
                                                "forward and backward of non-boundary micro-batches in "
                                                "`with model.no_sync():`")
            else:
                yield Report(backwards[0].node, "the model accelerator.prepare() wrapped all-reduces gradients on "
                                                "every micro-batch of a multi-process run; wrap the forward and "
                                                "backward of non-boundary micro-batches in "
                                                "`with accelerator.no_sync(model):`, or use accelerator.accumulate")


_NOT_MODELS = frozenset({Role.OPTIMIZER, Role.SCHEDULER, Role.CRITERION, Role.DEEPSPEED})


def _is_ddp_model(roles: frozenset[Role]) -> bool:
    return Role.DDP in roles or (Role.PREPARED in roles and not roles & _NOT_MODELS)


class NoSyncMissesForward(Rule):
    code = "ACC502"
    name = "no-sync-misses-forward"
    summary = "model.no_sync() wraps the backward but not the forward call, so it has no effect."
    severity = "warning"  # DDP still all-reduces every micro-batch: slow, not wrong
    requires = (Fact.TRAINING_LOOP, DDP_NO_SYNC)
    reads_outside_windows = (DDP_NO_SYNC,)  # every no_sync() of the file

    def check(self, model: FileModel) -> Iterator[Report]:
        for scope, sync, inside in model.ddp_no_sync_contexts():
            if not any(e.kind is EventKind.BACKWARD for e in inside):
                continue
            if any(_calls_model(e, sync.target) for e in inside):
                continue
            loops = sync.ctx.loops
            earlier = [e for e in scope.events if e.order < sync.order and e.ctx.loops == loops
                       and _calls_model(e, sync.target)]
            if loops and earlier:
                yield Report(sync.node, "no_sync() wraps the backward but not the forward, and DDP decides to "
                                        "sync during forward, so gradients are still all-reduced; move the "
                                        "forward inside the `with` block")


def _calls_model(event: Event, model_name: str) -> bool:
    return event.kind is EventKind.MODEL_CALL and (event.target == model_name or model_name in event.argument_names)
