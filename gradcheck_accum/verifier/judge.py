"""Judging gradients against a Reference, one row per parameter, with the least evidence that
settles the verdict: the floor of the budget around the same-precision big batch first, then the
full budget against float64 (the float64 run), then a second same-precision run (nondeterminism).
Each step can only turn failing rows into passing ones, so a match never pays for the later ones.
`verify` and `verify_loop` both judge this way."""

from __future__ import annotations

import functools
import math
from typing import Callable, Mapping, Optional, Sequence

import torch

from gradcheck_accum.verifier.accumulate import Grads
from gradcheck_accum.verifier.compare import Tolerance, compare, within_floor
from gradcheck_accum.verifier.reference import Reference
from gradcheck_accum.verifier.report import Row


class Magnitudes:
    """Root-sum-square of each parameter's contribution norms: the size of what was summed, which
    bounds the rounding of the sum when the result itself is small. Taken per parameter when a
    judgement asks (one pass over its N contributions), since most parameters are judged without."""

    def __init__(self, contributions: Sequence[Grads]) -> None:
        self.contributions = contributions
        self.known: dict[str, float] = {}

    def get(self, name: str, default: float = 0.0) -> float:
        if name not in self.known:
            total = 0.0
            for c in self.contributions:
                g = c.get(name)
                if g is not None:
                    total += float(torch.linalg.vector_norm(g.float() if g.dtype != torch.float64 else g)) ** 2
            self.known[name] = math.sqrt(total)
        return self.known[name]


def magnitudes(contributions: Sequence[Grads], names: Sequence[str]) -> dict[str, float]:
    """Magnitudes of every parameter in `names` at once."""
    sizes = Magnitudes(contributions)
    return {name: sizes.get(name) for name in names}


def compare_rows(
    mode: str,
    grads: Grads,
    reference: Reference,
    tol: Tolerance,
    shapes: Mapping[str, tuple[int, ...]],
    *,
    magnitude: Optional[Mapping[str, float] | Magnitudes] = None,
    steps: int = 1,
    note: str = "",
    products: Optional[dict[str, tuple[float, float, float]]] = None,
    until_failure: bool = False,
) -> list[Row]:
    """One row per trainable parameter: within the floor of the same-precision big batch until the
    float64 run has happened (Reference.measure_exact), then against float64 with the full budget
    (the same-precision big batch's own error against it). magnitude: per parameter, the size of
    what was summed (Magnitudes: taken only for a parameter its own norm does not settle).
    products: filled with each parameter's Comparison.products, for a whole-model scale and
    cosine (compare.scale_cosine). until_failure: stop after the first failing row (judge's
    partial rows)."""
    base = reference.baseline.grads
    rows = []
    for name in base:
        size = functools.partial(magnitude.get, name, 0.0) if magnitude is not None else 0.0
        if reference.exact is None:
            c = within_floor(grads.get(name), base.get(name), tol, magnitude=size, steps=steps)
        else:
            c = compare(grads.get(name), base.get(name), reference.exact.get(name), tol, magnitude=size,
                        nondeterminism=reference.nondeterminism.get(name, 0.0), steps=steps,
                        rounding=reference.rounding.get(name))
        if products is not None:
            products[name] = c.products
        rows.append(Row.from_comparison(mode, name, tuple(shapes[name]), c, note))
        if until_failure and not c.ok:
            break
    return rows


# The evidence judge() gathers, in order: the float64 truth and the rounding budget, then a rerun of
# the same-precision big batch (nondeterminism).
EVIDENCE = ("measure_exact", "recheck")


def judge(rows: Callable[[bool], list[Row]], *references: Reference, evidence: Sequence[str] = EVIDENCE) -> list[Row]:
    """rows(partial) judged with the floor; while some row fails, with more evidence (`evidence`, a
    prefix of EVIDENCE), each at most once per reference. partial: rows may stop at the first
    failing row while more evidence can come, since the rows are judged again once it has come
    (a mismatch does not judge every parameter against the floor first); the rows returned are
    always complete."""
    partial = bool(evidence)
    judged = rows(partial)
    for i, learn in enumerate(evidence):
        if all(r.ok for r in judged):
            break
        more = i + 1 < len(evidence)
        if any([getattr(ref, learn)() for ref in references]) or (partial and not more):
            partial = more
            judged = rows(partial)
    return judged
