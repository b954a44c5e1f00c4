"""The big-batch gradients everything is judged against: in the run's own precision (always run:
it records the random draws every other run replays) and in float64 (the truth, up to float64
rounding), whose difference is the rounding budget.

`BigBatch` computes them for `verify` (once, at the model's weights) and for `verify_loop` (once
per window, at the weights that window started from), so both judge by the same runs: the same
copies of the model, the same seeding and draws, the same one-line errors from the user's loss.

Runs happen when a judgement needs them (judge.py). Most matches are settled against the
same-precision big batch alone: a candidate within the budget's floor (a few float eps of what was
summed, see compare.py) of it is within the full budget of the truth too, so the float64 run
happens only when some parameter is beyond that floor, and the verdict is the one the full budget
gives. Then the same-precision run may be repeated, to tell nondeterminism from accumulation bugs;
neither can turn a match into a mismatch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import torch

from gradcheck_accum.verifier.accumulate import Grads, LossFn, WindowRun, run_window, to_device
from gradcheck_accum.verifier.compare import norms64
from gradcheck_accum.verifier.draws import Draws, Supply, same_supply
from gradcheck_accum.verifier.errors import VerifyError
from gradcheck_accum.verifier.prepare import PreparedModel, default_dtype


@dataclass
class Reference:
    baseline: WindowRun                      # big batch in the run's dtype (records the draws)
    exact_run: Callable[[], WindowRun]       # big batch in float64, replaying the baseline's draws
    baseline_run: Callable[[], WindowRun]    # the baseline again (for recheck)
    exact: Optional[Grads] = None            # the float64 gradient, once a judgement needed the truth
    draw_failure: Optional[str] = None       # why a run could not be given the baseline's draws
    # known after measure_exact(): per parameter, the L2 norms of baseline - float64 (the rounding
    # budget, which every comparison and baseline_error read) and of the float64 gradient
    rounding: dict[str, tuple[float, float]] = field(default_factory=dict)
    # known after recheck(): absolute L2 difference between two baseline runs, per parameter
    nondeterminism: dict[str, float] = field(default_factory=dict)
    rechecked: bool = False

    def __post_init__(self) -> None:
        self.draw_failure = self.draw_failure or self.baseline.draw_failure

    @property
    def draws(self) -> Draws:
        return self.baseline.draws[0] if self.baseline.draws else Draws()

    @property
    def random_ops(self) -> tuple[str, ...]:
        return self.draws.ops

    @property
    def best(self) -> Grads:
        """The most exact big-batch gradient computed so far."""
        return self.exact if self.exact is not None else self.baseline.grads

    def measure_exact(self) -> bool:
        """Run the big batch in float64 (once); True when it ran now."""
        if self.exact is not None:
            return False
        run = self.exact_run()
        self.exact = run.grads
        self.rounding = _rounding(self.baseline.grads, self.exact)
        self.draw_failure = self.draw_failure or run.draw_failure
        return True

    def recheck(self) -> bool:
        """Run the same-precision big batch again (once); True when the two runs differ."""
        if self.rechecked:
            return False
        self.rechecked = True
        self.measure_exact()
        second = self.baseline_run()
        self.nondeterminism = _difference(self.baseline.grads, second.grads)
        return any(d > 0 for d in self.nondeterminism.values())

    def baseline_error(self) -> float:
        """Relative L2 error of the same-precision big batch against float64, over all parameters
        (NaN before the float64 run)."""
        if self.exact is None:
            return math.nan
        diff = sum(error ** 2 for error, _ in self.rounding.values())
        norm = sum(size ** 2 for _, size in self.rounding.values())
        return math.sqrt(diff / norm) if norm > 0 else math.nan

    @property
    def nondeterministic(self) -> list[str]:
        return [n for n, d in self.nondeterminism.items() if d > 0]


def _rounding(baseline: Grads, exact: Grads) -> dict[str, tuple[float, float]]:
    """(|baseline - exact|, |exact|) per parameter that has both, on the CPU, in float64 (as
    `compare` takes them)."""
    out = {}
    for name, truth in exact.items():
        low = baseline.get(name)
        if truth is None or low is None:
            continue
        size, error = norms64(truth.detach().to(device="cpu"), low.detach().to(device="cpu"))
        out[name] = (error, size)
    return out


def _difference(a: Grads, b: Grads) -> dict[str, float]:
    out = {}
    for name, x in a.items():
        y = b.get(name)
        if x is None or y is None:
            out[name] = 0.0 if (x is None) == (y is None) else math.inf
        else:
            out[name] = float(torch.linalg.vector_norm(x.double() - y.double()))
    return out


def float64_device(device: torch.device) -> torch.device:
    # MPS has no float64; everything else does (slowly on consumer GPUs, but this runs once).
    return torch.device("cpu") if device.type == "mps" else device


class BigBatch:
    """Runs `loss_fn` on a whole batch (divided by `divisor`, as a window of one micro-batch) from the
    prepared model, or from given weights, and returns the gradients: in float64 (`exact`) and in the
    run's dtype (`reference`'s baseline). Every run starts from the same seed."""

    def __init__(self, prepared: PreparedModel, loss_fn: LossFn, *, device: torch.device, dtype: torch.dtype,
                 divisor: Any = 1, seed: int = 0) -> None:
        self.prepared = prepared
        self.loss_fn = loss_fn
        self.device = device
        self.dtype = dtype
        self.divisor = divisor
        self.seed = seed

    def run(self, batch: Any, device: torch.device, dtype: torch.dtype, weights: Optional[Mapping[str, torch.Tensor]],
            label: str, draws: Optional[list[Optional[Supply]]] = None) -> WindowRun:
        model = self.prepared.copy(device, dtype)
        if weights is not None:
            params = dict(model.named_parameters())
            with torch.no_grad():
                for name, value in weights.items():
                    params[name].copy_(value)
        return run_window(model, [to_device(batch, device, dtype)], self.loss_fn, [self.divisor], label=label,
                          capture=False, seed=self.seed, draws=draws)

    def exact_run(self, batch: Any, weights: Optional[Mapping[str, torch.Tensor]] = None,
                  supply: Optional[Supply] = None, label: str = "float64 big batch") -> WindowRun:
        """The float64 big batch, replaying `supply`'s random draws (without one, its own draws are
        neither recorded nor replayed: nothing reads them)."""
        try:
            with default_dtype(torch.float64):
                return self.run(batch, float64_device(self.device), torch.float64, weights, label,
                                None if supply is None else [supply])
        except VerifyError as exc:
            raise VerifyError(f"{exc}; the float64 reference needs the model and loss_fn to run in float64 "
                              "(avoid hard-coded float32 dtypes)") from None

    def exact(self, batch: Any, weights: Optional[Mapping[str, torch.Tensor]] = None,
              supply: Optional[Supply] = None) -> Grads:
        return self.exact_run(batch, weights, supply).grads

    def reference(self, batch: Any, weights: Optional[Mapping[str, torch.Tensor]] = None,
                  supply: Optional[Supply] = None) -> Reference:
        """The same-precision big batch now (recording its draws, or replaying `supply`'s), the
        float64 one when a judgement asks for the truth."""
        low = self.run(batch, self.device, self.dtype, weights, "big batch", [supply])
        drawn = low.draws[0]
        replay = same_supply(drawn) if drawn else None
        return Reference(
            low,
            exact_run=lambda: self.exact_run(batch, weights, replay),
            baseline_run=lambda: self.run(batch, self.device, self.dtype, weights, "big batch",
                                          [replay] if drawn else None),
        )
