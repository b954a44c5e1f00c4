"""Update order inside the accumulation window (ACC1xx)."""

from __future__ import annotations

from typing import Iterator

from gradcheck_accum.lint.model import FileModel
from gradcheck_accum.lint.rule import Report, Rule


class ZeroGradEveryMicroBatch(Rule):
    code = "ACC101"
    name = "zero-grad-every-micro-batch"
    summary = "Gradients are cleared on every micro-batch while the optimizer steps only on the window boundary."

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())


class GradientsNeverCleared(Rule):
    code = "ACC102"
    name = "gradients-never-cleared"
    summary = "The loop steps the optimizer but never clears gradients between windows."

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())


class ZeroGradBetweenBackwardAndStep(Rule):
    code = "ACC103"
    name = "zero-grad-between-backward-and-step"
    summary = "Gradients are cleared between the window's last backward and its optimizer step."

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())


class StepEveryMicroBatch(Rule):
    code = "ACC104"
    name = "step-every-micro-batch"
    summary = "The loop declares accumulation but steps the optimizer on every micro-batch."

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())

