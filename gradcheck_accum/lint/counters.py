"""Counter lifetimes: what becomes of the micro-batches after the last boundary of a pass.

A guarded window closes when its counter reaches the boundary. Whether the micro-batches left over
after the last boundary of one pass over the micro-batch loop are lost follows from four facts,
each read from the code:
- how long the counter lives (`Lifetime`): restarted with each pass (`enumerate(loader)`, `step = 0`
  just before the loop) or kept across passes (`self.global_step`, `state["step"]`, a counter set
  before the epoch loop, `ni = i + nb * epoch`);
- what one pass walks (`PassKind`): a finite data source, a count (`range(steps_per_epoch)` drawing
  `next(it)`), a count that is a multiple of N (`range(max_steps * N)`), or an endless stream;
- whether passes repeat (`Repetition`): an enclosing loop, a caller inside a loop, or one pass;
- whether gradients are cleared where a pass begins or ends (the epoch-start `zero_grad()`).

A restarting counter over repeated finite passes leaves a tail that leaks into the next pass's
first window (which then holds more than N micro-batches); a clear at the pass boundary throws the
tail away whatever the counter. A counter kept across passes with no such clear lets windows span
the pass boundary: nothing is lost. One pass drops its tail once, at the end, as `drop_last` would.
`drop_last=True` on a DataLoader drops a ragged *micro-batch*, not a ragged window: it changes none
of this.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Mapping, NamedTuple

from gradcheck_accum.lint.bindings import fresh_run_literal, loop_index
from gradcheck_accum.lint.lazy import cst
from gradcheck_accum.lint.names import (call_receiver, children, code, contains, dotted, item_name, iter_calls,
                                        iter_names, keyword, last_part, parameter_names, positional, source,
                                        summed_loss_name, walk)
from gradcheck_accum.lint.paths import invariant
from gradcheck_accum.lint.predicates import (BoundaryKind, bound_argument, conjuncts, guard_boundary,
                                             is_accumulation_count, plus_one, reads_length)
from gradcheck_accum.lint.vocabulary import Def, DefOp, Event, EventKind, Guard, Scope, Tag
from gradcheck_accum.lint.windows import (Placement, Window, assigned_in, increment, iterated, loop_guards,
                                          same_target)

if TYPE_CHECKING:
    from gradcheck_accum.lint.vocabulary import Loop


class Lifetime(Tag):
    PER_PASS = "restarts with each pass"
    ACROSS_PASSES = "kept across passes"
    UNKNOWN = "unknown"


class PassKind(Tag):
    """What one pass over the micro-batch loop walks."""

    DATA = "a finite data source"  # `for batch in loader`, `enumerate(tqdm(loader))`
    COUNT = "a count"  # `range(steps_per_epoch)`, `while step < total`: finite, any length
    MULTIPLE_OF_N = "a multiple of N"  # `range(max_steps * N)`: every window is full
    ENDLESS = "an endless stream"  # `while True`, `cycle(loader)`: ends where the code breaks out
    UNKNOWN = "unknown"


class Repetition(Tag):
    REPEATED = "repeated"  # an enclosing loop, or a caller inside a loop
    ONCE = "once"  # module level, or every caller in this file is outside loops
    UNKNOWN = "unknown"  # a function nobody in this file calls


class TailFate(Tag):
    LEAKS = "leaks into the next pass"  # backpropagated, never stepped, summed into the next window
    DISCARDED = "discarded"  # backpropagated, never stepped, cleared where the next pass begins
    # summed into a total that only the boundary backpropagates, and the total starts anew with the next pass
    NEVER_BACKPROPAGATED = "never backpropagated"


class Tail(NamedTuple):
    """The micro-batches after the last boundary of each pass, and what becomes of them."""

    fate: TailFate
    lifetime: Lifetime
    kind: PassKind
    clear: Event | None = None  # the zero_grad that discards them

    @property
    def clear_text(self) -> str:
        return source(self.clear.node) if self.clear is not None else ""


_SIZED_WORDS = ("loader", "batches", "dataset", "samples")
_ENDLESS_WORDS = ("cycle", "iter", "infinite", "repeat", "stream", "endless")


def _total_restarts_with_pass(window: Window, backward: Event) -> bool:
    """Is the total the boundary backpropagates bound anew in the pass around the micro-batch loop
    (`total = 0` before `for i, batch in enumerate(loader):`)?"""
    name = summed_loss_name(backward.expr)
    scope = backward.scope or window.scope
    return name is not None and any(d.op.rebinds and d.ctx.loops == window.outer for d in scope.defs_of(name))


def unstepped_tail(window: Window, repetition: Repetition, literals: Mapping[str, bool | int] | None = None) \
        -> Tail | None:
    """The tail a guarded window leaves at the end of each pass, when the code makes it certain that
    one is left and lost; None when there is none, or when the code does not say. `literals`: the
    file's module-level names bound once to a number (bindings.module_literals)."""
    boundary = window.boundary
    if boundary is None or boundary.kind not in (BoundaryKind.MODULO, BoundaryKind.DISTANCE):
        return None
    if window.flushes or not window.steps_after_backward:
        return None
    # The same optimizer also steps off the boundary, under another test (`elif i + 1 == len(loader):`,
    # `if last and (i + 1) % N != 0:`): most likely the flush; stay silent.
    stepped = {s.target for s in window.boundary_steps}
    off = (Placement.UNKNOWN, Placement.OFF_BOUNDARY)
    if any(window.inside(s) and s.target in stepped and window.placement(s) in off and not _retried(s, window)
           for s in window.steps):
        return None
    kind = pass_kind(window, literals or {}, repetition is Repetition.REPEATED)
    if kind not in (PassKind.DATA, PassKind.COUNT):
        return None
    # A loop over data is an epoch, usually run by a caller elsewhere; a count is the whole run
    # unless something here repeats it.
    if repetition is Repetition.ONCE or (kind is PassKind.COUNT and repetition is not Repetition.REPEATED):
        return None
    lifetime = counter_lifetime(window)
    backwards = [b for b in window.backwards if window.inside(b)]
    if backwards and all(window.placement(b) is Placement.BOUNDARY for b in backwards):
        # the window's losses are summed in the graph and differentiated on the boundary: the tail's sum
        # is lost where the pass binds the total anew (else it is carried on: nothing is lost)
        return Tail(TailFate.NEVER_BACKPROPAGATED, lifetime, kind) \
            if lifetime is Lifetime.PER_PASS and all(_total_restarts_with_pass(window, b) for b in backwards) else None
    clear = pass_boundary_clear(window)
    if clear is not None:
        return Tail(TailFate.DISCARDED, lifetime, kind, clear)
    if lifetime is Lifetime.PER_PASS:
        return Tail(TailFate.LEAKS, lifetime, kind)
    return None


