"""Boundary predicates: the tests that decide whether a micro-batch closes its accumulation window."""

from __future__ import annotations

from typing import Callable, NamedTuple

from gradcheck_accum.lint import catalogue as cat
from gradcheck_accum.lint.bindings import LITERAL_TRUTH, is_accumulation_name
from gradcheck_accum.lint.lazy import cst
from gradcheck_accum.lint.names import (call_receiver, code, dotted, iter_calls, iter_names, keyword, last_part,
                                        parameter)
from gradcheck_accum.lint.vocabulary import Def, DefOp, Guard, Scope, Tag


class BoundaryKind(Tag):
    """The families of boundary tests; `evidence` is text every test of the family contains."""

    MODULO = "modulo"  # `(i + 1) % N == 0`, `i % N == N - 1`, `step % N == 0`
    DISTANCE = "distance"  # `ni - last_opt_step >= accumulate`, `count >= accum_steps`
    SYNC_FLAG = "sync flag"  # accelerate's `accelerator.sync_gradients`

    @property
    def evidence(self) -> str:
        return {BoundaryKind.MODULO: "%", BoundaryKind.DISTANCE: ">", BoundaryKind.SYNC_FLAG: "sync_gradients"}[self]

    @property
    def evidence_tokens(self) -> tuple[str, ...]:
        """Any one of these is in every test of the family (`count == N` counts with a reset)."""
        return (self.evidence, "==") if self is BoundaryKind.DISTANCE else (self.evidence,)

    @property
    def counts_micro_batches(self) -> bool:
        """The loop's own count decides (not a framework's flag)."""
        return self is not BoundaryKind.SYNC_FLAG


SYNC_FLAG_ATTRIBUTE = "sync_gradients"


class Count(Tag):
    """What a configuration decision says about N."""

    ONE = "one"  # N is 1 on this side: every micro-batch is its own window
    MANY = "many"  # N is more than 1 on this side


class Boundary(NamedTuple):
    """A periodic test such as `(i + 1) % N == 0`, normalised.

    Two tests with the same `family` split micro-batches the same way; `positive` is True when the
    test is true on the boundary micro-batch.
    """

    kind: BoundaryKind
    period: str | None  # the canonical text of N (aliases followed once); None for the sync flag
    positive: bool
    flush: bool = False  # an `or` clause that also fires at the end of the data
    n: cst.BaseExpression | None = None
    counter: cst.BaseExpression | None = None  # `i` in `(i + 1) % N`, `ni` in `ni - last_opt_step >= N`
    offset: int | None = None  # 1 for `(i + 1) % N == 0` and `i % N == N - 1`; 0 for `i % N == 0`
    comparison: cst.BaseExpression | None = None  # the test itself (`i % N` when it stands alone)
    # `or (<configuration> and <end of data>)`: the flush exists only where the configuration holds
    flush_condition: cst.BaseExpression | None = None
    flush_clause: cst.BaseExpression | None = None  # the `or` clause itself (`i + 1 == len(loader)`)
    reference: cst.BaseExpression | None = None  # distance: `last_opt_step` in `ni - last_opt_step >= N`
    strict: bool = False  # distance: `>` rather than `>=`
    # `i + 1 % N == 0`: `%` binds tighter than `+`, so the test is `i + (1 % N) == 0`, never true for N > 1;
    # the fields above describe the `(i + 1) % N == 0` it was meant to be
    literal_modulo: bool = False

    @property
    def family(self) -> tuple[BoundaryKind, str | None]:
        return self.kind, self.period

    def same_count(self, other: "Boundary") -> bool:
        """Do both tests split the same counter by the same N (`i % N != 0` and `(i + 1) % N == 0`)?"""
        return self.family == other.family and self.counter is not None and other.counter is not None \
            and code(self.counter) == code(other.counter)

    def same_micro_batches(self, other: "Boundary") -> bool:
        """Do both tests single out the same micro-batches: the same counter, N and offset
        (`(i + 1) % N == 0` and `i % N == N - 1`, whichever way round each is written)?"""
        return self.same_count(other) and self.offset == other.offset

    def flipped(self) -> "Boundary":
        return self._replace(positive=not self.positive)


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
            # `or (len(it) <= N and step + 1 == len(it))` flushes only epochs shorter than a window;
            # `N == 1 or ...` says when every micro-batch is a window, which is no end of data
            if _only_short_epochs(other) or _compares_count_with_literal(other, found.n, scope):
                return found
            return found._replace(flush=True, flush_condition=_condition_of_flush(other, found), flush_clause=other)
        if isinstance(test.operator, cst.And) and not found.positive:
            return found._replace(flush=True)  # `not a or not b` in De Morgan form
        return found
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        return _comparison(test, scope)
    if isinstance(test, cst.Call) and dotted(test.func) == cat.TRUTH_CAST and len(test.args) == 1 \
            and not test.args[0].keyword and not test.args[0].star:
        return analyze(test.args[0].value, scope, depth + 1)  # `bool((i + 1) % N)`: as its argument holds
    if _is_modulo(test):
        return _modulo(test, cst.Integer("0"), False, test, scope)  # `if i % N:` is `i % N != 0`
    name = dotted(test)
    if name is not None:
        if last_part(name) == SYNC_FLAG_ATTRIBUTE:
            return Boundary(BoundaryKind.SYNC_FLAG, None, True)
        defs = scope.defs_of(name)
        values = {code(d.value) for d in defs if d.op is DefOp.ASSIGN and d.value is not None}
        if len(values) == 1 and len(defs) == len([d for d in defs if d.op is DefOp.ASSIGN]):
            bound = next(d for d in defs if d.op is DefOp.ASSIGN)
            return analyze(bound.value, bound.scope or scope, depth + 1)
        return _overridden_flag(defs, scope, depth)
    return None


