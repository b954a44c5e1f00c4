"""The file model that rules query: scopes with their events, helper effects, accumulation windows,
loss facts. Rules import from here only (and from the rule base and the fix helpers): every name a
rule needs is re-exported below, so what a rule can know is what this module answers.
"""

from __future__ import annotations

import re
from functools import cached_property
from collections import ChainMap
from typing import TYPE_CHECKING, Callable, Iterator, NamedTuple

from gradcheck_accum.lint import catalogue as cat
from gradcheck_accum.lint.bindings import ACCUM_NAME, accelerator_accumulation_steps, constructor_roles, no_roles
from gradcheck_accum.lint.catalogue import DDP_NO_SYNC, DDP_SYNC_FLAG, SYNCS_AT_BACKWARD, LossScaling
from gradcheck_accum.lint.counters import (Lifetime, PassKind, Repetition, Shift, Tail, TailFate, distance_shift,
                                          pass_kind, pass_length, step_count_bound, unstepped_tail)
from gradcheck_accum.lint.lazy import cst
from gradcheck_accum.lint.inlining import Inliner, ProjectContext, bound_parameter
from gradcheck_accum.lint.project import ClassRef, FunctionRef
from gradcheck_accum.lint.project.summary import MODULE_CODE
from gradcheck_accum.lint.losses import (LossFacts, LossTracer, Scaling, returned_loss, row_width,
                                         scaled_by_own_micro_batch, share_of_window,
                                         varies_per_micro_batch)
from gradcheck_accum.lint.names import (SELF_NAMES, ImportMap, call_receiver, children, code, contains, dotted,
                                        full_names, is_one, iter_calls, iter_names, keyword, last_part,
                                        paired_arguments, parameter, parameter_names, positional, source,
                                        assigned_names, summed_loss_name, top_level_statements, walk)
from gradcheck_accum.lint.paths import decision, excluded_by, invariant
from gradcheck_accum.lint.predicates import (Boundary, BoundaryKind, analyze, is_accumulation_count, reads_length,
                                             resolve_n)
from gradcheck_accum.lint.trainer_hooks import trainer_divides
from gradcheck_accum.lint.vocabulary import (END_OF_SCOPE, NO_ROLES, Context, Def, DefOp, Event, EventKind, Exit, Fact,
                                             Framework, Guard, Role, Scope)
from gradcheck_accum.lint.walker import ScopeWalker
from gradcheck_accum.lint.windows import (Placement, Window, WindowShape, accumulate_calls, assigned_in, build_windows,
                                          exclusive, grouped_models, increment, inner_count, is_micro_batch_loop,
                                          loop_events, same_target, straight_line_clears)

if TYPE_CHECKING:
    from pathlib import Path

    from gradcheck_accum.lint.vocabulary import Loop

__all__ = ["FileModel", "Window", "Event", "Scope", "LossFacts", "ScheduleLength", "EventKind", "Role", "Framework",
           "Fact", "Placement", "WindowShape", "BoundaryKind", "DDP_NO_SYNC", "DDP_SYNC_FLAG", "SYNCS_AT_BACKWARD",
           "same_target", "Tail", "TailFate",
           "Lifetime", "PassKind", "Repetition", "Shift", "Boundary", "exclusive", "accumulate_calls",
           "grouped_models"]


class ScheduleLength(NamedTuple):
    """How a scheduler constructor's length (`T_max=`, `num_training_steps=`) is computed."""

    counts_data: bool  # from len(...) of something: micro-batches
    divided: bool  # a division somewhere in it
    mentions_accumulation: bool  # a name that says accumulation appears in it


