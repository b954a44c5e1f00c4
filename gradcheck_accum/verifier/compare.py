"""The tolerance criterion that separates rounding from bugs.

Every candidate gradient (accumulated, compiled, ...) is compared with a float64 big-batch
gradient, and passes when its error is within a small multiple of the error that the
low-precision big batch itself makes against that float64 gradient: the scheme PyTorch uses to
accept compiled results. A fixed rtol would either flag rounding on large reductions or miss a
1.001x scaling bug; the baseline's own error adapts to each tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Optional, Union

import torch


def eps_of(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).eps)


@dataclass(frozen=True)
class Tolerance:
    """multiplier: allowed error as a multiple of the baseline's error; tiny tensors (at most
    tiny_numel elements) have few elements to average rounding over, so get tiny_multiplier;
    floor: an absolute allowance of floor * eps * magnitude for tensors whose baseline happens
    to be (nearly) exact, e.g. a bias whose float32 gradient has no rounding at all."""

    multiplier: float
    tiny_multiplier: float
    tiny_numel: int
    floor: float
    eps: float

    @classmethod
    def for_dtype(cls, dtype: torch.dtype) -> "Tolerance":
        if dtype in (torch.float16, torch.bfloat16):
            return cls(multiplier=3.0, tiny_multiplier=5.0, tiny_numel=16, floor=2.0, eps=eps_of(dtype))
        return cls(multiplier=2.0, tiny_multiplier=4.0, tiny_numel=16, floor=2.0, eps=eps_of(dtype))

    def to_dict(self) -> dict:
        return {"multiplier": self.multiplier, "tiny_multiplier": self.tiny_multiplier,
                "tiny_numel": self.tiny_numel, "floor": self.floor, "eps": self.eps}


@dataclass(frozen=True)
class Comparison:
    """Relative L2 numbers against the float64 gradient (absolute when it is exactly zero)."""

    error: float
    reference_error: float
    tolerance: float
    scale: float
    cosine: float
    ok: bool
    note: str = ""
    # <candidate, reference>, <reference, reference>, <candidate, candidate>: what a whole-model
    # scale and cosine add up (scale_cosine), without another pass over the gradients
    products: tuple[float, float, float] = (0.0, 0.0, 0.0)


def _f64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(device="cpu", dtype=torch.float64)


# Entries per block of norms64: one reused float64 buffer of this size stays in cache.
_BLOCK = 1 << 16


def norms64(x: torch.Tensor, other: Optional[torch.Tensor] = None) -> tuple[float, float]:
    """|x| and |x - other| (0.0 without other) in float64, on the CPU tensors given: x is converted a
    block at a time into one reused float64 buffer, so neither a float64 copy of x nor a difference
    tensor is ever allocated (each would be as large as the parameter, in float64). A float64 x is
    read in place (its differences are written into the buffer by type promotion)."""
    x = x.detach().reshape(-1)
    y = None if other is None else other.detach().reshape(-1)
    exact = x.dtype == torch.float64
    block = torch.empty(min(_BLOCK, x.numel()), dtype=torch.float64) if y is not None or not exact else None
    xx = dd = 0.0
    for start in range(0, x.numel(), _BLOCK):
        part = x[start:start + _BLOCK]
        view = None if block is None else block[:len(part)]
        if not exact:
            part = view.copy_(part)
        xx += float(torch.dot(part, part))
        if y is not None:
            rest = y[start:start + len(part)]
            if exact:
                torch.sub(part, rest, out=view)
            else:
                view.sub_(rest)
            dd += float(torch.dot(view, view))
    return math.sqrt(xx), math.sqrt(dd)


def _scale_cosine(xr: float, rr: float, xx: float) -> tuple[float, float]:
    scale = xr / rr if rr > 0 else (1.0 if xx == 0 else math.inf)
    cosine = xr / math.sqrt(rr * xx) if rr > 0 and xx > 0 else (1.0 if rr == xx == 0 else 0.0)
    return scale, cosine


def compare(
    candidate: Optional[torch.Tensor],
    baseline: Optional[torch.Tensor],
    reference64: Optional[torch.Tensor],
    tol: Tolerance,
    *,
    magnitude: "Magnitude" = 0.0,
    nondeterminism: float = 0.0,
    steps: int = 1,
    measured: bool = True,
    rounding: Optional[tuple[float, float]] = None,
) -> Comparison:
    """Judge one gradient tensor.

    candidate: the gradient under test; baseline: the same-precision big-batch gradient (its error
    against reference64 is the rounding budget); reference64: the float64 big-batch gradient.
    None stands for a parameter without gradient. magnitude: the size of what was summed to get
    the candidate (root-sum-square of the micro-batch contributions' norms), which bounds the
    rounding of the sum when the result itself is small (a callable: taken only when needed);
    nondeterminism: the absolute L2
    difference between two identical baseline runs; steps: micro-batches summed; rounding: the
    baseline's L2 error against reference64 when already known (Reference.rounding), so that it is
    not taken again for every candidate, with the norm of reference64 (|b - r|, |r|). measured=False:
    the baseline has not run yet, so only the floor is allowed (the full budget is never smaller)
    and reference_error is reported as NaN.
    """
    if candidate is None and reference64 is None:
        return Comparison(0.0, 0.0, 0.0, 1.0, 1.0, True, "unused: no gradient")
    if candidate is None or reference64 is None:
        present = candidate if candidate is not None else reference64
        if not bool(torch.any(present != 0)):
            return Comparison(0.0, 0.0, 0.0, 1.0, 1.0, True, "zero gradient / no gradient")
        note = "no gradient in this run" if candidate is None else "gradient where the big batch has none"
        return Comparison(math.inf, 0.0, 0.0, 0.0, 0.0, False, note)

    ref = _f64(reference64)
    # Differences with the float64 reference are taken in float64 by type promotion, without a
    # float64 copy of each gradient.
    cand = candidate.detach().to(device="cpu")
    if cand.shape != ref.shape:
        return Comparison(math.inf, 0.0, 0.0, math.nan, math.nan, False,
                          f"shape {tuple(cand.shape)} != {tuple(ref.shape)}")
    cand_norm, err = norms64(cand, ref)
    if not math.isfinite(err) and not bool(torch.isfinite(cand).all()):
        return Comparison(math.inf, 0.0, 0.0, math.nan, math.nan, False, "NaN/inf gradient")

    if rounding is not None:
        base_err, norm = rounding
    else:
        norm = norms64(ref)[0]
        base_err = (float(torch.linalg.vector_norm(baseline.detach().to(device="cpu") - ref)) if baseline is not None
                    else 0.0)
    if not math.isfinite(base_err):
        base_err = 0.0
    mult = tol.tiny_multiplier if ref.numel() <= tol.tiny_numel else tol.multiplier
    budget = mult * max(base_err, nondeterminism)
    allowed = budget + _floor(tol, steps, norm, magnitude, err, budget)
    denom = norm if norm > 0 else 1.0
    products = _products(norm, cand_norm, err)
    scale, cosine = _scale_cosine(*products)
    note = "" if norm > 0 else "reference is exactly zero: absolute errors"
    reported = base_err / denom if measured else math.nan
    return Comparison(err / denom, reported, allowed / denom, scale, cosine, err <= allowed, note, products)


def within_floor(
    candidate: Optional[torch.Tensor],
    baseline: Optional[torch.Tensor],
    tol: Tolerance,
    *,
    magnitude: "Magnitude" = 0.0,
    steps: int = 1,
) -> Comparison:
    """Judge one gradient tensor against the same-precision big batch alone, before any float64
    run: it passes within the budget's floor of it. That is never more lenient than `compare`:
    |c - ref64| <= |c - base| + |base - ref64| <= floor + |base - ref64|, inside the full budget.
    Computed in the run's precision (float32 at least): a difference of near-equal values is exact.
    The reported error is relative to the baseline; reference_error is NaN (not measured)."""
    if candidate is None or baseline is None:
        return compare(candidate, baseline, baseline, tol, magnitude=magnitude, steps=steps, measured=False)
    c, b = _working(candidate), _working(baseline)
    if c.shape != b.shape:
        return compare(candidate, baseline, baseline, tol, magnitude=magnitude, steps=steps, measured=False)
    norm = float(torch.linalg.vector_norm(b))
    err = float(torch.linalg.vector_norm(c - b))
    if not math.isfinite(err):  # NaN/inf somewhere: compare() says which
        return compare(candidate, baseline, baseline, tol, magnitude=magnitude, steps=steps, measured=False)
    allowed = _floor(tol, steps, norm, magnitude, err)
    denom = norm if norm > 0 else 1.0
    products = _products(norm, float(torch.linalg.vector_norm(c)), err)
    scale, cosine = _scale_cosine(*products)
    note = "" if norm > 0 else "reference is exactly zero: absolute errors"
    return Comparison(err / denom, math.nan, allowed / denom, scale, cosine, err <= allowed, note, products)


Magnitude = Union[float, Callable[[], float]]


def _floor(tol: Tolerance, steps: int, norm: float, magnitude: Magnitude, err: float, budget: float = 0.0) -> float:
    """The floor of the budget: floor * eps * sqrt(steps) * the size judged by, the gradient's own
    norm or the magnitude of what was summed, whichever is larger. A lazy magnitude (a callable)
    is taken only when the norm alone does not cover err (the floor only grows with it)."""
    scale = tol.floor * tol.eps * math.sqrt(max(steps, 1))
    if callable(magnitude):
        if err <= budget + scale * norm:
            return scale * norm
        magnitude = magnitude()
    return scale * max(norm, magnitude)


def _products(norm_b: float, norm_c: float, norm_diff: float) -> tuple[float, float, float]:
    """<c, b>, <b, b>, <c, c> from the norms |b|, |c| and |c - b| (polarisation), in float64: three
    reductions that allocate nothing, where products would each allocate a tensor as large as the
    parameter. Exact enough to report scale and cosine (the verdict reads the norms themselves)."""
    bb, cc = norm_b * norm_b, norm_c * norm_c
    return (bb + cc - norm_diff * norm_diff) / 2, bb, cc


def _working(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def scale_cosine(products: Iterable[tuple[float, float, float]]) -> tuple[float, float]:
    """Whole-model scale and cosine from the per-parameter products of the comparisons that judged
    it (Comparison.products): what global_scale_cosine computes, without touching a gradient."""
    xr = rr = xx = 0.0
    for a, b, c in products:
        xr, rr, xx = xr + a, rr + b, xx + c
    scale = xr / rr if rr > 0 else math.nan
    cosine = xr / math.sqrt(rr * xx) if rr > 0 and xx > 0 else math.nan
    return scale, cosine


def global_scale_cosine(
    candidate: Mapping[str, Optional[torch.Tensor]], reference64: Mapping[str, Optional[torch.Tensor]]
) -> tuple[float, float]:
    """Scale (projection ratio <x, ref> / <ref, ref>) and cosine over all parameters at once."""
    xr = rr = xx = 0.0
    for name, ref in reference64.items():
        cand = candidate.get(name)
        if ref is None or cand is None:
            continue
        r, c = _working(ref), _working(cand).to(device=ref.device)
        if c.dtype != r.dtype:
            c, r = c.double(), r.double()
        norms = (float(torch.linalg.vector_norm(t)) for t in (r, c, c - r))
        products = _products(*norms)
        xr, rr, xx = xr + products[0], rr + products[1], xx + products[2]
    scale = xr / rr if rr > 0 else math.nan
    cosine = xr / math.sqrt(rr * xx) if rr > 0 and xx > 0 else math.nan
    return scale, cosine