def guard_boundary(guard: Guard, scope: Scope) -> Boundary | None:
    """The periodic test a guarded statement runs under, as it holds there: the guard's test read by
    `analyze`, negated in the `else` branch (or past an early exit)."""
    found = analyze(guard.test, guard.scope or scope)
    return found if found is None or guard.positive else found.flipped()


def _overridden_flag(defs: list[Def], scope: Scope, depth: int) -> Boundary | None:
    """A flag set to a boolean, then to the other boolean under one `if` just after it
    (`step_optimizer = True` / `if (i + 1) % N != 0: step_optimizer = False`): the flag is that test,
    or its negation. Or set to True, then to a periodic test where N is more than one
    (`update = True` / `if N > 1: update = (i + 1) % N == 0`): that test, since with one micro-batch
    per window every micro-batch is a boundary. Any other shape of rebinding is unknown."""
    if len(defs) != 2 or any(d.op is not DefOp.ASSIGN or d.index is not None for d in defs):
        return None
    first, second = sorted(defs, key=lambda d: d.order)
    values = [_boolean(d.value) for d in (first, second)]
    if second.scope is not None or first.scope is not None:
        return None
    outer, inner = first.ctx, second.ctx
    if (inner.loops != outer.loops or len(inner.guards) != len(outer.guards) + 1
            or inner.guards[:-1] != outer.guards or inner.in_handler or outer.in_handler):
        return None
    guard = inner.guards[-1]
    if guard.exit is not None:
        return None
    if values[0] is True and values[1] is None:
        found = analyze(second.value, scope, depth + 1)
        if found is None or not found.positive or not excludes_only_single_windows(guard.test, guard.positive, found):
            return None
        return found
    if None in values or values[0] == values[1]:
        return None
    found = analyze(guard.test, guard.scope or scope, depth + 1)
    if found is None:
        return None
    # the flag holds the override where the guard is taken: the test itself, or (in `else`) its negation
    holds_when_taken = values[1]
    return found if guard.positive == holds_when_taken else found.flipped()


def _boolean(node: cst.BaseExpression | None) -> bool | None:
    """`True` or `False` as written (not `None`, which a flag test reads as false but no flag is set to)."""
    if isinstance(node, cst.Name) and node.value in LITERAL_TRUTH and node.value != "None":
        return LITERAL_TRUTH[node.value]
    return None


def _only_short_epochs(test: cst.BaseExpression) -> bool:
    if not (isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And)):
        return False
    for side in (test.left, test.right):
        if isinstance(side, cst.Comparison) and len(side.comparisons) == 1 and isinstance(
                side.comparisons[0].operator, (cst.LessThan, cst.LessThanEqual)) and reads_length(side.left):
            return True
    return False