class FileModel:
    def __init__(self, module: cst.Module, context: ProjectContext | None = None, text: str | None = None) -> None:
        """`context`: the project around the file (calls into other files resolve through it); without
        one, the file is a project of its own."""
        self.module = module
        self.context = context or ProjectContext.alone(module, text if text is not None else module.code)
        self.inliner = Inliner(self.context)
        self.imports = ImportMap()
        self.scopes: list[Scope] = []
        self.functions: dict[str, list[Scope]] = {}
        self._calls_by_callee: dict[str, list[tuple[cst.Call, Scope]]] | None = None  # this file's calls, by callee
        self._other_models: dict[Path, FileModel | None] = {}  # windows_handed's reading of other files
        self._build()
        self._losses = LossTracer(module, self.imports, self.scopes, self.inliner.returns, self.context.program,
                                  self.inliner.called_function, self.passed_to, self.inliner.attribute_constructions,
                                  self.inliner.attribute_roles)

    # -- construction -----------------------------------------------------------------------------
    def _build(self) -> None:
        functions = list(_function_defs(self.module))
        local_names = {fn.name.value for fn, _ in functions}
        counter = [0]
        module_scope = Scope(self.module, "<module>", module=self.module)
        self.inliner.register(module_scope)
        constants = self.context.this.constants
        ScopeWalker(module_scope, self.imports, {}, local_names, counter, inliner=self.inliner,
                    constants=constants).walk_block(self.module.body, Context())
        self.scopes.append(module_scope)
        globals_env = dict(module_scope.env)
        class_env: dict[int, dict[str, frozenset[Role]]] = {}
        # __init__ first so that `self.x` attributes are known in the other methods
        functions.sort(key=lambda item: item[0].name.value != "__init__")
        this = self.context.this
        for fn, cls in functions:
            if cls is not None and id(cls) not in class_env and id(cls) in this.qualnames_of_classes:
                # what every method (and the bases' methods, in any file) binds to `self`
                class_env[id(cls)] = dict(self.inliner.inherited_env(this, this.qualnames_of_classes[id(cls)]))
            attrs = class_env.setdefault(id(cls), {}) if cls is not None else {}
            scope = Scope(fn, fn.name.value, _bases(cls), owner=cls, module=self.module)
            # `self` is an instance of the method's class: an inherited method it calls dispatches
            # `self.m()` to this class's override (Inliner._resolve)
            owner = this.qualnames_of_classes.get(id(cls)) if cls is not None else None
            self.inliner.register(scope, self_class=ClassRef(this.path, owner) if owner is not None else None)
            # The function's bindings go in front of its parameters', its class's attributes and the
            # module's globals, which are read through, not copied: a copy of every global for every
            # function costs a file with a loop per function the square of its size.
            given = self.inliner.parameter_roles(fn, scope)
            if owner is not None and self.context.project.derives_from(
                    ClassRef(this.path, owner), cat.HF_COMPUTE_LOSS.qualified_bases, by_last_name=False):
                given = {**given, "self": given.get("self", NO_ROLES) | {Role.HF_TRAINER}}
            scope.given_counts = frozenset(name for name, roles in given.items() if Role.ACCUMULATION_COUNT in roles)
            scope.given_passes = frozenset(name for name, roles in given.items() if Role.PASS_FROM_ZERO in roles)
            scope.given_indices = frozenset(name for name, roles in given.items() if Role.PASS_INDEX in roles)
            scope.env = ChainMap({}, given, attrs, globals_env)
            ScopeWalker(scope, self.imports, {}, local_names, counter, inliner=self.inliner,
                        constants=constants).walk_block(fn.body.body, Context())
            if cls is not None:
                for name, roles in scope.env.items():
                    if name.startswith("self.") and roles:
                        attrs[name] = attrs.get(name, frozenset()) | roles
            scope.env = {}
            self.scopes.append(scope)
            self.functions.setdefault(fn.name.value, []).append(scope)
        if not self.context.alone:
            self.scopes.extend(self.inliner.walk_callers())
        self.driver_scopes = self.inliner.walk_drivers()  # a framework's loop around a hook of this file
        self.scopes.extend(self.driver_scopes)
        self.scopes.extend(self.inliner.walk_call_counted(self.scopes, _steps_on_count))

    def foreign_nodes(self) -> dict[int, list[tuple[cst.Call | None, Scope]]]:
        """Nodes of other files that the model walked in place of calls, by id, with the calls of this
        file they run through (None: left to their own file) and the scopes they were walked in."""
        return self.inliner.foreign_nodes()

    def places(self, node: cst.CSTNode, scope: Scope | None = None) -> tuple[str, list]:
        """The other places a finding on `node` depends on (inlining.Inliner.places): the call that runs
        it in a loop, the loop in another file or the framework's, the line in another file."""
        if scope is None or scope.frame is None and not scope.foreign:
            # walked where it is written: the call that also runs it in a loop says more
            scope = self._event_scopes.get(id(node), scope)
        return self.inliner.places(node, scope)

    @cached_property
    def _event_scopes(self) -> dict[int, Scope]:
        """The scope each event node was walked in, for the events reached through a call (the first
        one when several calls reach it)."""
        found: dict[int, Scope] = {}
        for scope in self.scopes:
            for event in scope.events:
                if event.scope is not None and event.scope is not scope:
                    found.setdefault(id(event.node), event.scope)
        return found

    # -- the windows --------------------------------------------------------------------------------
    @cached_property
    def windows(self) -> list[Window]:
        windows = [w for scope in self.scopes for w in build_windows(scope)]
        for window in windows:
            if window.shape in (WindowShape.GUARDED, WindowShape.NESTED) and self._n_is_one(window):
                # `gradient_accumulation_steps = 1`, bound once for the whole script: every
                # micro-batch closes its window (a micro-step loop runs once), and nothing accumulates
                window.shape, window.boundary = WindowShape.PLAIN, None
        return windows

    def _n_is_one(self, window: Window) -> bool:
        name = dotted(window.n) if window.n is not None else None
        if name in window.scope.defaulted and window.scope.frame is None and not window.scope.defs_of(name):
            # `def fit(self, loader, accum_steps=1)` that no call in the project gives `accum_steps`
            default = parameter(window.scope.node, name).default
            return isinstance(default, cst.Integer) and default.value == "1"
        # a function's own binding of the name hides the module's (the module's own are the literal's)
        if name is None or window.scope.frame is not None or window.scope.node is not self.module \
                and window.scope.defs_of(name):
            return False
        value = self.context.this.literals.get(name)
        return value == 1 and not isinstance(value, bool)

    def events(self, kind: EventKind) -> list[tuple[Scope, Event]]:
        """Every event of this kind in the file, with its scope, in program order."""
        return self._events_by_kind.get(kind, [])

    @cached_property
    def _events_by_kind(self) -> dict[EventKind, list[tuple[Scope, Event]]]:
        """The file's events grouped once: queries ask per window or per event, and a scan of the
        whole file for each would make a file of many loops cost the square of its loops."""
        grouped: dict[EventKind, list[tuple[Scope, Event]]] = {}
        for scope in self.scopes:
            for event in scope.events:
                grouped.setdefault(event.kind, []).append((scope, event))
        return grouped

    # -- passes over the micro-batch loop -----------------------------------------------------
    def callers(self, scope: Scope) -> list[Event]:
        """The calls of this function (or method, through `self.`) in this file."""
        if scope.node is self.module:
            return []
        return self._helper_calls.get(scope.name, [])

    @cached_property
    def _helper_calls(self) -> dict[str, list[Event]]:
        by_callee: dict[str, list[Event]] = {}
        for _, call in self.events(EventKind.HELPER_CALL):
            by_callee.setdefault(call.target, []).append(call)
        return by_callee

    def repetition(self, window: Window) -> Repetition:
        """Is one pass over the window's loop followed by another: a loop around it here, or a caller
        of its function inside a loop in this file (or, for another file's function, in the project)?"""
        if window.outer:
            return Repetition.REPEATED
        if window.scope.node is self.module:
            return Repetition.ONCE
        callers = self.callers(window.scope)
        if not callers:  # another file's function: its callers are there
            return Repetition.REPEATED if self.inliner.called_in_loop(window.scope) else Repetition.UNKNOWN
        return Repetition.REPEATED if any(call.ctx.loops for call in callers) else Repetition.ONCE

    @staticmethod
    def distance_shift(window: Window) -> Shift | None:
        """How many micro-batches beyond N a distance boundary's windows hold (counters.py)."""
        return distance_shift(window)

    def unstepped_tail(self, window: Window) -> Tail | None:
        """The micro-batches after the last boundary of each pass, when they are backpropagated and
        then lost (counters.py); None when nothing is lost or the code does not say."""
        if window.shape is not WindowShape.GUARDED or not window.accumulates:
            return None  # an optimizer that also steps on every micro-batch leaves nothing behind
        literals = self.context.this.literals
        if any(other is not window and pass_kind(other, literals) is PassKind.MULTIPLE_OF_N
               for other in self._windows_by_loop.get(id(window.loop), ())):
            return None  # a caller hands the loop data cut to whole windows (a sampler told N)
        return unstepped_tail(window, self.repetition(window), literals)

    @cached_property
    def _windows_by_loop(self) -> dict[int, list[Window]]:
        """The windows of each loop (its own function's, and those of the callers that walk it in place)."""
        by_loop: dict[int, list[Window]] = {}
        for window in self.windows:
            by_loop.setdefault(id(window.loop), []).append(window)
        return by_loop

    # -- losses -------------------------------------------------------------------------------------
    def loss_facts(self, expr: cst.BaseExpression | None, scope: Scope, before: int) -> LossFacts:
        return self._losses.facts(expr, scope, before)

    def graph_freed_each_window(self, window: Window, total: Event, name: str) -> bool:
        """Is every value of `name` this iteration makes backpropagated in the same iteration (before
        or after `total` adds it up: the total holds the same tensor), and does the total start afresh
        with each window (`losses = []` before the micro-step loop)?
        A backward without retain_graph frees the saved tensors of the graph it walks, so such a total
        keeps no micro-batch activations, only bare graph nodes, and those of one window at most. A
        value made on a branch that no backward here can follow (the pipeline-parallel branch whose
        schedule runs the backward) is not this loop's loss."""
        if not self._restarts_each_window(window, total):
            return False
        made = [d for d in window.scope.defs_of(name, total.order) if window.loop in d.ctx.loops and d.op.rebinds]
        backwards = [b for b in window.backwards if not b.via_helper and b.expr_name == name and window.inside(b)]
        if not made or not backwards:
            return False

        def freed(d: Def) -> bool:
            made_under = d.ctx.branches
            following = [b for b in backwards if d.order < b.order and not exclusive(d, b)]
            return not following or any(keyword(b.node, cat.RETAIN_GRAPH_KEYWORD) is None
                                        and b.ctx.branches <= made_under for b in following)
        return all(freed(d) for d in made)

    @staticmethod
    def _restarts_each_window(window: Window, total: Event) -> bool:
        """Is the total (or the container whose entry it is kept in) bound anew around a nested micro-step
        loop, in the loop that runs one window per iteration, or on the boundary of a guarded window (of
        accelerate's, where gradients sync); or, for a loop that never steps (the
        whole loop is one window: a closure given to `optimizer.step(closure)`, a full-batch pass with
        the step after it), before that loop outside any loop?"""
        container = total.target or _appended_container(total)
        if not container:
            return False
        boundary = frozenset().union(*(step.ctx.branches for step in window.boundary_steps))
        around = total.ctx.branches  # what the total runs under
        whole_loop = not window.steps and not window.outer
        # accelerate's window: bound anew where gradients sync (`if accelerator.sync_gradients: info =
        # defaultdict(list)`), after the backward of the window's last micro-batch, before the next one's total
        if window.shape is WindowShape.FRAMEWORK and any(
                d.op.rebinds and window.loop in d.ctx.loops and window.bound_on_boundary(d)
                for d in window.scope.defs_of(container)):
            return True
        for d in window.scope.defs_of(container, total.order):
            if not d.op.rebinds:
                continue
            if whole_loop and not d.ctx.loops:
                return True
            if window.shape is WindowShape.NESTED and not window.outer and not d.ctx.loops:
                return True  # a function whose body is one window (micro-step loop, then step): one per call
            if window.shape is WindowShape.NESTED and window.outer and window.outer[-1] in d.ctx.loops \
                    and window.loop not in d.ctx.loops and d.ctx.branches <= around:
                return True
            if window.shape is WindowShape.GUARDED and window.loop in d.ctx.loops and d.ctx.branches & boundary:
                return True
            if _made_afresh_each_step(window, total, d, container):
                return True
        # bound anew every k micro-batches, before or after the total in the loop body (`if i % 10 == 0:
        # total = 0`, a logging period): it holds k micro-batches at most
        where = total.scope or window.scope
        return any(d.op.rebinds and window.loop in d.ctx.loops and any(
            (test := analyze(g.test, g.scope or where)) is not None and test.kind is BoundaryKind.MODULO
            for g in d.ctx.guards) for d in where.defs_of(container))

    def scaler_off(self, scope: Scope, backward: Event, event: Event) -> bool:
        """Is every binding of the backward's scaler a GradScaler built with `enabled=E`, and does
        `event` run only where E is false (`if not use_amp:`, the `else` of `if use_amp:`)? A disabled
        scaler scales nothing, so the gradients on that path are plain ones. Names are read as
        written, in the function's own scope (a method walked from a caller reads them there too)."""
        switches = self._scaler_switches(scope, backward)
        # `if not use_amp:` or the `else` of `if use_amp:`, read as paths.py reads configuration tests
        return bool(switches) and all(any(self._tests_switch(g, switch, False, scope) for g in event.ctx.guards)
                                      for switch in switches)

    def _tests_switch(self, guard: Guard, switch: cst.BaseExpression, value: bool, scope: Scope) -> bool:
        """Does the guard hold where `switch` is `value`: its test is the switch, or a name bound once to
        what the switch reads (`use_amp = args.amp` against `GradScaler(enabled=args.amp)`)?"""
        taken = decision(guard)
        return taken.value == value and self._switch_text(taken.test, scope) == self._switch_text(switch, scope)

    @staticmethod
    def _switch_text(node: cst.BaseExpression, scope: Scope) -> str:
        """A setting's text, through a plain name bound once, outside loops, to another name or attribute."""
        name = dotted(node)
        defs = scope.defs_of(name) if name is not None and "." not in name else []
        if len(defs) == 1 and defs[0].op is DefOp.ASSIGN and not defs[0].ctx.loops \
                and isinstance(defs[0].value, (cst.Name, cst.Attribute)):
            return code(defs[0].value)
        return code(node)

    def unscaled_where_clipped(self, scope: Scope, backward: Event, unscales: list[Event], clip: Event,
                               taken: tuple[Guard, ...] = ()) -> bool:
        """Does some unscale run on every path to the clip while the backward's scaler scales? One may do
        it alone (unscales_where_clipped), or the two sides of an `if` the clip is not under may each
        have theirs (`if use_inner: scaler.unscale_(opt.inner) else: scaler.unscale_(opt)`); `taken`: the
        sides of such tests already followed."""
        if any(self.unscales_where_clipped(scope, backward, u, clip, taken) for u in unscales):
            return True
        for test in {id(g.owner): g for u in unscales for g in u.ctx.guards
                     if g not in clip.ctx.guards and g not in taken}.values():
            sides = [[g for u in unscales for g in u.ctx.guards if g.owner is test.owner and g.positive == side]
                     for side in (True, False)]
            if all(sides) and all(self.unscaled_where_clipped(scope, backward, [u for u in unscales
                                                                                if side[0] in u.ctx.guards],
                                                              clip, taken + (side[0],)) for side in sides):
                return True
        return False

    def unscales_where_clipped(self, scope: Scope, backward: Event, unscale: Event, clip: Event,
                               taken: tuple[Guard, ...] = ()) -> bool:
        """Does the unscale run wherever the clip runs while the backward's scaler scales: is every test it
        runs under, and the clip does not (nor is one of the sides `taken`), the scaler's own switch
        (`if use_amp: scaler.unscale_(opt)`)? An unscale under another setting (`if cfg.unscale:`) leaves
        the clip scaled where that is off."""
        receiver = call_receiver(unscale.node)[0] if isinstance(unscale.node, cst.Call) else None
        scaler_exists = (dotted(receiver), True)  # `if scaler:`, `if scaler is not None:`: false only without one
        # `if scaler.is_enabled():`: false only where the scaler does not scale
        scaler_on = (f"{dotted(receiver)}.{cat.SCALER_ENABLED_TEST}()", True)
        # a `continue` filter in a loop the clip is not in (`for opt in optimizers: if k != active: continue`)
        # picks which of the loop's optimizers are unscaled, not whether this micro-batch unscales
        extra = [g for g in unscale.ctx.guards if g not in clip.ctx.guards and g not in taken
                 and decision(g)[:2] not in (scaler_exists, scaler_on)
                 and not (g.exit is Exit.CONTINUE and g.depth > len(clip.ctx.loops))]
        # a setting the scaling backward also runs under (`if use_amp: scaler.scale(loss).backward()`):
        # wherever the gradients were scaled, the unscale runs
        scaled_under = {decision(g)[:2] for g in backward.ctx.guards if dotted(decision(g).test) is not None}
        extra = [g for g in extra if decision(g)[:2] not in scaled_under]
        if not extra:
            return True
        switches = self._scaler_switches(scope, backward)
        if switches is None and not self._scaler_built_here(scope, backward):
            # a scaler made elsewhere (`scaler = manager.scaler`), whose `enabled=` this function cannot
            # read: an unscale under a plain setting (`if use_amp:`) may run exactly where it scales
            return all(dotted(decision(g).test) is not None for g in extra)
        return bool(switches) and all(any(self._tests_switch(g, switch, True, scope) for switch in switches)
                                      for g in extra)

    def _scaler_switches(self, scope: Scope, backward: Event) -> list[cst.BaseExpression] | None:
        """The `enabled=` of every binding of the backward's GradScaler; None unless each has one."""
        constructions = self._scaler_constructions(scope, backward)
        switches = [keyword(made, cat.SCALER_SWITCH) if made is not None else None for made in constructions]
        return None if not switches or None in switches else switches

    def _scaler_built_here(self, scope: Scope, backward: Event) -> bool:
        """Is every binding of the backward's scaler, in its function or its class, a GradScaler made there?"""
        constructions = self._scaler_constructions(scope, backward)
        return bool(constructions) and None not in constructions

    def _scaler_constructions(self, scope: Scope, backward: Event) -> list[cst.Call | None]:
        """For each binding of the backward's scaler in its function (and, for `self.scaler`, its class's
        methods): the GradScaler construction it binds, or None for another value (`manager.scaler`)."""
        scope = next((s for s in self.scopes if s.node is scope.node and s.frame is None), scope)
        scaler = _scaler_as_written(backward)
        if scaler is None:
            return []
        scopes = [scope] + ([s for s in self.scopes if s.owner is scope.owner and s is not scope]
                            if scaler.startswith("self.") and scope.owner is not None else [])
        defs = [d for s in scopes for d in s.defs_of(scaler) if d.op.rebinds]
        return [d.value if isinstance(d.value, cst.Call) and Role.SCALER in
                constructor_roles(d.value, self.imports, no_roles) else None for d in defs]

    def straight_line_clears(self) -> Iterator[tuple[Scope, Event, Event]]:
        """Outside loops: a clear between a backward and the step of the same optimizer (windows.py)."""
        for scope in self.scopes:
            for zero, step in straight_line_clears(scope):
                yield scope, zero, step

    def backward_facts(self, window: Window, backward: Event) -> LossFacts:
        return self._losses.facts(backward.expr, backward.scope or window.scope, backward.order, backward.ctx.guards)

    def through_gradient_cache(self, window: Window, backward: Event) -> bool:
        """Is the backward one of gradient caching's (GradCache): the loss of the whole batch taken on
        representations detached into fresh leaves (`reps.detach().requires_grad_()`), whose `.grad`
        is the cache, or a chunk's surrogate weighted by that cache (`dot(reps, cache)`)? The first
        puts nothing in the model; the chunks' gradients add up to the whole batch's exactly."""
        seen: set[tuple[object, ...]] = set()
        pending = [(backward.expr, backward.order, backward.scope or window.scope)] if backward.expr is not None else []
        while pending and len(seen) < 2048:  # a bound on the provenance read, not a depth
            expression, before, scope = pending.pop()
            for node in walk(expression):
                if isinstance(node, cst.Attribute) and node.attr.value == cat.GRADIENT_ATTRIBUTE:
                    return True  # `cache = reps.grad`
                if isinstance(node, cst.Call) and call_receiver(node)[1] == cat.LEAF_AGAIN \
                        and isinstance(call_receiver(node)[0], cst.Call) \
                        and call_receiver(call_receiver(node)[0])[1] == cat.DETACH_METHOD:
                    return True  # `reps.detach().requires_grad_()`
                if isinstance(node, cst.Call) and ("call", id(node)) not in seen:
                    seen.add(("call", id(node)))  # what a project function called here returns
                    returned = self.inliner.returns(node, scope, before) or ()
                    pending += [(value, at, where) for value, where, at in returned]
                    continue
                name = dotted(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
                if name is None or (id(scope), name, before) in seen:
                    continue
                if self._spliced_into_cache(window, scope, name, before):
                    return True  # the chunk's fresh outputs written into the whole batch's cached ones
                seen.add((id(scope), name, before))  # `cache = cache.split(n)` reads the binding before it
                # the binding that reaches here (a parameter's is read in the caller, Def.scope: what the
                # call passed); not every earlier one, which in a file of many loops is every loop's
                pending += [(d.value, d.order, d.scope or scope)
                            for d in scope.defs_of(name, before)[-1:] if d.value is not None]
        return False

    def _spliced_into_cache(self, window: Window, scope: Scope, name: str, before: int) -> bool:
        """GradCache written out: `feats = copy.deepcopy(cached)`, then `feats[rows] = model(chunk)` in
        the micro-step loop, where `cached` holds the whole batch's outputs computed without grad before
        the loop. The loss over `feats` is the whole batch's, differentiated through one chunk's rows:
        the chunks' gradients add up to the whole batch's, with no division."""
        defs = scope.defs_of(name, before)
        spliced = [d for d in defs if d.op is DefOp.ITEM and window.loop in d.ctx.loops]
        copies = [d for d in defs if d.op is DefOp.ASSIGN and d.value is not None]
        if not spliced or not copies:
            return False
        for cached in iter_names(copies[-1].value):
            bound = scope.defs_of(cached, copies[-1].order)
            if bound and all(window.loop not in d.ctx.loops and d.order < copies[-1].order and _grad_off(d.ctx)
                             for d in bound):
                return True
        return False

    def is_accumulation_count(self, node: cst.BaseExpression, window: Window | None, scope: Scope) -> bool:
        """Is this expression N (the window's count, or a name that says accumulation; for a nested
        window, the length of what its micro-step loop walks)?"""
        return is_accumulation_count(node, window.n if window is not None else None, scope) \
            or window is not None and window.counts_micro_steps(node)

    def divisions_by_n(self, facts: LossFacts, scope: Scope, window: Window | None = None) -> list[cst.CSTNode]:
        """The divisions of a traced loss whose divisor is the accumulation count, read in `scope` or
        where the division is, in a function of this file walked in place (`divisor = num_steps or 1`
        there is its caller's N); a division in another file is that file's to report."""
        return [s.node for s in facts.scalings if s.divides and (
            self.is_accumulation_count(s.factor, window, scope)
            or s.scope.frame is not None and s.scope.frame.path is None
            and self.is_accumulation_count(s.factor, window, s.scope))]

    def gradient_divisions_by_n(self, window: Window) -> list[Event]:
        """The window's rescalings of the summed gradients by 1 / N (`p.grad.div_(n)`, `p.grad /= n`,
        `p.grad.mul_(1 / n)`)."""
        found = []
        for scale in window.of(EventKind.GRAD_SCALE):
            node = scale.node
            if isinstance(node, cst.AugAssign):
                factor, divides = node.value, isinstance(node.operator, cst.DivideAssign)
            elif isinstance(node, cst.Call):
                factor, divides = positional(node, 0), call_receiver(node)[1] == "div_"
            else:
                continue
            if factor is None:
                continue
            if not divides and isinstance(factor, cst.BinaryOperation) and isinstance(factor.operator, cst.Divide):
                factor, divides = factor.right, is_one(factor.left)  # `mul_(1 / n)`
            if divides and self.is_accumulation_count(factor, window, scale.scope):
                found.append(scale)
        return found

    def normalised(self, facts: LossFacts, window: Window | None, backward: Event | None,
                   reweighs: bool = False) -> bool:
        """Is the traced loss scaled in a way that can normalise the window: by a factor that may be
        N or a window-wide count, on every micro-batch? Dividing by a count or the size of the
        micro-batch itself makes a per-micro-batch mean, and a scaling only under a condition that
        changes from one micro-batch to the next (`if batch["runt_size"] > 0: loss = loss * w`)
        leaves the others unscaled; neither is normalisation (`loss = -loss` is not scaling at all).

        `reweighs`: only a factor that may differ between micro-batches counts (a mean of means is
        mended by each micro-batch's share of the window's items; a factor the loop never changes,
        `args.nll_weight` or N itself, scales every micro-batch's mean alike)."""
        variant = assigned_in(window.scope, window.loop) if reweighs and window is not None else None
        return any(self._normalises(scaling, window, backward) for scaling in facts.scalings
                   if variant is None or scaling.scope is not window.scope or not invariant(scaling.factor, variant))

    def _normalises(self, scaling: Scaling, window: Window | None, backward: Event | None) -> bool:
        """`window` None: the loss a hook returns to a framework's loop, which calls it per micro-batch."""
        loop = window.loop if window is not None else None
        signs = self._n_signs(scaling.factor, window, scaling.scope, 0)
        if signs == {-1} and scaling.divides:
            return False  # `loss / (batch_size // n)`: multiplied by N
        if signs:
            return True
        if _fixed_scale(scaling.factor, scaling.scope, scaling.scope.imports or self.imports, 0, self.inliner.returns):
            return False  # a world size or a loss scale: the same in every run, whatever N is
        if not scaling.divides and self._weight_setting(scaling.factor, scaling.scope, 0):
            return False  # a weight between loss terms, set where it is defined (`self.vf_coef * loss`)
        if not scaling.divides and row_width(scaling.factor):
            return False  # `loss.mean() * targets.size(1)`: summed along each row, still a mean over the rows
        if scaled_by_own_micro_batch(scaling, loop):
            # divided: a per-micro-batch mean; multiplied (`loss * bs`): a sum, which may be meant
            # for a nominal batch size and is left alone like any summed loss
            return not scaling.divides
        if not scaling.divides and share_of_window(scaling.factor, scaling.scope, loop):
            return True  # `loss * ((end - start) / n)`: the micro-batch's share of the window's n items
        if not scaling.divides and varies_per_micro_batch(scaling.factor, scaling.scope, loop):
            return False  # weighted by the micro-batch's own data (`values * mask`, a per-sample weight)
        shared = set(backward.ctx.guards) if backward is not None else set()  # what the backward runs under too
        return not any(guard not in shared and varies_per_micro_batch(guard.test, guard.scope or scaling.scope, loop)
                       for guard in scaling.guards)

    def _weight_setting(self, node: cst.BaseExpression, scope: Scope, depth: int) -> bool:
        """A factor fixed where it is defined, with no N in it: numbers, a parameter whose default is a
        number and that the function does not rebind (`lm_coef=0.5`), an attribute that only `__init__`
        binds, to one of those (`self.vf_coef = vf_coef`), and sums, products and powers of these
        (`1 - self.ptx_coef`). Nothing computed and nothing read from elsewhere (`args.coef`, a
        config), whose value could be anything."""
        if isinstance(node, (cst.Integer, cst.Float)):
            return True
        if isinstance(node, cst.UnaryOperation):
            return self._weight_setting(node.expression, scope, depth)
        if isinstance(node, cst.BinaryOperation):
            return isinstance(node.operator, (cst.Add, cst.Subtract, cst.Multiply, cst.Power)) \
                and self._weight_setting(node.left, scope, depth) and self._weight_setting(node.right, scope, depth)
        name = dotted(node)
        if name is None or depth > 2 or is_accumulation_count(node, None, scope):
            return False
        defs = scope.defs_of(name)
        if defs:  # bound here, or an argument the caller hands the function walked in its place
            return all(d.op is DefOp.ASSIGN and d.value is not None
                       and self._weight_setting(d.value, d.scope or scope, depth + 1) for d in defs)
        if isinstance(node, cst.Name) and isinstance(scope.node, cst.FunctionDef):
            # a parameter holds its default where no caller passes it (one may pass `1 / n`)
            return scope.passed is not None and name not in scope.passed and _number_default(scope.node, name)
        head, _, attribute = name.partition(".")
        cls = scope.owner or self._class_holding(scope.node)
        if head not in SELF_NAMES or "." in attribute or cls is None:
            return False
        bindings = [(method, statement) for method in cls.body.body if isinstance(method, cst.FunctionDef)
                    for statement in walk(method) if isinstance(statement, (cst.Assign, cst.AnnAssign, cst.AugAssign))
                    and name in assigned_names(statement)]
        if len(bindings) != 1:
            return False
        method, statement = bindings[0]
        value = statement.value
        return method.name.value == "__init__" and statement in top_level_statements(method) and value is not None and (
            isinstance(value, (cst.Integer, cst.Float)) or
            isinstance(value, cst.Name) and _number_default(method, value.value))

    def _class_holding(self, function: cst.CSTNode) -> cst.ClassDef | None:
        """The class of this file a method belongs to."""
        this = self.context.this
        qualname = this.qualnames.get(id(function))
        return this.classes.get(qualname.rpartition(".")[0]) if qualname and "." in qualname else None

    def _n_signs(self, node: cst.BaseExpression, window: Window | None, scope: Scope, depth: int) -> set[int]:
        """Where N is part of this factor: 1 where the factor grows with N (`n`, `micro_bs * n`, a name
        bound to such a value), -1 where it shrinks with it (`1 / n`, `batch_size // n`); empty when
        N is not part of it."""
        signs: set[int] = set()
        if self.is_accumulation_count(node, window, scope):
            return {1}
        if isinstance(node, cst.BinaryOperation):
            signs |= self._n_signs(node.left, window, scope, depth)
            right = self._n_signs(node.right, window, scope, depth)
            inverts = isinstance(node.operator, (cst.Divide, cst.FloorDivide))
            return signs | ({-sign for sign in right} if inverts else right)
        name = dotted(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
        if name and depth < 3:
            for d, where in self._bindings(name, scope):
                if d.op is DefOp.ASSIGN and d.value is not None:
                    signs |= self._n_signs(d.value, window, d.scope or where, depth + 1)
        return signs

    def _bindings(self, name: str, scope: Scope) -> list[tuple[Def, Scope]]:
        """The bindings of a name read in `scope`: its own, or for a function of this file that
        neither binds nor takes it, the module's (a global set at the top of a script)."""
        own = scope.defs_of(name)
        module_scope = self.scopes[0]
        if own or scope is module_scope or scope.module is not self.module \
                or not isinstance(scope.node, cst.FunctionDef) or name.split(".")[0] in parameter_names(scope.node):
            return [(d, scope) for d in own]
        return [(d, module_scope) for d in module_scope.defs_of(name)]

    def averaged_per_micro_batch(self, facts: LossFacts, window: Window | None) -> bool:
        """Is the traced loss divided by a count or the size of its own micro-batch (a sum made a mean)?"""
        loop = window.loop if window is not None else None
        return any(s.divides and scaled_by_own_micro_batch(s, loop) for s in facts.scalings)

    @staticmethod
    def summed_loss_name(event: Event) -> str | None:
        """The loss a running total adds (`total += loss * n` adds `loss`)."""
        return summed_loss_name(event.expr)

    @staticmethod
    def detached_in_place(window: Window, total: Event, name: str) -> bool:
        """Is the loss the total adds detached in place (`loss.detach_()`) after its last binding and
        before the total reads it, unconditionally?"""
        scope = total.scope or window.scope
        bound = [d.order for d in scope.defs_of(name, total.order)]
        after = bound[-1] if bound else -1
        return any(e.kind is EventKind.MODEL_CALL and e.target == f"{name}.{cat.IN_PLACE_DETACH}"
                   and after < e.order < total.order and e.ctx.guards == total.ctx.guards for e in scope.events)

    @staticmethod
    def keeps_what_is_added(window: Window, total: Event) -> bool:
        """Does the running total keep what is added to it: `total += loss`, or `.append(loss)` to a
        list (a deque), not to an object built by another class's constructor (MONAI's
        `CumulativeAverage().append(loss)` detaches it)?"""
        if total.api is None or total.target is None:
            return True  # `total += loss`
        built = [d.value for d in (total.scope or window.scope).defs_of(total.target)
                 if d.op is DefOp.ASSIGN and isinstance(d.value, cst.Call)]
        return all(dotted(value.func) in cat.KEEPING_CONTAINERS for value in built)

    def loss_of_last_micro_step(self, window: Window, backward: Event) -> Loop | None:
        """The micro-step loop whose every iteration rebinds the loss this backward differentiates,
        when the backward runs after that loop has finished: only the last iteration's loss reaches
        it (`for micro_step in range(n): loss = model(x) / n`, then `loss.backward()`). None when the
        loss is summed across the iterations, or the loop backpropagates itself."""
        found = self.micro_step_loss(window, backward)
        return found[0] if found is not None and not found[1] else None

    def micro_step_loss(self, window: Window, backward: Event) -> tuple[Loop, bool] | None:
        """The micro-step loop that binds the loss this backward differentiates after the loop, and
        whether the loop sums its losses into it (`total = total + loss / n`: one backward per window)
        rather than rebinding it (only the last iteration's loss is left)."""
        name = summed_loss_name(backward.expr)
        if name is None:
            return None
        scope, depth = window.scope, len(backward.ctx.loops)
        defs = scope.defs_of(name, backward.order)
        while defs and _rescales(defs[-1], name):  # `loss = loss / n` after the loop keeps the last value
            defs = defs[:-1]
        if not defs or len(defs[-1].ctx.loops) <= depth or defs[-1].ctx.loops[:depth] != backward.ctx.loops:
            return None
        loop = defs[-1].ctx.loops[depth]
        if not is_micro_batch_loop(loop, inner_count(loop)):
            return None
        if any(e.kind is EventKind.BACKWARD and loop in e.ctx.loops for e in scope.events):
            return None
        # `total += loss`, `total = total + loss`: the value of every iteration is kept
        return loop, any(increment(d, name, wrapped=False) is not None for d in defs if loop in d.ctx.loops)

    def framework_divides_loss(self, window: Window, backward: Event) -> bool:
        """Does this backward already divide the loss by N (catalogue semantics)? accelerator.backward
        under Accelerator(gradient_accumulation_steps=N); a DeepSpeed engine that owns the window (an
        engine stepped only on a hand-written boundary is configured without accumulation)."""
        scaling = backward.api.divides_loss if backward.api is not None else LossScaling.NEVER
        if scaling is LossScaling.WHEN_ENGINE_OWNS_WINDOW:
            steps = [s for s in window.steps if s.framework is backward.framework and window.inside(s)]
            return bool(steps) and all(window.placement(s) is Placement.EVERY for s in steps)
        if scaling is LossScaling.WITH_ACCUMULATION_STEPS:
            return Role.ACCELERATOR_ACCUMULATES in backward.roles
        return False

    @staticmethod
    def without_grad(event: Event) -> bool:
        """Called under `with torch.no_grad():` (or `inference_mode()`): a forward there builds no graph,
        so no backward reaches a DDP wrapper's hooks and it all-reduces nothing (a frozen generator)."""
        return _grad_off(event.ctx)

    def in_unread_context_given(self, event: Event, names: set[str]) -> bool:
        """Does the event run inside a `with` of a call that is handed one of `names` (the DDP model) and
        that the project cannot read: no function of the project, nothing of torch's (`with
        sync_ctx(ddp, last_round):` from an installed package)? Or of a context manager that a call
        made, one per micro-step, from what it is handed (`for ctx in micro_step_contexts(accelerator,
        model, n): with ctx():`), which no reading of the call's source would tell apart (the model may
        be one it is handed, or one the accelerator it is handed prepared)? It may switch the
        all-reduce off."""
        scope = event.scope or self.scopes[0]
        imports = scope.imports or self.imports

        def handed(call: cst.BaseExpression | None) -> bool:
            return isinstance(call, cst.Call) and any(dotted(a.value) in names for a in call.args)

        def made_per_micro_step_by_call(call: cst.Call) -> bool:
            defs = scope.defs_of(call.func.value) if isinstance(call.func, cst.Name) else []
            return bool(defs) and all(d.op in (DefOp.ASSIGN, DefOp.LOOP_TARGET) and isinstance(d.value, cst.Call)
                                      and d.value.args for d in defs)

        return any(handed(call) and not (imports.qualify(call.func) or "").startswith(cat.TORCH_MODULE_PREFIX)
                   and self.inliner.resolve(scope, call) is None or made_per_micro_step_by_call(call)
                   for call in event.ctx.withs)

    @staticmethod
    def output_detached(event: Event) -> bool:
        """Is what this forward returns cut from the graph before anything reads it (`teacher(x).detach()`,
        or `t = teacher(x)` then `t = t.detach()` rebinding it)? No backward then reaches the model's
        hooks (a frozen teacher wrapped in DDP)."""
        scope = event.scope
        if scope is None or not isinstance(event.node, cst.Call):
            return False
        bound = False  # every name bound to what it returns (`reps, atts, _ = teacher(x)`) is detached next
        for name, defs in scope.defs.items():
            for index, d in enumerate(defs):
                if d.value is None or not contains(d.value, event.node):
                    continue
                if _detaches(d.value, event.node):
                    return True
                later = defs[index + 1] if index + 1 < len(defs) else None
                if name != "_" and not (later is not None and later.op is DefOp.ASSIGN and later.value is not None
                                        and _detaches(later.value, None, name) and later.ctx.loops == d.ctx.loops):
                    return False
                bound = True
        return bound

    @staticmethod
    def accelerator_divides_outside_accumulate(backward: Event) -> bool:
        """`accelerator.backward(loss)` of an Accelerator built with gradient_accumulation_steps=N > 1,
        in a window accelerate does not own (no `accumulate()` around it): it divides by N all the same.
        Not one built with a `deepspeed_plugin`: DeepSpeed's engine then counts the micro-batches itself."""
        scaling = backward.api.divides_loss if backward.api is not None else LossScaling.NEVER
        return scaling is LossScaling.WITH_ACCUMULATION_STEPS and Role.ACCELERATOR_ACCUMULATES in backward.roles \
            and Role.ACCELERATOR_DEEPSPEED not in backward.roles

    def declares_accumulation(self, window: Window, step: Event) -> bool:
        """The loop prepares for accumulation: the loss is divided by N, the step's gradients are
        cleared under a `% N` test, or they are clipped under a `% N` test whose N says accumulation
        (`if micro_step % accum_steps == 0: clip_grad_norm_(...)`: the clip of a window's close)."""
        for backward in window.backwards:
            if self.divisions_by_n(self.backward_facts(window, backward), window.scope):
                return True
        # a clear of the step's gradients on every micro-batch: nothing survives from one to the next, so a
        # periodic clear besides it (an evaluation every k iterations that zeroes the model) closes no window
        cleared_each = any(window.placement(z) is Placement.EVERY and window.inside(z) and same_target(z, step)
                           for z in window.of(EventKind.ZERO_GRAD))
        for event in window.of(EventKind.ZERO_GRAD, EventKind.CLIP):
            if event.kind is EventKind.ZERO_GRAD and (not same_target(event, step) or cleared_each):
                continue
            for guard in event.ctx.guards:
                if guard in window.backward_guards or any(
                        guard in b.ctx.guards and b.order > event.order for b in window.backwards):
                    # the backward runs under it too, or one after this clear does: a periodic update
                    # of its own (a lazy regulariser every N iterations), not a window's close
                    continue
                boundary = analyze(guard.test, window.scope)
                if boundary is None or boundary.kind is not BoundaryKind.MODULO:
                    continue
                if event.kind is EventKind.ZERO_GRAD or (
                        boundary.n is not None and self.is_accumulation_count(boundary.n, window, window.scope)):
                    return True
        return False

    def hook_losses(self) -> Iterator[tuple[Scope, cat.Hook, LossFacts, bool]]:
        """The losses framework hooks return to the framework's own loop, with whether that loop
        divides them by N (catalogue.HOOKS): Lightning's training_step of a LightningModule under
        automatic optimisation does; transformers' Trainer does for an overridden compute_loss
        unless the window's items are counted for it (trainer_hooks.py). Hooks whose loop does
        something the code does not say are left out."""
        for hook in cat.HOOKS:
            if hook.divides_loss is LossScaling.UNLESS_ITEMS_COUNTED:
                for scope in self.functions.get(hook.name, []):
                    divides = trainer_divides(self.context, scope, hook)
                    if divides is not None:
                        yield from ((scope, hook, facts, divides) for facts in self._returned_losses(scope))
                continue
            manual = any(isinstance(d.value, cst.Name) and d.value.value == "False"
                         for scope in self.scopes for d in scope.defs.get(f"self.{hook.switch}", []))
            if manual:
                continue
            for scope in self.functions.get(hook.name, []):
                if any(last_part(base) == hook.base for base in scope.class_bases):
                    yield from ((scope, hook, facts, True) for facts in self._returned_losses(scope))

    def token_means_divided_by_driver(self) -> set[str]:
        """The classes of this file whose hook a framework's loop walked around it (Lightning's automatic
        optimisation, configured to accumulate) divides by N while it returns a per-micro-batch mean
        over a varying number of valid tokens. Read in that walk, where the batches the hook is given
        come from the loader the loop iterates (the module's own `train_dataloader()`)."""
        drivers = {id(scope) for scope in self.driver_scopes}
        classes = set()
        for window in self.windows:
            for backward in window.backwards if id(window.scope) in drivers else ():
                facts = self.backward_facts(window, backward)
                driven = self.inliner.driven_class(window.scope)
                if driven is not None and facts.token_level and self.divisions_by_n(facts, window.scope, window):
                    classes.add(driven.qualname)
        return classes

    def class_name_of(self, scope: Scope) -> str | None:
        """The qualified name of the class of this file a method's scope belongs to."""
        return self.context.this.qualnames_of_classes.get(id(scope.owner)) if scope.owner is not None else None

    def _returned_losses(self, scope: Scope) -> Iterator[LossFacts]:
        for event in scope.events:
            if event.kind is EventKind.RETURN and event.scope in (None, scope):
                yield self._losses.facts(returned_loss(event.expr), scope, event.order)

    # -- schedulers ---------------------------------------------------------------------------------
    def constructed_unprepared(self, scope: Scope, name: str | None) -> bool:
        """Is `name` bound here by a scheduler constructor and never passed through prepare()?"""
        defs = [d for s in (scope, self.scopes[0]) for d in s.defs_of(name or "")]
        built = any(d.op is DefOp.ASSIGN and isinstance(d.value, cst.Call) and
                    Role.SCHEDULER in constructor_roles(d.value, self.imports, no_roles) for d in defs)
        return built and not any(d.op is DefOp.UNPACK for d in defs)

    def prepared_untied(self, scope: Scope, name: str | None) -> bool:
        """Is `name` bound by the prepare() of an Accelerator built with step_scheduler_with_optimizer=False,
        whose schedulers step on every call?"""
        for d in [d for s in (scope, self.scopes[0]) for d in s.defs_of(name or "")]:
            if not (d.op.rebinds and isinstance(d.value, cst.Call)):
                continue
            receiver, method = call_receiver(d.value)
            if method not in cat.PREPARE_METHODS or dotted(receiver) is None:
                continue
            if any(a.op is DefOp.ASSIGN and isinstance(a.value, cst.Call) and Role.ACCELERATOR_UNTIED_SCHEDULERS
                   in constructor_roles(a.value, self.imports, no_roles)
                   for s in (scope, self.scopes[0]) for a in s.defs_of(dotted(receiver))):
                return True
        return False

    def schedule_length(self, scope: Scope, built: Event) -> ScheduleLength | None:
        """How the length of the scheduler built by this event is computed, if it is given."""
        lengths = [(length, read_in) for call, read_in in self.scheduler_constructions(scope, built)
                   if (length := _length_argument(call)) is not None]
        if not lengths:
            return None
        facts = _LengthFacts()
        for length, read_in in lengths:
            facts.collect(length, read_in, 0)
        return ScheduleLength(facts.has_len, facts.divided, facts.mentions_accumulation)

    def scheduler_constructions(self, scope: Scope, built: Event) -> list[tuple[cst.Call, Scope]]:
        """The scheduler constructions this event stands for, each with the scope its arguments are read
        in: the constructor call itself, or, for a project function that builds and returns the scheduler
        (`build_scheduler(optimizer, len(loader), epochs)`, here or in another module), the constructions
        it returns, read where its parameters are bound to this call's arguments."""
        return self._constructions(built.node, scope, built.order, 0)

    def _constructions(self, call: cst.CSTNode, scope: Scope, point: int, depth: int) -> list[tuple[cst.Call, Scope]]:
        if not isinstance(call, cst.Call):
            return []
        returns = self.inliner.returns(call, scope, point) if depth < 2 else None
        if not returns:  # a project function is read, not named
            return [(call, scope)]
        constructions = []
        for returned, walked, returned_at in returns:
            made = [returned] if isinstance(returned, cst.Call) else \
                [d.value for d in walked.defs_of(dotted(returned) or "", returned_at)]  # each branch's
            for value in made:
                constructions += self._constructions(value, walked, returned_at, depth + 1)
        return constructions

    @staticmethod
    def scheduler_parts(built: Event) -> set[str]:
        """The schedulers a composite one is built from (`SequentialLR(opt, [warmup, decay], ...)`):
        stepping it steps them."""
        call = built.node
        if not isinstance(call, cst.Call):
            return set()
        position = cat.SCHEDULER_PARTS_POSITIONS.get(call_receiver(call)[1] or "")
        parts = keyword(call, cat.SCHEDULER_PARTS_KEYWORD) or (positional(call, position) if position is not None
                                                                else None)
        if not isinstance(parts, (cst.List, cst.Tuple)):
            return set()
        return {name for element in parts.elements if (name := dotted(element.value))}

    @staticmethod
    def scheduler_given_position(stepped: Event) -> bool:
        """`scheduler.step(epoch + i / iters)`, `step_update(num_updates=n)`: the call says where the
        schedule is, so how often it is called does not move it."""
        return isinstance(stepped.node, cst.Call) and bool(stepped.node.args)

    @cached_property
    def prepared_schedulers_step_every_micro_batch(self) -> bool:
        """Does the project declare an accelerate older than the one whose prepared scheduler skips the
        micro-batches where gradients do not sync (catalogue)? Then it steps on every micro-batch."""
        return not self.context.alone and self.context.project.requires_below(
            *cat.ACCELERATE_SCHEDULER_SKIPS_UNSYNCED_SINCE)

    def schedule_counts_micro_batches(self, scope: Scope, stepped: Event, window: Window | None = None) -> bool:
        """Is the scheduler this event steps built with a length counted in micro-batches
        (`len(loader) * epochs`, not divided; or the number of micro-batches the window's loop runs)?
        Stepping it every micro-batch is then what it expects."""
        name = stepped.target
        if not name:
            return False
        for built_scope, built in self.events(EventKind.SCHEDULER_BUILT):
            if built.target != name or not (built_scope is scope or built_scope.node is self.module
                                              or name.startswith("self.")):
                continue
            length = self.schedule_length(built_scope, built)
            # `len(loader) * epochs`, `len(dataset) // batch_size`: micro-batches, unless N enters it
            if length is not None and length.counts_data and not length.mentions_accumulation:
                return True
            # a length multiplied by N: sized in micro-batches, however the factor it multiplies was counted
            if window is not None and (self.length_is_run(built_scope, built, window)
                                       or self.length_from_run(built_scope, built, window)
                                       or self.length_times_n(built_scope, built, window) is not None):
                return True
        return window is not None and self._run_length_passed(scope, name, window)

    def _run_length_passed(self, scope: Scope, scheduler: str, window: Window) -> bool:
        """For a scheduler the window's function takes as a parameter: does a call of that function in
        this file hand it one built with the number of micro-batches the loop runs, passed in the same
        call (`train_loop(model, loader, sched, max_steps)` after `CosineAnnealingLR(opt, T_max=max_steps)`,
        the loop returning once it has run `num_steps`)?"""
        bound = pass_length(window)
        if bound is None or window.scope is not scope:
            return False
        for argument, caller, call in self.passed_to(scheduler, scope):
            handed = dict(paired_arguments(call, scope.node, None))
            bound_name = dotted(bound)
            bound_there, where = (handed[bound_name], caller) if bound_name in handed else (bound, scope)
            for built_scope, built in self.events(EventKind.SCHEDULER_BUILT):
                length = _length_argument(built.node) if isinstance(built.node, cst.Call) else None
                if built_scope is caller and built.target == dotted(argument) and length is not None \
                        and resolve_n(length, caller) == resolve_n(bound_there, where):
                    return True
        return False

    def passed_to(self, name: str, scope: Scope) -> list[tuple[cst.BaseExpression, Scope, cst.Call]]:
        """For a parameter of a plain function of this file walked on its own, the argument each call
        of it in the file's other functions binds to it, with the calling scope and the call."""
        function = scope.node
        if scope.frame is not None or scope.owner is not None or not isinstance(function, cst.FunctionDef):
            return []
        return [(argument, caller, call)
                for call, caller in self._calls_of(function.name.value) if caller.node is not function
                for parameter, argument in paired_arguments(call, function, None) if parameter == name]

    def _calls_of(self, callee: str) -> list[tuple[cst.Call, Scope]]:
        """The calls written `callee(...)` in this file's functions, each with its scope."""
        if self._calls_by_callee is None:
            self._calls_by_callee = {}
            for caller in self.scopes:
                if caller.frame is None and isinstance(caller.node, cst.FunctionDef):
                    for call in iter_calls(caller.node.body):
                        self._calls_by_callee.setdefault(dotted(call.func) or "", []).append((call, caller))
        return self._calls_by_callee.get(callee, [])

    def windows_handed(self, scope: Scope, name: str) -> list[tuple[Window, str]]:
        """The windows of another module's training code that this scope hands `name` to, each with the
        name it goes by there: a parameter of the function called (`train(model, loader, sched)` for
        `def train(model, loader, scheduler)`), or the attribute a class's `__init__` keeps it in, read
        in that class's methods (`Loop(sched=sched).run()` for `self.sched = sched`). Read in that
        module's own model, built when first asked: a complete training function is analysed where it
        is defined, never walked in place of its call."""
        if self.context.alone or scope.frame is not None or scope.foreign:
            return []
        project, this = self.context.project, self.context.this
        found: list[tuple[Window, str]] = []
        statements = scope.node.body.body if isinstance(scope.node, cst.FunctionDef) else \
            [s for s in self.module.body if not isinstance(s, (cst.FunctionDef, cst.ClassDef))]
        calls = [call for statement in statements for call in iter_calls(statement)
                 if any(dotted(argument.value) == name for argument in call.args)]
        for call in calls:
            resolved = self.inliner.resolve(scope, call)
            if resolved is not None:
                ref, _, function = resolved
                owner = None
            else:
                written = dotted(call.func) or ""
                cls = project.resolve_class(this.path, written) if written else None
                init = project.lookup_method(cls, "__init__") if isinstance(cls, ClassRef) \
                    and cls.qualname.rsplit(".", 1)[-1] == last_part(written) else None
                loaded = self.context.load(init.path) if init is not None else None
                function = loaded.functions.get(init.qualname) if loaded is not None else None
                if function is None:
                    continue
                ref, owner = init, loaded.classes.get(cls.qualname)
            if ref.path == this.path:
                continue  # this file's own functions and classes: walked with it (handed_names)
            parameter = next((p for p, argument in paired_arguments(call, function, None)
                              if dotted(argument) == name), None)
            if parameter is None:
                continue
            other = self._model_of(ref.path)
            for window in other.windows if other is not None else ():
                if owner is None and window.scope.node is function:
                    found.append((window, parameter))
                elif owner is not None and window.scope.owner is owner:
                    found += [(window, event.target) for event in window.events
                              if (event.target or "").startswith("self.") and "." not in event.target[5:]
                              and bound_parameter(function, event.target[5:]) == parameter]
        return found

    def _model_of(self, path: "Path") -> FileModel | None:
        """The model of another file of the project (built once per file asked about)."""
        if path not in self._other_models:
            loaded = self.context.load(path)
            context = ProjectContext(self.context.project, path, loaded.module, loaded.text, self.context.parse) \
                if loaded is not None else None
            self._other_models[path] = FileModel(loaded.module, context, text=loaded.text) if context else None
        return self._other_models[path]

    def handed_names(self, scope: Scope, name: str) -> set[str]:
        """The names what `name` holds in a function of this file goes by where it is handed over in this
        file: its own, the arguments the file's calls bind to it when it is a parameter (`run(net, opt,
        sched)` for `def run(net, optimizer, scheduler)`), and for `self.x` that `__init__` binds to a
        parameter, the arguments the file's constructions of the class pass for it (`Loop(sched=sched)`)."""
        names = {name}
        names |= {found for argument, _, _ in self.passed_to(name, scope) if (found := dotted(argument))}
        head, _, attribute = name.partition(".")
        owner = scope.owner
        if head in SELF_NAMES and attribute and "." not in attribute and owner is not None and scope.frame is None:
            init = next((m for m in owner.body.body if isinstance(m, cst.FunctionDef) and m.name.value == "__init__"),
                        None)
            parameter = bound_parameter(init, attribute) if init is not None else None
            names |= {found for call, _ in self._calls_of(owner.name.value) if parameter is not None
                      for bound, argument in paired_arguments(call, init, None)
                      if bound == parameter and (found := dotted(argument))}
        return names

    def length_multiplies_windows(self, scope: Scope, built: Event, window: Window) -> bool:
        """Is the scheduler's length a count of windows multiplied back by N
        (`num_training_steps=max_train_steps * N` where `max_train_steps = epochs * ceil(len(loader) / N)`,
        or where the loop stops when a count of its optimizer steps reaches `max_train_steps`):
        a count of micro-batches reached the long way round?"""
        others = self.length_times_n(scope, built, window)
        n = self._window_n(scope, window)
        if others is None or n is None:
            return False
        steps = step_count_bound(window)
        return any(_counts_windows(factor, read_in, n, 0)
                   or steps is not None and resolve_n(factor, read_in) == resolve_n(steps, window.scope)
                   for factor, read_in in others)

    def length_times_n(self, scope: Scope, built: Event,
                       window: Window) -> list[tuple[cst.BaseExpression, Scope]] | None:
        """When the scheduler's length is a product with the window's N as one factor
        (`args.max_train_steps * args.gradient_accumulation_steps`), its other factors, each with the
        scope it is read in: whatever they count, the author sized the schedule N times longer than
        they are. Else None."""
        wanted = self._window_n(scope, window)
        if wanted is None:
            return None
        for call, read_in in self.scheduler_constructions(scope, built):
            length = _length_argument(call)
            factors = _product_factors(length) if length is not None else []
            times_n = [factor for factor in factors if resolve_n(factor, read_in) == wanted]
            if len(times_n) == 1:
                return [(factor, read_in) for factor in factors if factor is not times_n[0]]
        return None

    @staticmethod
    def _window_n(scope: Scope, window: Window) -> str | None:
        """The window's N as text: its own, or for accelerate's window in a method that reads the
        Accelerator off `self` (`self.accelerator.accumulate(model)`), the `gradient_accumulation_steps=`
        of the one Accelerator the scheduler's own scope builds and hands over with it."""
        n = window.accumulation_count()
        if n is not None:
            return resolve_n(n, window.scope)
        if window.framework is not Framework.ACCELERATE or scope is window.scope:
            return None
        counts = [steps for defs in scope.defs.values() for d in defs
                  if d.op is DefOp.ASSIGN and isinstance(d.value, cst.Call)
                  and (steps := accelerator_accumulation_steps(d.value)) is not None
                  and call_receiver(d.value)[1] in cat.ACCELERATOR.names]
        return resolve_n(counts[0], scope) if len(counts) == 1 else None

    def length_is_run(self, scope: Scope, built: Event, window: Window) -> bool:
        """Is the scheduler's length the number of micro-batches the window's loop runs in all
        (`get_cosine_schedule_with_warmup(opt, w, args.max_steps)` for `for step in range(args.max_steps)`)?"""
        bound = pass_length(window)
        if bound is None:
            return False
        run = resolve_n(bound, window.scope)
        for call, read_in in self.scheduler_constructions(scope, built):
            if any(resolve_n(name, read_in) == run for name in self._lengths_read(call, read_in)):
                return True
        return False

    def length_from_run(self, scope: Scope, built: Event, window: Window) -> bool:
        """Is the scheduler's length (or a name its step function reads) made from the number of
        micro-batches the window's loop runs, never divided by N (`warm = int(0.2 * args.iters)` for
        `for it in range(args.iters)`)? Its unit is then the micro-batch."""
        bound = pass_length(window)
        if bound is None:
            return False
        run, wanted = resolve_n(bound, window.scope), self._window_n(scope, window)
        for call, read_in in self.scheduler_constructions(scope, built):
            for length in self._lengths_read(call, read_in):
                defs = [d for d in read_in.defs_of(dotted(length) or "") if d.op is DefOp.ASSIGN]
                value = defs[0].value if len(defs) == 1 and defs[0].value is not None else length
                parts = list(walk(value))
                if any(resolve_n(part, read_in) == run for part in parts if isinstance(part, cst.BaseExpression)) \
                        and not any(_is_division(part) and resolve_n(part.right, read_in) == wanted for part in parts):
                    return True
        return False

    def _lengths_read(self, call: cst.Call, scope: Scope) -> list[cst.BaseExpression]:
        """A scheduler construction's length argument, or else the names its step function reads:
        `LambdaLR(opt, lambda step: cosine(step, warmup, total))`, or a function defined here
        (`def ramp(it): return min(1.0, it / warm)`, `LambdaLR(opt, lr_lambda=ramp)`)."""
        length = _length_argument(call)
        if length is not None:
            return [length]
        keyword_name, position = cat.SCHEDULE_FUNCTION_ARGUMENT
        function = keyword(call, keyword_name) or positional(call, position)
        if isinstance(function, cst.Name):
            # defined in the function that builds the scheduler, or at the top of its module
            bodies = [*(scope.node.body.body if isinstance(scope.node, cst.FunctionDef) else ()),
                      *(scope.module or self.module).body]
            function = next((f for f in bodies if isinstance(f, cst.FunctionDef) and f.name.value == function.value),
                            function)
        if not isinstance(function, (cst.Lambda, cst.FunctionDef)):
            return []
        own = parameter_names(function)
        return [node for node in walk(function.body) if isinstance(node, cst.Name) and node.value not in own]

    @staticmethod
    def dead_flush_text(window: Window) -> str | None:
        """The window's end-of-data clause as written, when it can never hold (Window.dead_flush)."""
        clause = window.dead_flush
        return source(clause) if clause is not None else None

    @staticmethod
    def run_bound_flush_text(window: Window) -> str | None:
        """The window's end-of-data clause as written, when it tests the run's length, not the epoch's
        (Window.run_bound_flush)."""
        clause = window.run_bound_flush
        return source(clause) if clause is not None else None

    # -- compile and checkpoints --------------------------------------------------------------------
    @staticmethod
    def receiver_text(event: Event) -> str | None:
        """The object a method call event acts on, as written: its name, or the expression
        (`unwrap(model)` in `unwrap(model).state_dict()`)."""
        call = event.node
        if event.target or not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)):
            return event.target
        return source(call.func.value)

    def is_saved(self, scope: Scope, state_dict: Event) -> bool:
        """Is this `x.state_dict()` written to disk: inside a save call's arguments, or in a
        container (`ckpt = {...}`, `ckpt["model"] = ...`) that is passed to one?"""
        saves, passed = self._saves
        # inside a save call's arguments: then in the same statement
        if any(contains(save.node, state_dict.node) for save in saves.get((id(scope), id(state_dict.stmt)), ())):
            return True
        for name in passed.get(id(scope), ()):
            if any(d.value is not None and contains(d.value, state_dict.node) for d in scope.defs_of(name)):
                return True
        return False

    @cached_property
    def handles_compiled_prefix(self) -> bool:
        """Does the file rewrite state-dict keys by the compile wrapper's key prefix: a string that is
        that prefix (`"_orig_mod."`, `"module._orig_mod."`) given to a call or bound to a name
        (`k.replace("_orig_mod.", "")`, `unwanted = "_orig_mod."` then `k[len(unwanted):]`,
        `consume_prefix_in_state_dict_if_present(sd, "_orig_mod.")`)? Then the checkpoints it writes
        are read back, or written, with the prefix taken care of: the key itself is the code's data.
        Another file of the project that does so (a loader that strips it) counts too."""
        if any(_is_compiled_key_prefix(node) for node in _key_literals(self.module)):
            return True
        project = self.context.project
        return not self.context.alone and project.summaries.remember(
            ("compiled prefix keys",),
            lambda: any(project.summary(path).compiled_prefix_keys for path in project.files))

    @cached_property
    def _saves(self) -> tuple[dict[tuple[int, int], list[Event]], dict[int, set[str]]]:
        """The save calls by scope and statement, and the names each scope passes whole to one."""
        by_statement: dict[tuple[int, int], list[Event]] = {}
        passed: dict[int, set[str]] = {}
        for scope, save in self.events(EventKind.SAVE):
            by_statement.setdefault((id(scope), id(save.stmt)), []).append(save)
            passed.setdefault(id(scope), set()).update(save.passed_names)
        return by_statement, passed

    @staticmethod
    def compiles_fresh_model(scope: Scope, compile_: Event, loop: Loop) -> bool:
        """`torch.compile(build_model())`, or of a model built in this iteration: a sweep over trials
        compiles each new model once, which is not recompiling the same one. Reached through a call
        (the loop runs `main()`, which builds and compiles), a model the called function builds
        itself before compiling it is new on every call."""
        call = compile_.node
        target = call.args[0].value if isinstance(call, cst.Call) and call.args else None
        if isinstance(target, cst.Call):
            return True
        name = dotted(target)
        if not name:
            return False
        if compile_.frame is not None and compile_.scope is not scope and not name.startswith("self."):
            return any(d.order < compile_.order and isinstance(d.value, cst.Call) and d.value is not compile_.node
                       and d.scope is None and d.op.rebinds for d in compile_.scope.defs_of(name))
        return any(loop in d.ctx.loops and d.order < compile_.order and d.value is not compile_.node
                   for d in scope.defs_of(name))

    def loads_after_compile(self, scope: Scope, load: Event) -> bool:
        """Does this load run on a name that a torch.compile binding made a wrapper before it, with
        evidence of the order: the binding earlier in the same function, or, for a `self.x` bound in
        another method of the class, that method runs first. `__init__` (and the methods it calls)
        runs before any method it does not reach; a method that calls the binding method before
        the load runs it first. Without such evidence the order is unknown."""
        name = load.target
        if self._reloads_own_state(scope, load):
            return False
        if not name or not name.startswith("self.") or scope.owner is None:
            # the walk gave the name its roles in program order, joining the branches of an `if`: where a
            # binding before the load is in another branch (`if task == "a": model = compile(...)`
            # `else: model = Net(); model.load_state_dict(...)`), only the last one on the load's way counts
            bindings = [d for d in scope.defs_of(name, load.order) if d.op.rebinds]
            if any(exclusive(d, load) for d in bindings):
                on_its_way = [d for d in bindings if not exclusive(d, load)]
                return bool(on_its_way) and self._compiles(on_its_way[-1].value)
            return Role.COMPILED in load.roles and not self._compiled_only_on_other_paths(scope, name, load, bindings)
        local = [d for d in scope.defs_of(name, load.order) if d.op.rebinds]
        if local and not any(exclusive(d, load) for d in local):
            # bound on the load's way in this method: compiled there, or by the project function that made
            # it (`self.net = build(cfg)`, which returns `torch.compile(net)` when configured to)
            return self._compiles(local[-1].value) or Role.COMPILED in load.roles
        if local:
            return self._compiles(local[-1].value)
        return self.compiled_in_method_run_first(scope, name, load.order)

    def _compiled_only_on_other_paths(self, scope: Scope, name: str, load: Event, bindings: list[Def]) -> bool:
        """Is the compiled module a parameter holds at this load handed in only by calls made under a test
        the load is on the other side of? `self._load(path, model)` under `if sharded() and resume:`,
        and the load in the callee's `else` of `if sharded():`: the caller that compiles never reaches it
        (a module function called with nothing, or a setting, means the same in both functions)."""
        given = scope.compiled_given_under.get(name)
        if not given or any(self._may_compile(d.value, scope) for d in bindings if d.value is not None):
            return False
        return all(excluded_by(site, load.ctx, lambda _: False) for site in given)

    def taken_from_compiled(self, scope: Scope, state_dict: Event) -> bool:
        """Is this `x.state_dict()` taken from a torch.compile wrapper: `x` may be one where it is read,
        or it is an attribute this method does not bind that another method of the class, run first,
        binds to one?"""
        name = state_dict.target
        return Role.COMPILED in state_dict.roles or name is not None and name.startswith("self.") \
            and not scope.defs_of(name, state_dict.order) \
            and self.compiled_in_method_run_first(scope, name, state_dict.order)

    def compiled_in_method_run_first(self, scope: Scope, name: str, order: int) -> bool:
        """Is the attribute `name` (`self.x`), which this method does not bind, bound to a torch.compile
        wrapper (or to what a project function that may compile returns) by another method of the class
        that runs before point `order` of this one? `__init__` (and the methods it calls) runs before any
        method it does not reach; a method that calls the binding method before that point runs it first.
        Without such evidence the order is unknown."""
        methods = [s for s in self.scopes if s.owner is scope.owner and s.owner is not None]
        binders = [s for s in methods if s is not scope and any(self._may_compile(d.value, s) for d in s.defs_of(name))]
        if not binders:
            return False
        constructed = _reached(methods, {"__init__"})
        if scope.name not in constructed and any(b.name in constructed for b in binders):
            return True
        if _runs_before(methods, scope, order, binders):
            return True
        # a method run only by the class's own methods, each of which runs a binder before calling it
        # (`fit()`: `self._build()`, the loop, then `self.save_checkpoint()`)
        callers = [(method, call) for method in methods for call in method.events
                   if call.kind is EventKind.HELPER_CALL and call.target == scope.name]
        if callers and all(_runs_before(methods, method, call.order, binders) for method, call in callers) \
                and not self._called_from_elsewhere(scope):
            return True
        return self._set_up_first_by_callers(scope, methods, binders, constructed)

    def _set_up_first_by_callers(self, scope: Scope, methods: list[Scope], binders: list[Scope],
                                 constructed: set[str]) -> bool:
        """Is every way into the method from outside the class a call on an object that the same caller
        set up first (`trainer.initialize(); trainer.train_and_validate()` in a script, where
        `initialize` binds the compiled model and `train_and_validate` reaches the method)? The ways in
        are the methods reaching it that no method of the class calls; each needs a call from outside,
        and every such call must follow a call of a binder (or a method reaching one) on its receiver."""
        if self.context.alone or scope.name in constructed:
            return False
        this = self.context.this
        binder_names = {b.name for b in binders}
        setting_up = {m.name for m in methods if _reached(methods, {m.name}) & binder_names}
        called_inside = {e.target for m in methods for e in m.events if e.kind is EventKind.HELPER_CALL}
        entries = [m for m in methods if scope.name in _reached(methods, {m.name}) and m.name not in called_inside]
        if not entries:
            return False
        for entry in entries:
            qualname = this.qualnames.get(id(entry.node))
            if qualname is None or entry.name in setting_up:
                return False
            ref = FunctionRef(this.path, qualname)
            # and the calls of that name on objects of unknown class (`def resume(trainer): trainer.train()`)
            sites = self.context.project.callers(ref) + self.context.project.unresolved_calls_named(ref)
            if not sites or not all(self._caller_sets_up_first(site.caller, entry.name, setting_up) for site in sites):
                return False
        return True

    def _caller_sets_up_first(self, caller: FunctionRef, method: str, setting_up: set[str]) -> bool:
        """Does every call `x.method()` in the caller follow a call `x.s()` on the same receiver, `s` one of
        `setting_up`, written before it in the caller?"""
        loaded = self.context.load(caller.path)
        code = loaded.module if loaded is not None and caller.qualname == MODULE_CODE else (
            loaded.functions.get(caller.qualname) if loaded is not None else None)
        if code is None:
            return False
        set_up: set[str] = set()
        found = False
        for call in iter_calls(code.body if isinstance(code, cst.FunctionDef) else code):  # in written order
            receiver, name = call_receiver(call)
            held = dotted(receiver) if receiver is not None else None
            if held is None or held in SELF_NAMES:
                continue
            if name in setting_up:
                set_up.add(held)
            elif name == method:
                if held not in set_up:
                    return False
                found = True
        return found

    def _called_from_elsewhere(self, scope: Scope) -> bool:
        """Is the method called by code outside its class in the project (in an order unknown here)?"""
        this = self.context.this
        qualname = this.qualnames.get(id(scope.node))
        if qualname is None or self.context.alone:
            return False
        owner = qualname.rpartition(".")[0] + "."
        return any(not site.caller.qualname.startswith(owner) or site.caller.path != this.path
                   for site in self.context.project.callers(FunctionRef(this.path, qualname)))

    def _may_compile(self, value: cst.BaseExpression | None, scope: Scope, depth: int = 0) -> bool:
        """A torch.compile call, or a call of a project function some return of which is one, through a
        few such functions (`self._get_model().to(device)` where `_get_model` returns the model zoo's
        `get_model(cfg)`, which compiles when configured: moved to a device, still the wrapper), or a
        choice of one (`torch.compile(model) if cfg.compile else model`)."""
        if isinstance(value, cst.IfExp):
            return self._may_compile(value.body, scope, depth) or self._may_compile(value.orelse, scope, depth)
        while isinstance(value, cst.Call) and call_receiver(value)[1] in cat.MODULE_RETURNING_METHODS:
            value = call_receiver(value)[0]
        if not isinstance(value, cst.Call):
            return False
        if self._compiles(value):
            return True
        returned = self.inliner.returns(value, scope, END_OF_SCOPE) or [] if depth < 3 else []
        return any(self._may_compile(made, where, depth + 1) for made, where, _ in returned)

    @staticmethod
    def _reloads_own_state(scope: Scope, load: Event) -> bool:
        """Is the loaded state the wrapper's own, taken after it was compiled (`initial =
        copy.deepcopy(model.state_dict())` after `model = torch.compile(model)`, then
        `model.load_state_dict(initial)` to reset it)? Its keys carry the prefix too, so they match."""
        if not isinstance(load.node, cst.Call) or not load.target:
            return False
        argument = positional(load.node, 0) or keyword(load.node, "state_dict")
        if argument is None:
            return False
        # what the argument is made of, through a few bindings (`ckpt = {"model": state}` after `state =
        # model.state_dict()`, then `model.load_state_dict(ckpt["model"])`: a checkpoint read into the
        # wrapper's own state dict, whose keys it was given)
        sources, names, seen = [argument], [argument], set()
        for _ in range(3):
            found = []
            for node in names:
                for name in full_names(node):
                    if name in seen:
                        continue
                    seen.add(name)
                    found += [d.value for d in scope.defs_of(name, load.order) if d.op.rebinds and d.value is not None]
            sources += found
            names = found
        taken = [e for e in scope.events if e.kind is EventKind.STATE_DICT and e.order < load.order
                 and e.target == load.target and Role.COMPILED in e.roles]
        return any(contains(source, e.node) for source in sources for e in taken)

    def _compiles(self, value: cst.BaseExpression | None) -> bool:
        return isinstance(value, cst.Call) and Role.COMPILED in constructor_roles(value, self.imports, no_roles)

    # -- distributed ----------------------------------------------------------------------------
    def ddp_no_sync_contexts(self) -> Iterator[tuple[Scope, Event, list[Event]]]:
        """Each `with model.no_sync():` of a DDP model, with the events inside its block; also
        `stack.enter_context(model.no_sync())`, with the events after it in the `with ExitStack() as
        stack:` block (where the context stays entered), and `with accelerator.accumulate(model):` of an
        Accelerator that accumulates, which enters that no_sync() itself."""
        for scope, sync in self.events(EventKind.SYNC_CONTROL):
            # `with accelerator.accumulate(model):` enters model.no_sync() on the micro-batches it accumulates
            entered_by_accelerate = sync.api is cat.ACCELERATE_ACCUMULATE and Role.ACCELERATOR_ACCUMULATES in sync.roles
            if sync.api is not DDP_NO_SYNC and not entered_by_accelerate or sync.target is None:
                continue
            inside = [e for e in scope.events if any(call is sync.node for call in e.ctx.withs)]
            stack = _entered_on(sync) if not inside else None
            if stack is not None:
                blocks = [d.node for d in scope.defs_of(stack, sync.order) if isinstance(d.node, cst.With)]
                calls = {id(call) for block in blocks[-1:] for item in block.items for call in iter_calls(item.item)}
                inside = [e for e in scope.events if e.order > sync.order and any(id(c) in calls for c in e.ctx.withs)]
            yield scope, sync, inside

    def ddp_sync_flags(self) -> Iterator[tuple[Scope, Event]]:
        """Each `model.require_backward_grad_sync = ...` of the file, on a model that may be torch's
        DDP: not on an instance of a project class of its own (a hand-written data-parallel wrapper
        reads its flag where it chooses, in a gradient hook as often as in the forward)."""
        for scope, sync in self.events(EventKind.SYNC_CONTROL):
            if sync.api is DDP_SYNC_FLAG and sync.target is not None and (
                    Role.DDP in sync.roles or not self._own_wrapper(scope, sync.target)):
                yield scope, sync

    def _own_wrapper(self, scope: Scope, name: str) -> bool:
        cls = self.inliner.class_of_name(scope, name)
        return cls is not None and not self.context.project.derives_from(cls, cat.WRAPPERS.names)

    @staticmethod
    def loss_handed_in(backward: Event) -> bool:
        """Is the loss a backward runs on one its function was handed (`def update(self, loss, step)`,
        then `loss = loss / self.n; loss.backward()`): a parameter, through arithmetic with settings and
        numbers only, so its forward ran in the caller before the call?"""
        scope = backward.scope
        if scope is None or not isinstance(scope.node, cst.FunctionDef) or backward.expr is None:
            return False
        parameters = parameter_names(scope.node) - set(SELF_NAMES)
        pending, reached = [(backward.expr, backward.order)], False
        for _ in range(16):
            if not pending:
                return reached
            expression, before = pending.pop()
            if any(isinstance(node, cst.Call) for node in walk(expression)):
                return False  # computed here, by whatever the call runs
            for name in iter_names(expression):
                if "." in name:
                    continue  # a setting read off an object (`self.accum_grad`)
                defs = scope.defs_of(name, before)
                if not defs and name in parameters:
                    reached = True
                elif defs and all(d.op is DefOp.ASSIGN and d.value is not None for d in defs):
                    # each binding that may reach (`loss = raw / n`, then under a spike guard `loss = loss * 0`)
                    pending.extend((d.value, d.order) for d in defs)
                elif defs:
                    return False
        return False

    @staticmethod
    def same_iteration(scope: Scope, event: Event) -> list[Event]:
        """The events of one iteration of the innermost loop around `event` (those inside that loop,
        deeper loops included), in program order; empty outside loops."""
        if not event.ctx.loops:
            return []
        loops = event.ctx.loops
        return [e for e in loop_events(scope, loops[-1]) if e.ctx.loops[:len(loops)] == loops]