def _retried(step: Event, window: Window) -> bool:
    """A step in an exception handler under the same tests as a boundary step of the same optimizer
    (`try: optimizer.step()` / `except SomeError: optimizer.step(closure)`): the boundary step tried
    again, on the boundary only; not a step for the end of the data."""
    return step.ctx.in_handler and any(b.target == step.target and b.ctx.guards == step.ctx.guards
                                       and b.ctx.loops == step.ctx.loops for b in window.boundary_steps)


def pass_kind(window: Window, literals: Mapping[str, bool | int] | None = None, repeated: bool = False) -> PassKind:
    """What one pass of the window's loop runs through. `repeated`: a caller runs the loop's function
    inside a loop of its own (FileModel.repetition)."""
    loop = window.loop
    if _stops_after_whole_windows(window):
        return PassKind.MULTIPLE_OF_N
    if isinstance(loop, cst.For):
        found = _source_kind(loop.iter, window, 0, literals or {})
        # A loop that an enclosing loop (here or in a caller) runs again and again walks something
        # finite each time: a `for` over an endless source inside an epoch loop would never let the
        # epoch end.
        return PassKind.DATA if found is PassKind.UNKNOWN and (window.outer or repeated) else found
    if isinstance(loop, cst.While):
        test = loop.test
        if (isinstance(test, cst.Name) and test.value == "True") or (isinstance(test, cst.Integer) and test.value != "0"):
            # `try: batch = next(it) except StopIteration: break`: the pass ends with its data
            return PassKind.DATA if _breaks_on_exhaustion(loop.body) else PassKind.ENDLESS
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and (
                _multiple_of_n(test.comparisons[0].comparator, window, 0) or _whole_windows_of_data(test, window)):
            return PassKind.MULTIPLE_OF_N
        if window.stops_on_flag and not _breaks_on_exhaustion(loop.body):
            return PassKind.MULTIPLE_OF_N  # one window per pass, and the data is refilled, never cut short
        return PassKind.COUNT
    return PassKind.UNKNOWN


def _stops_after_whole_windows(window: Window) -> bool:
    """`if i // N >= full_windows: break` (or `continue`, or the quotient bound to a name first:
    `step = i // N`) ahead of every backward of the body, on the 0-based counter whose `(i + 1) % N`
    closes the windows: the first micro-batch it stops at starts a window, and the counter only grows,
    so each pass ends after whole windows."""
    boundary, index = window.boundary, window.index_counter()
    if index is None or boundary.kind is not BoundaryKind.MODULO or boundary.offset != 1 or index[1] != 0:
        return False
    counter, _, scope = index
    body = list(window.loop.body.body)
    backwards = [e for e in window.backwards if window.inside(e)]
    leaving = (cst.Break, cst.Continue)  # either way, no later micro-batch of the pass is backpropagated
    for index, test in ((i, s.test) for i, s in enumerate(body) if isinstance(s, cst.If) and _breaks_out(s, leaving)):
        if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(
                test.comparisons[0].operator, (cst.GreaterThan, cst.GreaterThanEqual))):
            continue
        left = _quotient_bound(test.left, body[:index])
        if isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.FloorDivide) \
                and dotted(left.left) == counter and is_accumulation_count(left.right, window.boundary.n, scope) \
                and not any(contains(statement, e.node) for statement in body[:index + 1] for e in backwards):
            return True
    return any(_breaks_after_last_whole_window(statement, window, counter, scope) for statement in body
               if isinstance(statement, cst.If) and contains(statement.test, boundary.comparison))


def _breaks_after_last_whole_window(boundary_if: cst.If, window: Window, counter: str, scope: Scope) -> bool:
    """In the boundary's branch, after its step, `if (i + 1) // N >= len(loader) // N: break`: the
    pass ends right after the step that closes the data's last whole window, and the micro-batches
    beyond it are never fetched."""
    body = list(boundary_if.body.body)
    stepped = [i for i, statement in enumerate(body) if any(contains(statement, s.node) for s in window.boundary_steps)]
    for index, statement in enumerate(body):
        if not stepped or index <= stepped[0] or not isinstance(statement, cst.If) or not _breaks_out(statement):
            continue
        test = statement.test
        if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(
                test.comparisons[0].operator, (cst.GreaterThan, cst.GreaterThanEqual))):
            continue
        left = test.left
        done = left.left if isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.FloorDivide) \
            and is_accumulation_count(left.right, window.boundary.n, scope) else None
        if done is not None and plus_one(done) == 1 and dotted(done.left) == counter:
            bounds = _values_of(test.comparisons[0].comparator, scope)
            if bounds and all(_at_most_whole_windows(bound, scope, window) for bound in bounds):
                return True
    return False


