"""The big-batch gradients everything is judged against: the run's own precision (run twice, to
tell nondeterminism from accumulation bugs) and float64 (the truth, up to float64 rounding)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from gradcheck_accum.verifier.accumulate import Grads, LossFn, RandomOpRecorder, WindowRun, run_window, to_device
from gradcheck_accum.verifier.errors import VerifyError
from gradcheck_accum.verifier.prepare import PreparedModel


@dataclass
class Reference:
    baseline: WindowRun            # big batch in the run's dtype
    exact: Grads                   # big batch in float64
    nondeterminism: dict[str, float]  # absolute L2 difference between two baseline runs, per parameter
    random_ops: tuple[str, ...] = ()  # random ops the big batch runs (dropout left on, noise, ...)

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
    model = prepared.copy(device, dtype)
    big = to_device(batch, device, dtype)
    first = run_window(model, [big], reference_loss_fn, [reference_div], label="big batch", capture=False, seed=seed)
    with RandomOpRecorder() as recorder:
        second = run_window(model, [big], reference_loss_fn, [reference_div], label="big batch", capture=False,
                            seed=seed)
    device64 = float64_device(device)
    model64 = prepared.copy(device64, torch.float64)
    try:
        exact = run_window(model64, [to_device(batch, device64, torch.float64)], reference_loss_fn,
                           [reference_div], label="float64 big batch", capture=False, seed=seed)
    except VerifyError as exc:
        raise VerifyError(f"{exc}; the float64 reference needs the model and loss_fn to run in float64 "
                          "(avoid hard-coded float32 dtypes)") from None
    return Reference(first, exact.grads, _difference(first.grads, second.grads), tuple(sorted(recorder.ops)))