def _detaches(value: cst.BaseExpression, call: cst.Call | None, name: str | None = None) -> bool:
    """`<call>.detach()` (or `.detach_()`), or `name.detach()`, or each item of `name` detached
    (`[r.detach() for r in name]`): the value cut from its graph."""
    if isinstance(value, (cst.ListComp, cst.GeneratorExp)) and name is not None \
            and value.for_in.inner_for_in is None and dotted(value.for_in.iter) == name \
            and isinstance(value.for_in.target, cst.Name):
        return _detaches(value.elt, None, value.for_in.target.value)
    if not isinstance(value, cst.Call):
        return False
    receiver, method = call_receiver(value)
    if method not in cat.DETACHING_METHODS or receiver is None:
        return False
    return receiver is call if call is not None else dotted(receiver) == name


def _made_afresh_each_step(window: Window, total: Event, d: Def, container: str) -> bool:
    """Is the total bound anew, to a value that does not read it, at least once per optimizer step: in
    the loop the step runs in or one nested in it, on the total's way (`total = 0.0` at the top of a
    micro-step loop's body, then the losses of that micro-batch's segments added)?"""
    # the steps of the window, or, for a loop that only backpropagates (a micro-batch's segments), those
    # of the loops around it
    steps = [step.ctx.loops for step in window.steps or
             [e for e in window.nest_events if e.kind is EventKind.STEP] if step.ctx.loops]
    if not steps or d.value is None or container in set(iter_names(d.value)) \
            or not d.ctx.branches <= total.ctx.branches:
        return False
    loops, held = d.ctx.loops, total.ctx.loops
    return held[:len(loops)] == loops and any(len(loops) >= len(step) and loops[:len(step)] == step for step in steps)


