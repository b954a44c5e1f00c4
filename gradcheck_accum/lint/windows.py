"""The accumulation-window model: for each micro-batch loop, where each relevant call runs.

Three window shapes (RULES.md):
- guarded: the step sits in the micro-batch loop under a boundary predicate;
- nested: an inner loop does the backwards and the step follows it;
- framework: `accelerator.accumulate(...)` or a DeepSpeed engine owns the window.
A loop whose step runs unconditionally is shape "unguarded" (no accumulation, or ACC104).

Each path through the loop body's configuration tests (paths.py) is its own window; on a path
where N is 1 the window is "plain": every micro-batch is its own window, nothing accumulates.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gradcheck_accum.lint import catalogue as cat
from gradcheck_accum.lint.bindings import (accelerator_accumulation_steps, asserted_engine_count,
                                           deepspeed_engine_count, first_index, is_accumulation_name,
                                           pass_from_zero)
from gradcheck_accum.lint.lazy import cst
from gradcheck_accum.lint.names import (SELF_NAMES, assigned_names, call_receiver, children, code, contains, dotted,
                                        is_one, iter_calls, iter_names, keyword, last_part, positional,
                                        statement_blocks, summed_loss_name, top_level_statements, walk)
from gradcheck_accum.lint.paths import NO_PATH, Count, Path, count_on_path, decision, invariant, split
from gradcheck_accum.lint.predicates import (Boundary, BoundaryKind, analyze, bound_argument, clipping_factor,
                                             conjuncts, ends_with_break, guard_boundary, is_accumulation_count,
                                             plus_one, reads_length)
from gradcheck_accum.lint.vocabulary import Def, DefOp, Event, EventKind, Exit, Framework, Guard, Role, Scope, Tag

if TYPE_CHECKING:
    from gradcheck_accum.lint.vocabulary import Loop


class Placement(Tag):
    """Where an event runs relative to its window."""

    EVERY = "every"  # on every micro-batch
    BOUNDARY = "boundary"  # once per window, on its last micro-batch (or once around a nested loop)
    OFF_BOUNDARY = "off-boundary"  # on every micro-batch except the boundary one
    AFTER = "after"  # after the micro-batch loop has finished
    UNKNOWN = "unknown"  # under a condition the model cannot read


class WindowShape(Tag):
    GUARDED = "guarded"  # the step sits in the micro-batch loop under a boundary predicate
    NESTED = "nested"  # an inner loop does the backwards; the step follows it
    FRAMEWORK = "framework"  # accelerate's accumulate() or a DeepSpeed engine owns the window
    UNGUARDED = "unguarded"  # the step runs on every micro-batch: no accumulation (or ACC104)
    PLAIN = "plain"  # on this path N is 1 (`if accum_steps > 1: ... else: <this>`): nothing accumulates


EVERY, BOUNDARY, OFF_BOUNDARY, AFTER, UNKNOWN = Placement
GUARDED, NESTED, FRAMEWORK, UNGUARDED, PLAIN = WindowShape


@dataclass
class Window:
    scope: Scope
    loop: Loop  # the micro-batch loop (the loop whose body reaches backward)
    shape: WindowShape
    framework: Framework | None = None  # accelerate or DeepSpeed, when it owns the window
    boundary: Boundary | None = None  # guarded: the boundary test of the step
    framework_roles: frozenset[Role] = frozenset()  # roles of the Accelerator or DeepSpeed engine owning the window
    # accelerate: the `accelerator.accumulate(...)` calls entered on each micro-batch, around the backwards
    # or before them (either way they set the sync flag the prepared optimizer reads)
    accumulate_entries: tuple[cst.Call, ...] = ()
    outer: tuple[Loop, ...] = ()  # the loops around the micro-batch loop
    n: cst.BaseExpression | None = None
    events: list[Event] = field(default_factory=list)  # events inside the loop and after it
    placements: dict[int, Placement] = field(default_factory=dict)  # id(event) -> placement
    path: Path = NO_PATH  # the configuration this window is built for (paths.py)
    # whose names the boundary test reads: a function called in the loop and walked in place (its
    # counter may be a parameter bound to the caller's loop index)
    boundary_scope: Scope | None = None
    # Guards every backward of the window runs under: micro-batches they turn away make no gradient,
    # so they say nothing about where other calls run relative to the window.
    backward_guards: frozenset[Guard] = frozenset()

    def placement(self, event: Event) -> Placement:
        return self.placements.get(id(event), UNKNOWN)

    def of(self, *kinds: EventKind, direct: bool = False) -> list[Event]:
        """The window's events of these kinds; `direct`: not those standing for a helper's effects."""
        return [e for e in self.events if e.kind in kinds and not (direct and e.via_helper)]

    @property
    def backwards(self) -> list[Event]:
        return [e for e in self.events if e.kind is EventKind.BACKWARD and self.placement(e) is not AFTER]

    @property
    def steps(self) -> list[Event]:
        return self.of(EventKind.STEP)

    def inside(self, event: Event) -> bool:
        return self.loop in event.ctx.loops

    @property
    def boundary_steps(self) -> list[Event]:
        return [s for s in self.steps if self.placement(s) is BOUNDARY]

    @property
    def inverted_steps(self) -> list[Event]:
        """Steps that run on every micro-batch but the boundary one (`if i % N: optimizer.step()`)
        while no step runs on the boundary: the test is read backwards."""
        if self.shape is not GUARDED or self.boundary_steps:
            return []
        return [s for s in self.steps if self.placement(s) is OFF_BOUNDARY]

    @property
    def steps_beside_boundary(self) -> list[Event]:
        """Steps of a last-window flush indented into the loop (`if acc > 0: step()` below the boundary's
        `acc = 0`): they run on every micro-batch but the boundary, where the same optimizer steps too, so
        together they step on every micro-batch."""
        if self.shape is not GUARDED:
            return []
        stepped = {b.target for b in self.boundary_steps if b.target is not None}
        return [s for s in self.steps if self.placement(s) is OFF_BOUNDARY and s.target in stepped
                and any(_after_reset(self, s, g) is OFF_BOUNDARY for g in _guards_below(s, self.loop))]

    @property
    def steps_besides_boundary_step(self) -> list[Event]:
        """Steps on every micro-batch of an optimizer the loop also steps under its boundary test, both
        written in the same body (`if i % N == 0: optimizer.step()` and `optimizer.step()` below it): the
        optimizer steps on every micro-batch, twice on the boundary, and nothing accumulates."""
        if self.shape is not GUARDED:
            return []
        stepped = {(b.target, id(b.scope)) for b in self.boundary_steps
                   if b.target is not None and not b.via_helper and self.inside(b)}
        return [s for s in self.steps if self.placement(s) is EVERY and not s.via_helper and self.inside(s)
                and (s.target, id(s.scope)) in stepped]

    @property
    def pass_outer(self) -> tuple[Loop, ...]:
        """The loops around the micro-batch loop that repeat the pass over the data: `outer` less a loop
        over data sources whose item the micro-batch loop walks (`for loader in shards:` around
        `for x, y in loader:`), which is part of one pass."""
        if not self.outer or not isinstance(self.loop, cst.For) or not isinstance(self.outer[-1], cst.For):
            return self.outer
        walked = dotted(iterated(self.loop))
        return self.outer[:-1] if walked in set(iter_names(self.outer[-1].target)) else self.outer

    @property
    def loop_nest(self) -> tuple[Loop, ...]:
        """The micro-batch loop and the loops around it."""
        return self.outer + (self.loop,)

    @property
    def nest_events(self) -> list[Event]:
        """Every event inside the outermost loop around the window (where clearing or syncing may sit)."""
        outermost = self.loop_nest[0]
        return [e for e in loop_events(self.scope, outermost) if outermost in e.ctx.loops]

    @property
    def n_varies(self) -> bool:
        """N is assigned inside the window's loops (a warm-up ramp of the accumulation count)."""
        name = dotted(self.n) if self.n is not None else None
        return bool(name) and self.assigned_in_nest(name)

    def n_shrunk_to_remainder(self) -> Def | None:
        """N rebound inside the micro-batch loop to the remainder `len(data) % N` (directly or through a
        name bound once to it), to size the epoch's last partial window, while the boundary counts the
        loop's own index from the start of the epoch: the binding, if so."""
        name, counter = dotted(self.n) if self.n is not None else None, dotted(self.counter)
        if name is None or counter is None or _loop_target(self.scope, counter, self.loop) is None:
            return None
        for d in self.scope.defs_of(name):
            if self.loop not in d.ctx.loops or d.op is not DefOp.ASSIGN:
                continue
            value = d.value
            aliases = [a for a in self.scope.defs_of(dotted(value) or "") if a.op is DefOp.ASSIGN]
            if len(aliases) == 1:
                value = aliases[0].value
            if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Modulo) \
                    and code(value.right) == code(self.n) and reads_length(value.left) \
                    and not self._modulo_test_conditioned():
                return d
        return None

    def _modulo_test_conditioned(self) -> bool:
        """The boundary's `% N` clause sits under an `and` with another condition (`last or (not in_tail
        and (i + 1) % n == 0)`), which may keep it off where N changed: the code may handle that."""
        comparison = self.boundary.comparison if self.boundary is not None else None
        if comparison is None:
            return True
        tests = [g.test for step in self.boundary_steps for g in step.ctx.guards]
        tests += [d.value for test in list(tests) for name in iter_names(test)
                  for d in self.scope.defs_of(name) if d.op is DefOp.ASSIGN and d.value is not None]
        return any(isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.And)
                   and contains(node, comparison) for test in tests for node in walk(test))

    def assigned_in_nest(self, name: str) -> bool:
        """Is `name` bound inside the window's loops (an optimizer built anew every iteration)?"""
        return any(loop in d.ctx.loops for d in self.scope.defs_of(name) for loop in self.loop_nest)

    def built_per_iteration(self, step: Event) -> bool:
        """Is the optimizer a step steps built anew on every iteration: bound inside the window's loops, or
        in the function a call in them runs, before the step (`optim = AdamW(model.parameters())` in a
        helper that builds a model, steps once and saves it)?"""
        name = step.target
        if not name:
            return False
        if self.assigned_in_nest(name):
            return True
        scope = step.scope
        return scope is not None and scope is not self.scope and scope.frame is not None and any(
            d.op is DefOp.ASSIGN and d.scope is None and d.order < step.order for d in scope.defs_of(name))

    def runs_every_iteration(self, event: Event, loop: Loop) -> bool:
        """No guard opened inside `loop` (one of the window's nest) depends on the iteration."""
        return invariant_guards(event.ctx.guards, self.scope, self.loop_nest[: self.loop_nest.index(loop) + 1])

    @property
    def steps_after_backward(self) -> bool:
        """The boundary step follows the first backward of the micro-batch."""
        steps = self.boundary_steps
        backwards = [e.order for e in self.backwards if self.inside(e)]
        return bool(steps and backwards) and min(s.order for s in steps) > min(backwards)

    @property
    def counter_start(self) -> int | None:
        """The value of the boundary test's counter on the first micro-batch (0, 1, or 2 for a count
        set to 1 and incremented before the test), when the code makes it certain (`enumerate(x,
        start=1)`, `step = 0` then `step += 1` before the test, `ni = i + nb * epoch` in the first
        epoch)."""
        first = self._first_value(self.counter, 0)
        if first is None and self.boundary is not None and self.boundary_scope is not None:
            # the micro-batch loop is a function's walked in place of its call (a loss scaler's
            # `update_grad` argument, tested in the scaler): its counter is read where the loop is
            counter, scope = bound_argument(self.boundary.counter, self.boundary_scope)
            name = dotted(counter)
            while scope is not None and not scope.defs_of(name or ""):  # out to the code that counts
                scope = scope.frame.caller if scope.frame is not None else None
            if scope is not None and scope is not self.scope:
                first = self._first_value(counter, 0, scope)
        return first

    def boundary_skips_first(self) -> bool:
        """`i % N == 0 and i > 0` (or `i != 0`, `i >= 1`): the boundary test also excludes the counter's
        first value, so the first window runs on to the next multiple of N."""
        boundary = self.boundary
        if boundary is None or boundary.counter is None:
            return False
        counter = code(boundary.counter)
        for step in self.boundary_steps:
            for guard in step.ctx.guards:
                test = guard.test
                # the boundary's test on one side, maybe beside a flush (`i != 0 and (last or i % N == 0)`)
                if not (isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And)
                        and (contains(test.left, boundary.comparison) or contains(test.right, boundary.comparison))):
                    continue
                other = test.right if contains(test.left, boundary.comparison) else test.left
                if isinstance(other, cst.Comparison) and len(other.comparisons) == 1 and code(other.left) == counter:
                    operator, bound = other.comparisons[0].operator, code(other.comparisons[0].comparator)
                    if (type(operator), bound) in ((cst.GreaterThan, "0"), (cst.NotEqual, "0"),
                                                   (cst.GreaterThanEqual, "1")):
                        return True
        return False

    def accumulation_count(self) -> cst.BaseExpression | None:
        """N, as the code states it: the window's own count, or for a window accelerate owns, the
        `gradient_accumulation_steps=` its Accelerator is built with in this scope."""
        if self.n is not None or self.framework is not Framework.ACCELERATE:
            return self.n
        calls = self.accumulate_entries
        receiver = call_receiver(calls[0])[0] if calls else None
        built = self.scope.defs_of(dotted(receiver) or "")
        if len(built) != 1 or not isinstance(built[0].value, cst.Call):
            return None
        return accelerator_accumulation_steps(built[0].value)

    def accumulate_entries_per_micro_batch(self) -> int:
        """How many `accelerator.accumulate(...)` entries each micro-batch makes: nested around one
        backward, or one after another around several (`with accumulate(vae): ...` then `with
        accumulate(discriminator): ...`). Each entry counts one in accelerate's step counter. Entries on
        exclusive branches are one per micro-batch at most."""
        backwards = [b for b in self.backwards if self.inside(b)]
        nested = max((len(accumulate_calls(b)) for b in backwards), default=0)
        if any(exclusive(a, b) for a in backwards for b in backwards):
            return nested
        # one after another: each entry a micro-batch of its own, which is a window of N entries when
        # every entry steps the same optimizer (two losses per batch, each entered and stepped)
        stepped: dict[int, frozenset[str | None]] = {}
        for b in backwards:
            for call in accumulate_calls(b):
                stepped[id(call)] = frozenset(s.target for s in self.steps if self.inside(s)
                                              and any(c is call for c in accumulate_calls(s)))
        if len(set(stepped.values())) <= 1:
            return nested
        return max(nested, len(stepped))

    @property
    def counting_scope(self) -> Scope:
        """Whose names the boundary test reads: the window's scope, or a function walked in place of a
        call in its loop (whose own bindings the window's scope does not hold)."""
        return self.boundary_scope or self.scope

    def index_counter(self) -> tuple[str, int, Scope] | None:
        """The boundary test's counter as the loop's own code names it, its first value, and the scope the
        loop is written in, when it is the loop's index (`for i, batch in enumerate(loader)`): also a
        loop of a function walked in place, whose index the window's own scope cannot name."""
        name = dotted(self.boundary.counter) if self.boundary is not None else None
        scope = self.counting_scope
        while name is not None and scope is not None:  # from where the test is read out to the loop's code
            target = _loop_target(scope, name, self.loop)
            if target is not None:
                start = _enumerate_start(self.loop, target.index, scope)
                return (name, start, scope) if start is not None else None
            scope = scope.frame.caller if scope.frame is not None else None
        return None

    def steps_on_outer_counter(self) -> tuple[str | None, list[Event]]:
        """The boundary steps inside the micro-batch loop whose test counts the index of an enclosing
        loop (`for epoch in ...: for batch in loader: ... if (epoch + 1) % N == 0: step`) that nothing
        in the micro-batch loop changes, with that index's name: the test is the same on every
        micro-batch of an outer iteration. Only steps of one optimizer (not `optimizers[k]` picked by
        the inner loop, one per head or model)."""
        name = dotted(self.counter)
        if name is None or self.shape is not GUARDED:
            return None, []
        variant = assigned_in(self.scope, self.loop)
        if name in variant or not any(d.op is DefOp.LOOP_TARGET and d.node in self.outer
                                      for d in self.scope.defs_of(name)) or self._passes_over_same_input():
            return None, []
        steps = [s for s in self.boundary_steps if self.inside(s) and not s.via_helper and s.target
                 and "[" not in s.target and s.target.split(".")[0] not in variant
                 and not self.refreshed_on_boundary(s)]
        return name, steps

    def _passes_over_same_input(self) -> bool:
        """Does the loop run again over the outer iteration's batch (`for _ in range(ppo_epochs):
        loss = self.training_step(model, inputs)`)? Nothing in it draws (`next(...)`), its target
        indexes nothing (`chunks[k]`) and is handed to no call, and every call in it reads only what
        was bound before the loop or what the pass itself computes from that: each pass is an update
        of its own on the same data, not a micro-batch of a window."""
        loop = self.loop
        if not isinstance(loop, cst.For) or not isinstance(loop.iter, cst.Call) \
                or call_receiver(loop.iter) != (None, "range"):
            return False
        targets = set(iter_names(loop.target))
        indexed = {name for node in walk(loop.body) if isinstance(node, cst.Subscript) for name in iter_names(node)}
        if targets & indexed or any(call_receiver(c) == (None, "next") for c in iter_calls(loop.body)):
            return False
        calls = [e for e in self.events if self.inside(e) and e.kind in (EventKind.MODEL_CALL, EventKind.HELPER_CALL)]
        return bool(calls) and not any(call.argument_names & targets for call in calls)

    @property
    def counter(self) -> cst.BaseExpression | None:
        """The boundary test's counter as the window's own scope names it: a counter read in a function
        walked in place is followed through the parameter it arrives by (`update_step(batch_idx)`
        called with the caller's loop index `i` is `i`). None when it cannot be named there."""
        return self.as_own(self.boundary.counter) if self.boundary is not None else None

    def as_own(self, node: cst.BaseExpression | None) -> cst.BaseExpression | None:
        """A name of the boundary test (its counter, its last-step marker) as the window's scope names it,
        through the parameters it arrives by; None when it is a name of the called function itself."""
        if node is None:
            return None
        node, scope = bound_argument(node, self.counting_scope)
        # an argument the caller wrote out (`scaler(loss, opt, update_grad=step % n == 0)`, tested in the
        # callee as its parameter) reads the caller's names, not the callee's
        while scope is not self.scope and scope.frame is not None and not contains(scope.node, node):
            scope = scope.frame.caller
        return node if scope is self.scope else None

    def _first_value(self, counter: cst.BaseExpression | None, depth: int, scope: Scope | None = None) -> int | None:
        name = dotted(counter)
        if name is None or depth > 2:
            return None
        loop, scope = self.loop, scope or self.scope
        defs = scope.defs_of(name)
        target = _loop_target(scope, name, loop)
        inside = [d for d in defs if loop in d.ctx.loops and d is not target]
        if target is not None:
            start = _enumerate_start(loop, target.index, scope)
            first_step = self._test_read_at(scope)
            # a rebinding after the test (`index += 1`, an evaluation loop's own `for step, b in ...`) changes
            # nothing the test sees: the loop binds the index anew first
            inside = [d for d in inside if first_step is None or d.order < first_step]
            if not inside or start is None:
                return start
            # `for index, batch in enumerate(loader): index += 1`: one more before the test on every pass;
            # any other rebinding leaves the value unknown
            by = increment(inside[0], name) if len(inside) == 1 else None
            conditional = any(g.depth > len(self.outer) for g in inside[0].ctx.guards)  # a test inside the loop
            if not (isinstance(by, cst.Integer) and by.value == "1") or conditional:
                return None
            return start + 1
        if len(inside) == 1 and inside[0].op is DefOp.ASSIGN and isinstance(inside[0].value, cst.BinaryOperation) \
                and isinstance(inside[0].value.operator, cst.Add):
            value = inside[0].value  # `ni = i + nb * epoch`: the loop index, offset by whole epochs
            for index, offset in ((value.left, value.right), (value.right, value.left)):
                if dotted(index) is not None and self._zero_in_first_pass(offset, scope):
                    return self._first_value(index, depth + 1, scope)
            return None
        steps = [d for d in inside if increment(d, name) is not None]
        resets = [d for d in inside if d not in steps]
        before = [d for d in defs if loop not in d.ctx.loops and d.order < scope.loop_start.get(id(loop), 0)]
        # `if args.resume: step = int(ckpt_name.split(".")[0])`: a count restored under a condition is a
        # resumed run's; a fresh run starts from the unconditional value before it
        restored = [d for d in before if d.ctx.guards and not isinstance(d.value, cst.Integer)]
        before = [d for d in before if d not in restored]
        # or where __init__ starts it, for a count kept on `self` (read only here: few counters need it)
        started = before[-1].bound if before else \
            _counter_starts(scope.owner).get(name) if scope.owner is not None and name.startswith("self.") else None
        if len(steps) != 1 or started is None or not self.boundary_steps:
            return None
        first_step = self._test_read_at(scope)
        # a reset to 0 that runs with the step (`count = 0` on the boundary) restarts the count
        if any(not (isinstance(d.value, cst.Integer) and d.value.value == "0" and self.placement_of_def(d))
               for d in resets):
            return None
        init, step = started, steps[0]
        by = increment(step, name)
        # past an exit that ends the loop (`if updates >= total: break`), the count runs on every pass; a
        # test around the whole loop (`if args.do_train:`) decides nothing from one pass to the next
        passes_all = all(guard.exit is not None and guard.exit.ends_loop or skips_stretch(guard, self)
                         for guard in step.ctx.guards if guard.depth > len(self.outer))
        if not (isinstance(init, cst.Integer) and init.value in _SMALL_STARTS and isinstance(by, cst.Integer)
                and by.value == "1" and passes_all):
            return None
        return int(init.value) + (1 if step.order < first_step else 0)

    def _test_read_at(self, scope: Scope) -> int | None:
        """The program point where the boundary test reads its counter: where the test is kept in a flag
        (`update = (count + 1) % n == 0`, then `count += 1`, then `if update:`) or where the predicate that
        holds it was called, else at the first step it guards."""
        first_step = min((s.order for s in self.boundary_steps), default=None)
        comparison = self.boundary.comparison if self.boundary is not None else None
        if comparison is None:
            return first_step
        flags = {dotted(decision(guard).test) for step in self.boundary_steps for guard in step.ctx.guards}
        kept = [d.order for flag in flags if flag for d in scope.defs_of(flag)
                if d.value is not None and self.loop in d.ctx.loops and contains(d.value, comparison)]
        predicate = self.boundary_scope
        if predicate is not None and predicate is not scope and predicate.frame is not None:
            # a project predicate's test, read with the arguments its call was handed where it was made
            kept += [d.order for defs in predicate.defs.values() for d in defs if d.scope is not None]
        return min(kept + ([first_step] if first_step is not None else []), default=None)

    def cleared_earlier_in_block(self) -> bool:
        """A nested window: gradients are cleared in its block before the micro-step loop, also inside
        an earlier loop of that block (a forward-backward loop that clears first, then a second backward
        loop before the one step). Whether that clear runs before this window the code does not say."""
        if self.shape is not NESTED and not self.runs_one_window:
            return False
        depth = len(self.outer)
        head_start = self.scope.loop_start.get(id(self.outer[-1]), 0) if self.outer else 0
        start = self.scope.loop_start.get(id(self.loop), 0)
        return any(e.kind is EventKind.ZERO_GRAD and head_start <= e.order < start and e.ctx.loops[:depth] == self.outer
                   for e in self.scope.events)

    @property
    def runs_one_window(self) -> bool:
        """Does the loop end on its boundary (`if count == N: optimizer.step(); break`): one window per
        run of the loop, as a nested micro-step loop is?"""
        if self.shape is not GUARDED or self.boundary is None:
            return False
        owners = {id(g.owner): g.owner for step in self.boundary_steps for g in step.ctx.guards
                  if g.positive and g.test is self.boundary.comparison}
        return any(isinstance(owner, cst.If) and ends_with_break(owner) for owner in owners.values()) \
            or self.stops_on_flag

    @property
    def stops_on_flag(self) -> bool:
        """`while not window_done:` where the loop sets `window_done` only on the boundary (on the
        window's path): the loop ends with its first window."""
        test = self.loop.test if isinstance(self.loop, cst.While) else None
        if not (isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)):
            return False
        flag = dotted(test.expression)
        sets = [d for d in self.counting_scope.defs_of(flag) if self.loop in d.ctx.loops and self.path.allows(d)] \
            if flag else []
        return bool(sets) and all(self.bound_on_boundary(d) for d in sets)

    def bound_on_boundary(self, d: Def) -> bool:
        """Is the binding made only on the window's boundary (under its test, or `if accelerator.sync_gradients:`)?"""
        for guard in d.ctx.guards:
            boundary = guard_boundary(guard, self.scope)
            if boundary is not None and boundary.positive and (
                    boundary.kind is BoundaryKind.SYNC_FLAG
                    or self.boundary is not None and boundary.family == self.boundary.family):
                return True
        return False

    @property
    def repeats_fixed_input(self) -> bool:
        """Every forward in the loop reads only values bound before it (a few optimizer steps on one
        batch built beforehand, as unit tests of an optimizer do): the loop walks no data."""
        if not isinstance(self.loop, (cst.For, cst.While)):
            return False
        changing = assigned_in(self.scope, self.loop)
        if isinstance(self.loop, cst.For):
            changing |= set(iter_names(self.loop.target))
        calls = [e for e in self.events if self.inside(e) and e.kind in (EventKind.MODEL_CALL, EventKind.HELPER_CALL)]
        if not calls or any(e.kind is EventKind.HELPER_CALL for e in calls):
            return False  # a helper may draw the next batch
        for call in calls:
            arguments = [a.value for a in call.node.args] if isinstance(call.node, cst.Call) else []
            if any(not _plain_value(a) for a in arguments) or call.argument_names & changing:
                return False
        return any(call.argument_names for call in calls)

    def sync_boundaries(self) -> list[tuple[Event, Boundary]]:
        """Each DDP sync switch of the window with the test that decides on which micro-batches the
        model all-reduces, normalised so that it is true where it does: `ctx = model.no_sync if i % N
        != 0 else nullcontext`, `if not boundary: with model.no_sync(): ...`,
        `model.require_backward_grad_sync = test`, `m.set_requires_gradient_sync(test)`."""
        found = []
        for event in self.events:
            if event.kind is not EventKind.SYNC_CONTROL or event.framework is not Framework.DDP \
                    or not self.inside(event):
                continue
            boundary = _sync_boundary(event, self)
            if boundary is not None:
                found.append((event, boundary))
        return found

    def placement_of_def(self, d: Def) -> bool:
        """Does this assignment run on the boundary (under the step's boundary test)?"""
        steps = self.boundary_steps
        return bool(steps) and any(g in steps[0].ctx.guards for g in d.ctx.guards if analyze(g.test, self.scope))

    def _zero_in_first_pass(self, offset: cst.BaseExpression, scope: Scope) -> bool:
        """`nb * epoch`, `epoch * len(loader)`: a multiple of an enclosing loop's index that starts at 0."""
        if not (isinstance(offset, cst.BinaryOperation) and isinstance(offset.operator, cst.Multiply)):
            return False
        for factor in (offset.left, offset.right):
            name = dotted(factor)
            if name in scope.given_passes:
                return True  # `epoch`, which every caller binds to its loop's index from 0
            bound = scope.defs_of(name or "")
            if len(bound) == 1 and bound[0].scope is not None and bound[0].value is not None \
                    and pass_from_zero(bound[0].value, bound[0].ctx, bound[0].scope):
                return True  # the same, in a function walked in place of the call that binds it
            for outer in self.outer:
                if _loop_target(scope, name or "", outer) is not None and isinstance(outer, cst.For) \
                        and first_index(outer.iter, scope) == 0:
                    return True
        return False

    def cleared_between_backwards(self, event: Event) -> bool:
        """Does a clear that may be of the window's optimizer run on every micro-batch after an earlier
        backward of that micro-batch and before this one (an adversarial-training helper's
        `optimizer.zero_grad(); adv_loss.backward()` after the loss's own backward)? Nothing this backward
        adds is then summed over the window. Only a clear of another optimizer, both known, is not such."""
        for zero in self.of(EventKind.ZERO_GRAD):
            # it runs wherever the event does: on its micro-batch, under no test the event is not under
            if zero.order >= event.order or not self.inside(zero) or self.placement(zero) not in (EVERY, UNKNOWN) \
                    or not zero.ctx.branches <= event.ctx.branches:
                continue
            if not any(b.order < zero.order and not exclusive(b, zero) for b in self.backwards if self.inside(b)):
                continue  # a clear before every backward (ACC101 reports it; the loss's scale is its own question)
            if any(same_target(zero, step, self.scope) or not _distinct_optimizers(zero, step, self.scope)
                   for step in self.boundary_steps):
                return True
        return False

    def cleared_after(self, event: Event) -> bool:
        """Does a clear of the window's optimizer run after this backward wherever it runs, before the
        step (a gradient-surgery branch: `loss_a.backward(); saved = [p.grad.clone() ...]; opt.zero_grad()`)?
        What the backward adds never reaches the step through the window's sum (a copy kept by hand is the
        code's own business)."""
        later_steps = [step for step in self.boundary_steps if step.order > event.order]
        for zero in self.of(EventKind.ZERO_GRAD):
            if zero.order <= event.order or not self.inside(zero) or not zero.ctx.branches <= event.ctx.branches \
                    or zero.ctx.loops != event.ctx.loops:
                continue
            if any(zero.order < step.order and (same_target(zero, step, self.scope)
                                                or not _distinct_optimizers(zero, step, self.scope))
                   for step in later_steps):
                return True
        return False

    def clears_before_step(self, zero: Event) -> Event | None:
        """The step that `zero` wipes the gradients of: zero_grad runs after a backward and before a
        step of the same iteration, with no backward in between, whenever that step runs."""
        # Cheap tests first: most of a window's events, and most zero_grads a rule asks about, come
        # after its loop.
        if self.placement(zero) is AFTER or _clears_some_parameters(zero, self.scope):
            return None
        own = [e.order for e in self.backwards]
        if not own or zero.order < min(own):
            return None
        backward_orders = None
        for step in self.steps:
            if step.via_helper or step.order < zero.order or self.placement(step) is AFTER \
                    or not same_target(zero, step, self.scope):
                continue
            if backward_orders is None:
                # every backward counts as a "backward in between", also those of a later loop in the same body,
                # and a call of a helper that backpropagates (not walked again at each call)
                backward_orders = [e.order for e in self.events if e.kind is EventKind.BACKWARD
                                   or e.kind is EventKind.HELPER_CALL and e.backpropagates]
            if any(zero.order < order < step.order for order in backward_orders):
                continue
            if zero.ctx.branches <= step.ctx.branches:
                return step
        return None

    def clears_before_next_step(self, zero: Event) -> bool:
        """`zero` runs after a backward of its micro-batch and the next gradient event after it is a step
        of the same optimizer: on every micro-batch it clears what that micro-batch just made, the
        boundary one included, so nothing it clears ever reaches a step (a step on cleared gradients,
        ACC103, or parameters kept out of the update on purpose: `p.grad = None` for a frozen layer)."""
        if not any(e.order < zero.order for e in self.backwards if self.inside(e)):
            return False
        later = [e for e in self.events if e.order > zero.order and self.inside(e)
                 and (e.kind is EventKind.BACKWARD or (e.kind is EventKind.STEP and same_target(zero, e, self.scope)))]
        return bool(later) and later[0].kind is EventKind.STEP

    def clears_accumulated_model(self, zero: Event) -> bool:
        """Inside `accelerator.accumulate(model)`, `model.zero_grad()` on every micro-batch: accelerate
        holds back a prepared optimizer's zero_grad until the window's last micro-batch, but a module's
        own zero_grad is torch's, and wipes what the window has summed each time."""
        call = _accumulate_call(zero)
        if self.framework is not Framework.ACCELERATE or not self.accumulates or call is None \
                or zero.api is None or zero.api.form is not cat.Form.CALL or not zero.model_wide \
                or Role.OPTIMIZER in zero.roles or self.placement(zero) is not EVERY or not self.inside(zero):
            return False
        # one of the models accumulate() was given (a prepared model, whose zero_grad accelerate leaves alone),
        # or the module it wraps (`accelerator.unwrap_model(model)`: the same parameters)
        given = {dotted(a.value) for a in call.args if not a.star}
        if zero.target is None:
            return False
        bound = (zero.scope or self.scope).defs_of(zero.target)
        unwrapped = bound[0].value if len(bound) == 1 and bound[0].op is DefOp.ASSIGN else None
        if isinstance(unwrapped, cst.Call) and call_receiver(unwrapped)[1] == cat.UNWRAP_METHOD and unwrapped.args:
            return dotted(unwrapped.args[0].value) in given
        return zero.target in given

    def clears_last_micro_batch_first(self, zero: Event) -> Event | None:
        """Inside `accelerator.accumulate()`, a prepared optimizer's zero_grad before the backward: it
        acts only on the window's last micro-batch (catalogue.SYNC_ONLY_OPTIMIZER), and there it
        clears the earlier micro-batches' gradients before the last one adds its own. The step of the
        same optimizer after that backward, if any."""
        if self.framework is not Framework.ACCELERATE or not self.accumulates or _accumulate_call(zero) is None \
                or cat.SYNC_ONLY_OPTIMIZER not in zero.roles:
            return None
        # a backward in another `accumulate()` entry is another micro-batch of accelerate's count (a loop body
        # that enters it once per loss): the clear ran after the step of the one before
        entered = _accumulate_call(zero)
        later = [b for b in self.backwards
                 if b.order > zero.order and self.inside(b) and _accumulate_call(b) is entered]
        if not later or Role.ACCELERATOR_DEEPSPEED in self.framework_roles or any(
                e.kind is EventKind.MODEL_CALL and last_part(e.target) in cat.DEEPSPEED_ENGINE_METHODS
                for e in self.scope.events):
            return None  # the model is a DeepSpeed engine: the prepared optimizer's zero_grad does nothing
        return next((s for s in self.steps if s.order > later[0].order and self.inside(s)
                     and same_target(zero, s, self.scope)), None)

    def on_other_micro_batch(self, event: Event) -> bool:
        """Does the event run once per window, but under a test of the window's counter and N that
        singles out another micro-batch than the boundary's (`if step % N == 0:` beside a step under
        `if (step + 1) % N == 0:`): the window's first, before the others have added their gradients?"""
        boundary = self.boundary
        if self.shape is not GUARDED or boundary is None or boundary.offset is None or not self.inside(event):
            return False
        for guard in event.ctx.guards:
            test = guard_boundary(guard, self.scope)
            if test is not None and test.positive and test.offset is not None and test.same_count(boundary) \
                    and not test.same_micro_batches(boundary):
                return True
        return False

    def clears_boundary_micro_batch_first(self, zero: Event) -> Event | None:
        """A guarded window's clear under the step's own boundary test, before that micro-batch's
        backward (`if (i + 1) % N == 0: optimizer.zero_grad()` at the top of the body, the step at its
        end): on the window's last micro-batch it wipes the N - 1 micro-batches before it, and only
        that one reaches the step. A clear that opens the window (`if i % N == 0:`) runs on its first
        micro-batch instead. The step of the same optimizer after that backward, if any."""
        boundary = self.boundary
        if self.shape is not GUARDED or boundary is None or boundary.offset is None or not self.inside(zero) \
                or self.placement(zero) is not BOUNDARY:
            return None
        same_micro_batch = False
        for guard in zero.ctx.guards:
            test = guard_boundary(guard, self.scope)
            same_micro_batch |= test is not None and test.same_micro_batches(boundary) and test.positive
        # a backward the clear's branch skips (`if isnan(loss): optimizer.zero_grad(); continue`) runs on
        # another micro-batch: the clear only drops a window abandoned there
        later = [b for b in self.backwards if b.order > zero.order and self.inside(b) and not exclusive(b, zero)]
        if not same_micro_batch or not later:
            return None
        step = next((s for s in self.boundary_steps if s.order > later[0].order and same_target(zero, s, self.scope)),
                    None)
        return None if step is None or self.refreshed_on_boundary(step) else step

    def inside_step(self, event: Event) -> bool:
        """Was the event walked inside one of the window's steps: the body of an optimizer class of the
        project (`ClipAdam.step` clipping each parameter's gradient before updating it) is part of that step."""
        steps = {id(step.node) for step in self.steps}
        frame = event.frame
        while frame is not None:
            if id(frame.call) in steps:
                return True
            frame = frame.caller.frame
        return False

    @property
    def accumulates(self) -> bool:
        """The optimizer steps once per window of several micro-batches."""
        if self.shape is FRAMEWORK:
            if self.framework is Framework.DEEPSPEED:
                return Role.DEEPSPEED_WITHOUT_ACCUMULATION not in self.framework_roles
            return Role.ACCELERATOR_ACCUMULATES in self.framework_roles
        if self.shape is PLAIN:
            return False
        return any(self.placement(s) is BOUNDARY and not self.stepped_every_micro_batch(s)
                   and not self.refreshed_on_boundary(s) for s in self.steps)

    def refreshed_on_boundary(self, step: Event) -> bool:
        """Does the boundary clear the step's optimizer and then make all the gradients it steps with
        (`if update % k == 0: actor_opt.zero_grad(); actor_loss.backward(); actor_opt.step()`, a delayed
        policy update, a discriminator trained every k batches)? It steps on one micro-batch's own
        gradients: a periodic update, not the close of a window."""
        clears = [z for z in self.of(EventKind.ZERO_GRAD) if z.order < step.order
                  and (self.inside(z) or self.shape is NESTED) and self.placement(z) is BOUNDARY
                  and same_target(z, step, self.scope) and not z.model_wide]
        if not clears:
            return False
        last = max(clears, key=lambda z: z.order)
        made = [b for b in self.backwards if last.order < b.order < step.order]
        return bool(made) and all(self.placement(b) is BOUNDARY for b in made) \
            and not any(b.order < last.order and self.placement(b) is not BOUNDARY
                        and not self._used_by_another(b, step) and not self._gradients_read(b, last)
                        for b in self.backwards)

    def _used_by_another(self, backward: Event, step: Event) -> bool:
        """Is a backward off the boundary followed, on every micro-batch, by the step of an optimizer
        told apart from `step`'s (a critic's update before the delayed actor update)?"""
        return any(s.order > backward.order and self.placement(s) is EVERY and s.target is not None
                   and not same_target(s, step, self.scope) for s in self.steps)

    def before_micro_steps(self, event: Event) -> bool:
        """Does the event run once per window, before the micro-step loop of a nested window starts (a
        reference model's single full-batch backward ahead of a pipeline schedule's micro-batches)?"""
        return self.shape is NESTED and not self.inside(event) \
            and event.order < self.scope.loop_start.get(id(self.loop), 0)

    def _gradients_read(self, backward: Event, clear: Event) -> bool:
        """Are the gradients a backward makes read before the clear that follows it, in the window's
        loop (`grads[i] = w.grad.clone()`: MGDA's or PCGrad's per-task gradients, combined into the
        loss that is backpropagated and stepped after the clear)? Then they are used, not lost."""
        # the calls in between (`w.grad.clone()`, `torch.cat([p.grad.flatten() ...])`) are the window's events
        reads = [e.node for e in self.events if backward.order < e.order < clear.order and self.inside(e)]
        return any(isinstance(node, cst.Attribute) and node.attr.value == cat.GRADIENT_ATTRIBUTE
                   for read in reads for node in walk(read))

    def stepped_every_micro_batch(self, event: Event) -> bool:
        """May the optimizer `event` clears or steps also step on every micro-batch (a step of the same
        one, or of one that cannot be told apart from it, outside the boundary test)? Then it uses each
        micro-batch's gradients as they come: nothing accumulates for it."""
        return any(self.placement(s) is EVERY and same_target(event, s, self.scope) for s in self.steps)

    @property
    def flushes(self) -> bool:
        """The last, partial window of a pass is stepped too: the boundary test has an end-of-data
        clause (`or i + 1 == len(loader)`) that holds in every configuration, or a step follows the
        loop. A flush under a configuration test (`or (not dynamic and last)`) leaves the other
        configuration without one."""
        if any(self.placement(s) is AFTER and s.ctx.loops == self.outer and not self._only_if_never_stepped(s)
               for s in self.steps) or self._steps_after_sources():
            return True  # a step right after the loop (not one in a later loop of the same body)
        boundary = self.boundary
        if boundary is None or not boundary.flush or self.dead_flush is not None or self.run_bound_flush is not None:
            return False
        condition = boundary.flush_condition
        return condition is None or not invariant(condition, assigned_in(self.scope, self.loop))

    def _steps_after_sources(self) -> bool:
        """Does a step follow the loop over data sources the micro-batch loop walks (pass_outer), in the
        body of the loop that repeats the pass? It steps the pass's last, partial window."""
        if self.pass_outer == self.outer:
            return False
        after = self.scope.loop_end.get(id(self.outer[-1]), 0) + 1
        last = self.scope.loop_end.get(id(self.pass_outer[-1])) if self.pass_outer else None
        return any(e.kind is EventKind.STEP and e.ctx.loops == self.pass_outer for e in _span(self.scope, after, last))

    def _only_if_never_stepped(self, step: Event) -> bool:
        """Is a step after the loop guarded by a name the loop sets only on the boundary (`stepped = True`
        where it steps, then `if not stepped: optimizer.step()` after it)? It runs only in a pass that never
        reached a boundary, and leaves the partial window of every other pass unstepped."""
        boundary = frozenset().union(*(s.ctx.branches for s in self.boundary_steps))
        backwards = [b for b in self.backwards if self.inside(b)]
        for guard in step.ctx.guards:
            if any(guard in b.ctx.guards for b in backwards):
                continue  # open around the loop too
            for name in iter_names(guard.test):
                inside = [d for d in self.scope.defs_of(name) if self.loop in d.ctx.loops]
                if inside and all(d.ctx.branches & boundary for d in inside):
                    return True
        return False

    def _flush_equality(self) -> tuple[cst.Comparison | None, tuple[str, int, Scope] | None]:
        """The end-of-data clause when it is one `==` comparison (`or i + 1 == len(loader)`), and the
        loop's index as index_counter names it."""
        clause = self.boundary.flush_clause if self.boundary is not None else None
        if not isinstance(clause, cst.Comparison) or len(clause.comparisons) != 1 \
                or not isinstance(clause.comparisons[0].operator, cst.Equal):
            return None, None
        return clause, self.index_counter()

    @property
    def dead_flush(self) -> cst.Comparison | None:
        """The end-of-data clause when it can never hold: the loop's 0-based index compared with the
        data's length (`or i == len(loader)`), which its last value, len - 1, never reaches."""
        clause, index = self._flush_equality()
        if clause is None or index is None or index[1] != 0:
            return None
        left, right = clause.left, clause.comparisons[0].comparator
        for counted, length in ((left, right), (right, left)):
            if dotted(counted) == index[0] and isinstance(length, cst.Call) \
                    and call_receiver(length) == (None, cat.LENGTH_FUNCTION):
                return clause
        return None

    @property
    def run_bound_flush(self) -> cst.Comparison | None:
        """The end-of-data clause when it compares the loop's index with what bounds a loop around it
        (`or k == max_micro_steps` inside `while seen < max_micro_steps`): the length of the run, which
        an index that restarts every epoch does not reach at each epoch's end."""
        clause, index = self._flush_equality()
        if clause is None or index is None:
            return None
        bounds = {name for loop in self.outer for name in iter_names(
            loop.test if isinstance(loop, cst.While) else loop.iter)} - {index[0]}
        left, right = clause.left, clause.comparisons[0].comparator
        for counted, bound in ((left, right), (right, left)):
            if index[0] in set(iter_names(counted)) and dotted(bound) in bounds:
                return clause
        return None

    def is_micro_batch_loop(self) -> bool:
        """For a nested window: does the inner loop clearly walk the micro-batches of one window?"""
        return is_micro_batch_loop(self.loop, self.n, self.scope)

    def counts_micro_steps(self, node: cst.BaseExpression) -> bool:
        """`len(chunks)` for a nested window whose micro-step loop walks `chunks` (directly or through
        `enumerate`): the number of its micro-batches, which is N however the list was made."""
        if self.shape is not NESTED or not isinstance(self.loop, cst.For) or not isinstance(node, cst.Call) \
                or call_receiver(node) != (None, cat.LENGTH_FUNCTION) or len(node.args) != 1:
            return False
        name = dotted(iterated(self.loop))
        return name is not None and dotted(node.args[0].value) == name


