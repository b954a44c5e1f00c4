"""Boundary predicates: the tests that decide whether a micro-batch closes its accumulation window."""

from __future__ import annotations

from dataclasses import dataclass, replace

from gradcheck_accum.lint.bindings import is_accumulation_name
from gradcheck_accum.lint.lazy import cst
from gradcheck_accum.lint.names import call_receiver, code, dotted, iter_calls, last_part
from gradcheck_accum.lint.vocabulary import DefOp, Scope, Tag


class BoundaryKind(Tag):
    """The families of boundary tests; `evidence` is text every test of the family contains."""

    MODULO = "modulo"  # `(i + 1) % N == 0`, `i % N == N - 1`, `step % N == 0`
    DISTANCE = "distance"  # `ni - last_opt_step >= accumulate`, `count >= accum_steps`
    SYNC_FLAG = "sync flag"  # accelerate's `accelerator.sync_gradients`

    @property
    def evidence(self) -> str:
        return {BoundaryKind.MODULO: "%", BoundaryKind.DISTANCE: ">", BoundaryKind.SYNC_FLAG: "sync_gradients"}[self]

    @property
    def counts_micro_batches(self) -> bool:
        """The loop's own count decides (not a framework's flag)."""
        return self is not BoundaryKind.SYNC_FLAG


SYNC_FLAG_ATTRIBUTE = "sync_gradients"


@dataclass(frozen=True)
class Boundary:
    """A periodic test such as `(i + 1) % N == 0`, normalised.

    Two tests with the same `family` split micro-batches the same way; `positive` is True when the
    test is true on the boundary micro-batch.
    """

    kind: BoundaryKind
    period: str | None  # the canonical text of N (aliases followed once); None for the sync flag
    positive: bool
    flush: bool = False  # an `or` clause that also fires at the end of the data
    n: cst.BaseExpression | None = None
    counter: cst.BaseExpression | None = None  # `i` in `(i + 1) % N`
    offset: int | None = None  # 1 for `(i + 1) % N == 0` and `i % N == N - 1`; 0 for `i % N == 0`
    comparison: cst.Comparison | None = None

    @property
    def family(self) -> tuple[BoundaryKind, str | None]:
        return self.kind, self.period

    def flipped(self) -> "Boundary":
        return replace(self, positive=not self.positive)


def analyze(test: cst.BaseExpression, scope: Scope, depth: int = 0) -> Boundary | None:
    if depth > 4:
        return None
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = analyze(test.expression, scope, depth + 1)
        return inner.flipped() if inner else None
    if isinstance(test, cst.BooleanOperation):
        left, right = analyze(test.left, scope, depth + 1), analyze(test.right, scope, depth + 1)
        found = left or right
        if found is None:
            return None
        if isinstance(test.operator, cst.Or) and found.positive:
            other = test.right if left is not None else test.left
            # `or (len(it) <= N and step + 1 == len(it))` flushes only epochs shorter than a window
            return replace(found, flush=not _only_short_epochs(other))
        if isinstance(test.operator, cst.And) and not found.positive:
            return replace(found, flush=True)  # `not a or not b` in De Morgan form
        return found
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        return _comparison(test, scope)
    name = dotted(test)
    if name is not None:
        if last_part(name) == SYNC_FLAG_ATTRIBUTE:
            return Boundary(BoundaryKind.SYNC_FLAG, None, True)
        defs = scope.defs_of(name)
        values = {code(d.value) for d in defs if d.op is DefOp.ASSIGN and d.value is not None}
        if len(values) == 1 and len(defs) == len([d for d in defs if d.op is DefOp.ASSIGN]):
            value = next(d.value for d in defs if d.op is DefOp.ASSIGN)
            return analyze(value, scope, depth + 1)
    return None


def _only_short_epochs(test: cst.BaseExpression) -> bool:
    if not (isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And)):
        return False
    for side in (test.left, test.right):
        if isinstance(side, cst.Comparison) and len(side.comparisons) == 1 and isinstance(
                side.comparisons[0].operator, (cst.LessThan, cst.LessThanEqual)) and any(
                isinstance(c, cst.Call) and call_receiver(c)[1] == "len" for c in iter_calls(side.left)):
            return True
    return False


def _comparison(test: cst.Comparison, scope: Scope) -> Boundary | None:
    target = test.comparisons[0]
    op, right, left = target.operator, target.comparator, test.left
    if isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Modulo) \
            and isinstance(op, (cst.Equal, cst.NotEqual)):
        n = left.right
        counter = left.left
        offset: int | None = None
        if isinstance(right, cst.Integer) and right.value == "0":
            offset = _plus_one(counter)
            if offset == 1:
                counter = counter.left  # type: ignore[union-attr]
        elif isinstance(right, cst.BinaryOperation) and isinstance(right.operator, cst.Subtract) \
                and code(right.left) == code(n) and isinstance(right.right, cst.Integer) and right.right.value == "1":
            offset = 1 if _plus_one(counter) == 0 else None
        else:
            return None
        return Boundary(BoundaryKind.MODULO, resolve_n(n, scope), isinstance(op, cst.Equal), n=n, counter=counter,
                        offset=offset, comparison=test)
    if isinstance(op, (cst.GreaterThanEqual, cst.GreaterThan)) and dotted(right) is not None and (
            is_accumulation_name(right) or (isinstance(left, cst.BinaryOperation)
                                            and isinstance(left.operator, cst.Subtract))):
        return Boundary(BoundaryKind.DISTANCE, resolve_n(right, scope), True, n=right, comparison=test)
    return None


def _plus_one(counter: cst.BaseExpression) -> int:
    if isinstance(counter, cst.BinaryOperation) and isinstance(counter.operator, cst.Add) \
            and isinstance(counter.right, cst.Integer) and counter.right.value == "1":
        return 1
    return 0


def resolve_n(node: cst.BaseExpression, scope: Scope) -> str:
    """Canonical text of N, following one level of plain aliasing (`n = cfg.accum`)."""
    name = dotted(node)
    if name is not None:
        defs = [d for d in scope.defs_of(name) if d.op is DefOp.ASSIGN and d.value is not None]
        if len(defs) == 1 and dotted(defs[0].value) is not None:
            return code(defs[0].value)
    return code(node)


def is_accumulation_count(node: cst.BaseExpression, n: cst.BaseExpression | None, scope: Scope) -> bool:
    """Is this expression N: a name that says accumulation (or an alias of one), or the same N as `n`?"""
    if is_accumulation_name(node):
        return True
    name = dotted(node)
    if name is not None:
        for d in scope.defs_of(name):
            if d.op is DefOp.ASSIGN and d.value is not None and is_accumulation_name(d.value):
                return True
    if n is not None:
        return resolve_n(node, scope) == resolve_n(n, scope)
    return False
