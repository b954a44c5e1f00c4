"""Paths through a loop body: one window per way the configuration can go.

A training loop often holds two loops in one: `if accum_steps > 1: <accumulate, step on the
boundary> else: <step every batch>`, `if use_amp: scaler.scale(loss).backward() else:
loss.backward()`, `if use_engine: <engine steps> else: <micro-step loop>`. The tests that choose
between them are *configuration tests*: nothing the loop assigns changes their value, so one run
takes the same branch on every micro-batch. Merging the branches into one window makes the plain
branch look like a broken accumulating one, so the window model builds one window per path: a value
for each configuration test that decides where a backward or a step runs.

A path may also say what N is: a test that compares the accumulation count with 1 (`N > 1`,
`N == 1`, `N <= 1`, `if not accumulate`) puts every micro-batch in its own window on the side where
N is 1 (a plain loop), whatever the rest of the loop does.

A test the loop body itself decides (`if not torch.isfinite(loss): continue`) is no configuration:
it stays a guard of the events under it (windows.py places them).
"""

from __future__ import annotations

from itertools import product
from typing import Callable, Iterable, NamedTuple

from gradcheck_accum.lint.catalogue import LIVE_ATTRIBUTES, SCALER_ENABLED_TEST
from gradcheck_accum.lint.lazy import cst
from gradcheck_accum.lint.names import call_receiver, code, dotted, iter_calls, iter_names
from gradcheck_accum.lint.predicates import Count, compares_n_with_one
from gradcheck_accum.lint.vocabulary import Context, Def, Event, EventKind, Guard, Scope

# Calls whose value a loop cannot change between micro-batches (the rest may read live state).
# (A GradScaler's is_enabled() and torch.distributed.is_initialized() are settled before training.)
_PURE_CALLS = {"len", "isinstance", "hasattr", "getattr", "bool", "int", "float", "str", "is_available",
               "is_initialized", SCALER_ENABLED_TEST}
# A loop with more configuration tests than this keeps the later ones merged (as unguarded code).
MAX_SPLIT_TESTS = 4
# The events whose branch decides the window: where the gradients are made and applied.
_DECIDING = (EventKind.BACKWARD, EventKind.STEP)


class Decision(NamedTuple):
    key: str  # the test's canonical text, `not` stripped
    value: bool
    test: cst.BaseExpression  # the test without its `not`


class Path(NamedTuple):
    """One way through the configuration tests of a loop: a value for each test decided."""

    decisions: tuple[Decision, ...] = ()

    def allows(self, event: Event | Def) -> bool:
        """Does the event (or binding) run on this path (no guard of it contradicts a decision)?"""
        if not self.decisions:
            return True
        chosen = {d.key: d.value for d in self.decisions}
        for guard in event.ctx.guards:
            taken = decision(guard)
            if chosen.get(taken.key, taken.value) is not taken.value:
                return False
        return True

    def holds(self, guard: Guard) -> bool:
        """Has this path decided the guard's test the way the guard takes it (so wherever the path
        reaches the guard, it is passed)?"""
        taken = decision(guard)
        return any(d.key == taken.key and d.value is taken.value for d in self.decisions)


NO_PATH = Path()


def decision(guard: Guard) -> Decision:
    """The test a guard decides, canonically, and the value it takes: `not x` is `x` decided False, and
    `x is not None` is `x` decided True (`if scaler is not None:` and a later `if scaler:` are one
    configuration; an object that is None on one run is None on every micro-batch of it)."""
    if guard.decided is not None:
        return guard.decided
    test, value = guard.test, guard.positive
    while True:
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, value = test.expression, not value
        elif (compared := _compared_with_none(test)) is not None:
            test, value = compared[0], value is compared[1]
        else:
            decided = Decision(code(test), value, test)
            object.__setattr__(guard, "decided", decided)  # a frozen record: its own cache, set once
            return decided


