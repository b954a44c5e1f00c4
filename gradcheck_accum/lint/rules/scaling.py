"""Loss normalisation (ACC2xx)."""

from __future__ import annotations

from typing import Iterator

from gradcheck_accum.lint.model import FileModel
from gradcheck_accum.lint.rule import Report, Rule


class UnscaledAccumulatedLoss(Rule):
    code = "ACC201"
    name = "unscaled-accumulated-loss"
    summary = "An accumulated loss is backpropagated without being divided by the accumulation steps."

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())


class DoubleScaledLoss(Rule):
    code = "ACC202"
    name = "double-scaled-loss"
    summary = "The loss is divided by the accumulation steps by hand although the framework already does it."

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())


class MeanOfMeansTokenLoss(Rule):
    code = "ACC203"
    name = "mean-of-means-token-loss"
    summary = "A per-micro-batch mean over a variable number of valid tokens is divided by the accumulation steps."

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())


class LossGraphKeptAlive(Rule):
    code = "ACC204"
    name = "loss-graph-kept-alive"
    summary = "A loss that still carries autograd history is accumulated into a running total."

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())