def _whole_windows_of_data(test: cst.Comparison, window: Window) -> bool:
    """`while steps < len(loader) // N`, where the loop adds one to `steps` only on the boundary: the
    test can turn false only right after a boundary, and not before the data has no whole window
    left, so each pass ends after whole windows and the micro-batches beyond them are never fetched.
    A bound lowered below that (`min(max_steps, len(loader) // N)`) ends the pass sooner, as whole."""
    if not isinstance(test.comparisons[0].operator, cst.LessThan):
        return False
    count = dotted(test.left)
    scope = window.counting_scope
    steps = [d for d in scope.defs_of(count) if window.loop in d.ctx.loops] if count else []
    if not steps or not all(_adds_one_on_boundary(d, count, window) for d in steps):
        return False
    bounds = _values_of(test.comparisons[0].comparator, scope)
    return bool(bounds) and all(_at_most_whole_windows(bound, scope, window) for bound in bounds)


def _at_most_whole_windows(bound: cst.BaseExpression, scope: Scope, window: Window) -> bool:
    """`len(loader) // N`, or `min(...)` of something and that."""
    if isinstance(bound, cst.Call) and call_receiver(bound) == (None, "min"):
        return any(_at_most_whole_windows(a.value, scope, window) for a in bound.args if not a.star)
    return isinstance(bound, cst.BinaryOperation) and isinstance(bound.operator, cst.FloorDivide) \
        and reads_length(bound.left) and is_accumulation_count(bound.right, window.n, scope)


def _values_of(node: cst.BaseExpression, scope: Scope) -> list[cst.BaseExpression]:
    """What an expression holds: itself, or every value a name is assigned here, or for `self.x` bound
    nowhere in this method, in any method of its class (`self.steps_per_epoch = ...` in `setup()`).
    A value assigned only when it is below the name's (`if cap < x: x = cap`) lowers it, and is left out."""
    name = dotted(node)
    if name is None:
        return [node]
    defs = scope.defs_of(name)
    if defs:
        if not all(d.op is DefOp.ASSIGN and d.value is not None for d in defs):
            return []
        assigned = [(d.value, [g.test for g in d.ctx.guards if g.positive]) for d in defs]
    elif name.startswith("self.") and scope.owner is not None:
        assigned = list(_attribute_assignments(scope.owner, name, []))
    else:
        return []
    return [value for value, tests in assigned if not any(_lowers(test, value, name) for test in tests)]


def _attribute_assignments(node: cst.CSTNode, name: str,
                           tests: list[cst.BaseExpression]) -> Iterator[tuple[cst.BaseExpression, list]]:
    """The values assigned to `name` in `node`, each with the tests of the `if` bodies around it."""
    for child in children(node):
        if isinstance(child, cst.If):
            yield from _attribute_assignments(child.body, name, tests + [child.test])
            if child.orelse is not None:
                yield from _attribute_assignments(child.orelse, name, tests)
        elif isinstance(child, cst.Assign):
            if any(dotted(target.target) == name for target in child.targets):
                yield child.value, tests
        else:
            yield from _attribute_assignments(child, name, tests)


def _lowers(test: cst.BaseExpression, value: cst.BaseExpression, name: str) -> bool:
    """Does the test hold only when `value` is below what `name` holds (`cap < name`, `name > cap`)?"""
    for term in conjuncts(test):
        if not (isinstance(term, cst.Comparison) and len(term.comparisons) == 1):
            continue
        operator, right = term.comparisons[0].operator, term.comparisons[0].comparator
        if isinstance(operator, cst.LessThan) and code(term.left) == code(value) and dotted(right) == name \
                or isinstance(operator, cst.GreaterThan) and dotted(term.left) == name and code(right) == code(value):
            return True
    return False


def _quotient_bound(node: cst.BaseExpression, before: list[cst.BaseStatement]) -> cst.BaseExpression:
    """What a name holds when a plain statement of the loop body ahead of the test binds it once
    (`step = i // N`); the expression itself otherwise."""
    if not isinstance(node, cst.Name):
        return node
    values = [small.value for line in before if isinstance(line, cst.SimpleStatementLine) for small in line.body
              if isinstance(small, cst.Assign) and len(small.targets) == 1
              and isinstance(small.targets[0].target, cst.Name) and small.targets[0].target.value == node.value]
    rebound = any(node.value in iter_names(statement) for statement in before if not isinstance(
        statement, cst.SimpleStatementLine))
    return values[0] if len(values) == 1 and not rebound else node


def _breaks_out(statement: cst.If, exits: tuple[type, ...] | None = None) -> bool:
    """`if <test>: break` (or another of `exits`) with no else."""
    exits = exits or (cst.Break,)  # libcst is read on the first call, never on import
    if isinstance(statement.body, cst.SimpleStatementSuite):  # `if count >= B: break` on one line
        smalls = list(statement.body.body)
    else:
        smalls = [small for line in statement.body.body if isinstance(line, cst.SimpleStatementLine)
                  for small in line.body]
    return statement.orelse is None and any(isinstance(small, exits) for small in smalls)


def pass_length(window: Window) -> cst.BaseExpression | None:
    """How many micro-batches one pass over the loop walks, when the loop states it as a bound:
    `range(B)`, `while count < B`, or `if count >= B: break` on a count the loop adds one to on every
    micro-batch; also where that test ends the run around an epoch loop over data (`while count < B`
    outside it, `if count >= B: return` in it). None for a bound the code does not state."""
    loop, nest = window.loop, window.loop_nest
    if isinstance(loop, cst.For):
        source_ = iterated(loop)
        starts_at_zero = isinstance(source_, cst.Call) and (len(source_.args) == 1 or (
            len(source_.args) == 2 and isinstance(source_.args[0].value, cst.Integer)
            and source_.args[0].value.value == "0"))
        if starts_at_zero and call_receiver(source_)[1] in ("range", "trange") and not window.outer:
            return source_.args[-1].value  # the whole run, not an epoch of it
    # a break in an inner loop ends the run too when its count is the run's (never set again by a loop
    # around it): once it reaches B every later pass breaks as it reaches the test
    bounds = _exit_bounds(loop)
    if loop is not nest[0]:
        bounds += _exit_bounds(nest[0])  # the outermost loop's exits end the run
    for each in nest:
        bounds += _exit_bounds(each, exits=(cst.Return,), own_test=False)
    for count, bound in bounds:
        if _counted_every_micro_batch(count, window):
            return bound
    return None