def reads_length(node: cst.CSTNode) -> bool:
    """Does the expression call `len(...)` (a length counted in micro-batches: `len(loader) % N`)?"""
    return any(call_receiver(call)[1] == cat.LENGTH_FUNCTION for call in iter_calls(node))


def _comparison(test: cst.Comparison, scope: Scope) -> Boundary | None:
    target = test.comparisons[0]
    op, right, left = target.operator, target.comparator, test.left
    if isinstance(left, cst.Name):  # `remaining = len(loader) % N` ... `if remaining != 0:`: the remainder itself
        defs = scope.defs_of(left.value)
        if len(defs) == 1 and defs[0].op is DefOp.ASSIGN and _is_modulo(defs[0].value):
            left = defs[0].value
    if isinstance(left, cst.Integer) and _is_modulo(right):  # `0 < step % N` reads as `step % N > 0`
        left, right, op = right, left, _mirrored(type(op))()
    if _is_modulo(left) and isinstance(op, (cst.Equal, cst.NotEqual)):
        return _modulo(left, right, isinstance(op, cst.Equal), test, scope)
    meant = _meant_modulo(left)
    if meant is not None and isinstance(op, (cst.Equal, cst.NotEqual)):
        found = _modulo(meant, right, isinstance(op, cst.Equal), test, scope)
        return found._replace(literal_modulo=True) if found is not None else None
    if _is_modulo(left) and isinstance(right, cst.Integer):
        # a remainder is never negative: `% N > 0` and `% N >= 1` are `% N != 0`; `% N < 1`, `% N <= 0` are `== 0`
        bound, kind = int(right.value, 0), type(op)
        is_zero = {(cst.GreaterThan, 0): False, (cst.GreaterThanEqual, 1): False,
                   (cst.LessThan, 1): True, (cst.LessThanEqual, 0): True}.get((kind, bound))
        if is_zero is not None:
            return _modulo(left, cst.Integer("0"), is_zero, test, scope)
    if isinstance(op, (cst.Equal, cst.NotEqual)) and isinstance(right, cst.Integer) and right.value == "0":
        kept = _kept_modulo(left, scope)
        if kept is not None:  # `acc = (acc + 1) % N` ... `if acc == 0:`
            return Boundary(BoundaryKind.MODULO, resolve_n(kept, scope), isinstance(op, cst.Equal), n=kept,
                            counter=left, offset=0, comparison=test)
    if isinstance(op, cst.Equal) and dotted(right) is not None and (
            _counted_and_reset(left, scope) and (is_accumulation_name(right) or _reset_when(left, test, scope))
            or is_accumulation_name(right) and _counted_until_break(left, test, scope)):
        # `count += 1` ... `if count == N: step; count = 0`: a count of the window's micro-batches.
        # Reset by this very test, the count runs 1..N and again whatever N is called
        # (`num_steps_per_update`).
        return Boundary(BoundaryKind.DISTANCE, resolve_n(right, scope), True, n=right, counter=left,
                        comparison=test)
    if isinstance(op, (cst.GreaterThanEqual, cst.GreaterThan)) and dotted(right) is not None \
            and not isinstance(left, cst.Integer) and (
            is_accumulation_name(right) or (isinstance(left, cst.BinaryOperation)
                                            and isinstance(left.operator, cst.Subtract))):
        distance = isinstance(left, cst.BinaryOperation)
        return Boundary(BoundaryKind.DISTANCE, resolve_n(right, scope), True, n=right,
                        counter=left.left if distance else left, reference=left.right if distance else None,
                        strict=isinstance(op, cst.GreaterThan), comparison=test)
    return None


def _mirrored(kind: type) -> type:
    """The comparison with its sides swapped: `1 < N` is `N > 1`."""
    return {cst.LessThan: cst.GreaterThan, cst.GreaterThan: cst.LessThan,
            cst.LessThanEqual: cst.GreaterThanEqual, cst.GreaterThanEqual: cst.LessThanEqual}.get(kind, kind)


def _is_modulo(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo)