def _compared_with_none(test: cst.BaseExpression) -> tuple[cst.BaseExpression, bool] | None:
    """`x is not None` -> (x, True), `x is None` -> (x, False), for a name or attribute x."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
            and isinstance(test.left, (cst.Name, cst.Attribute))):
        return None
    target = test.comparisons[0]
    if not (isinstance(target.comparator, cst.Name) and target.comparator.value == "None"):
        return None
    if isinstance(target.operator, cst.IsNot):
        return test.left, True
    if isinstance(target.operator, cst.Is):
        return test.left, False
    return None


def excluded_by(bound: Context, here: Context, rebound: Callable[[str], bool]) -> bool:
    """Can code under the guards `here` never run on a pass where code under the guards `bound` ran?
    So when some test is taken one way by the one and the other way by the other (`if env == "ddp":`
    and its `else`, or `elif env == "cpu":`, the same name compared with another literal), and that
    test calls nothing that may read live state and reads no name `rebound(name)` says changed."""
    for guard in bound.guards:
        for taken in implied(guard):
            if not all(_settled(call) for call in iter_calls(taken.test)) \
                    or any(rebound(name) for name in iter_names(taken.test)):
                continue
            for other in here.guards:
                for there in implied(other):
                    if there.key == taken.key and there.value is not taken.value:
                        return True
                    if taken.value and there.value and _disagree(taken.test, there.test):
                        return True
    return False


def implied(guard: Guard) -> list[Decision]:
    """What passing a guard decides: its test, taken its way, and for `a and b` passed (or `a or b`
    failed) each side the same way."""
    taken = decision(guard)
    test = taken.test
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And if taken.value else cst.Or):
        return [taken, *(found for side in (test.left, test.right)
                         for found in implied(Guard(side, taken.value, guard.owner, guard.depth, scope=guard.scope)))]
    return [taken]


def _settled(call: cst.Call) -> bool:
    """A call whose value the run settles before training: a builtin of _PURE_CALLS, or a module function
    called with nothing (`is_sagemaker_mp_enabled()`, `is_main_process()`), which reads the launch."""
    return call_receiver(call)[1] in _PURE_CALLS or not call.args and isinstance(call.func, cst.Name)


def rebound_since(scope: Scope, name: str, bound: Def | Context, order: int, before: int | None = None) -> bool:
    """Is `name` (or the object it is an attribute of) bound in `scope` after program point `order` (and
    before `before`), or in a loop around the binding `bound` (whose next pass may bind it again)? The
    question excluded_by asks of each name a test reads."""
    loops = set(bound.ctx.loops if isinstance(bound, Def) else bound.loops)
    # a function walked in place of its call has its parameters bound by the caller, once per call
    # (in the caller's loop): within the call they hold, and a local bound in it dies with the call
    local = isinstance(bound, Def) and "." not in bound.name
    return any(order < d.order and (before is None or d.order < before) or loops & set(d.ctx.loops)
               for read in {name, name.split(".")[0]} for d in scope.defs.get(read, ())
               if not (local and d.scope is not None and d.scope is not scope))


def _disagree(one: cst.BaseExpression, other: cst.BaseExpression) -> bool:
    """Two tests of one name that no value passes both of: `x == "a"` and `x == "b"`; `"ds" in x` and
    `x == "cpu"` ("ds" is no part of "cpu")."""
    first, second = _literal_test(one), _literal_test(other)
    if first is None or second is None or first[0] != second[0]:
        return False
    (_, equal_a, a), (_, equal_b, b) = first, second
    if equal_a and equal_b:
        return a != b
    if equal_a != equal_b and isinstance(a, str) and isinstance(b, str):
        part, whole = (b, a) if equal_a else (a, b)
        return part not in whole
    return False


def _literal_test(test: cst.BaseExpression) -> tuple[str, bool, object] | None:
    """(the name's text, True for `name == literal` or False for `"text" in name`, the literal's value)."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return None
    operator, right = test.comparisons[0].operator, test.comparisons[0].comparator
    if isinstance(operator, cst.Equal) and isinstance(right, (cst.SimpleString, cst.Integer)):
        return code(test.left), True, right.evaluated_value
    if isinstance(operator, cst.In) and isinstance(test.left, cst.SimpleString) and dotted(right) is not None:
        return code(right), False, test.left.evaluated_value
    return None


def invariant(test: cst.BaseExpression, variant: set[str]) -> bool:
    """A test whose value cannot change from one micro-batch to the next: it reads no name the loop
    assigns and calls nothing that may read live state."""
    for call in iter_calls(test):
        _, name = call_receiver(call)
        if name not in _PURE_CALLS:
            return False
    return not any(name in variant or name.split(".")[0] in variant or name.rpartition(".")[2] in LIVE_ATTRIBUTES
                   for name in iter_names(test))


def split(events: list[Event], deciders: list[Event], region_depth: int, variant: set[str],
          periodic: Callable[[cst.BaseExpression], bool]) -> list[tuple[Path, list[Event]]]:
    """The paths through `events` (a loop body and the block around it) and the events on each.

    The tests split are those around a backward or a step among `deciders`, opened at loop depth
    `region_depth` or deeper, that read no `variant` name and are not `periodic` (a boundary
    predicate); paths that keep the same events are one."""
    tests: dict[str, cst.BaseExpression] = {}
    for event in deciders:
        if event.kind not in _DECIDING:
            continue
        for guard in event.ctx.guards:
            if guard.depth < region_depth or guard.exit is not None or not invariant(guard.test, variant) \
                    or periodic(guard.test):
                continue
            taken = decision(guard)
            tests.setdefault(taken.key, taken.test)
    if not tests:
        return [(NO_PATH, events)]
    keys = list(tests)[:MAX_SPLIT_TESTS]
    seen: set[frozenset[int]] = set()
    paths = []
    for values in product((True, False), repeat=len(keys)):
        path = Path(tuple(Decision(key, value, tests[key]) for key, value in zip(keys, values)))
        on_path = [e for e in events if path.allows(e)]
        signature = frozenset(id(e) for e in on_path)
        if signature not in seen:
            seen.add(signature)
            paths.append((path, on_path))
    return paths


def count_on_path(decisions: Iterable[Decision], is_n: Callable[[cst.BaseExpression], bool]) -> Count | None:
    """What these decisions (a path's, and the guards around its loop) say about N; `is_n(expr)`
    tells whether an expression is the accumulation count."""
    found = None
    for taken in decisions:
        when = compares_n_with_one(taken.test, is_n)
        said = when[0] if taken.value else when[1]
        if said is Count.ONE:
            return Count.ONE
        found = said or found
    return found