def _exit_bounds(loop: Loop, exits: tuple[type, ...] | None = None,
                 own_test: bool = True) -> list[tuple[str, cst.BaseExpression]]:
    """(count, B) for each test that ends the loop when a count reaches a bound: the loop's own
    `while count < B` (or `<=`, unless not `own_test`), or `if count >= B: break` (or `>`, `==`; another
    of `exits`) directly in its body; the callers check that the count goes up by one."""
    found = []
    own = loop.test if own_test and isinstance(loop, cst.While) else None
    for test in ([own] if own is not None else []) + _breaking_tests(loop, exits):
        if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
            continue
        operator, bound = test.comparisons[0].operator, test.comparisons[0].comparator
        # a count that goes up by one meets its bound on the way: `if seen == B: return` ends where `>=` does
        runs_on = (cst.LessThan, cst.LessThanEqual) if test is own else (cst.GreaterThan, cst.GreaterThanEqual,
                                                                          cst.Equal)
        count = dotted(test.left)
        if count is not None and isinstance(operator, runs_on):
            found.append((count, bound))
    return found


def _breaking_tests(loop: Loop, exits: tuple[type, ...] | None = None) -> list[cst.BaseExpression]:
    """The tests of `if <test>: break` (or another of `exits`) statements directly in the loop's body."""
    found = []
    for statement in loop.body.body:
        if isinstance(statement, cst.If) and _breaks_out(statement, exits):
            found.append(statement.test)
    return found


def _counted_every_micro_batch(name: str, window: Window) -> bool:
    """Does the loop add one to the count `name` on every micro-batch, outside any test (and no loop around
    it set it again)?"""
    defs = window.scope.defs_of(name)
    steps = [d for d in defs if window.loop in d.ctx.loops]
    level = len(window.outer) + 1
    by = increment(steps[0], name) if len(steps) == 1 else None
    if not (isinstance(by, cst.Integer) and by.value == "1") or len(steps[0].ctx.loops) != level \
            or any(g.depth >= level for g in steps[0].ctx.guards):
        return False
    # set again by an enclosing loop: a count of one epoch, not of the run
    return not any(d not in steps and any(lp in d.ctx.loops for lp in window.outer) for d in defs)


def step_count_bound(window: Window) -> cst.BaseExpression | None:
    """How many optimizer steps the run takes, when the loop states it as a bound on a count of
    windows: B in `if global_step >= B: break` (or `while global_step < B`) in the window's loop or
    one around it, where the loop adds one to `global_step` only on the boundary (under the window's
    boundary test, or `if accelerator.sync_gradients:`)."""
    for loop in window.loop_nest:
        for count, bound in _exit_bounds(loop):
            steps = [d for d in window.scope.defs_of(count) if window.loop in d.ctx.loops]
            if steps and all(_adds_one_on_boundary(d, count, window) for d in steps):
                return bound
    return None


def _adds_one_on_boundary(d: Def, name: str, window: Window) -> bool:
    by = increment(d, name)
    return isinstance(by, cst.Integer) and by.value == "1" and window.bound_on_boundary(d)


