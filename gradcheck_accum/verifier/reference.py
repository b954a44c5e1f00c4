"""The big-batch gradients everything is judged against: the run's own precision and float64 (the
truth, up to float64 rounding). On a mismatch the run's own precision is run a second time, to tell
nondeterminism from accumulation bugs and to see which random ops run: neither can turn a match
into a mismatch, so a check that matches never pays for it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from gradcheck_accum.verifier.accumulate import Grads, LossFn, RandomOpRecorder, WindowRun, run_window, to_device
from gradcheck_accum.verifier.errors import VerifyError
from gradcheck_accum.verifier.prepare import PreparedModel


@dataclass
class Reference:
    baseline: WindowRun            # big batch in the run's dtype
    exact: Grads                   # big batch in float64
    # known after recheck(): absolute L2 difference between two baseline runs, per parameter, and the
    # random ops the big batch runs (dropout left on, noise, ...)
    nondeterminism: dict[str, float] = field(default_factory=dict)
    random_ops: tuple[str, ...] = ()
    second_run: Optional[Callable[[], tuple[WindowRun, tuple[str, ...]]]] = None

    def recheck(self) -> bool:
        """Run the big batch again (once); True when that added anything to judge by."""
        if self.second_run is None:
            return False
        second, self.random_ops = self.second_run()
        self.second_run = None
        self.nondeterminism = _difference(self.baseline.grads, second.grads)
        return bool(self.random_ops) or any(d > 0 for d in self.nondeterminism.values())

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


def compute_reference(
    prepared: PreparedModel,
    batch: Any,
    reference_loss_fn: LossFn,
    reference_div: Any,
    *,
    device: torch.device,
    dtype: torch.dtype,
    seed: int = 0,
) -> Reference:
    big = to_device(batch, device, dtype)
    first = run_window(prepared.copy(device, dtype), [big], reference_loss_fn, [reference_div], label="big batch",
                       capture=False, seed=seed)

    def second_run() -> tuple[WindowRun, tuple[str, ...]]:
        with RandomOpRecorder() as recorder:
            second = run_window(prepared.copy(device, dtype), [big], reference_loss_fn, [reference_div],
                                label="big batch", capture=False, seed=seed)
        return second, tuple(sorted(recorder.ops))

    device64 = float64_device(device)
    model64 = prepared.copy(device64, torch.float64)
    try:
        exact = run_window(model64, [to_device(batch, device64, torch.float64)], reference_loss_fn,
                           [reference_div], label="float64 big batch", capture=False, seed=seed)
    except VerifyError as exc:
        raise VerifyError(f"{exc}; the float64 reference needs the model and loss_fn to run in float64 "
                          "(avoid hard-coded float32 dtypes)") from None
    return Reference(first, exact.grads, second_run=second_run)
