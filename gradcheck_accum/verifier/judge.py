"""Judging gradients against a Reference, one row per parameter, with the least evidence that
settles the verdict: the floor of the budget around the same-precision big batch first, then the
full budget against float64 (the float64 run), then a second same-precision run (nondeterminism).
Each step can only turn failing rows into passing ones, so a match never pays for the later ones.
`verify` and `verify_loop` both judge this way."""

from __future__ import annotations

import math
from typing import Callable, Mapping, Optional, Sequence

import torch

from gradcheck_accum.verifier.accumulate import Grads
from gradcheck_accum.verifier.compare import Tolerance, compare, within_floor
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
                total += float(torch.linalg.vector_norm(g.float() if g.dtype != torch.float64 else g)) ** 2
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
    """One row per trainable parameter: within the floor of the same-precision big batch until the
    float64 run has happened (Reference.measure_exact), then against float64 with the full budget
    (the same-precision big batch's own error against it)."""
    base = reference.baseline.grads
    size = magnitude or {}
    rows = []
    for name in base:
        if reference.exact is None:
            c = within_floor(grads.get(name), base.get(name), tol, magnitude=size.get(name, 0.0), steps=steps)
        else:
            c = compare(grads.get(name), base.get(name), reference.exact.get(name), tol,
                        magnitude=size.get(name, 0.0), nondeterminism=reference.nondeterminism.get(name, 0.0),
                        steps=steps, rounding=reference.rounding.get(name, (None,))[0])
        rows.append(Row.from_comparison(mode, name, tuple(shapes[name]), c, note))
    return rows


def judge(rows: Callable[[], list[Row]], *references: Reference) -> list[Row]:
    """rows() judged with the floor; while some row fails, with more evidence (the float64 truth and
    the rounding budget, then nondeterminism), each at most once per reference."""
    judged = rows()
    for learn in ("measure_exact", "recheck"):
        if not all(r.ok for r in judged) and any([getattr(ref, learn)() for ref in references]):
            judged = rows()
    return judged