def _appended_container(total: Event) -> str | None:
    """`info` in `info["loss"].append(loss)`: the container whose entry a total is kept in."""
    call = total.node
    receiver = call.func.value if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) else None
    if isinstance(receiver, cst.Subscript):
        return dotted(receiver.value)
    return None


def _entered_on(sync: Event) -> str | None:
    """`stack` in `stack.enter_context(model.no_sync())`: the exit stack the context is entered on."""
    for call in iter_calls(sync.stmt) if sync.stmt is not None and not isinstance(sync.stmt, cst.With) else ():
        receiver, method = call_receiver(call)
        if method == _ENTER_CONTEXT and any(a.value is sync.node for a in call.args):
            return dotted(receiver)
    return None


_ENTER_CONTEXT = "enter_context"  # contextlib.ExitStack: the context stays entered until the `with` ends


def _number_default(function: cst.FunctionDef, name: str) -> bool:
    """Is `name` a parameter of the function whose default is a number (`lm_coef=0.5`)?"""
    param = parameter(function, name)
    default = param.default if param is not None else None
    if isinstance(default, cst.UnaryOperation):
        default = default.expression
    return isinstance(default, (cst.Integer, cst.Float))


def _fixed_scale(node: cst.BaseExpression, scope: Scope, imports: ImportMap, depth: int,
                 returns: Callable | None = None) -> bool:
    """A factor made of the number of processes (`dist.get_world_size()`), powers of two (a loss scale,
    `2 ** self.lg_loss_scale`) and numbers, or a name every binding of which is one, or a call of a
    project function every return of which is one (`utils.get_world_size()`: 1 when not distributed,
    else `dist.get_world_size()`)."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Power):
        return isinstance(node.left, (cst.Integer, cst.Float)) and node.left.value in cat.LOSS_SCALE_BASES
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Multiply, cst.Divide)):
        return _fixed_scale(node.left, scope, imports, depth, returns) and \
            _fixed_scale(node.right, scope, imports, depth, returns)
    if isinstance(node, (cst.Integer, cst.Float)):
        return True
    if isinstance(node, cst.Call):
        if (scope.imports or imports).qualify(node.func) in cat.WORLD_SIZE_FUNCTIONS:
            return True
        found = returns(node, scope, END_OF_SCOPE) if returns is not None and depth < 3 and not node.args else None
        return bool(found) and all(_fixed_scale(value, where, imports, depth + 1, returns) for value, where, _ in found)
    name = dotted(node)
    defs = scope.defs_of(name) if name is not None and depth < 3 else []
    return bool(defs) and all(d.op is DefOp.ASSIGN and d.value is not None
                              and _fixed_scale(d.value, d.scope or scope, imports, depth + 1, returns) for d in defs)


def _runs_before(methods: list[Scope], scope: Scope, order: int, binders: list[Scope]) -> bool:
    """Does `scope` run one of the `binders` (calling it, or a method that reaches it) before point `order`?"""
    called_first = {e.target for e in scope.events if e.kind is EventKind.HELPER_CALL and e.order < order and e.target}
    runs_first = _reached(methods, called_first)
    return any(b.name in runs_first for b in binders)


def _reached(methods: list[Scope], start: set[str]) -> set[str]:
    """The methods of one class that calling `start` runs (through `self.m()` calls), and `start`."""
    by_name = {m.name: m for m in methods}
    reached, todo = set(), list(start)
    while todo:
        name = todo.pop()
        if name in reached or name not in by_name:
            continue
        reached.add(name)
        todo.extend(e.target for e in by_name[name].events if e.kind is EventKind.HELPER_CALL and e.target)
    return reached


def _rescales(d, name: str) -> bool:
    """`loss /= n`, `loss = loss / n`: the same value, scaled."""
    return d.op.scales or (d.op is DefOp.ASSIGN and isinstance(d.value, cst.BinaryOperation)
                           and isinstance(d.value.operator, (cst.Divide, cst.Multiply))
                           and dotted(d.value.left) == name)


def _grad_off(ctx: Context) -> bool:
    """Inside `with torch.no_grad():` (or `inference_mode()`): what runs there records no graph."""
    return any(call_receiver(call)[1] in cat.GRAD_OFF_CONTEXTS and not call.args for call in ctx.withs)


def _length_argument(call: cst.Call) -> cst.BaseExpression | None:
    for name in cat.SCHEDULE_LENGTH_KEYWORDS:
        value = keyword(call, name)
        if value is not None:
            return value
    _, method = call_receiver(call)
    if method and method.startswith("get_") and cat.SCHEDULERS.pattern_word in method:
        return positional(call, cat.SCHEDULE_LENGTH_POSITION)
    position = cat.SCHEDULE_LENGTH_POSITIONS.get(method or "")
    return positional(call, position) if position is not None else None


def _product_factors(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The operands of a product (`a * b * c`), or the expression alone."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        return _product_factors(node.left) + _product_factors(node.right)
    return [node]


def _counts_windows(node: cst.BaseExpression, scope: Scope, n: str, depth: int) -> bool:
    """Does the expression count windows: a length divided by N (`math.ceil(len(loader) / N)`), here or
    in the values of the names it reads (`epochs * updates_per_epoch`)?"""
    if depth > 3:
        return False
    if any(_is_division(current) and reads_length(current.left) and resolve_n(current.right, scope) == n
           for current in walk(node)):
        return True
    return any(_counts_windows(d.value, d.scope or scope, n, depth + 1) for name in full_names(node)
               for d in scope.defs_of(name) if d.value is not None and d.op is DefOp.ASSIGN)


class _LengthFacts:
    def __init__(self) -> None:
        self.has_len = self.divided = self.mentions_accumulation = False

    def collect(self, node: cst.CSTNode, scope: Scope, depth: int) -> None:
        if depth > 3:
            return
        if reads_length(node):
            self.has_len = True
        if _has_division(node):
            self.divided = True
        for name in full_names(node):
            if ACCUM_NAME.search(name):
                self.mentions_accumulation = True
            for d in scope.defs_of(name):
                if d.value is None or d.op is not DefOp.ASSIGN:
                    continue
                if isinstance(d.value, cst.Call) and call_receiver(d.value)[1] in cat.DATA_LOADERS:
                    # a loader's batch size (`B // N`: micro-batches) says nothing of what its length counts
                    for index, argument in enumerate(d.value.args):  # (dataset, batch_size, ...)
                        if argument.keyword is None and index != 1 or argument.keyword is not None \
                                and argument.keyword.value != cat.LOADER_BATCH_SIZE_KEYWORD:
                            self.collect(argument.value, d.scope or scope, depth + 1)
                    continue
                self.collect(d.value, d.scope or scope, depth + 1)  # an argument: in the caller


def _has_division(node: cst.CSTNode) -> bool:
    return any(_is_division(current) for current in walk(node))


def _is_division(node: cst.CSTNode) -> bool:
    """`a / b` or `a // b`."""
    return isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Divide, cst.FloorDivide))


def _function_defs(module: cst.Module):
    """Every function in the file with its enclosing class (or None)."""
    stack: list[tuple[cst.CSTNode, cst.ClassDef | None]] = [(module, None)]
    while stack:
        node, cls = stack.pop()
        for child in reversed(_body(node)):
            if isinstance(child, cst.FunctionDef):
                yield child, cls
                stack.append((child, None))
            elif isinstance(child, cst.ClassDef):
                stack.append((child, child))
            elif isinstance(child, (cst.If, cst.With, cst.Try, cst.For, cst.While, cst.Else)):
                stack.append((child, cls))


def _body(node: cst.CSTNode) -> list[cst.CSTNode]:
    out: list[cst.CSTNode] = []
    if isinstance(node, cst.Module):
        return list(node.body)
    body = getattr(node, "body", None)
    if isinstance(body, (cst.IndentedBlock, cst.SimpleStatementSuite)):
        out.extend(body.body)
    for attr in ("orelse", "finalbody"):
        extra = getattr(node, attr, None)
        if extra is not None:
            out.append(extra)
    for handler in getattr(node, "handlers", ()) or ():
        out.extend(handler.body.body)
    return out


def _bases(cls: cst.ClassDef | None) -> tuple[str, ...]:
    if cls is None:
        return ()
    return tuple(dotted(base.value) or "" for base in cls.bases)


_COMPILED_KEY_PREFIX = re.compile(cat.COMPILED_KEY_PREFIX)


def _key_literals(module: cst.Module) -> Iterator[cst.SimpleString]:
    """The plain strings handed to a call or bound to a name (or to an element of a bound list):
    the places a key prefix is used as data; a docstring or a message inside an f-string is not."""
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.Arg, cst.Assign, cst.Element)) and isinstance(node.value, cst.SimpleString):
            yield node.value
        stack.extend(children(node))


def _is_compiled_key_prefix(literal: cst.SimpleString) -> bool:
    value = literal.evaluated_value
    return isinstance(value, str) and _COMPILED_KEY_PREFIX.fullmatch(value) is not None


def _scaler_as_written(backward: Event) -> str | None:
    """`self.scaler` of `self.scaler.scale(loss).backward()`, whoever's frame it was walked in."""
    func = backward.node.func if isinstance(backward.node, cst.Call) else None
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call):
        receiver, method = call_receiver(func.value)
        if method == "scale" and receiver is not None:
            return dotted(receiver)
    return None


def _steps_on_count(scope: Scope, counter: str) -> bool:
    """Does a window of the scope step on a boundary of `counter` (a loop over a method's calls,
    inlining.Inliner.walk_call_counted)?"""
    return any(w.shape is WindowShape.GUARDED and w.boundary is not None and w.boundary.counter is not None
               and dotted(w.boundary.counter) == counter for w in build_windows(scope))