def _meant_modulo(node: cst.BaseExpression) -> cst.BinaryOperation | None:
    """`(i + 1) % N` for an unbracketed `i + 1 % N`, which Python reads as `i + (1 % N)`."""
    if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add)):
        return None  # `i - 1 % N == 0` does fire, once, at i == 1: a different slip
    remainder = node.right
    if not (isinstance(remainder, cst.BinaryOperation) and isinstance(remainder.operator, cst.Modulo)
            and isinstance(remainder.left, cst.Integer) and not remainder.lpar):
        return None
    shifted = cst.BinaryOperation(left=node.left, operator=node.operator, right=remainder.left,
                                  lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.BinaryOperation(left=shifted, operator=cst.Modulo(), right=remainder.right)


def _modulo(modulo: cst.BinaryOperation, right: cst.BaseExpression, equal: bool, test: cst.BaseExpression,
            scope: Scope) -> Boundary | None:
    """`counter % N` compared (== or !=) with 0 or with N - 1."""
    n = modulo.right
    counter = modulo.left
    offset: int | None = None
    if isinstance(right, cst.Integer) and right.value == "0":
        offset = plus_one(counter)
        if offset:
            counter = counter.left  # type: ignore[union-attr]
    elif isinstance(right, cst.BinaryOperation) and isinstance(right.operator, cst.Subtract) \
            and code(right.left) == code(n) and isinstance(right.right, cst.Integer) and right.right.value == "1" \
            or _one_less(right, n):
        offset = 1 if plus_one(counter) == 0 else None
    else:
        return None
    if measures_a_tensor(counter):
        return None  # `if x.size(0) % 2 != 0: continue`: a test of the data's shape, not of a count
    return Boundary(BoundaryKind.MODULO, resolve_n(n, scope), equal, n=n, counter=counter, offset=offset,
                    comparison=test)


def _one_less(right: cst.BaseExpression, n: cst.BaseExpression) -> bool:
    """`5` against a literal `6`: `i % 6 == 5`, the written-out form of `i % N == N - 1`."""
    return isinstance(right, cst.Integer) and isinstance(n, cst.Integer) \
        and right.evaluated_value == n.evaluated_value - 1 > 0


def measures_a_tensor(node: cst.BaseExpression) -> bool:
    """`x.size(0)`, `x.shape[0]`, `x.numel()`: how big a tensor is (which no loop counts up)."""
    if isinstance(node, cst.Subscript):
        return isinstance(node.value, cst.Attribute) and node.value.attr.value == cat.SHAPE_ATTRIBUTE
    return isinstance(node, cst.Call) and call_receiver(node)[0] is not None and \
        call_receiver(node)[1] in cat.SIZE_METHODS


def _kept_modulo(counter: cst.BaseExpression, scope: Scope) -> cst.BaseExpression | None:
    """N, when the counter is only ever advanced as `counter = (counter + 1) % N` (or reset to a
    constant): a count kept modulo N is 0 exactly on the boundary."""
    name = dotted(counter)
    if name is None:
        return None
    n = None
    for d in scope.defs_of(name):
        value = d.value
        if d.op is DefOp.ASSIGN and isinstance(value, cst.Integer):
            continue
        if not (d.op is DefOp.ASSIGN and _is_modulo(value) and _advances(value.left, name)):
            return None
        n = value.right
    return n


def _counted_and_reset(counter: cst.BaseExpression, scope: Scope) -> bool:
    """A counter only ever incremented by one and set to 0, and reset inside the loop under a test (in
    the scope the test is read in; a method walked in place of its call sees its own `self._count`
    bindings)."""
    resets, increments = _zeros_and_increments(counter, scope)
    if not any(d.ctx.loops and d.ctx.guards for d in resets):
        return False  # never reset on the boundary: `step == N` holds once
    return bool(increments)


def _zeros_and_increments(counter: cst.BaseExpression, scope: Scope) -> tuple[list[Def], list[Def]]:
    """The bindings of a counter that set it to 0 and those that add 1 to it, when those are all its
    bindings (else none: a count advanced or set otherwise is no plain count)."""
    name = dotted(counter)
    defs = scope.defs_of(name) if name is not None else []
    zeros = [d for d in defs if d.op is DefOp.ASSIGN and isinstance(d.value, cst.Integer) and d.value.value == "0"]
    increments = [d for d in defs if d.op is DefOp.ADD and isinstance(d.value, cst.Integer) and d.value.value == "1"]
    return (zeros, increments) if len(zeros) + len(increments) == len(defs) else ([], [])


def _counted_until_break(counter: cst.BaseExpression, test: cst.BaseExpression, scope: Scope) -> bool:
    """`count = 0` before the loop, `count += 1` in it, and `if count == N: ...; break`: a micro-step
    loop (`while True:`) that ends on its N-th micro-batch, where `count == N` holds once and closes
    the one window the loop runs."""
    starts, steps = _zeros_and_increments(counter, scope)
    if len(starts) != 1 or starts[0].ctx.loops or not steps:
        return False
    loop = steps[0].ctx.loops[-1] if steps[0].ctx.loops else None
    if loop is None or any(not d.ctx.loops or d.ctx.loops[-1] is not loop for d in steps):
        return False
    owner = next((stmt for stmt in loop.body.body if isinstance(stmt, cst.If) and stmt.test is test), None)
    return owner is not None and ends_with_break(owner)


def ends_with_break(statement: cst.If) -> bool:
    """Does the `if` body's last statement leave the loop (`...; break`)?"""
    last = statement.body.body[-1] if statement.body.body else None
    return isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], cst.Break)