def iterated(loop: cst.For) -> cst.BaseExpression:
    """What a `for` loop walks, past `enumerate(...)` and `tqdm(...)`."""
    walked = loop.iter
    while isinstance(walked, cst.Call) and call_receiver(walked)[1] in cat.ITERATION_WRAPPERS and walked.args:
        walked = walked.args[0].value
    return walked


_SMALL_STARTS = ("0", "1")  # the values a count starts from that say where its first window ends
_MICRO_WORDS = {"micro", "microbatch", "microbatches", "mb", "chunk", "chunks", "accum", "accumulation"}


def is_micro_batch_loop(loop: Loop, n: cst.BaseExpression | None, scope: Scope | None = None) -> bool:
    """Does the loop clearly walk the micro-batches of one window, N of them? (`for micro_step in
    range(grad_accum)`, `for chunk in batch.chunk(n)`, `while seen < total:` counting what it has
    done, `for x, y in zip(xs, ys)` over a batch's fields cut into groups of rows alike; not
    `for task in ...`.)"""
    if isinstance(loop, cst.While):
        return _runs_until_counted(loop)
    if not isinstance(loop, cst.For):
        return False
    if n is not None and (is_accumulation_name(n) or _is_chunking(loop.iter)):
        return True
    if scope is not None and (_walks_row_groups(loop.iter, scope) or _indexes_row_groups(loop, scope)):
        return True
    if _draws_a_batch_per_count(loop) or _walks_strided_slices(loop) or _walks_indexed_slices(loop) \
            or _loads_tensors_in_pieces(loop.iter):
        return True
    names = list(iter_names(loop.iter)) + list(iter_names(loop.target))
    return any(_MICRO_WORDS.intersection(last_part(name).lower().split("_")) for name in names)