def _breaks_on_exhaustion(node: cst.CSTNode) -> bool:
    """A `break` in an `except StopIteration:` handler of this loop body (not of a nested loop or function)."""
    for child in children(node):
        if isinstance(child, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(child, cst.ExceptHandler) and child.type is not None \
                and "StopIteration" in {last_part(n) for n in iter_names(child.type)} and _breaks(child.body):
            return True
        if _breaks_on_exhaustion(child):
            return True
    return False


def _breaks(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.Break):
        return True
    return not isinstance(node, (cst.For, cst.While, cst.FunctionDef)) and any(_breaks(c) for c in children(node))


def _source_kind(node: cst.BaseExpression | None, window: Window, depth: int,
                 literals: Mapping[str, bool | int] | None = None, scope: Scope | None = None) -> PassKind:
    """What the loop walks, read in `scope` (by default the function the loop is written in, which may
    have been walked in place of a call)."""
    if node is None or depth > 3:
        return PassKind.UNKNOWN
    literals = literals or {}
    scope = scope or _loop_scope(window)
    passed_on = window.scope.iterated  # kept by the walk's root, for the functions walked in place too
    if isinstance(node, cst.Call) and id(node) in passed_on:  # a generator passing its argument's items on
        return _source_kind(passed_on[id(node)], window, depth + 1, literals, scope)
    if isinstance(node, cst.Call):
        callee = call_receiver(node)[1] or ""
        if callee in ("enumerate", "tqdm", "iter"):  # `iter(loader)` is as finite as the loader
            return _source_kind(positional(node, 0), window, depth + 1, literals, scope)
        if callee == "range":
            stop = node.args[-1].value if 1 <= len(node.args) <= 2 else None
            if stop is not None and _multiple_of_n(stop, window, 0):
                return PassKind.MULTIPLE_OF_N
            folded = [_number(each, scope, literals, 0) for each in (stop, window.n)]
            if len(node.args) == 1 and None not in folded and folded[1] > 0 and folded[0] % folded[1] == 0:
                return PassKind.MULTIPLE_OF_N  # `range(n_micro)` with both numbers written in the file
            return PassKind.COUNT
        if callee == "islice" and len(node.args) == 2 and _multiple_of_n(node.args[1].value, window, 0):
            return PassKind.MULTIPLE_OF_N  # `islice(loader, steps_per_epoch * N)`: the pass stops after whole windows
        if callee == "zip" and node.args and not any(a.star for a in node.args):
            # a zip ends with its shortest source: an endless one (`cycle(range(N))`) never decides.
            # All of them read as endless (by their names) says nothing: one of them must end the epoch.
            finite = {_source_kind(a.value, window, depth + 1, literals, scope) for a in node.args} - {PassKind.ENDLESS}
            if len(finite) == 1:
                return finite.pop()
        lowered = callee.lower()
        if any(word in lowered for word in _ENDLESS_WORDS):
            return PassKind.ENDLESS
        if lowered == "dataloader" and _sampled_in_windows(node, window, scope.node):
            return PassKind.MULTIPLE_OF_N
        if lowered in ("dataloader", "prepare", "setup_dataloaders"):
            return PassKind.DATA
    if isinstance(node, cst.IfExp):
        kinds = {_source_kind(node.body, window, depth + 1, literals, scope),
                 _source_kind(node.orelse, window, depth + 1, literals, scope)}
        return kinds.pop() if len(kinds) == 1 else PassKind.UNKNOWN
    name = dotted(node)
    if name is None:
        return PassKind.UNKNOWN
    argument, caller = bound_argument(node, scope)
    if caller is not scope:  # a parameter of a function walked in place: what its caller passes
        return _source_kind(argument, window, depth + 1, literals, caller)
    if _holds_n_items(name, window):
        return PassKind.MULTIPLE_OF_N
    if name.startswith("self.") and scope.owner is not None and not scope.defs_of(name):
        # a loader the class made in another method (`self.train_loader = DataLoader(...)` in __init__)
        if any((call_receiver(value)[1] or "").lower() == "dataloader" and _sampled_in_windows(value, window, method)
               for value, method in _attribute_calls(scope.owner, name)):
            return PassKind.MULTIPLE_OF_N
    defs = [d for d in scope.defs_of(name) if d.value is not None and d.op.rebinds]
    for d in defs:
        if isinstance(d.value, cst.Call):
            found = _source_kind(d.value, window, depth + 1, literals, d.scope or scope)
            if found is not PassKind.UNKNOWN:
                return found
    return PassKind.DATA if any(word in last_part(name).lower() for word in _SIZED_WORDS) else PassKind.UNKNOWN


def _attribute_calls(cls: cst.ClassDef, name: str) -> Iterator[tuple[cst.Call, cst.FunctionDef]]:
    """The calls whose results a class binds to `self.x` (`name`), each with the method that makes it:
    `self.x = Call(...)`, or element k of `self.a, self.x = self.build()` where `build` returns a tuple
    whose element k is a name it binds to a call."""
    methods = {m.name.value: m for m in children(cls.body) if isinstance(m, cst.FunctionDef)}
    for method in methods.values():
        yield from ((value, method) for value, _ in _attribute_assignments(method, name, [])
                    if isinstance(value, cst.Call))
        for node in walk(method):
            if not isinstance(node, cst.Assign) or not isinstance(node.value, cst.Call):
                continue
            for target in (t.target for t in node.targets if isinstance(t.target, cst.Tuple)):
                index = next((k for k, e in enumerate(target.elements) if dotted(e.value) == name), None)
                receiver, called = call_receiver(node.value)
                maker = methods.get(called or "") if dotted(receiver) == "self" else None
                if index is not None and maker is not None:
                    yield from _returned_element_calls(maker, index)


def _returned_element_calls(method: cst.FunctionDef, index: int) -> Iterator[tuple[cst.Call, cst.FunctionDef]]:
    """The call element `index` of the tuples a method returns is bound to in that method."""
    for node in walk(method):
        if isinstance(node, cst.Return) and isinstance(node.value, cst.Tuple) and index < len(node.value.elements):
            element = node.value.elements[index].value
            made = [value for value, _ in _attribute_assignments(method, dotted(element) or "", [])]
            yield from ((value, method) for value in made if isinstance(value, cst.Call))


def _loop_scope(window: Window) -> Scope:
    """The scope whose code holds the window's loop: the window's own, or that of a function walked in
    place of a call (whose names the window's scope does not hold)."""
    for event in window.events:
        if window.loop not in event.ctx.loops or event.scope is None or event.scope is window.scope:
            continue
        return event.scope.holding(window.loop) or window.scope
    return window.scope


def _sampled_in_windows(loader: cst.Call, window: Window, where: cst.CSTNode) -> bool:
    """Is the DataLoader's sampler (or batch sampler) made with N among its arguments (`sampler =
    DistSampler(dataset, batch_size=b, acc_grad=args.accum_iter)`, written in the call or bound in
    `where`, the function that makes the loader)? A sampler told the window size shapes each epoch
    around it: truncated or padded to whole windows, which is what such samplers are written for."""
    for argument in loader.args:
        if argument.keyword is None or argument.keyword.value not in _SAMPLER_KEYWORDS:
            continue
        made = [argument.value] if isinstance(argument.value, cst.Call) else [
            value for value, _ in _attribute_assignments(where, dotted(argument.value) or "", [])]
        if any(isinstance(call, cst.Call) and any(is_accumulation_count(a.value, window.n, window.scope)
                                                   for a in call.args) for call in made):
            return True
    return False


_SAMPLER_KEYWORDS = ("sampler", "batch_sampler")


def _number(node: cst.BaseExpression | None, scope: Scope, literals: Mapping[str, bool | int], depth: int) -> int | None:
    """The integer an expression always holds: a literal, a name bound once to one (here, or at the
    top of the module and nowhere else), or `+ - * //` of such; None otherwise."""
    if node is None or depth > 6:
        return None
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    if isinstance(node, cst.BinaryOperation):
        left, right = _number(node.left, scope, literals, depth + 1), _number(node.right, scope, literals, depth + 1)
        if left is None or right is None:
            return None
        operator = node.operator
        if isinstance(operator, cst.Add):
            return left + right
        if isinstance(operator, cst.Subtract):
            return left - right
        if isinstance(operator, cst.Multiply):
            return left * right
        if isinstance(operator, cst.FloorDivide) and right != 0:
            return left // right
        return None
    if not isinstance(node, cst.Name):
        return None
    defs = scope.defs_of(node.value)
    if defs:
        return _number(defs[0].value, scope, literals, depth + 1) if len(defs) == 1 and defs[0].op is DefOp.ASSIGN \
            else None
    # the module's names, read in the linted file's own functions (not one walked from another file)
    local = scope.frame is None and scope.imports is None \
        and not (isinstance(scope.node, cst.FunctionDef) and node.value in parameter_names(scope.node))
    value = literals.get(node.value) if local else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _holds_n_items(name: str, window: Window) -> bool:
    """A list made with N slots (`buffer = [None] * N`, `[None for _ in range(N)]`; for `self.buffer`, in
    any method of the class), its slots only ever replaced (`buffer[i % N] = item`), never added to:
    a pass over it walks one window."""
    scope = window.scope
    defs = [d for d in scope.defs_of(name) if d.op is not DefOp.ITEM]
    if defs:
        values = [d.value for d in defs if d.op is DefOp.ASSIGN] if all(d.op is DefOp.ASSIGN for d in defs) else []
    elif name.startswith("self.") and scope.owner is not None:
        values = [value for value, _ in _attribute_assignments(scope.owner, name, [])]
    else:
        return False
    where = scope.owner if name.startswith("self.") and scope.owner is not None else scope.node
    grown = any(dotted(call.func) in (f"{name}.{method}" for method in _GROWING) for call in iter_calls(where))
    return bool(values) and not grown and all(_n_slots(value, window) for value in values)


_GROWING = ("append", "extend", "insert", "pop", "clear", "remove")  # list methods that change its length


def _n_slots(value: cst.BaseExpression | None, window: Window) -> bool:
    """`[x] * N` (or `N * [x]`), `[x for _ in range(N)]`."""
    scope = window.scope
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply):
        for one, times in ((value.left, value.right), (value.right, value.left)):
            if isinstance(one, cst.List) and len(one.elements) == 1 and is_accumulation_count(times, window.n, scope):
                return True
        return False
    if isinstance(value, cst.ListComp) and value.for_in.inner_for_in is None and value.for_in.ifs == [] \
            and isinstance(value.for_in.iter, cst.Call) and call_receiver(value.for_in.iter) == (None, "range") \
            and len(value.for_in.iter.args) == 1:
        return is_accumulation_count(value.for_in.iter.args[0].value, window.n, scope)
    return False


