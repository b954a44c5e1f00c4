"""The big-batch gradients everything is judged against: float64 (the truth, up to float64
rounding) and the run's own precision, whose error against float64 is the rounding budget.

`BigBatch` computes them for `verify` (once, at the model's weights) and for `verify_loop` (once
per window, at the weights that window started from), so both judge by the same runs: the same
copies of the model, the same seeding, the same one-line errors from the user's loss.

Runs happen when a judgement needs them. The float64 run always does. Most matches are settled
by the budget's floor alone (a few float eps of what was summed, see compare.py), which the
measured budget can only raise, never lower: so the same-precision run happens only when some
parameter is beyond the floor, and the verdict is the one the full budget gives. On a mismatch
the same-precision run is repeated, to tell nondeterminism from accumulation bugs and to see which
random ops run: neither can turn a match into a mismatch either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import torch

from gradcheck_accum.verifier.accumulate import Grads, LossFn, WindowRun, run_window, to_device
from gradcheck_accum.verifier.draws import Draws, Supply, same_supply
from gradcheck_accum.verifier.errors import VerifyError
from gradcheck_accum.verifier.prepare import PreparedModel, default_dtype


@dataclass
class Reference:
    exact: Grads                   # big batch in float64
    baseline_run: Callable[[], WindowRun]  # big batch in the run's dtype (replaying exact's draws)
    baseline: Optional[WindowRun] = None  # its result, once a judgement needed the rounding budget
    draws: Draws = field(default_factory=Draws)  # the random numbers the float64 big batch drew
    draw_failure: Optional[str] = None  # why a run could not be given those draws
    # known after recheck(): absolute L2 difference between two baseline runs, per parameter
    nondeterminism: dict[str, float] = field(default_factory=dict)
    rechecked: bool = False

    @property
    def random_ops(self) -> tuple[str, ...]:
        return self.draws.ops

    def measure_rounding(self) -> bool:
        """Run the big batch in the run's dtype (once); True when it ran now."""
        if self.baseline is not None:
            return False
        self.baseline = self.baseline_run()
        self.draw_failure = self.draw_failure or self.baseline.draw_failure
        return True

    def recheck(self) -> bool:
        """Run the big batch again (once); True when the two runs differ (nondeterminism)."""
        if self.rechecked:
            return False
        self.rechecked = True
        self.measure_rounding()
        second = self.baseline_run()
        self.nondeterminism = _difference(self.baseline.grads, second.grads)
        return any(d > 0 for d in self.nondeterminism.values())

    def baseline_error(self) -> float:
        """Relative L2 error of the same-precision big batch against float64, over all parameters
        (NaN before it ran)."""
        if self.baseline is None:
            return math.nan
        diff = norm = 0.0
        for name, exact in self.exact.items():
            low = self.baseline.grads.get(name)
            if exact is None or low is None:
                continue
            norm += float(torch.linalg.vector_norm(exact)) ** 2
            diff += float(torch.linalg.vector_norm(low.to(exact) - exact)) ** 2
        return math.sqrt(diff / norm) if norm > 0 else math.nan

    @property
    def nondeterministic(self) -> list[str]:
        return [n for n, d in self.nondeterminism.items() if d > 0]


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
        """The float64 big batch, recording its random draws (or replaying `supply`'s)."""
        try:
            with default_dtype(torch.float64):
                return self.run(batch, float64_device(self.device), torch.float64, weights, label, [supply])
        except VerifyError as exc:
            raise VerifyError(f"{exc}; the float64 reference needs the model and loss_fn to run in float64 "
                              "(avoid hard-coded float32 dtypes)") from None

    def exact(self, batch: Any, weights: Optional[Mapping[str, torch.Tensor]] = None,
              supply: Optional[Supply] = None) -> Grads:
        return self.exact_run(batch, weights, supply).grads

    def reference(self, batch: Any, weights: Optional[Mapping[str, torch.Tensor]] = None,
                  supply: Optional[Supply] = None) -> Reference:
        """The float64 gradient now, the same-precision one (with the same draws) when a judgement
        asks for it."""
        exact = self.exact_run(batch, weights, supply)
        drawn = exact.draws[0]
        replay = [same_supply(drawn)] if drawn else None
        return Reference(exact.grads, lambda: self.run(batch, self.device, self.dtype, weights, "big batch", replay),
                         draws=drawn, draw_failure=exact.draw_failure)