def _draws_a_batch_per_count(loop: cst.For) -> bool:
    """`for _ in range(k): x, y = next(batches)`: a count of iterations, each drawing the next batch of
    an iterator in its own body (not in a loop nested in it): k micro-batches of fresh data."""
    if not (isinstance(loop.iter, cst.Call) and call_receiver(loop.iter) == (None, "range")):
        return False
    stack: list[cst.CSTNode] = [loop.body]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(node, cst.Assign) and isinstance(node.value, cst.Call) \
                and call_receiver(node.value) == (None, cat.NEXT_BATCH_FUNCTION):
            return True
        stack.extend(children(node))
    return False


def _walks_strided_slices(loop: cst.For) -> bool:
    """`for lo in range(0, n, m): ... x[lo:lo + m]` (or `hi = lo + m` first, or `min(lo + m, n)`, or a
    `slice(lo, ...)` object): the rows of one batch cut into consecutive slices of a stride, one
    micro-batch each, whatever the stride is called."""
    start = _counting_index(loop)
    if start is None or len(loop.iter.args) != 3:
        return False
    stride = code(loop.iter.args[2].value).replace(" ", "")
    ends = {f"{start}+{stride}", f"{stride}+{start}"}

    def ends_slice(upper: cst.BaseExpression | None) -> bool:
        """`lo + m`, or `min(lo + m, n)` that stops the last slice at the end of the rows."""
        if isinstance(upper, cst.Call) and call_receiver(upper) == (None, cat.CAPPING_BUILTIN):
            return any(ends_slice(a.value) for a in upper.args)
        return upper is not None and code(upper).replace(" ", "") in ends

    for node in walk(loop.body):  # `hi = lo + m`, `stop = min(lo + m, n)`: a name for the slice's end
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name) \
                and ends_slice(node.value):
            ends.add(node.targets[0].target.value)
    for node in walk(loop.body):
        if isinstance(node, cst.Slice) and node.lower is not None and code(node.lower) == start \
                and ends_slice(node.upper):
            return True
        if isinstance(node, cst.Call) and call_receiver(node) == (None, "slice") and len(node.args) == 2 \
                and code(node.args[0].value) == start and ends_slice(node.args[1].value):
            return True  # `part = slice(lo, min(lo + m, n))`, then `x[part]`
    return False


