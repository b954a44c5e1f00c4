"""The rule registry: every rule class, ordered by code."""

from __future__ import annotations

from gradcheck_accum.lint.rule import Rule
from gradcheck_accum.lint.rules.compile import CompiledStateDictSaved, CompileInsideLoop, LoadAfterCompile
from gradcheck_accum.lint.rules.distributed import DdpSyncEveryMicroBatch, NoSyncMissesForward
from gradcheck_accum.lint.rules.housekeeping import UnusedSuppression
from gradcheck_accum.lint.rules.once_per_step import (
    BoundaryOffByOne,
    ClipBeforeUnscale,
    ClipEveryMicroBatch,
    RemainderDropped,
    ScalerEveryMicroBatch,
    ScheduleLengthIgnoresAccumulation,
    SchedulerEveryMicroBatch,
)
from gradcheck_accum.lint.rules.order import (
    GradientsNeverCleared,
    StepEveryMicroBatch,
    ZeroGradBetweenBackwardAndStep,
    ZeroGradEveryMicroBatch,
)
from gradcheck_accum.lint.rules.scaling import (
    DoubleScaledLoss,
    LossGraphKeptAlive,
    MeanOfMeansTokenLoss,
    UnscaledAccumulatedLoss,
)

ALL_RULES: tuple[type[Rule], ...] = tuple(
    sorted(
        [ZeroGradEveryMicroBatch, GradientsNeverCleared, ZeroGradBetweenBackwardAndStep, StepEveryMicroBatch, UnscaledAccumulatedLoss, DoubleScaledLoss, MeanOfMeansTokenLoss, LossGraphKeptAlive, LoadAfterCompile, CompiledStateDictSaved, CompileInsideLoop, SchedulerEveryMicroBatch, ScheduleLengthIgnoresAccumulation, ClipEveryMicroBatch, ScalerEveryMicroBatch, ClipBeforeUnscale, RemainderDropped, BoundaryOffByOne, DdpSyncEveryMicroBatch, NoSyncMissesForward, UnusedSuppression],
        key=lambda rule: rule.code,
    )
)
RULES_BY_CODE: dict[str, type[Rule]] = {rule.code: rule for rule in ALL_RULES}