def _reset_when(counter: cst.BaseExpression, test: cst.BaseExpression, scope: Scope) -> bool:
    """Is the counter set to 0 in the body of the `if` whose test this is (or one of whose `and` terms
    it is: `if count == k and phase == "train":`)?"""
    name = dotted(counter)
    return name is not None and any(
        d.op is DefOp.ASSIGN and isinstance(d.value, cst.Integer) and d.value.value == "0"
        and any(guard.positive and any(term is test for term in conjuncts(guard.test)) for guard in d.ctx.guards)
        for d in scope.defs_of(name))


def conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The terms of `a and b and c` (the test itself when it is no conjunction)."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return conjuncts(test.left) + conjuncts(test.right)
    return [test]


def _advances(value: cst.BaseExpression, name: str) -> bool:
    """`name + 1` (with parentheses or not)."""
    return isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add) \
        and dotted(value.left) == name and isinstance(value.right, cst.Integer)


def _compares_count_with_literal(test: cst.BaseExpression, n: cst.BaseExpression | None, scope: Scope) -> bool:
    """`N == 1`, `N <= 1`, `not accumulate`: a test of the configuration, not of the data."""
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test = test.expression
    return compares_n_with_one(test, lambda node: is_accumulation_count(node, n, scope)) != (None, None)


def excludes_only_single_windows(test: cst.BaseExpression, positive: bool, boundary: Boundary) -> bool:
    """Does `test` (where it holds, or with `positive` False where it fails) leave out only the runs where
    the boundary's N is 1 (`if N > 1:`)? In those every micro-batch is a boundary: a positive boundary
    test always holds there, a negated one never does."""
    if boundary.n is None:
        return False
    many, one = compares_n_with_one(test, lambda node: code(node) == code(boundary.n))
    return (many, one) == ((Count.MANY, Count.ONE) if positive else (Count.ONE, Count.MANY))


def compares_n_with_one(test: cst.BaseExpression,
                         is_n: Callable[[cst.BaseExpression], bool]) -> tuple[Count | None, Count | None]:
    """What N is when the test is true, and when it is false. `N > 1` and `N != 1`: many, else one;
    `N == 1`, `N <= 1`, `N < 2`: the reverse; a bare accumulation flag or count (`if accumulate:`):
    nothing when true (a count of 1 is true), one when false."""
    if isinstance(test, (cst.Name, cst.Attribute)):
        return (None, Count.ONE) if is_accumulation_name(test) or is_n(test) else (None, None)
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return None, None
    operator, right, left = test.comparisons[0].operator, test.comparisons[0].comparator, test.left
    kind = type(operator)
    if isinstance(left, cst.Integer) and is_n(right):  # `1 < N` reads as `N > 1`
        left, right, kind = right, left, _mirrored(kind)
    if not (isinstance(right, cst.Integer) and is_n(left)):
        return None, None
    bound = int(right.value, 0)
    if (kind, bound) in ((cst.GreaterThan, 1), (cst.NotEqual, 1), (cst.GreaterThanEqual, 2)):
        return Count.MANY, Count.ONE
    if (kind, bound) in ((cst.Equal, 1), (cst.LessThanEqual, 1), (cst.LessThan, 2)):
        return Count.ONE, Count.MANY
    return None, None