def _counting_index(loop: cst.For) -> str | None:
    """The index of `for i in range(...)`."""
    walked = loop.iter
    if isinstance(walked, cst.Call) and call_receiver(walked) == (None, "range") and isinstance(loop.target, cst.Name):
        return loop.target.value
    return None


def _indexes_row_groups(loop: cst.For, scope: Scope) -> bool:
    """`for i in range(k): ... xs[i] ... ys[i]` where two or more tensors are each cut into groups of rows
    (`xs = x.chunk(k)`, bound once): the loop walks one batch's fields a group of rows at a time, by
    index, as `zip(xs, ys)` would."""
    index = _counting_index(loop)
    if index is None:
        return False
    indexed = {dotted(node.value): node.value for node in walk(loop.body) if isinstance(node, cst.Subscript)
               and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index)
               and code(node.slice[0].slice.value) == index and dotted(node.value) is not None}
    return len([name for name, tensors in indexed.items() if (value := _bound_once(tensors, scope)) is not None
                and _cuts_rows(value, scope)]) >= 2


def _walks_indexed_slices(loop: cst.For) -> bool:
    """`for i in range(k): ... x[i * m:(i + 1) * m]`: the rows of one batch cut by the loop's index into
    consecutive slices of one size (the first dimension's; a slice of a later one may be a time window)."""
    index = _counting_index(loop)
    if index is None:
        return False

    def times_size(node: cst.BaseExpression, factor: str) -> str | None:
        """The size `m` of `factor * m` or `m * factor`."""
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
            for one, other in ((node.left, node.right), (node.right, node.left)):
                if code(one).replace(" ", "").strip("()") == factor:
                    return code(other).replace(" ", "")
        return None

    for node in walk(loop.body):
        if isinstance(node, cst.Subscript) and node.slice and isinstance(node.slice[0].slice, cst.Slice):
            cut = node.slice[0].slice
            size = times_size(cut.lower, index) if cut.lower is not None else None
            upper = code(cut.upper).replace(" ", "") if cut.upper is not None else ""
            if size is not None and (times_size(cut.upper, f"{index}+1") == size or upper == f"{index}*{size}+{size}"):
                return True
    return False


def _loads_tensors_in_pieces(source: cst.BaseExpression) -> bool:
    """`DataLoader(TensorDataset(x, w), batch_size=piece)`: tensors in hand (one batch's) walked a piece at
    a time."""
    if not (isinstance(source, cst.Call) and last_part(dotted(source.func) or "") in cat.DATA_LOADERS
            and source.args):
        return False
    dataset = source.args[0].value
    return isinstance(dataset, cst.Call) and last_part(dotted(dataset.func) or "") == cat.TENSOR_DATASET


def _runs_until_counted(loop: cst.While) -> bool:
    """A `while` loop that ends when a count its body adds to reaches a bound: `while n < total:`
    or `while True: ... n += k; if n >= total: break`: one window's micro-batches, as many as it
    takes to see that many samples (or steps)."""
    counted = set()
    exits = [loop.test]
    stack: list[cst.CSTNode] = [loop.body]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.For, cst.While)):
            continue  # a nested loop's counters and breaks are its own
        if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign) and dotted(node.target):
            counted.add(dotted(node.target))
        if isinstance(node, cst.If) and any(isinstance(small, cst.Break) for statement in node.body.body
                                            if isinstance(statement, cst.SimpleStatementLine) for small in statement.body):
            exits.append(node.test)
        stack.extend(children(node))
    return any(isinstance(test, cst.Comparison) and any(
        isinstance(c.operator, (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual))
        for c in test.comparisons) and set(iter_names(test)) & counted for test in exits)


def exclusive(a: Event | Def, b: Event | Def) -> bool:
    """Do the two events (or bindings) sit in opposite branches of one `if` (`if use_apex: ... else: ...`)?
    Then no pass through the code runs both."""
    taken = {id(g.owner): g.positive for g in a.ctx.guards}
    return any(taken.get(id(g.owner), g.positive) != g.positive for g in b.ctx.guards)