def _multiple_of_n(node: cst.BaseExpression, window: Window, depth: int) -> bool:
    """`max_steps * N`, or a name bound only to one."""
    scope = window.scope
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        return any(is_accumulation_count(side, window.n, scope) for side in (node.left, node.right))
    name = dotted(node)
    if name is None or depth > 2:
        return False
    defs = scope.defs_of(name)
    return bool(defs) and all(d.op is DefOp.ASSIGN and d.value is not None and _multiple_of_n(d.value, window, depth + 1)
                              for d in defs)


# -- the counter -----------------------------------------------------------------------------------

def counter_lifetime(window: Window) -> Lifetime:
    counter = window.counter
    if counter is None and window.index_counter() is not None:
        return _index_lifetime(window.loop, window.scope)  # the index of a loop walked in place of a call
    found = _lifetime(counter, window, 0) if counter is not None else Lifetime.UNKNOWN
    return found or Lifetime.UNKNOWN


def _lifetime(node: cst.BaseExpression, window: Window, depth: int) -> Lifetime | None:
    """The counter's lifetime; None for a value that no loop of the window's nest changes."""
    if depth > 4:
        return Lifetime.UNKNOWN
    if isinstance(node, cst.Integer):
        return None
    scope, loop = window.scope, window.loop
    if isinstance(node, cst.Subscript):
        # `state["step"]`: a container entry outlives the loop, unless the loop sets it from its own
        # count (`info["batch_idx"] = batch_idx`, read by a helper the loop calls)
        entry = item_name(node)
        if entry is None or not any(loop in d.ctx.loops for d in scope.defs_of(entry)):
            return Lifetime.ACROSS_PASSES
    name = dotted(node) or item_name(node)
    if name is None:
        if isinstance(node, cst.BinaryOperation):
            return _combine(_lifetime(node.left, window, depth + 1), _lifetime(node.right, window, depth + 1))
        return Lifetime.UNKNOWN
    defs = scope.defs_of(name)
    targets = [d for d in defs if d.op is DefOp.LOOP_TARGET]
    if any(d.node is loop for d in targets):
        return _index_lifetime(loop, scope)
    if any(d.node in window.outer for d in targets):
        return Lifetime.ACROSS_PASSES  # the epoch index
    nest = window.loop_nest
    inside = [d for d in defs if loop in d.ctx.loops]
    if not inside:
        if name in scope.given_indices or any(d.scope is not None and loop_index(d.value, d.ctx) for d in defs):
            return Lifetime.ACROSS_PASSES  # the epoch index a caller's loop hands in (`train_one_epoch(epoch, ...)`)
        changed = any(any(lp in d.ctx.loops for lp in nest) for d in defs)
        return Lifetime.UNKNOWN if changed else None
    if all(increment(d, name) is not None or _is_constant(d) for d in inside):
        start = scope.loop_start.get(id(loop), 0)
        inits = [d for d in defs if loop not in d.ctx.loops and d.order < start and d.op.rebinds]
        if not inits:
            if _reset_after(defs, window):
                return Lifetime.PER_PASS  # `self.step = 0` once the pass is over: the next starts from it
            return Lifetime.ACROSS_PASSES if "." in name or _is_parameter(scope, name) else Lifetime.UNKNOWN
        init = inits[-1]
        outer = window.outer
        if not outer or init.ctx.loops[: len(outer)] == outer:
            return Lifetime.PER_PASS  # set again before each pass (or at the top of the function)
        if window.pass_outer != outer and init.ctx.loops == window.pass_outer:
            # set in the epoch loop, above a loop over data sources (`for loader in shards:`) whose items the
            # micro-batch loop walks: windows span the sources and the count restarts with the epoch
            return Lifetime.PER_PASS
        return Lifetime.ACROSS_PASSES  # set once, before the loops that repeat the pass
    derived = [d for d in inside if d.op is DefOp.ASSIGN and d.value is not None]
    if len(inside) == 1 and derived:  # `ni = i + nb * epoch`, `step = i + 1`
        if _plus_epoch_offset(derived[0].value, window):
            return Lifetime.ACROSS_PASSES
        found: Lifetime | None = None
        for read in _plain_names(derived[0].value):
            found = _combine(found, _lifetime(cst.parse_expression(read), window, depth + 1))
        return found
    return Lifetime.UNKNOWN