def _condition_of_flush(clause: cst.BaseExpression, found: Boundary) -> cst.BaseExpression | None:
    """In `... or (<configuration> and <end of data>)`, the configuration part: the conjunct that
    reads neither the boundary's counter nor any call (`len(loader)`)."""
    if not (isinstance(clause, cst.BooleanOperation) and isinstance(clause.operator, cst.And)):
        return None
    counter = dotted(found.counter) if found.counter is not None else None
    for side, other in ((clause.left, clause.right), (clause.right, clause.left)):
        names = set(iter_names(side))
        if not any(True for _ in iter_calls(side)) and counter not in names and \
                (counter in set(iter_names(other)) or any(True for _ in iter_calls(other))):
            return side
    return None


def plus_one(counter: cst.BaseExpression) -> int:
    """1 for `i + 1`, -1 for `i - 1`, else 0."""
    if isinstance(counter, cst.BinaryOperation) and isinstance(counter.operator, (cst.Add, cst.Subtract)) \
            and isinstance(counter.right, cst.Integer) and counter.right.value == "1":
        return 1 if isinstance(counter.operator, cst.Add) else -1
    return 0


def uncast(node: cst.BaseExpression) -> cst.BaseExpression:
    """`float(n)`, `int(n)`: the number n, whatever its type; `n or 1`, `max(n, 1)`: n too, kept from
    being 0 (where it is 0 nothing accumulates anyway)."""
    while True:
        if isinstance(node, cst.Call) and len(node.args) == 1 and not node.args[0].keyword \
                and dotted(node.func) in cat.NUMBER_CASTS:
            node = node.args[0].value
        elif isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.Or) and _is_number(node.right):
            node = node.left
        elif isinstance(node, cst.Call) and dotted(node.func) == cat.NUMBER_FLOOR and len(node.args) == 2 \
                and not any(a.keyword or a.star for a in node.args) and _is_number(node.args[1].value):
            node = node.args[0].value
        else:
            return node


def _is_number(node: cst.BaseExpression) -> bool:
    return isinstance(node, (cst.Integer, cst.Float))


def resolve_n(node: cst.BaseExpression, scope: Scope) -> str:
    """Canonical text of N: through the arguments bound to a called function's parameters, then one
    level of plain aliasing (`n = cfg.accum`), past casts to a number."""
    node, scope = bound_argument(uncast(node), scope)
    name = dotted(node)
    if name is not None:
        defs = [d for d in scope.defs_of(name) if d.op is DefOp.ASSIGN and d.value is not None]
        if len(defs) == 1 and dotted(uncast(defs[0].value)) is not None:  # `divisor = num_steps or 1`
            alias, read_in = bound_argument(uncast(defs[0].value), defs[0].scope or scope)
            # `updates = total; total = total * N`: the alias holds the value from before, not the name's
            rebound = read_in is scope and any(d.order > defs[0].order and d.op is not DefOp.ITEM
                                               for d in scope.defs_of(dotted(alias) or ""))
            return code(node) if rebound else code(alias)
    return code(node)


def bound_argument(node: cst.BaseExpression, scope: Scope) -> tuple[cst.BaseExpression, Scope]:
    """For a parameter of a called function walked in place of its call, the argument it was bound
    to and the caller's scope (repeatedly, through several calls); anything else as it is."""
    if isinstance(node, cst.Subscript) and scope.frame is not None:
        # `info["batch_idx"]` where `info` is the caller's dict: that entry of it
        container, caller = bound_argument(node.value, scope)
        return (node.with_changes(value=container), caller) if caller is not scope else (node, scope)
    for _ in range(8):
        name = dotted(node)
        if name is None or scope.frame is None:
            break
        defs = [d for d in scope.defs_of(name) if d.op is not DefOp.ITEM]  # filling it keeps the object
        if len(defs) == 1 and defs[0].scope is not None and defs[0].value is not None:
            node, scope = defs[0].value, defs[0].scope
            continue
        head, _, rest = name.partition(".")
        defs = scope.defs_of(head) if rest else []
        owner = dotted(defs[0].value) if len(defs) == 1 and defs[0].scope is not None else None
        if owner is None:  # `self.n` where `self` is the caller's `self.scaler`: `self.scaler.n`
            break
        node, scope = _attribute_chain(owner, rest), defs[0].scope
    return node, scope


