"""From numbers to a named cause.

Two least-squares fits over the per-micro-batch contributions c_i (flattened across all
parameters, in float64; solved from their inner products alone, see Gram):
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
class Gram:
    """Inner products, in float64 over all parameters, of the contributions c_1..c_N, the reference
    r and the accumulated gradient a: everything the fits below need is a combination of them, so
    no model-sized float64 matrix of all the gradients is ever held. Built once per diagnosis, one
    block of entries at a time (those entries of the N + 2 gradients stacked on the CPU in float64,
    times their transpose). A parameter missing from one of them (or of another size) is zeros there.
    `squared_error`: |a - r|^2, summed directly (a difference of near-equal products would lose
    the digits of a small error)."""

    products: torch.Tensor   # (N + 2, N + 2): rows and columns c_1..c_N, r, a
    squared_error: float

    @classmethod
    def of(cls, accumulated: Grads, contributions: Sequence[Grads], reference: Grads) -> "Gram":
        n = len(contributions)
        products = torch.zeros(n + 2, n + 2, dtype=torch.float64)
        cc = torch.zeros(n, n + 1, dtype=torch.float64)     # <c_i, c_j>, <c_i, a>
        with_ref = torch.zeros(n + 1, dtype=torch.float64)   # <c_i, r>, <a, r>
        rr = aa = squared_error = 0.0
        # One float64 block of _CHUNK columns, reused, holding c_1..c_N and a converted: stacking a
        # whole parameter's gradients in float64 would allocate (and fault in) 8 * (N + 2) bytes per
        # gradient entry. The reference is float64 already and read in place (no copy of it), and
        # each product is taken once: <c_i, .> by one (N, N + 1) product, <., r> by one
        # matrix-vector product, |a| and |r| by dot products (a full (N + 2)^2 block product would
        # take every off-diagonal product twice).
        block = None
        for name, ref in reference.items():
            if ref is None:
                continue
            flat = [_flat(grads.get(name), ref.numel()) for grads in (*contributions, accumulated)]
            truth = _flat(ref, ref.numel())
            if truth.dtype != torch.float64:
                truth = truth.double()
            for start in range(0, ref.numel(), _CHUNK):
                width = min(_CHUNK, ref.numel() - start)
                if block is None:
                    block = torch.empty(n + 2, _CHUNK, dtype=torch.float64)
                view = block[:, :width]
                for row, g in zip(view, flat):
                    if g is None:
                        row.zero_()
                    else:
                        row.copy_(g[start:start + width])  # converted on the way
                rows, r, a, scratch = view[:n + 1], truth[start:start + width], view[n], view[n + 1]
                cc += rows[:n] @ rows.T
                with_ref += rows @ r
                rr += float(torch.dot(r, r))
                aa += float(torch.dot(a, a))
                torch.sub(a, r, out=scratch)
                squared_error += float(torch.dot(scratch, scratch))
        products[:n, :n], products[:n, n + 1] = cc[:, :n], cc[:, n]
        products[:n, n], products[n, n + 1] = with_ref[:n], with_ref[n]
        products[n, n], products[n + 1, n + 1] = rr, aa
        products = torch.triu(products) + torch.triu(products, 1).T
        return cls(products, squared_error)

    @property
    def steps(self) -> int:
        return self.products.shape[0] - 2

    @property
    def contributions(self) -> torch.Tensor:
        """<c_i, c_j>, (N, N)."""
        return self.products[:-2, :-2]

    def with_reference(self) -> torch.Tensor:
        """<c_i, r>, (N,)."""
        return self.products[:-2, -2]

    def with_accumulated(self) -> torch.Tensor:
        """<c_i, a>, (N,)."""
        return self.products[:-2, -1]

    @property
    def finite(self) -> bool:
        """No NaN/inf in the contributions and the accumulated gradient: any would make its own
        squared norm NaN or inf (squares of finite float32 gradients cannot overflow float64)."""
        return bool(torch.isfinite(torch.diagonal(self.products)[:-2]).all()) and self.accumulated_finite

    @property
    def accumulated_finite(self) -> bool:
        return math.isfinite(float(self.products[-1, -1]))

    @property
    def scale_cosine(self) -> tuple[float, float]:
        """Scale <a, r> / <r, r> and cosine of the accumulated gradient against the reference."""
        ar, rr, aa = (float(self.products[i, j]) for i, j in ((-1, -2), (-2, -2), (-1, -1)))
        scale = ar / rr if rr > 0 else math.nan
        cosine = ar / math.sqrt(rr * aa) if rr > 0 and aa > 0 else math.nan
        return scale, cosine

    @property
    def relative_error(self) -> float:
        rr = float(self.products[-2, -2])
        return math.sqrt(self.squared_error / rr) if rr > 0 else math.nan


# Gradient entries per block of Gram.of: (N + 2) x 2^16 float64 values stay in cache.
_CHUNK = 1 << 16


def _flat(g: Optional[torch.Tensor], numel: int) -> Optional[torch.Tensor]:
    """A gradient as one flat vector on the CPU, or None where the parameter has none (or another size)."""
    if g is None or g.numel() != numel:
        return None
    return g.detach().reshape(-1).cpu()


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


def fit_weights(gram: Gram) -> Fit:
    none = Fit(None, None, math.nan, math.nan)
    if not gram.steps or not gram.finite:
        return none
    G = gram.contributions
    # Micro-batches whose contribution is exactly zero have nothing to weigh.
    active = [i for i in range(gram.steps) if float(G[i, i]) > 0]
    if not active:
        return none
    index = torch.tensor(active)
    gram_a = G[index][:, index]
    ref_c, acc_c = gram.with_reference()[index], gram.with_accumulated()[index]
    w = _solve(gram_a, ref_c)
    a = _solve(gram_a, acc_c)
    if w is None or a is None:
        return none

    def residual(tt: float, projections: torch.Tensor, coef: torch.Tensor) -> float:
        # |t - sum_i coef_i c_i|^2 from the inner products; float64 keeps the relative residual
        # exact to ~1e-8, far below FIT_RESIDUAL.
        if tt <= 0:
            return math.nan
        squared = tt - 2 * float(coef @ projections) + float(coef @ gram_a @ coef)
        return math.sqrt(max(squared, 0.0) / tt)

    def spread(values: torch.Tensor) -> tuple[float, ...]:
        out = [math.nan] * gram.steps
        for i, v in zip(active, values.tolist()):
            out[i] = float(v)
        return tuple(out)

    return Fit(spread(a), spread(w), residual(float(gram.products[-1, -1]), acc_c, a),
               residual(float(gram.products[-2, -2]), ref_c, w))


def pattern_residual(gram: Gram, pattern: Sequence[float]) -> float:
    """Relative residual of reference ~= k * sum_i pattern_i c_i with the best scalar k, given
    that accumulated holds the plain sum of the contributions (else nan). Tests one named
    hypothesis when the free fit is ill-conditioned (collinear micro-batch gradients)."""
    G, ones = gram.contributions, torch.ones(gram.steps, dtype=torch.float64)
    aa, rr = float(gram.products[-1, -1]), float(gram.products[-2, -2])
    # |a - sum_i c_i|^2
    off_sum = aa - 2 * float(ones @ gram.with_accumulated()) + float(ones @ G @ ones)
    if aa == 0 or math.sqrt(max(off_sum, 0.0)) > FIT_RESIDUAL * math.sqrt(aa):
        return math.nan
    p = torch.tensor([float(v) for v in pattern], dtype=torch.float64)
    cc, cr = float(p @ G @ p), float(p @ gram.with_reference())
    if cc <= 0 or rr == 0:
        return math.nan
    # min over k of |r - k combo|^2 = rr - <combo, r>^2 / <combo, combo>
    return math.sqrt(max(rr - cr * cr / cc, 0.0) / rr)


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
    gram = Gram.of(accumulated, contributions, reference)
    # NaN/inf shows in the accumulated gradient's own squared norm; parameters the Gram leaves out
    # (no reference gradient, another size) are checked one by one.
    left_out = [g for name, g in accumulated.items() if g is not None
                and (reference.get(name) is None or reference[name].numel() != g.numel())]
    if not gram.accumulated_finite or not all(bool(torch.isfinite(g).all()) for g in left_out):
        bad = [i + 1 for i, loss in enumerate(losses) if not math.isfinite(loss)]
        where = f" (loss of micro-batch {', '.join(map(str, bad))} is NaN/inf, e.g. a mean over zero valid items)" if bad else ""
        return Diagnosis("non_finite", f"NaN/inf in the accumulated gradient{where}", math.nan, math.nan, None, math.nan)

    scale, cosine = gram.scale_cosine
    fit = fit_weights(gram)
    presence, required, residual = fit.presence, fit.required, fit.residual
    error = gram.relative_error
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
                plain = pattern_residual(gram, [1.0] * len(values))
                by_items = pattern_residual(gram, values)
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