def _plus_epoch_offset(value: cst.BaseExpression, window: Window) -> bool:
    """`i + self.epoch * len(self.train_loader)` (or `epoch_size` bound to that length): the loop's
    index plus whole passes over what the loop walks, a count of the run whatever counts the passes."""
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add)):
        return False
    walked = _walked_sources(window.loop)
    return bool(walked) and any(
        isinstance(term, cst.BinaryOperation) and isinstance(term.operator, cst.Multiply)
        and any(_length_of(factor, walked, window.scope) for factor in (term.left, term.right))
        for term in (value.left, value.right))


def _walked_sources(loop: Loop) -> set[str]:
    """What a `for` loop walks, as written, past `enumerate`/`tqdm`: `self.train_loader`, and for a
    call that hands it on (`metric_logger.log_every(self.train_loader, 10)`), its first argument."""
    source_ = iterated(loop) if isinstance(loop, cst.For) else None
    if isinstance(source_, cst.Call):
        source_ = positional(source_, 0)
    name = dotted(source_) if source_ is not None else None
    return {name} if name else set()


def _length_of(node: cst.BaseExpression, walked: set[str], scope: Scope) -> bool:
    """`len(walked)`, or a name every binding of which is."""
    if isinstance(node, cst.Call) and call_receiver(node) == (None, "len") and node.args:
        return dotted(node.args[0].value) in walked
    name = dotted(node)
    defs = scope.defs_of(name) if name else []
    return bool(defs) and all(d.op is DefOp.ASSIGN and isinstance(d.value, cst.Call)
                              and _length_of(d.value, walked, scope) for d in defs)


def _combine(a: Lifetime | None, b: Lifetime | None) -> Lifetime | None:
    """A value made of two counters lives as long as the longer-lived (an epoch offset never restarts)."""
    if a is None or b is None:
        return a or b
    if Lifetime.ACROSS_PASSES in (a, b):
        return Lifetime.ACROSS_PASSES
    if Lifetime.UNKNOWN in (a, b):
        return Lifetime.UNKNOWN
    return Lifetime.PER_PASS


def _index_lifetime(loop: Loop, scope: Scope) -> Lifetime:
    """The loop's own index restarts with each pass, unless it starts from a running count
    (`enumerate(loader, start=global_step)`); a start that is the same number on every pass of a
    fresh run (`start=start_step`, reset to 0 after each epoch) is no running count."""
    source_ = loop.iter if isinstance(loop, cst.For) else None
    if isinstance(source_, cst.Call) and call_receiver(source_)[1] == "enumerate":
        start = keyword(source_, "start") or positional(source_, 1)
        if isinstance(start, cst.Name):
            start = fresh_run_literal(start.value, scope) or start
        if start is not None and not isinstance(start, cst.Integer):
            return Lifetime.ACROSS_PASSES
    return Lifetime.PER_PASS


def _reset_after(defs: list[Def], window: Window) -> bool:
    """Is the counter set to a constant after the loop, in the block the loop sits in and under the
    same tests, whatever the pass did (`self.step = 0` at the end of a method that runs one epoch)?"""
    if not any(window.loop in e.ctx.loops for e in window.events):
        return False
    end, around = window.scope.loop_end.get(id(window.loop), 0), loop_guards(window, window.loop)
    return any(d.order > end and _is_constant(d) and d.ctx.loops == window.outer and d.ctx.guards == around
               and not d.ctx.in_handler for d in defs)


def _is_constant(d: Def) -> bool:
    return d.op is DefOp.ASSIGN and isinstance(d.value, cst.Integer)


def _is_parameter(scope: Scope, name: str) -> bool:
    node = scope.node
    if not isinstance(node, cst.FunctionDef):
        return False
    params = node.params
    every = list(params.params) + list(params.kwonly_params) + list(params.posonly_params)
    return any(p.name.value == name for p in every)


def _plain_names(node: cst.BaseExpression) -> set[str]:
    """The outermost names an expression reads (`self.x`, not also `self`)."""
    names = set(iter_names(node))
    return {n for n in names if not any(other != n and other.startswith(n + ".") for other in names)}


# -- the pass boundary -------------------------------------------------------------------------------

