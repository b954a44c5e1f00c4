"""Judging gradients against a Reference, one row per parameter, with the least evidence that
settles the verdict: the budget's floor first, then the measured rounding budget, then a second
big-batch run (nondeterminism). Each step can only turn failing rows into passing ones, so a
match never pays for the later ones. `verify` and `verify_loop` both judge this way."""

from __future__ import annotations

import math
from typing import Callable, Mapping, Optional, Sequence

import torch

from gradcheck_accum.verifier.accumulate import Grads
from gradcheck_accum.verifier.compare import Tolerance, compare
from gradcheck_accum.verifier.reference import Reference
from gradcheck_accum.verifier.report import Row


def magnitudes(contributions: Sequence[Grads], names: Sequence[str]) -> dict[str, float]:
    """Root-sum-square of each parameter's contribution norms: the size of what was summed, which
    bounds the rounding of the sum when the result itself is small."""
    out = {}
    for name in names:
        total = 0.0
        for c in contributions:
            g = c.get(name)
            if g is not None:
                total += float(torch.linalg.vector_norm(g.double())) ** 2
        out[name] = math.sqrt(total)
    return out


def compare_rows(
    mode: str,
    grads: Grads,
    reference: Reference,
    tol: Tolerance,
    shapes: Mapping[str, tuple[int, ...]],
    *,
    magnitude: Optional[Mapping[str, float]] = None,
    steps: int = 1,
    note: str = "",
) -> list[Row]:
    """One row per trainable parameter, judged against the big batch in the run's dtype, whose
    error against float64 is the rounding budget; before that has run, the budget is its floor
    alone (Reference.measure_rounding)."""
    measured = reference.baseline is not None
    base = reference.baseline.grads if measured else {}
    rows = []
    for name, exact in reference.exact.items():
        c = compare(grads.get(name), base.get(name), exact, tol, magnitude=(magnitude or {}).get(name, 0.0),
                    nondeterminism=reference.nondeterminism.get(name, 0.0), steps=steps, measured=measured)
        rows.append(Row.from_comparison(mode, name, tuple(shapes[name]), c, note))
    return rows


def judge(rows: Callable[[], list[Row]], *references: Reference) -> list[Row]:
    """rows() judged with the floor; while some row fails, with more evidence (the rounding budget,
    then nondeterminism and random ops), each at most once per reference."""
    judged = rows()
    for learn in ("measure_rounding", "recheck"):
        if not all(r.ok for r in judged) and any([getattr(ref, learn)() for ref in references]):
            judged = rows()
    return judged
