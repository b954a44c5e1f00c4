"""Distributed training (ACC5xx)."""

from __future__ import annotations

from typing import Iterator

from gradcheck_accum.lint.model import FileModel
from gradcheck_accum.lint.rule import Report, Rule


class DdpSyncEveryMicroBatch(Rule):
    code = "ACC501"
    name = "ddp-sync-every-micro-batch"
    summary = "A DistributedDataParallel model all-reduces gradients on every micro-batch of a window."

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())


class NoSyncMissesForward(Rule):
    code = "ACC502"
    name = "no-sync-misses-forward"
    summary = "model.no_sync() wraps the backward but not the forward call, so it has no effect."

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())