def same_target(zero: Event, step: Event, scope: Scope | None = None) -> bool:
    """Does clearing `zero` affect the gradients `step` uses? Unknown or model-wide clears do; with
    the scope, two names bound once to the same value do too (`opt_a = optimizers[0]`, `opt_b = optimizers[0]`)."""
    if zero.target is not None and step.target is not None and scope is not None and zero.model_wide:
        # `gpu_model.zero_grad()` while the optimizer steps another model's parameters
        # (`Adam(cpu_model.parameters())`, gradients copied over before the clear)
        cleared, stepped = _parameters_owner(zero.target, scope), _stepped_model(step.target, scope)
        return not _separate_models(cleared, stepped, scope) and not _submodule_of(cleared, stepped)
    if zero.model_wide or zero.target is None or step.target is None:
        return True
    if zero.target == step.target:
        return True
    if scope is None:
        return False
    root = _alias_root(zero.target, scope, 0)
    return root is not None and root == _alias_root(step.target, scope, 0)


def _submodule_of(cleared: str, model: str | None) -> bool:
    """Is `cleared` one part of `model` (`model.teacher` of `model`), not the whole of it reached through
    a wrapper (`model.module`, `model._orig_mod`)? Clearing one submodule's gradients (an EMA teacher's,
    a frozen encoder's) may well be meant; whether the rest of the model keeps its gradients cannot be
    told here."""
    if model is None or not cleared.startswith(model + "."):
        return False
    return any(part not in cat.WRAPPED_MODULE_ATTRIBUTES for part in cleared[len(model) + 1:].split("."))


def _distinct_optimizers(zero: Event, step: Event, scope: Scope) -> bool:
    """Are the cleared and the stepped optimizer two objects, each bound once here by a construction?"""
    if zero.model_wide or zero.target is None or step.target is None or zero.target == step.target:
        return False
    defs = [scope.defs_of(name) for name in (zero.target, step.target)]
    return all(len(d) == 1 and d[0].op is DefOp.ASSIGN and isinstance(d[0].value, cst.Call) for d in defs)


def _stepped_model(optimizer: str, scope: Scope) -> str | None:
    """The model whose parameters an optimizer bound once here was built on: `cpu_model` of
    `opt = Adam(cpu_model.parameters(), lr=...)`."""
    # `optimizer = accelerator.prepare(optimizer)` (or unpacked from a prepare of several) wraps the same
    # parameters: the construction is the one binding left
    defs = [d for d in scope.defs_of(optimizer) if not (isinstance(d.value, cst.Call) and any(
        dotted(argument.value) == optimizer for argument in d.value.args))]
    if len(defs) != 1 or defs[0].op is not DefOp.ASSIGN or not isinstance(defs[0].value, cst.Call):
        return None
    params = positional(defs[0].value, 0) or keyword(defs[0].value, "params")
    if isinstance(params, cst.Call) and call_receiver(params) == (None, "list") and len(params.args) == 1:
        params = params.args[0].value  # `list(model.parameters())`
    found = _parameters_call(params)
    return found[0] if found is not None else None


def _parameters_call(node: cst.BaseExpression | None) -> tuple[str, str] | None:
    """(`m`, the method) for `m.parameters()` or `m.named_parameters()`."""
    if not isinstance(node, cst.Call):
        return None
    receiver, method = call_receiver(node)
    model = dotted(receiver) if receiver is not None else None
    return (model, method) if model and method in cat.PARAMETER_METHODS else None


def _parameters_owner(name: str, scope: Scope) -> str:
    """The model whose parameters a loop variable walks (`m` for `p` of `for p in m.parameters()`, of
    `for n, p in m.named_parameters()`, or of `for q, p in zip(a.parameters(), m.parameters())`), in
    every loop that binds it: a clear of each `p.grad` clears that model's gradients. The name itself
    otherwise."""
    owners = {_walked_model(d) for d in scope.defs_of(name)}
    owner = owners.pop() if len(owners) == 1 else None
    return owner or name


def _walked_model(d: Def) -> str | None:
    if d.op is not DefOp.LOOP_TARGET or not isinstance(d.node, cst.For):
        return None
    source, index = d.node.iter, d.index
    zipped = isinstance(source, cst.Call) and call_receiver(source)[0] is None and call_receiver(source)[1] == "zip"
    if zipped and index is not None and index < len(source.args):
        source, index = source.args[index].value, None
    found = _parameters_call(source)
    if found is None:
        return None
    model, method = found
    # the parameter itself is the whole target of `parameters()` (its first and only name), the second
    # of a named_parameters() pair
    return model if index in ((1,) if method == cat.NAMED_PARAMETERS_METHOD else (0, None)) else None


def _separate_models(one: str, other: str | None, scope: Scope) -> bool:
    """Two models each bound once here, neither built from the other (`gpu = cpu.half().cuda()` is
    the same module, moved in place) unless as a deep copy of it (`copy.deepcopy(model)`)."""
    if other is None or other == one:
        return False
    defs = {name: scope.defs_of(name) for name in (one, other)}
    if any(len(d) != 1 or d[0].op is not DefOp.ASSIGN or d[0].value is None for d in defs.values()):
        return False
    return not _built_from(defs[one][0].value, other) and not _built_from(defs[other][0].value, one)


def _built_from(value: cst.BaseExpression, name: str) -> bool:
    """Does `value` read the module `name` other than through a deep copy of it?"""
    copied = any(call_receiver(call)[1] == cat.DEEP_COPY_FUNCTION and len(call.args) == 1
                 and dotted(call.args[0].value) == name for call in iter_calls(value))
    return _reads(value, name) and not copied


def _reads(value: cst.BaseExpression, name: str) -> bool:
    return any(read == name or read.startswith(name + ".") for read in iter_names(value))


def _alias_root(name: str, scope: Scope, depth: int) -> str | None:
    """The value a name is an alias of, when it is bound exactly once to a plain value (a name, an
    attribute, a constant subscript), followed through such aliases."""
    defs = scope.defs_of(name)
    if depth > 3 or len(defs) != 1 or defs[0].op is not DefOp.ASSIGN or defs[0].value is None:
        return None
    value = defs[0].value
    if not isinstance(value, (cst.Name, cst.Attribute, cst.Subscript)) or not _plain_value(value):
        return None
    text = dotted(value)
    deeper = _alias_root(text, scope, depth + 1) if text else None
    return deeper or code(value)


def _clears_some_parameters(zero: Event, scope: Scope) -> bool:
    """`for p in shared_params: p.grad = None`: a clear of parameters gathered some other way than
    walking a model's `parameters()`, which may be a part of what the optimizer holds (a critic update
    keeping the body it shares with the actor out of the step)."""
    walks = [d for d in (zero.scope or scope).defs_of(zero.target or "") if d.op is DefOp.LOOP_TARGET]
    return zero.model_wide and bool(walks) and not any(
        isinstance(d.node, cst.For) and _parameters_call(d.node.iter) is not None for d in walks)


def straight_line_clears(scope: Scope) -> list[tuple[Event, Event]]:
    """Outside loops (a train_step function, a hook called once per micro-batch): a clear that runs
    after a backward and before a step of the same optimizer, with nothing between them that could
    make new gradients. Pairs (zero_grad, step)."""
    plain = [e for e in scope.events if not e.ctx.loops and not e.ctx.in_handler]
    found = []
    for zero in plain:
        # an optimizer's own clear only: `netG.zero_grad()` before `opt_d.step()` clears another model
        if zero.kind is not EventKind.ZERO_GRAD or zero.via_helper or zero.model_wide or zero.target is None:
            continue
        zero_guards = set(zero.ctx.guards)
        if not any(e.kind is EventKind.BACKWARD and e.order < zero.order and set(e.ctx.guards) <= zero_guards
                   for e in plain):
            continue
        for event in scope.events:
            if event.order <= zero.order or event.ctx.in_handler:
                continue
            if event.kind in (EventKind.BACKWARD, EventKind.MODEL_CALL, EventKind.HELPER_CALL):
                break  # new gradients may be made here (also in a loop: `for _ in range(2): feed()`)
            if event.ctx.loops:
                continue
            if event.kind is EventKind.STEP and not event.via_helper and same_target(zero, event, scope) \
                    and zero_guards <= set(event.ctx.guards) and not _steps_with_closure(event):
                found.append((zero, event))
                break
    return found


def _steps_with_closure(step: Event) -> bool:
    """`optimizer.step(closure)`: the closure recomputes the loss and its gradients."""
    if step.scaler is not None or not isinstance(step.node, cst.Call):
        return False  # `scaler.step(optimizer)` is handed the optimizer
    return bool(step.node.args)


def build_windows(scope: Scope) -> list[Window]:
    """One window per micro-batch loop and path through its configuration tests."""
    backward_loops: dict[int, Loop] = {}
    for event in scope.events:
        if event.kind is EventKind.BACKWARD and event.ctx.loops:
            loop = event.ctx.loops[-1]
            backward_loops[id(loop)] = loop
    backwards_in: dict[int, list[Event]] = {}
    for event in scope.events:
        if event.kind is EventKind.BACKWARD and event.ctx.loops:
            backwards_in.setdefault(id(event.ctx.loops[-1]), []).append(event)
    for key in [key for key, loop in backward_loops.items() if _breaks_after_each(loop, backwards_in[key])]:
        del backward_loops[key]
    stacks = {key: _loop_stack(scope, loop) for key, loop in backward_loops.items()}
    # the loops a step runs in, gathered once for the file (not once per loop)
    stepping = {id(loop) for event in scope.events if event.kind is EventKind.STEP for loop in event.ctx.loops}
    for key in [key for key, loop in backward_loops.items()
                if _tail_of_nested_window(scope, loop, backwards_in[key], stacks, stepping)]:
        del backward_loops[key], stacks[key]
    per_batch: set[int] = set()  # loops whose backwards are part of the enclosing loop's micro-batch
    for key, loop in list(backward_loops.items()):
        enclosing = _batch_loop_around(scope, loop, stacks[key], stepping)
        if enclosing is not None:
            per_batch.add(key)
            del backward_loops[key]
            backward_loops[id(enclosing)], stacks[id(enclosing)] = enclosing, stacks.pop(key)[:-1]
    # The loops of each block that hold a micro-batch loop (the block's training loops), by start.
    training: dict[tuple[int, ...], dict[int, Loop]] = {}
    for key, loop in backward_loops.items():
        chain = stacks[key] + (loop,)
        for depth in range(len(chain)):
            training.setdefault(tuple(id(x) for x in chain[:depth]), {})[id(chain[depth])] = chain[depth]
    neighbours = {block: _Neighbours(scope, loops.values()) for block, loops in training.items()}
    return [window for key, loop in backward_loops.items()
            for window in _loop_windows(scope, loop, stacks[key], neighbours[tuple(id(x) for x in stacks[key])],
                                        per_batch)]


def _tail_of_nested_window(scope: Scope, loop: Loop, backwards: list[Event],
                           stacks: dict[int, tuple[Loop, ...]], stepping: set[int]) -> bool:
    """Are the backwards the loop runs directly the last micro-batch of a window that a micro-step loop
    inside it began (`for _ in range(N - 1): ...backward()` then one more forward and backward, then the
    step)? That window is the inner loop's, which runs once per iteration of this one and never steps
    itself; each backward here comes after such an inner loop in the same iteration."""
    inner_ends = [scope.loop_end.get(key, 0) for key, stack in stacks.items()
                  if stack and stack[-1] is loop and key not in stepping]  # not an update loop of its own
    return bool(inner_ends) and all(any(end < event.order for end in inner_ends) for event in backwards)


def _batch_loop_around(scope: Scope, loop: Loop, stack: tuple[Loop, ...], stepping: set[int]) -> Loop | None:
    """The loop around `loop` when `loop` backpropagates several losses of that loop's batch and never
    steps (`for width in widths:` or `for _ in range(samples):` inside the loop over the data), and every
    step after it in the enclosing body waits for an accumulation boundary of the enclosing loop
    (`if (step + 1) % accum == 0:`): the window is the enclosing loop's, each of its micro-batches
    several backwards."""
    if not stack or id(loop) in stepping:
        return None
    enclosing, end = stack[-1], scope.loop_end.get(id(loop), 0)
    later = [e for e in _span(scope, end + 1, scope.loop_end.get(id(enclosing)))
             if e.kind is EventKind.STEP and e.ctx.loops == stack]
    return enclosing if later and all(_step_boundary(step, enclosing, scope) is not None for step in later) else None


def _breaks_after_each(loop: Loop, backwards: list[Event]) -> bool:
    """Does the loop end right after each of its backwards (`for _ in range(retries): try: ...;
    loss.backward(); break`)? Its body then backpropagates once per run of the loop: it retries until
    one micro-batch goes through, it does not accumulate N of them."""
    return all(event.stmt is not None and _breaks_after(loop.body.body, event.stmt) for event in backwards)


def _breaks_after(statements, stmt: cst.CSTNode) -> bool:
    """In this statement list, is a `break` of the enclosing loop certain once `stmt` has run?"""
    for index, statement in enumerate(statements):
        if statement is not stmt and not contains(statement, stmt):
            continue
        if isinstance(statement, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef)) and statement is not stmt:
            return False  # a nested loop's break is its own; a definition runs later
        if statement is not stmt and any(_breaks_after(block, stmt) for block in statement_blocks(statement)
                                         if any(contains(each, stmt) for each in block)):
            return True
        return any(isinstance(later, cst.SimpleStatementLine) and any(isinstance(small, cst.Break) for small in later.body)
                   for later in statements[index + 1:])
    return False


