"""The rule registry: every rule class, ordered by code."""

from __future__ import annotations

from gradcheck_accum.lint.rule import Rule
from gradcheck_accum.lint.rules.order import ZeroGradEveryMicroBatch
from gradcheck_accum.lint.rules.order import GradientsNeverCleared
from gradcheck_accum.lint.rules.order import ZeroGradBetweenBackwardAndStep
from gradcheck_accum.lint.rules.order import StepEveryMicroBatch
from gradcheck_accum.lint.rules.scaling import UnscaledAccumulatedLoss
from gradcheck_accum.lint.rules.scaling import DoubleScaledLoss
from gradcheck_accum.lint.rules.scaling import MeanOfMeansTokenLoss
from gradcheck_accum.lint.rules.scaling import LossGraphKeptAlive
from gradcheck_accum.lint.rules.compile import LoadAfterCompile
from gradcheck_accum.lint.rules.compile import CompiledStateDictSaved
from gradcheck_accum.lint.rules.compile import CompileInsideLoop
from gradcheck_accum.lint.rules.once_per_step import SchedulerEveryMicroBatch
from gradcheck_accum.lint.rules.once_per_step import ScheduleLengthIgnoresAccumulation
from gradcheck_accum.lint.rules.once_per_step import ClipEveryMicroBatch
from gradcheck_accum.lint.rules.once_per_step import ScalerEveryMicroBatch
from gradcheck_accum.lint.rules.once_per_step import ClipBeforeUnscale
from gradcheck_accum.lint.rules.once_per_step import RemainderDropped
from gradcheck_accum.lint.rules.once_per_step import BoundaryOffByOne
from gradcheck_accum.lint.rules.distributed import DdpSyncEveryMicroBatch
from gradcheck_accum.lint.rules.distributed import NoSyncMissesForward

ALL_RULES: tuple[type[Rule], ...] = tuple(
    sorted(
        [ZeroGradEveryMicroBatch, GradientsNeverCleared, ZeroGradBetweenBackwardAndStep, StepEveryMicroBatch, UnscaledAccumulatedLoss, DoubleScaledLoss, MeanOfMeansTokenLoss, LossGraphKeptAlive, LoadAfterCompile, CompiledStateDictSaved, CompileInsideLoop, SchedulerEveryMicroBatch, ScheduleLengthIgnoresAccumulation, ClipEveryMicroBatch, ScalerEveryMicroBatch, ClipBeforeUnscale, RemainderDropped, BoundaryOffByOne, DdpSyncEveryMicroBatch, NoSyncMissesForward],
        key=lambda rule: rule.code,
    )
)
RULES_BY_CODE: dict[str, type[Rule]] = {rule.code: rule for rule in ALL_RULES}