def parameter_value(name: str, scope: Scope) -> tuple[cst.BaseExpression, Scope] | None:
    """What a parameter of the scope's function holds: the argument the call it is walked for binds
    to it (read in the caller's scope), or its default when nothing binds it; None for a name that is
    no parameter, one bound again in the function, or one the call may pass through `**kwargs`."""
    function = scope.node
    if not isinstance(function, cst.FunctionDef):
        return None
    param = parameter(function, name)
    if param is None:
        return None
    defs = scope.defs_of(name)
    if not defs:
        if param.default is None or any(a.star for a in getattr(scope.frame.call if scope.frame else None, "args", ())):
            return None
        return param.default, scope
    if len(defs) == 1 and defs[0].scope is not None and defs[0].value is not None:
        return defs[0].value, defs[0].scope
    return None


def caller_name(name: str, scope: Scope) -> str:
    """A dotted name in a called function walked in place, as the outermost caller spells it when
    its head is a parameter (`opt.step` in `update(opt)` called as `update(optimizer)`:
    `optimizer.step`); a local of the called function stays as it is."""
    for _ in range(8):
        if scope.frame is None:
            break
        head, _, rest = name.partition(".")
        defs = scope.defs_of(head)
        base = dotted(defs[0].value) if len(defs) == 1 and defs[0].scope is not None else None
        if base is None:
            break
        name, scope = f"{base}.{rest}" if rest else base, defs[0].scope
    return name


def _attribute_chain(base: str, rest: str) -> cst.BaseExpression:
    node: cst.BaseExpression = cst.Name(base.split(".")[0])
    for part in [*base.split(".")[1:], *rest.split(".")]:
        node = cst.Attribute(node, cst.Name(part))
    return node


def is_accumulation_count(node: cst.BaseExpression, n: cst.BaseExpression | None, scope: Scope) -> bool:
    """Is this expression N: a name that says accumulation (or an alias of one, or a parameter every
    caller binds to N), a getter of one (`engine.gradient_accumulation_steps()`), or the same N as `n`?
    Cast to a number (`float(n)`) it still is."""
    node = uncast(node)
    if _says_accumulation(node):
        return True
    name = dotted(node)
    if name is not None and (_aliases_accumulation(name, scope) or name in scope.given_counts):
        return True
    if n is not None:
        return resolve_n(node, scope) == resolve_n(n, scope)
    return False


def _says_accumulation(node: cst.BaseExpression) -> bool:
    """A name that says it holds N, or a getter of one (`engine.gradient_accumulation_steps()`)."""
    node = uncast(node)
    return is_accumulation_name(node) or isinstance(node, cst.Call) and not node.args and is_accumulation_name(node.func)


def _aliases_accumulation(name: str, scope: Scope) -> bool:
    """Is `name` assigned a name that says accumulation somewhere in the scope? Answered once per name
    (again only after the scope binds it anew): a name bound by every loop of a file (`batch`) would
    otherwise cost each question a scan of all its bindings, the square of the loops in all."""
    count = len(scope.defs.get(name, ()))
    known = scope.accumulation_aliases.get(name)
    if known is None or known[0] != count:
        known = scope.accumulation_aliases[name] = (count, any(
            d.op is DefOp.ASSIGN and d.value is not None and _says_accumulation(d.value)
            for d in scope.defs.get(name, ())))
    return known[1]


def clipping_factor(node: cst.BaseExpression | None, scope: Scope, depth: int = 0) -> bool:
    """Is this factor (or a test of it, `if coef < 1:`) computed from a gradient norm, or capped at 1
    (catalogue.NORM_FUNCTIONS, CAPPING_FUNCTIONS), here or in the values of the names it reads?
    Rescaling gradients by it clips them."""
    if node is None or depth > 3:
        return False
    for call in iter_calls(node):
        receiver, name = call_receiver(call)
        if name in cat.NORM_FUNCTIONS:
            return True
        if name in cat.CAPPING_FUNCTIONS and keyword(call, "max") is not None:
            return True
        if name == cat.CAPPING_BUILTIN and receiver is None and len(call.args) >= 2:
            return True
    for name in iter_names(node):
        for d in scope.defs_of(name):
            if d.op is DefOp.ASSIGN and clipping_factor(d.value, d.scope or scope, depth + 1):
                return True
    return False