class _Neighbours:
    """The training loops of one block, as the program points where they start and end, sorted: the
    nearest one before or after a loop is found by bisection, not by a scan of the block (which at
    the top of a script of many loops would cost the square of its loops)."""

    def __init__(self, scope: Scope, loops) -> None:
        spans = [(scope.loop_start.get(id(loop), 0), scope.loop_end.get(id(loop), 0)) for loop in loops]
        self.ends = sorted(end for _, end in spans)
        self.starts = sorted(start for start, _ in spans)

    def last_end_before(self, order: int) -> int | None:
        i = bisect.bisect_left(self.ends, order)
        return self.ends[i - 1] if i else None

    def first_start_after(self, order: int) -> int | None:
        i = bisect.bisect_right(self.starts, order)
        return self.starts[i] if i < len(self.starts) else None


def _loop_windows(scope: Scope, loop: Loop, outer: tuple[Loop, ...], neighbours: _Neighbours,
                  per_batch: set[int]) -> list[Window]:
    # The block the loop sits in (the enclosing loop body, or the function): what runs once around
    # the loop (a nested window's step) is there. Another training loop of the block ends that region:
    # what comes after it (or before the one before) belongs to that loop, and bounding the region
    # keeps a file of many loops linear.
    start, end = scope.loop_start.get(id(loop), 0), scope.loop_end.get(id(loop), 0)
    first = scope.loop_start.get(id(outer[-1]), 0) if outer else 0
    last = scope.loop_end.get(id(outer[-1]), 0) if outer else None
    previous, following = neighbours.last_end_before(start), neighbours.first_start_after(end)
    if previous is not None:
        first = max(first, previous + 1)
    if following is not None:
        last = following - 1 if last is None else min(last, following - 1)
    region = [e for e in _span(scope, first, last) if e.ctx.loops[: len(outer)] == outer]
    deciders = [e for e in region if loop in e.ctx.loops or e.ctx.loops == outer]
    variant = assigned_in(scope, loop)
    windows = []
    def periodic(test: cst.BaseExpression) -> bool:
        return analyze(test, scope) is not None

    built = []
    for path, events in split(region, deciders, len(outer), variant, periodic):
        if any(e.kind is EventKind.BACKWARD and e.ctx.loops and (e.ctx.loops[-1] is loop or (
                e.ctx.loops[-2:-1] == (loop,) and id(e.ctx.loops[-1]) in per_batch)) for e in events):
            built.append((events, _build(scope, loop, outer, events, path)))
    counts = [w.n for _, w in built if w.n is not None]
    enclosing = [decision(g) for g in loop_guards(built[0][1], loop)] if built else []

    def is_n(node: cst.BaseExpression) -> bool:
        return any(is_accumulation_count(node, n, scope) for n in counts) or is_accumulation_count(node, None, scope)

    def only_when_one(event: Event) -> bool:
        """Under a configuration test that holds only where N is 1 (`if accum_steps == 1: optimizer.zero_grad()`)."""
        return count_on_path([decision(g) for g in event.ctx.guards if invariant(g.test, variant)], is_n) is Count.ONE

    for events, window in built:
        if count_on_path(window.path.decisions + tuple(enclosing), is_n) is Count.ONE:
            window.shape, window.boundary = PLAIN, None
        elif any(only_when_one(e) for e in events):
            # a window that may accumulate runs none of what runs only where N is 1, even when that
            # test is not one of the path's (it decides no backward or step)
            window = _build(scope, loop, outer, [e for e in events if not only_when_one(e)], window.path)
        windows.append(window)
    return windows


def _span(scope: Scope, first: int, last: int | None) -> list[Event]:
    """The scope's events with `first <= order <= last` (`last` None: to the end); events are in order."""
    orders = [e.order for e in scope.events] if scope.event_orders is None else scope.event_orders
    scope.event_orders = orders
    low = bisect.bisect_left(orders, first)
    high = len(orders) if last is None else bisect.bisect_right(orders, last)
    return scope.events[low:high]


def loop_events(scope: Scope, loop: Loop) -> list[Event]:
    """The scope's events from the start to the end of `loop` (those inside it, and few others)."""
    return _span(scope, scope.loop_start.get(id(loop), 0), scope.loop_end.get(id(loop)))


def loop_guards(window: Window, loop: Loop) -> tuple[Guard, ...]:
    """The guards around the loop statement itself."""
    for event in window.events:
        if loop in event.ctx.loops:
            return tuple(g for g in event.ctx.guards if g.depth <= event.ctx.loops.index(loop))
    return ()


def _loop_stack(scope: Scope, loop: Loop) -> tuple[Loop, ...]:
    """The loops enclosing `loop` (not including it)."""
    for event in loop_events(scope, loop):
        if loop in event.ctx.loops:
            return event.ctx.loops[: event.ctx.loops.index(loop)]
    return ()


def _build(scope: Scope, loop: Loop, outer: tuple[Loop, ...], events: list[Event], path: Path) -> Window:
    end = scope.loop_end.get(id(loop), 0)
    start = scope.loop_start.get(id(loop), 0)
    inside = [e for e in events if loop in e.ctx.loops]
    after = [e for e in events if e.order > end and loop not in e.ctx.loops]
    # A loop nested here whose every pass is a whole update (backward, then step: extra updates on a
    # hard batch) is a plain loop of its own, not part of this window; and a plain loop nested in
    # another has nothing to do with what that loop's body does after it.
    updating = _self_updating_loops(inside)
    if outer and id(loop) in updating:
        after = [e for e in after if e.ctx.loops != outer]
    updating.discard(id(loop))
    inside = [e for e in inside if not updating.intersection(map(id, e.ctx.loops))]
    window = Window(scope, loop, UNGUARDED, events=inside + after, outer=outer, path=path)
    for event in after:
        window.placements[id(event)] = AFTER
    backwards = [e for e in inside if e.kind is EventKind.BACKWARD]
    own = [set(e.ctx.guards) for e in backwards if e.ctx.loops[-1] is loop]
    window.backward_guards = frozenset(set.intersection(*own)) if own else frozenset()

    if any(e.framework is Framework.DEEPSPEED for e in backwards):
        window.shape, window.framework = FRAMEWORK, Framework.DEEPSPEED
        window.framework_roles = frozenset().union(*(e.roles for e in backwards if e.framework is Framework.DEEPSPEED))
        # the engine counts the window's micro-batches itself, to the count its config says (when every
        # engine backpropagating here says the same one)
        counts = [(deepspeed_engine_count(e.target, e.scope or scope) if e.target else None)
                  or asserted_engine_count(e.scope or scope) for e in backwards if e.framework is Framework.DEEPSPEED]
        if counts[0] is not None and all(c is not None and code(c) == code(counts[0]) for c in counts):
            window.n = counts[0]
    elif any(_accumulate_call(e) for e in backwards):
        window.shape, window.framework = FRAMEWORK, Framework.ACCELERATE
        window.accumulate_entries = tuple(call for e in backwards if (call := _accumulate_call(e)) is not None)
        calls = {id(call) for call in window.accumulate_entries}
        for event in scope.events:
            if event.kind is EventKind.SYNC_CONTROL and id(event.node) in calls:
                window.framework_roles |= event.roles
    elif entered := _accumulate_entered_before(inside, backwards):
        # `with accelerator.accumulate(model):` around the forward only: entering it sets accelerate's
        # sync flag for this micro-batch, which stays set after the block, so the prepared optimizer
        # and scheduler after it still step only on the window's last micro-batch
        window.shape, window.framework = FRAMEWORK, Framework.ACCELERATE
        window.accumulate_entries = tuple(e.node for e in entered)
        window.framework_roles = frozenset().union(*(e.roles for e in entered))

    steps = [e for e in inside if e.kind is EventKind.STEP]
    variant = assigned_in(scope, loop)
    if window.shape is not FRAMEWORK and steps:
        for step in steps:
            found = _step_boundary(step, loop, scope)
            if found is not None and not _self_contained(step, found[1], inside, scope, loop):
                window.shape, window.boundary, window.n = GUARDED, found[0], found[0].n
                window.boundary_scope = found[1].scope or scope
                # a backward under the boundary differentiates the window's summed losses: the test is
                # the window's close, not a path every gradient is made on
                window.backward_guards -= {found[1]}
                break
        else:
            inverted = _inverted_boundary(steps, loop, scope)
            if inverted is not None:  # `if i % N:`: the window's boundary, read backwards
                window.shape, window.boundary, window.n = GUARDED, inverted[0], inverted[0].n
                window.boundary_scope = inverted[1].scope or scope
    elif window.shape is not FRAMEWORK:
        # nested: the step follows the inner loop, in the same enclosing loop (or function body)
        later = [e for e in after if e.kind is EventKind.STEP and e.ctx.loops == outer]
        if later:
            window.shape = NESTED
            window.n = inner_count(loop)

    for event in inside:
        window.placements[id(event)] = _place_inside(window, event, variant)
    if window.shape is NESTED:
        # a loop after the inner one that makes no gradients (`for p in model.parameters(): p.grad = None`)
        # runs once per window as a whole, like a statement of the enclosing body
        producing = {id(l) for e in after if e.kind is EventKind.BACKWARD for l in e.ctx.loops[len(outer):]}
        for event in after:
            deeper = event.ctx.loops[len(outer):]
            if event.ctx.loops[: len(outer)] == outer and not any(id(l) in producing for l in deeper):
                if invariant_guards(event.ctx.guards, scope, outer):
                    window.placements[id(event)] = BOUNDARY
                elif event.kind is EventKind.ZERO_GRAD:
                    # a clear some windows skip (`if not do_adam: continue` before `p.grad = None`, in an
                    # optimizer's own step): whether it runs between two steps is not ours to read
                    window.placements[id(event)] = UNKNOWN
        # events between the start of the enclosing loop body (or of the function) and the inner loop
        # run once per window too
        head_start = scope.loop_start.get(id(outer[-1]), 0) if outer else 0
        head = [e for e in events if e.ctx.loops == outer and head_start <= e.order < start]
        # an early `continue` of the enclosing body before the inner loop (`if (i + 1) % N: continue`, the
        # micro-batches before it only cached) makes the head run on every pass of that body, not once
        # per window
        skips = {g for b in backwards for g in b.ctx.guards if g.exit is not None and g.depth == len(outer)}
        for event in head:
            window.events.append(event)
            window.placements[id(event)] = UNKNOWN if skips - set(event.ctx.guards) else BOUNDARY
        window.events.sort(key=lambda e: e.order)
    return window


def _self_updating_loops(events: list[Event]) -> set[int]:
    """The loops whose body backpropagates and then steps on the same pass, the step under no test but
    the backward's own and the exits that end the loop: each pass is a whole update."""
    found = set()
    for step in events:
        loops = step.ctx.loops
        if step.kind is not EventKind.STEP or not loops:
            continue
        inner = loops[-1]
        level = len(loops) - 1
        for backward in events:
            if backward.kind is EventKind.BACKWARD and backward.order < step.order and backward.ctx.loops \
                    and backward.ctx.loops[-1] is inner:
                # the same test twice (`if fp16: scale(loss).backward()` ... `if fp16: scaler.step(opt)`) is one path
                tests = {(code(g.test), g.positive) for g in backward.ctx.guards}
                if all(g.exit is not None or (code(g.test), g.positive) in tests
                       for g in step.ctx.guards if g.depth > level):
                    found.add(id(inner))
                    break
    return found


def _is_chunking(source: cst.BaseExpression) -> bool:
    return isinstance(source, cst.Call) and call_receiver(source)[1] in cat.CHUNKING_METHODS


def _walks_row_groups(source: cst.BaseExpression, scope: Scope) -> bool:
    """`zip(xs, ys, ...)` where each of two or more sequences is a tensor cut into groups of rows
    (`x.split(k)`, `x.chunk(n)`, `x.reshape(x.shape[0] // k, k, ...)`, written there or bound once to a
    name): the fields of one batch, walked a group of rows at a time, are the micro-batches of one
    step. (One tensor cut alone may be a sequence cut along time, truncated backpropagation.)"""
    if not (isinstance(source, cst.Call) and call_receiver(source) == (None, "zip") and len(source.args) >= 2):
        return False
    for arg in source.args:
        value = _bound_once(arg.value, scope)
        if value is None or not _cuts_rows(value, scope):
            return False
    return True


def _bound_once(node: cst.BaseExpression, scope: Scope) -> cst.BaseExpression | None:
    """The value a name is bound to by its one plain assignment in the scope (or its item of a tuple
    unpacked there); an expression itself."""
    name = dotted(node)
    if name is None:
        return node
    defs = scope.defs_of(name)
    if len(defs) != 1:
        return None
    value = defs[0].value
    if defs[0].op is DefOp.UNPACK and isinstance(value, cst.Tuple) and defs[0].index is not None \
            and defs[0].index < len(value.elements):
        return value.elements[defs[0].index].value  # `xs, ys = x.split(k), y.split(k)`
    return value if defs[0].op is DefOp.ASSIGN else None


