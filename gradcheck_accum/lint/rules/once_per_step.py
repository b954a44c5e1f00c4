"""What must happen once per optimizer step (ACC4xx)."""

from __future__ import annotations

from typing import Iterator

from gradcheck_accum.lint.model import FileModel
from gradcheck_accum.lint.rule import Report, Rule


class SchedulerEveryMicroBatch(Rule):
    code = "ACC401"
    name = "scheduler-every-micro-batch"
    summary = "The learning-rate scheduler steps on every micro-batch while the optimizer steps on the boundary."

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())


class ScheduleLengthIgnoresAccumulation(Rule):
    code = "ACC402"
    name = "schedule-length-ignores-accumulation"
    summary = "The scheduler's length counts micro-batches, not optimizer steps."

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())


class ClipEveryMicroBatch(Rule):
    code = "ACC403"
    name = "clip-every-micro-batch"
    summary = "Gradients are clipped on every micro-batch or after the step instead of once before the step."

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())


class ScalerEveryMicroBatch(Rule):
    code = "ACC404"
    name = "scaler-every-micro-batch"
    summary = "GradScaler step, update or unscale_ runs on every micro-batch while the window steps on the boundary."

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())


class ClipBeforeUnscale(Rule):
    code = "ACC405"
    name = "clip-before-unscale"
    summary = "Gradients are clipped while still multiplied by the GradScaler's scale."

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())


class RemainderDropped(Rule):
    code = "ACC406"
    name = "remainder-dropped"
    summary = "The last micro-batches of an epoch that do not fill a window are never stepped."

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())


class BoundaryOffByOne(Rule):
    code = "ACC407"
    name = "boundary-off-by-one"
    summary = "The boundary test is shifted by one: the first window has the wrong number of micro-batches."

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())

