"""From numbers to a named cause.

Two least-squares fits over the per-micro-batch contributions c_i (flattened across all
parameters, in float64):
  presence a: accumulated  ~= sum_i a_i c_i   (how the loop combined the contributions: a_i = 0
              means micro-batch i's gradient was wiped before the step)
  required w: reference    ~= sum_i w_i c_i   (how the big batch needs them weighted)
The effective weight of micro-batch i, relative to what the big batch gives it, is a_i / w_i:
all 1 when correct, all N when the loss is not divided by N, proportional to 1/items for a
mean-of-means loss, (0, ..., 0, 1) when gradients are cleared every micro-batch. When no
weighting reproduces the reference (large residual), the loss couples items across micro-batches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import torch

from gradcheck_accum.verifier.compare import global_scale_cosine

Grads = Mapping[str, Optional[torch.Tensor]]

# A fit whose residual is below this reproduces the reference; rounding in float32 gives ~1e-6,
# in bfloat16 ~1e-2, a coupled loss (BatchNorm) typically 1e-1.
FIT_RESIDUAL = 0.03
UNIFORM_SPREAD = 0.02   # weights within 2% of each other count as uniform
RATIO_MATCH = 0.02      # a scale within 2% of N (or 1/N) names that bug


@dataclass(frozen=True)
class Diagnosis:
    code: str                  # machine name of the cause (see CAUSES)
    cause: str                 # the sentence for the user
    scale: float
    cosine: float
    weights: Optional[tuple[float, ...]]  # effective weight per micro-batch (1 = correct)
    residual: float            # relative residual of the required-weights fit (nan if not fitted)
    error: float = math.nan    # relative L2 error of the whole accumulated gradient


CAUSES = {
    "match": "accumulated gradient matches the big batch",
    "non_finite": "NaN/inf gradients",
    "not_divided": "loss not divided by the accumulation steps",
    "scaled_twice": "loss scaled twice",
    "uniform_scale": "gradient uniformly scaled",
    "only_last": "only the last micro-batch contributes",
    "dropped": "some micro-batches contribute nothing",
    "mean_of_means": "per-micro-batch mean over unequal item counts",
    "proportional_items": "weights proportional to items",
    "uneven_weights": "micro-batches weighted unevenly",
    "coupled": "the loss couples items across micro-batches",
    "direction": "gradient direction differs",
}


@dataclass(frozen=True)
class Flat:
    """Every parameter's gradient laid end to end, in float64 on the CPU, built once per diagnosis:
    the contributions (N, P), the reference and the accumulated gradient (P,). A parameter missing
    from one of them (or of another size) is zeros there."""

    contributions: torch.Tensor
    reference: torch.Tensor
    accumulated: torch.Tensor

    @classmethod
    def of(cls, accumulated: Grads, contributions: Sequence[Grads], reference: Grads) -> "Flat":
        sizes = {n: (0 if g is None else g.numel()) for n, g in reference.items()}
        rows = [*contributions, reference, accumulated]
        out = torch.zeros(len(rows), sum(sizes.values()), dtype=torch.float64)
        for row, grads in zip(out, rows):
            start = 0
            for name, size in sizes.items():
                g = grads.get(name)
                if g is not None and g.numel() == size:
                    row[start:start + size] = g.detach().reshape(-1)  # one copy, converted on the way
                start += size
        return cls(out[:-2], out[-2], out[-1])

    @property
    def relative_error(self) -> float:
        norm = float(torch.linalg.vector_norm(self.reference))
        return float(torch.linalg.vector_norm(self.accumulated - self.reference)) / norm if norm > 0 else math.nan


def _solve(gram: torch.Tensor, rhs: torch.Tensor) -> Optional[torch.Tensor]:
    # Contributions of distinct micro-batches are almost always linearly independent; when they
    # are not (fewer gradient entries than micro-batches, identical micro-batches) no weights.
    eig = torch.linalg.eigvalsh(gram)
    if eig.numel() == 0 or eig[-1] <= 0 or eig[0] / eig[-1] < 1e-10:
        return None
    return torch.linalg.solve(gram, rhs)


@dataclass(frozen=True)
class Fit:
    """presence a (accumulated ~= sum a_i c_i), required w (reference ~= sum w_i c_i) and the
    relative residuals of both fits. Micro-batches whose contribution is exactly zero (nothing to
    weigh, e.g. no valid item) are left out of the fits and get nan."""

    presence: Optional[tuple[float, ...]]
    required: Optional[tuple[float, ...]]
    presence_residual: float
    residual: float


def fit_weights(flat: Flat) -> Fit:
    none = Fit(None, None, math.nan, math.nan)
    C, ref, acc = flat.contributions, flat.reference, flat.accumulated  # (N, P), (P,), (P,)
    if not len(C):
        return none
    if not (torch.isfinite(C).all() and torch.isfinite(acc).all()):
        return none
    active = [i for i in range(C.shape[0]) if bool(torch.any(C[i] != 0))]
    if not active:
        return none
    Ca = C if len(active) == C.shape[0] else C[active]
    gram = Ca @ Ca.T
    ref_c, acc_c = Ca @ ref, Ca @ acc
    w = _solve(gram, ref_c)
    a = _solve(gram, acc_c)
    if w is None or a is None:
        return none

    def residual(target: torch.Tensor, projections: torch.Tensor, coef: torch.Tensor) -> float:
        # |t - coef @ Ca|^2 from the small products already at hand (no P-sized temporaries);
        # float64 keeps the relative residual exact to ~1e-8, far below FIT_RESIDUAL.
        tt = float(target @ target)
        if tt <= 0:
            return math.nan
        squared = tt - 2 * float(coef @ projections) + float(coef @ gram @ coef)
        return math.sqrt(max(squared, 0.0) / tt)

    def spread(values: torch.Tensor) -> tuple[float, ...]:
        out = [math.nan] * C.shape[0]
        for i, v in zip(active, values.tolist()):
            out[i] = float(v)
        return tuple(out)

    return Fit(spread(a), spread(w), residual(acc, acc_c, a), residual(ref, ref_c, w))


def pattern_residual(flat: Flat, pattern: Sequence[float]) -> float:
    """Relative residual of reference ~= k * sum_i pattern_i c_i with the best scalar k, given
    that accumulated holds the plain sum of the contributions (else nan). Tests one named
    hypothesis when the free fit is ill-conditioned (collinear micro-batch gradients)."""
    C, ref, acc = flat.contributions, flat.reference, flat.accumulated
    total = C.sum(0)
    acc_norm = float(torch.linalg.vector_norm(acc))
    if acc_norm == 0 or float(torch.linalg.vector_norm(acc - total)) > FIT_RESIDUAL * acc_norm:
        return math.nan
    combo = torch.tensor([float(p) for p in pattern], dtype=torch.float64) @ C
    cc = float(combo @ combo)
    ref_norm = float(torch.linalg.vector_norm(ref))
    if cc == 0 or ref_norm == 0:
        return math.nan
    k = float(combo @ ref) / cc
    return float(torch.linalg.vector_norm(ref - k * combo)) / ref_norm


def _uniform(values: Sequence[float]) -> bool:
    mean = sum(values) / len(values)
    return mean != 0 and all(abs(v - mean) <= UNIFORM_SPREAD * abs(mean) for v in values)


def _fmt_scale(s: float) -> str:
    text = f"{s:.2f}"
    return f"{s:.6g}x" if text in ("1.00", "0.00", "-0.00") else f"{text}x"


# A uniform scale this close to 1, or weights no pattern explains, is what an auxiliary loss computed
# from batch-level statistics (an MoE load-balancing loss) looks like.
_AUX_HINT = ("; if the loss adds a term computed from batch-level statistics (an MoE load-balancing loss, ...), "
             "return the terms as a dict, e.g. {'ce': ce, 'aux': aux}: the check then measures that term's "
             "coupling and checks the rest")


def _weights_text(weights: Sequence[float]) -> str:
    return "[" + ", ".join(f"{w:.3g}" for w in weights) + "]"


def _items_match(weights: Sequence[float], counts: Mapping[str, Sequence[int]],
                 inverse: bool) -> Optional[tuple[str, Sequence[int]]]:
    """The candidate count the weights are (inversely) proportional to, the closest one first."""
    best = None
    for label, values in counts.items():
        if len(values) != len(weights) or len(set(values)) < 2 or min(values) <= 0:
            continue
        products = [w * n if inverse else w / n for w, n in zip(weights, values)]
        if _uniform(products):
            mean = sum(products) / len(products)
            spread = max(abs(p - mean) for p in products) / abs(mean)
            if best is None or spread < best[0]:
                best = (spread, label, values)
    return None if best is None else (best[1], best[2])


def _on_top(weights: Sequence[float], values: Sequence[int], n: int) -> str:
    """What a mean-of-means loop does besides: a correct one (per-micro-batch mean divided by N)
    gives weight total / (N * items_i), so mean(weight * items) / (total / N) is 1."""
    k = sum(w * v for w, v in zip(weights, values)) / len(values) / (sum(values) / n)
    if abs(k - 1) <= RATIO_MATCH:
        return ""
    if n > 1 and abs(k / n - 1) <= RATIO_MATCH:
        return f"; on top, the loss is not divided by the accumulation steps ({k:.2f}x)"
    if n > 1 and abs(k * n - 1) <= RATIO_MATCH:
        return f"; on top, it is divided by the accumulation steps twice ({k:.3g}x)"
    return f"; on top, scaled {k:.4g}x"


def diagnose(
    accumulated: Grads,
    contributions: Sequence[Grads],
    reference: Grads,
    *,
    steps: Optional[int] = None,
    item_counts: Optional[Mapping[str, Sequence[int]]] = None,
    losses: Sequence[float] = (),
) -> Diagnosis:
    """Name what makes `accumulated` differ from the float64 big-batch `reference`.

    accumulated: the gradient after the window (from verify's runner or from a user's own loop);
    contributions: each micro-batch's own gradient as the loop scaled it (sum of these is what a
    correct window holds); steps: N; item_counts: candidate item counts per micro-batch (rows,
    valid tokens, ...) used to recognise mean-of-means weighting; losses: per-micro-batch loss
    values, used to point at the micro-batch that produced NaN/inf.
    """
    n = steps if steps is not None else max(len(contributions), 1)
    if not all(g is None or bool(torch.isfinite(g).all()) for g in accumulated.values()):
        bad = [i + 1 for i, loss in enumerate(losses) if not math.isfinite(loss)]
        where = f" (loss of micro-batch {', '.join(map(str, bad))} is NaN/inf, e.g. a mean over zero valid items)" if bad else ""
        return Diagnosis("non_finite", f"NaN/inf in the accumulated gradient{where}", math.nan, math.nan, None, math.nan)

    scale, cosine = global_scale_cosine(accumulated, reference)
    flat = Flat.of(accumulated, contributions, reference)
    fit = fit_weights(flat)
    presence, required, residual = fit.presence, fit.required, fit.residual
    error = flat.relative_error
    bad_losses = [i + 1 for i, loss in enumerate(losses) if not math.isfinite(loss)]
    prefix = (f"loss of micro-batch {', '.join(map(str, bad_losses))} is NaN/inf (no valid items?) though its "
              "gradient is finite; ") if bad_losses else ""

    def result(code: str, cause: str, weights: Optional[tuple[float, ...]] = None) -> Diagnosis:
        return Diagnosis(code, prefix + cause, scale, cosine, weights, residual, error)

    # How the window combined its contributions does not depend on the reference: a wiped
    # micro-batch is named even when the loss couples items (BatchNorm).
    if presence is not None and fit.presence_residual <= FIT_RESIDUAL:
        known = [(i, a) for i, a in enumerate(presence) if math.isfinite(a)]
        largest = max((abs(a) for _, a in known), default=0.0)
        present = {i: abs(a) > 0.1 * largest for i, a in known}
        if len(presence) > 1 and present.get(len(presence) - 1) and not any(v for i, v in present.items()
                                                                             if i < len(presence) - 1):
            return result("only_last", "only the last micro-batch contributes: gradients cleared every micro-batch "
                          f"(contributions present: {_weights_text(presence)})", presence)
        if not all(present.values()):
            missing = [str(i + 1) for i, p in present.items() if not p]
            return result("dropped", f"micro-batch {', '.join(missing)} contribute(s) nothing: their gradients were "
                          f"cleared or dropped before the step (contributions present: {_weights_text(presence)})",
                          presence)

    if presence is not None and required is not None and residual <= FIT_RESIDUAL:
        effective = tuple(a / w if w != 0 else math.inf for a, w in zip(presence, required))
        active = [e for e in effective if math.isfinite(e)]
        active_counts = {label: [v for v, e in zip(values, effective) if math.isfinite(e)]
                         for label, values in (item_counts or {}).items() if len(values) == len(effective)}
        if active and _uniform(active):
            s = sum(active) / len(active)
            if n > 1 and abs(s / n - 1) <= RATIO_MATCH:
                return result("not_divided", f"{_fmt_scale(s)}: loss not divided by the accumulation steps "
                              f"(every micro-batch counts {s:.2f} times)", effective)
            if n > 1 and abs(s * n - 1) <= RATIO_MATCH:
                return result("scaled_twice", f"{_fmt_scale(s)}: scaled twice: the loss is divided by the accumulation "
                              "steps twice, on top of a normalisation that already accounts for them", effective)
            hint = _AUX_HINT if abs(s - 1) < 0.01 else ""
            return result("uniform_scale", f"{_fmt_scale(s)}: every micro-batch's gradient is scaled by {s:.6g} "
                          f"relative to the big batch{hint}", effective)
        match = _items_match(active, active_counts, inverse=True)
        if match:
            label, values = match
            return result("mean_of_means", "weights proportional to 1/items: per-micro-batch mean over unequal item "
                          f"counts (mean-of-means; {label} = {list(values)}){_on_top(active, values, n)}; sum "
                          "per-item losses and divide by the window's item count", effective)
        match = _items_match(active, active_counts, inverse=False)
        if match:
            label, values = match
            return result("proportional_items", f"weights proportional to items ({label} = {list(values)}): each "
                          "micro-batch's sum is not normalised by the window's item count", effective)
        return result("uneven_weights", f"micro-batches weighted {_weights_text(effective)} instead of all 1: "
                      "the window does not weight micro-batches as the big batch does", effective)

    if required is None and contributions and item_counts:
        for label, values in item_counts.items():
            if len(values) == len(contributions) and len(set(values)) > 1 and min(values) > 0:
                plain = pattern_residual(flat, [1.0] * len(values))
                by_items = pattern_residual(flat, values)
                # The item pattern must explain the reference far better than the plain sum does.
                if by_items <= FIT_RESIDUAL and (math.isnan(plain) or by_items < 0.1 * plain):
                    return result("mean_of_means", "weights proportional to 1/items: per-micro-batch mean over "
                                  f"unequal item counts (mean-of-means; {label} = {list(values)}); sum per-item "
                                  "losses and divide by the window's item count")

    if required is not None and residual > FIT_RESIDUAL:
        return result("coupled", f"no weighting of the micro-batch gradients reproduces the big batch (residual "
                      f"{residual:.2g}, cosine {cosine:.4f}): the loss or a layer couples items across micro-batches")
    if math.isfinite(cosine) and cosine > 1 - 1e-4 and math.isfinite(scale):
        s = scale
        if n > 1 and abs(s / n - 1) <= RATIO_MATCH:
            return result("not_divided", f"{_fmt_scale(s)}: loss not divided by the accumulation steps")
        if n > 1 and abs(s * n - 1) <= RATIO_MATCH:
            return result("scaled_twice", f"{_fmt_scale(s)}: scaled twice: the loss is divided by the accumulation "
                          "steps twice, on top of a normalisation that already accounts for them")
        return result("uniform_scale", f"{_fmt_scale(s)}: the gradient is scaled by {s:.6g} relative to the big batch")
    return result("direction", f"gradient differs from the big batch in direction (cosine {cosine:.4f}, "
                  f"scale {scale:.4g})")