def _cuts_rows(value: cst.BaseExpression, scope: Scope) -> bool:
    """`x.split(k)` or `x.chunk(n)` along the first dimension, or `x.reshape(b // k, k, ...)`."""
    if not isinstance(value, cst.Call):
        return False
    _, method = call_receiver(value)
    if method in cat.CHUNKING_METHODS:
        dim = keyword(value, "dim") or positional(value, 1)
        return dim is None or isinstance(dim, cst.Integer) and dim.value == "0"
    if method in ("reshape", "view") and len(value.args) >= 2:
        groups, size = _bound_once(value.args[0].value, scope), value.args[1].value
        return isinstance(groups, cst.BinaryOperation) and isinstance(groups.operator, cst.FloorDivide) \
            and code(groups.right) == code(size)
    return False


def _accumulate_entered_before(inside: list[Event], backwards: list[Event]) -> list[Event]:
    """The `accelerator.accumulate(...)` entries of the loop body that run before every backward of it,
    on every micro-batch (under no test the backwards are not under), when no backward runs inside one."""
    entries = [e for e in inside if e.kind is EventKind.SYNC_CONTROL and e.api is cat.ACCELERATE_ACCUMULATE]
    return [e for e in entries if all(e.order < b.order and e.ctx.branches <= b.ctx.branches
                                      and e.ctx.loops == b.ctx.loops for b in backwards)] if backwards else []


def _accumulate_call(event: Event) -> cst.Call | None:
    """The `accelerator.accumulate(...)` call of a `with` around the event (or the call of a name bound
    to that method, `self.accum_scope(model)`), if any."""
    calls = accumulate_calls(event)
    return calls[0] if calls else None


def accumulate_calls(event: Event) -> list[cst.Call]:
    """Every `accelerator.accumulate(...)` entered around the event, outermost first: each entry counts
    one micro-batch in accelerate's step counter."""
    entered = _root(event.scope).accumulate_entries if event.scope is not None else set()
    calls = []
    for call in event.ctx.withs:
        receiver, method = call_receiver(call)
        if method == cat.ACCELERATE_ACCUMULATE.name and receiver is not None or id(call) in entered:
            calls.append(call)
    return calls


def grouped_models(call: cst.Call) -> list[cst.BaseExpression]:
    """The arguments of `accelerator.accumulate(...)` written as one tuple or list (`accumulate((a, b))`).
    accelerate enters the `no_sync` of each argument it is given, read off the argument itself
    (Accelerator.no_sync); a tuple has none, so the models in it all-reduce on every micro-batch."""
    return [a.value for a in call.args if not a.star and isinstance(a.value, (cst.Tuple, cst.List))]


def _root(scope: Scope) -> Scope:
    """The scope a walk started from: a function walked in place of a call is walked from its caller's."""
    while scope.frame is not None:
        scope = scope.frame.caller
    return scope


def inner_count(loop: Loop) -> cst.BaseExpression | None:
    """N of `for _ in range(N)` or `for chunk in x.chunk(N)`."""
    if not isinstance(loop, cst.For) or not isinstance(loop.iter, cst.Call):
        return None
    _, name = call_receiver(loop.iter)
    if name == "range":
        args = [a.value for a in loop.iter.args]
        if len(args) == 1:
            return args[0]
        if len(args) == 2 and isinstance(args[0], cst.Integer) and args[0].value == "0":
            return args[1]
    if name == "chunk":
        return loop.iter.args[-1].value if loop.iter.args else None
    if name == "enumerate" and len(loop.iter.args) == 1 and isinstance(loop.target, cst.Tuple) and loop.target.elements:
        return _breaks_at_count(loop, dotted(loop.target.elements[0].value))
    return None


def _breaks_at_count(loop: cst.For, index: str | None) -> cst.BaseExpression | None:
    """N of a loop over an iterator that leaves it after its N-th item: `for i, mb in enumerate(it):
    ...; if i + 1 >= N: break` (or `== N`), a statement of the loop body itself."""
    for statement in loop.body.body:
        if not isinstance(statement, cst.If) or statement.orelse is not None or not ends_with_break(statement) \
                or len(statement.body.body) != 1:
            continue
        for term in conjuncts(statement.test):  # `if n is not None and i + 1 >= n: break` too
            if not isinstance(term, cst.Comparison) or len(term.comparisons) != 1:
                continue
            left, target = term.left, term.comparisons[0]
            if isinstance(target.operator, (cst.GreaterThanEqual, cst.Equal)) and plus_one(left) == 1 \
                    and index is not None and dotted(left.left) == index:
                return target.comparator
    return None


def assigned_in(scope: Scope, loop: Loop) -> set[str]:
    """Names that may change from one iteration of `loop` to the next: bound inside it, here or in a
    function called inside it and walked in place (its parameters only when their argument may)."""
    own = _settled(set(_bound_by_loop(scope).get(id(loop), ())), scope)
    if scope.called_frames is None:  # the scopes walked in place of calls, callers first; once per scope
        called = {id(e.scope): e.scope for e in scope.events if e.scope is not None and e.scope is not scope}
        # and those of the predicates tests call (`if self._is_update_step(step):`)
        called.update({id(g.scope): g.scope for e in scope.events for g in e.ctx.guards
                       if g.scope is not None and g.scope is not scope and g.scope.frame is not None})
        for frame in list(called.values()):  # and the calls between, whose own lines may have no event
            while frame.frame is not None and frame.frame.caller is not scope and id(frame.frame.caller) not in called:
                frame = called.setdefault(id(frame.frame.caller), frame.frame.caller)
        scope.called_frames = sorted(called.values(), key=lambda s: s.frame.depth if s.frame is not None else 0)
    if not scope.called_frames:
        return own
    variant = {id(scope): own}
    for frame in scope.called_frames:
        names = variant[id(frame)] = set()
        for name in _bound_by_loop(frame).get(id(loop), ()):
            defs = frame.defs[name]
            argument = defs[0] if len(defs) == 1 and defs[0].scope is not None else None
            caller = variant.get(id(argument.scope)) if argument is not None else None
            if caller is None or argument.value is None or not invariant(argument.value, caller):
                names.add(name)
                continue
            # an object the caller passes whose attributes it changes: `engine.state.iteration` in
            # `update(engine, batch)` called as `update(self, batch)` after `self.state.iteration += 1`
            base = dotted(argument.value)
            names.update(name + changed[len(base):] for changed in caller if base and changed.startswith(base + "."))
        variant[id(frame)] = _settled(names, frame)
    return set().union(*variant.values())


def _settled(names: set[str], scope: Scope) -> set[str]:
    """Of the names a scope binds inside a loop, those that may change from one iteration to the next:
    a name bound once, to a plain value that reads only names that do not change and calls nothing
    (`use_amp = args.use_amp` at the top of a function an epoch loop calls), is the same every time; so is
    the target of a loop walked as straight code (`for hook in self.hooks:`, walker.walk_loop), which
    takes the same values in the same order on every iteration when what it iterates does not change."""
    variant = set(names)
    settled = True
    while settled:
        settled = False
        for name in sorted(variant):
            defs = scope.defs.get(name, [])
            single = defs[0] if len(defs) == 1 and defs[0].scope is None else None
            value = single.value if single is not None and (single.op is DefOp.ASSIGN or (
                single.op is DefOp.LOOP_TARGET and single.node not in single.ctx.loops)) else None
            if value is not None and _plain(value) and invariant(value, variant - {name}):
                variant.discard(name)
                settled = True
    return variant


def _plain(value: cst.BaseExpression) -> bool:
    """Names, attributes, literals and the operators between them: a value no later statement can change
    in place (a list or a dict could be appended to)."""
    if isinstance(value, (cst.Name, cst.Attribute, cst.Integer, cst.Float, cst.SimpleString)):
        return True
    if isinstance(value, cst.UnaryOperation):
        return _plain(value.expression)
    if isinstance(value, (cst.BinaryOperation, cst.BooleanOperation)):
        return _plain(value.left) and _plain(value.right)
    if isinstance(value, cst.Comparison):
        return _plain(value.left) and all(_plain(c.comparator) for c in value.comparisons)
    return False


def _bound_by_loop(scope: Scope) -> dict[int, frozenset[str]]:
    """id(loop) -> the names the scope binds inside it; one pass over its bindings, not one per loop asked about."""
    if scope.assigned_by_loop is None:
        index: dict[int, set[str]] = {}
        for name, defs in scope.defs.items():
            for d in defs:
                for enclosing in d.ctx.loops:
                    index.setdefault(id(enclosing), set()).add(name)
        scope.assigned_by_loop = {key: frozenset(names) for key, names in index.items()}
    return scope.assigned_by_loop


def _guards_below(event: Event, loop: Loop) -> list[Guard]:
    """Guards of the event that sit inside `loop`."""
    level = event.ctx.loops.index(loop)
    return [g for g in event.ctx.guards if g.depth > level]


def _ends_run(guard: Guard, loop_scope: Scope) -> bool:
    """Is this guard the way on past an exit that ends the loop (or the run): a `break`, a `raise`, or
    a `return` from the function that runs the loop? Every micro-batch that gets that far takes it. A
    `return` from a helper called in the loop (`if (i + 1) % N: return` before its step) ends that
    call only: the way past it can be a boundary."""
    if guard.exit is None or not guard.exit.ends_loop:
        return False
    return guard.exit is not Exit.RETURN or guard.scope is None or guard.scope is loop_scope


def _deciding_guards(step: Event, loop: Loop, scope: Scope) -> list[Guard]:
    """The guards below `loop` that can make a step's boundary (`if elapsed > max_time: break` cannot)."""
    return [g for g in _guards_below(step, loop) if not _ends_run(g, scope)]


def _step_boundary(step: Event, loop: Loop, scope: Scope) -> tuple[Boundary, Guard] | None:
    for guard in _deciding_guards(step, loop, scope):
        effective = guard_boundary(guard, scope)
        if effective is not None:
            # The step must run when the test says "boundary"; a step under "not boundary" is no window.
            return (effective, guard) if effective.positive else None
    return None


def _inverted_boundary(steps: list[Event], loop: Loop, scope: Scope) -> tuple[Boundary, Guard] | None:
    """The boundary a step runs the wrong side of: a `% N` test over the accumulation count that is
    true on the N - 1 micro-batches that should accumulate (`if i % accum_steps:`)."""
    for step in steps:
        for guard in _deciding_guards(step, loop, scope):
            effective = guard_boundary(guard, scope)
            if effective is None:
                continue
            if not effective.positive and effective.kind is BoundaryKind.MODULO and effective.n is not None \
                    and is_accumulation_count(effective.n, None, scope):
                return effective.flipped(), guard
            break
    return None


def _self_contained(step: Event, guard: Guard, inside: list[Event], scope: Scope, loop: Loop) -> bool:
    """A periodic update that makes its own gradients under the test (a GAN generator every
    n_critic iterations, a DQN update every train_freq steps): backward before the step under the
    same test, and either gradients cleared there first or no backward outside it. No window.
    Not when what it backpropagates is a total every pass adds a loss to: the window is summed in
    the graph and differentiated once (`total += criterion(out, y)` on each micro-batch, then
    `(total / N).backward()` on the boundary)."""
    under = [e for e in inside if guard in e.ctx.guards and e.order < step.order]
    backwards = [e for e in under if e.kind is EventKind.BACKWARD]
    if not backwards or all(_backprops_running_total(b, guard, scope, loop) for b in backwards):
        return False
    cleared = any(e.kind is EventKind.ZERO_GRAD and e.order < backwards[0].order and same_target(e, step)
                  for e in under)
    outside = any(e.kind is EventKind.BACKWARD and guard not in e.ctx.guards for e in inside)
    return cleared or not outside


def _backprops_running_total(backward: Event, guard: Guard, scope: Scope, loop: Loop) -> bool:
    """Does the backward differentiate a name (`total`, or `total / N`) that every pass of the loop adds
    a value to outside the test, and that the test's side binds anew after the backward (the sum
    restarts)?"""
    name = summed_loss_name(backward.expr)
    defs = (backward.scope or scope).defs_of(name) if name is not None else []
    added = [d for d in defs if loop in d.ctx.loops and guard not in d.ctx.guards and increment(d, name, False)]
    restarted = [d for d in defs if d.op.rebinds and guard in d.ctx.guards and d.order > backward.order]
    return bool(added) and bool(restarted) and all(
        not any(g.owner is guard.owner for g in d.ctx.guards) for d in added)