def pass_boundary_clear(window: Window) -> Event | None:
    """A zero_grad of the stepped optimizer (or the model) that runs, unconditionally, in the block
    around the micro-batch loop: before it (the epoch start) or after it (the epoch end)."""
    scope, loop, outer = window.scope, window.loop, window.outer
    block_start = scope.loop_start.get(id(outer[-1]), 0) if outer else 0
    block_end = scope.loop_end.get(id(outer[-1]), 0) if outer else None
    start, end = scope.loop_start.get(id(loop), 0), scope.loop_end.get(id(loop), 0)
    variant = assigned_in(scope, outer[-1]) if outer else set()
    steps = window.boundary_steps
    for event in scope.events:
        if event.kind is not EventKind.ZERO_GRAD or event.ctx.in_handler or not window.path.allows(event):
            continue
        if event.ctx.loops == outer + (loop,) and _on_first_micro_batch(event, window) \
                and any(same_target(event, step) for step in steps):
            return event  # `if i == 0: optimizer.zero_grad()`: the first micro-batch of every pass
        if event.ctx.loops != outer:
            continue
        before = block_start <= event.order < start
        # after it: in the enclosing loop's body, or (a function that runs one pass) to the function's end
        after = end < event.order <= block_end if outer else end < event.order
        if not (before or after):
            continue
        # a test every backward also runs under (`if epoch < warmup: continue` before the clear and the
        # loop) lets the clear run on every pass that makes gradients
        if not all(invariant(g.test, variant) or after and _off_last_boundary(g, window)
                   for g in event.ctx.guards if g.depth >= len(outer) and g not in window.backward_guards):
            continue
        if any(same_target(event, step) for step in steps):
            return event
    return None


def _on_first_micro_batch(event: Event, window: Window) -> bool:
    """Does the event run, inside the micro-batch loop, under one test that varies there: that the
    window's counter holds its first value (`if cur_iter == 0:`)? Tests of the configuration (the path's
    own) may surround it."""
    variant = assigned_in(window.scope, window.loop)
    inside = [g for g in event.ctx.guards if g.depth > len(window.outer) and not invariant(g.test, variant)]
    counter, first = code(window.counter) if window.counter is not None else None, window.counter_start
    index = window.index_counter() if counter is None else None
    if index is not None:  # the index of a loop walked in place of a call, as that loop's code names it
        counter, first = index[0], index[1]
    if len(inside) != 1 or not inside[0].positive or inside[0].exit is not None or counter is None or first is None:
        return False
    test = inside[0].test
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.Equal)):
        return False
    sides = (test.left, test.comparisons[0].comparator)
    for a, b in (sides, sides[::-1]):
        if not (isinstance(b, cst.Integer) and int(b.value) == (first if code(a) == counter else 0)):
            continue
        if code(a) == counter:
            return True  # `if i == 0:`
        # `if i % N == 0:` on the loop's own index from 0 (it restarts with the pass), when that is not
        # the boundary itself: the start of each window, the first of them the pass's first micro-batch
        if first == 0 and isinstance(a, cst.BinaryOperation) and isinstance(a.operator, cst.Modulo) \
                and code(a.left) == counter and window.index_counter() is not None:
            opened = guard_boundary(inside[0], window.counting_scope)
            return opened is None or window.boundary is None or not opened.same_micro_batches(window.boundary)
    return False


def _off_last_boundary(guard: Guard, window: Window) -> bool:
    """After the loop, a test that the last micro-batch closed no window: the window's own boundary test,
    negated, on its counter (`if i % N != N - 1: optimizer.zero_grad()`): it clears exactly the tail."""
    effective, boundary = guard_boundary(guard, window.scope), window.boundary
    return effective is not None and boundary is not None and effective.same_micro_batches(boundary) \
        and effective.positive != boundary.positive


# -- distance boundaries --------------------------------------------------------------------------

class Shift(NamedTuple):
    """How many micro-batches a distance boundary's windows hold beyond N: the first window (where
    the counter and the reference start) and every later one (`>` where `>=` was meant)."""

    first: int
    later: int
    counter_start: int | None = None
    reference_start: int | None = None


def distance_shift(window: Window) -> Shift | None:
    """For `counter - last >= N` (with `last = counter` on the boundary) or `count >= N` (with
    `count = 0` on the boundary): the windows' excess, when the starting values are certain. The
    value tested grows by one per micro-batch; the first window closes when it first reaches N."""
    boundary = window.boundary
    if boundary is None or boundary.kind is not BoundaryKind.DISTANCE or not window.boundary_steps:
        return None
    if window.n is None or window.n_varies:
        return None  # N changes during the run (a warm-up ramp): the arithmetic below does not hold
    start = window.counter_start
    if start is None:
        return None
    threshold = 2 if boundary.strict else 1  # the tested value on the first micro-batch of a right window
    if boundary.reference is None:
        return Shift(threshold - start, threshold - 1)
    reference = dotted(window.as_own(boundary.reference))
    counter = dotted(window.counter)
    if reference is None or counter is None:
        return None
    scope, loop = window.scope, window.loop
    defs = scope.defs_of(reference)
    loop_start = scope.loop_start.get(id(loop), 0)
    inits = [d for d in defs if not any(lp in d.ctx.loops for lp in window.loop_nest) and d.order < loop_start
             and d.op.rebinds]
    resets = [d for d in defs if loop in d.ctx.loops]
    if not inits or not resets or not all(dotted(d.value) == counter and window.placement_of_def(d) for d in resets):
        return None
    initial = _integer(inits[-1].value)
    if initial is None:
        return None
    return Shift(threshold - (start - initial), threshold - 1, start, initial)


def _integer(node: cst.BaseExpression | None) -> int | None:
    if isinstance(node, cst.Integer):
        return int(node.value, 0)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and \
            isinstance(node.expression, cst.Integer):
        return -int(node.expression.value, 0)
    return None
