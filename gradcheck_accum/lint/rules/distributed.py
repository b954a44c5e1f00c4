"""Distributed training (ACC5xx)."""

from __future__ import annotations

from typing import Iterator

from gradcheck_accum.lint import bindings as b
from gradcheck_accum.lint import events as ev
from gradcheck_accum.lint.model import FileModel
from gradcheck_accum.lint.rule import Report, Rule
from gradcheck_accum.lint.windows import GUARDED, NESTED


class DdpSyncEveryMicroBatch(Rule):
    code = "ACC501"
    name = "ddp-sync-every-micro-batch"
    summary = "A DistributedDataParallel model all-reduces gradients on every micro-batch of a window."
    tokens = ("DataParallel", "DDP", "FSDP")
    outside_windows = ()
    needs = ("backward(", "step(")

    def check(self, model: FileModel) -> Iterator[Report]:
        for window in model.windows:
            if window.shape not in (GUARDED, NESTED) or not window.boundary_steps:
                continue
            in_nest = window.nest_events
            forwards = [e for e in in_nest if e.kind == ev.MODEL_CALL and b.DDP in e.kinds and window.inside(e)]
            if not forwards or any(e.kind == ev.SYNC_CONTROL for e in in_nest):
                continue
            backwards = [e for e in window.backwards if not e.via_helper]
            if backwards:
                yield Report(backwards[0].node, "the DDP model all-reduces gradients on every micro-batch; wrap the "
                                                "forward and backward of non-boundary micro-batches in "
                                                "`with model.no_sync():`")


class NoSyncMissesForward(Rule):
    code = "ACC502"
    name = "no-sync-misses-forward"
    summary = "model.no_sync() wraps the backward but not the forward call, so it has no effect."
    tokens = ("no_sync",)
    outside_windows = ("no_sync",)  # every no_sync() of the file

    def check(self, model: FileModel) -> Iterator[Report]:
        for scope, sync in model.events(ev.SYNC_CONTROL):
            if sync.api != "no_sync" or sync.extra.get("framework") != "ddp" or sync.target is None:
                continue
            body = [e for e in scope.events if any(call is sync.node for call in e.ctx.withs)]
            if not any(e.kind == ev.BACKWARD for e in body):
                continue
            if any(_calls_model(e, sync.target) for e in body):
                continue
            loops = sync.ctx.loops
            earlier = [e for e in scope.events if e.order < sync.order and e.ctx.loops == loops
                       and _calls_model(e, sync.target)]
            if loops and earlier:
                yield Report(sync.node, "no_sync() wraps the backward but not the forward, and DDP decides to "
                                        "sync during forward, so gradients are still all-reduced; move the "
                                        "forward inside the `with` block")


def _calls_model(event: ev.Event, model_name: str) -> bool:
    if event.kind != ev.MODEL_CALL:
        return False
    return event.target == model_name or model_name in event.extra.get("args", set())