def _place_inside(window: Window, event: Event, variant: set[str]) -> Placement:
    if event.ctx.in_handler:
        return UNKNOWN
    guards = _guards_below(event, window.loop)
    placement = EVERY
    unread = False  # under a test the model cannot read: what it runs on depends on it too
    for guard in guards:
        if guard in window.backward_guards or _ends_run(guard, window.scope):
            continue  # the path every gradient is made on; or the run goes on only this way
        boundary = guard_boundary(guard, window.scope)  # as it holds where the event runs
        side = _side(boundary, window) if boundary is not None else _after_reset(window, event, guard)
        if side is BOUNDARY:
            return BOUNDARY
        if side is OFF_BOUNDARY:
            placement = OFF_BOUNDARY
        elif boundary is not None and boundary.kind is BoundaryKind.SYNC_FLAG:
            if boundary.positive and not window.accumulate_entries:
                continue  # only accelerator.accumulate() lowers the flag: outside it, it is always true
            return BOUNDARY if boundary.positive else OFF_BOUNDARY
        elif guard.exit is not None and guard.exit.ends_loop:
            continue  # past a helper's early `return` that is no boundary (`if not grads: return`): its way on
        elif skips_stretch(guard, window, variant):
            continue  # what follows runs on every micro-batch the skip leaves
        elif _holds_when_finite(guard):
            continue  # `if torch.isfinite(grad_norm): optimizer.step()`: every micro-batch but a failed one
        elif event.kind is EventKind.CLIP and clipping_factor(guard.test, event.scope or window.scope):
            continue  # a clip written by hand, scaling only when the norm is over its bound (`if coef < 1:`)
        elif not invariant(guard.test, variant) and not _per_item(window, event, guard, variant):
            if event.kind not in (EventKind.BACKWARD, EventKind.STEP) and _run_phase(guard.test, window, variant):
                continue  # `if train_steps >= start_clip_iter: clip(...)`: every micro-batch from then on
            # Unknown, unless a boundary test inside it decides (`if isnan(norm): skip; else: if
            # (i + 1) % N == 0: step`): then it runs on the boundary, when this test lets it run at all.
            unread = True
    return UNKNOWN if unread else placement


def _holds_when_finite(guard: Guard) -> bool:
    """Does the side of the test the code runs on hold whenever the values are numbers:
    `if torch.isfinite(norm):`, `if not torch.isnan(loss).any():`, the `else` of `if math.isinf(x):`?"""
    taken = decision(guard)  # the test without its `not`, and the side taken
    test, positive = taken.test, taken.value
    while isinstance(test, cst.Call) and call_receiver(test)[1] in ("all", "any", "item") and not test.args:
        test = call_receiver(test)[0]
    if not isinstance(test, cst.Call):
        return False
    _, method = call_receiver(test)
    return method in cat.FINITE_TESTS and positive == (method == "isfinite")


def _side(boundary: Boundary | None, window: Window) -> Placement | None:
    """Where a test of the window's own boundary family holds: on the boundary, or off it; None for a
    test of another family (or none)."""
    if boundary is None or window.boundary is None or boundary.family != window.boundary.family:
        return None
    return BOUNDARY if boundary.positive == window.boundary.positive else OFF_BOUNDARY


def _after_reset(window: Window, event: Event, guard: Guard) -> Placement | None:
    """`if acc > 0:` (`acc != 0`, `acc >= 1`, `if acc:`) below the boundary's `acc = 0` in the same pass of
    the loop, the counter unchanged in between: the count is 0 just after the boundary and positive on
    every other micro-batch, so the test holds exactly off the boundary (and `if not acc:` on it).
    None for any other test."""
    test, positive = guard.test, guard.positive
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, positive = test.expression, not positive
    name = dotted(test) or _counted_above_zero(test)
    if name is None or name != dotted(window.counter):
        return None
    defs = window.scope.defs_of(name)
    resets = [d for d in defs if d.op is DefOp.ASSIGN and isinstance(d.value, cst.Integer) and d.value.value == "0"
              and d.order < event.order and d.ctx.loops == event.ctx.loops and guard not in d.ctx.guards
              and any(_side(guard_boundary(g, window.scope), window) is BOUNDARY for g in d.ctx.guards)]
    if not resets:
        return None
    last = max(d.order for d in resets)
    if any(last < d.order < event.order for d in defs):
        return None  # counted again before the test
    return OFF_BOUNDARY if positive else BOUNDARY


def _counted_above_zero(test: cst.BaseExpression) -> str | None:
    """`acc` of `acc > 0`, `acc != 0`, `acc >= 1`."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    comparison = test.comparisons[0]
    bound, operator = comparison.comparator, comparison.operator
    if not isinstance(bound, cst.Integer):
        return None
    above = (isinstance(operator, (cst.GreaterThan, cst.NotEqual)) and bound.value == "0"
             or isinstance(operator, cst.GreaterThanEqual) and bound.value == "1")
    return dotted(test.left) if above else None


def skips_stretch(guard: Guard, window: Window, variant: set[str] | None = None) -> bool:
    """`if args.resume and step < resume_step: continue`: the guard of what follows a skip of a stretch
    of micro-batches (a term of its test is a run phase), which are then not run at all (a resumed
    run's catching up); on the others, what follows runs as if the test were not there."""
    if guard.exit is not Exit.CONTINUE:
        return False
    if variant is None:
        variant = assigned_in(window.scope, window.outer[-1] if window.outer else window.loop)
    return any(_run_phase(term, window, variant) for term in conjuncts(guard.test))


def _run_phase(test: cst.BaseExpression, window: Window, variant: set[str]) -> bool:
    """A counter that only counts up compared with a bound fixed for the run (`train_steps >=
    args.start_clip_iter`, `step < warmup`): once the test changes its value it keeps it until the
    counter starts again, so what runs under it runs on every micro-batch of that stretch of the run.
    (A window's own step is left out: a phase that gates the step is a schedule, not a placement.)"""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(
            test.comparisons[0].operator, (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual))):
        return False
    varying = [side for side in (test.left, test.comparisons[0].comparator) if not invariant(side, variant)]
    counter = dotted(varying[0]) if len(varying) == 1 else None
    if counter is None:
        return False
    target = _loop_target(window.scope, counter, window.loop)
    if target is not None:  # the loop's own index: `i` of `enumerate(loader)` or `range(n)`
        return _enumerate_start(window.loop, 0 if target.index is None else target.index, window.scope) is not None
    counts = [d for d in window.scope.defs_of(counter) if any(loop in d.ctx.loops for loop in window.loop_nest)]
    return bool(counts) and all(d.op is DefOp.ADD and isinstance(d.value, cst.Integer) for d in counts)


def _per_item(window: Window, event: Event, guard: Guard, variant: set[str]) -> bool:
    """A test inside a loop nested in the micro-batch loop that makes no gradients and takes no
    step (`for p in params: if p.grad is not None: ...`, `if coef < 1:`), reading only what that
    loop binds besides names fixed for the run: it picks items of each micro-batch, not micro-batches."""
    level = event.ctx.loops.index(window.loop)
    inner = event.ctx.loops[level + 1:guard.depth]
    if not inner or any(e.kind in (EventKind.BACKWARD, EventKind.STEP) and inner[0] in e.ctx.loops
                        for e in window.events):
        return False
    own = assigned_in(window.scope, inner[0])
    return invariant(guard.test, {name for name in variant if name.split(".")[0] not in own})


def invariant_guards(guards: tuple[Guard, ...], scope: Scope, outer: tuple[Loop, ...]) -> bool:
    # Guards of an event that follows the inner loop: those opened inside the enclosing loop body
    # must not depend on the iteration (a `if grad_clip:` is fine, `if it % 10 == 0:` is not).
    relevant = [g for g in guards if g.depth >= len(outer)]
    outer_variant = assigned_in(scope, outer[-1]) if outer else set()
    return all(invariant(g.test, outer_variant) for g in relevant)


def _sync_boundary(sync: Event, window: Window) -> Boundary | None:
    scope = window.scope
    if sync.api is not None and sync.api.sync_flag:
        value = _flag_value(sync, scope)
        return analyze(value, scope) if value is not None else None  # the flag is the test: sync where it holds
    selection = _selecting_test(sync, scope)
    if selection is not None:  # `ctx = model.no_sync if test else nullcontext`, `with m.no_sync() if t else ...`
        test, skips_when_true = selection
        boundary = analyze(test, scope)
        if boundary is None:
            return None
        return boundary.flipped() if skips_when_true else boundary
    for guard in _guards_below(sync, window.loop):  # `if test: with model.no_sync(): ...`
        boundary = analyze(guard.test, scope)
        if boundary is not None:
            skips = boundary if guard.positive else boundary.flipped()
            return skips.flipped()
    return None


def _flag_value(sync: Event, scope: Scope) -> cst.BaseExpression | None:
    """The value a sync flag is given: assigned (`m.require_backward_grad_sync = v`) or passed
    (`m.set_requires_gradient_sync(v)`)."""
    if isinstance(sync.node, cst.Call):
        return positional(sync.node, 0) or keyword(sync.node, "requires_gradient_sync")
    bound = [d for d in scope.defs.get(sync.target or "", []) if d.node is sync.node] if sync.target else []
    bound = bound or [d for defs in scope.defs.values() for d in defs if d.node is sync.node]
    return bound[0].value if bound else None


def _selecting_test(sync: Event, scope: Scope) -> tuple[cst.BaseExpression, bool] | None:
    """The conditional expression that chooses the sync switch or something else, and whether the
    switch is its true branch: `ctx = model.no_sync if test else nullcontext` (the bound method read),
    `cm = model.no_sync() if test else nullcontext()`, `with (m.no_sync() if test else nullcontext()):`."""
    if isinstance(sync.node, cst.Call):
        statement = sync.stmt
        roots = [item.item for item in statement.items] if isinstance(statement, cst.With) else \
            [statement] if statement is not None else []
        for node in (node for root in roots for node in walk(root)):
            if isinstance(node, cst.IfExp):
                if contains(node.body, sync.node):
                    return node.test, True
                if contains(node.orelse, sync.node):
                    return node.test, False
        return None
    bound = [d for d in scope.defs.get(sync.target or "", []) if d.node is sync.node]
    value = bound[0].value if bound else None
    if isinstance(value, cst.IfExp) and sync.api is not None:
        return value.test, any(last_part(name) == sync.api.name for name in iter_names(value.body))
    return None


def _plain_value(node: cst.BaseExpression) -> bool:
    """A name, an attribute of one, or a constant subscript of one: reading it draws nothing new."""
    if isinstance(node, (cst.Name, cst.Integer, cst.Float, cst.SimpleString)):
        return True
    if isinstance(node, cst.Attribute):
        return _plain_value(node.value)
    if isinstance(node, cst.Subscript):
        return _plain_value(node.value) and all(
            isinstance(s.slice, cst.Index) and isinstance(s.slice.value, (cst.Integer, cst.SimpleString))
            for s in node.slice)
    return False


def increment(d: Def, name: str, wrapped: bool = True) -> cst.BaseExpression | None:
    """What an assignment adds to `name`: `c += k`, `c = c + k`, and with `wrapped` `c = (c + k) % N`."""
    if d.op is DefOp.ADD:
        return d.value
    value = d.value
    if d.op is not DefOp.ASSIGN or value is None:
        return None
    if wrapped and isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Modulo):
        value = value.left
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add):
        if dotted(value.left) == name:
            return value.right
        if dotted(value.right) == name:
            return value.left
    return None


def _loop_target(scope: Scope, name: str, loop: Loop) -> Def | None:
    """The binding of `name` as a target of `loop` (`for i, batch in enumerate(loader)` binds `i`)."""
    return next((d for d in scope.defs_of(name) if d.op is DefOp.LOOP_TARGET and d.node is loop), None)


def _enumerate_start(loop: Loop, index: int | None, scope: Scope) -> int | None:
    """The first value of the loop's index target, following `it = tqdm(enumerate(x)) if a else enumerate(x)`."""
    if not isinstance(loop, cst.For) or index != 0:
        return None
    starts = {first_index(source, scope) for source in _iterated(loop.iter, scope, 0)}
    return starts.pop() if len(starts) == 1 else None


def _iterated(node: cst.BaseExpression, scope: Scope, depth: int) -> list[cst.BaseExpression]:
    """What a loop may iterate over: both arms of a conditional, through tqdm and plain aliases."""
    if depth > 3:
        return [node]
    if isinstance(node, cst.IfExp):
        return _iterated(node.body, scope, depth + 1) + _iterated(node.orelse, scope, depth + 1)
    if isinstance(node, cst.Call) and call_receiver(node)[1] == "tqdm" and node.args:
        return _iterated(node.args[0].value, scope, depth + 1)
    if isinstance(node, cst.Name):
        defs = [d for d in scope.defs_of(node.value) if d.value is not None]
        if len(defs) == 1 and defs[0].op is DefOp.ASSIGN:
            return _iterated(defs[0].value, scope, depth + 1)
    return [node]


def _counter_starts(cls: cst.ClassDef) -> dict[str, cst.Integer]:
    """The attributes `__init__` binds to an integer (`self.global_step = 0`, in its own block) that the
    class's other methods only count up by one or restore under a condition from something that is not
    a number (`if resume: self.global_step = ckpt["step"]`, a resumed run's): where a fresh run's count
    starts."""
    methods = [m for m in cls.body.body if isinstance(m, cst.FunctionDef)]
    init = next((m for m in methods if m.name.value == "__init__"), None)
    if init is None:
        return {}
    starts = {}
    for small in top_level_statements(init):
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.value, cst.Integer):
            name = dotted(small.targets[0].target) or ""
            if name.partition(".")[0] in SELF_NAMES and name.count(".") == 1:
                starts[name] = small.value
    for method in methods:
        top = set(map(id, top_level_statements(method)))
        for node in walk(method):
            if not isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
                continue
            for name in set(assigned_names(node)) & set(starts):
                counts_up = isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign) \
                    and is_one(node.value)
                restored = id(node) not in top and not isinstance(node.value, cst.Integer)
                if not (method is init and starts[name] is node.value) and not counts_up and not restored:
                    del starts[name]
    return starts
