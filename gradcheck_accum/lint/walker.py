"""One ordered walk over each scope that records the calls the catalogue knows as events.

Every event carries its context: the `if` guards, loops and `with` items around it, and its place
in program order. Calls are classified from the catalogue (catalogue.py), names get their roles
from bindings.py; the window model (windows.py) is built from the events.
"""

from __future__ import annotations

from collections import ChainMap

from typing import TYPE_CHECKING, Protocol

from gradcheck_accum.lint import catalogue as cat
from gradcheck_accum.lint.bindings import (LITERAL_TRUTH, constructor_roles, deepspeed_config,
                                           deepspeed_config_accumulates, function_reference_roles, prepared_roles,
                                           roles_from_name, unpacked_roles)
from gradcheck_accum.lint.catalogue import Api, Operand
from gradcheck_accum.lint.lazy import cst
from gradcheck_accum.lint.names import (SELF_NAMES, ImportMap, call_receiver, children, code, dotted, full_names,
                                        is_infinite, item_name, iter_calls, iter_names, keyword, last_part,
                                        parameter_names, positional, walk)
from gradcheck_accum.lint.paths import excluded_by, rebound_since
from gradcheck_accum.lint.predicates import (analyze, caller_name, clipping_factor, excludes_only_single_windows,
                                             parameter_value)
from gradcheck_accum.lint.vocabulary import NO_ROLES, Context, Def, DefOp, Event, EventKind, Exit, Guard, Role, Scope

_COMPILED = frozenset({Role.COMPILED})

if TYPE_CHECKING:
    from gradcheck_accum.lint.vocabulary import Loop

    class Inliner(Protocol):
        def inline(self, walker: "ScopeWalker", call: cst.Call, ctx: Context) -> bool:
            """Walk the function `call` runs in place of the call, when it matters to a window."""

        def returned_roles(self, walker: "ScopeWalker", call: cst.Call) -> frozenset[Role]:
            """Roles of what the project function `call` runs returns (a model it wraps in DDP)."""

        def forwarded_roles(self, walker: "ScopeWalker", call: cst.Call) -> frozenset[Role]:
            """Roles of the distributed models the project function `call` runs calls itself."""

        def returned_element_roles(self, walker: "ScopeWalker", call: cst.Call, count: int) \
                -> "list[frozenset[Role]] | None":
            """Roles of each element of the tuple of `count` that the project function `call` runs returns."""

        def returned_item_roles(self, walker: "ScopeWalker", call: cst.Call) -> frozenset[Role]:
            """Roles every item of the container the project function `call` runs returns holds."""

        def runs_project_function(self, walker: "ScopeWalker", call: cst.Call) -> bool:
            """Does `call` run a function of the project (its own `clip_grad_norm_`, not torch's)?"""

        def delegates_step(self, walker: "ScopeWalker", call: cst.Call) -> bool:
            """Does `call` run a project method whose body steps another optimizer (a wrapper's step)?"""

        def iterated_argument(self, scope: Scope, call: cst.Call) -> "cst.BaseExpression | None":
            """The argument a project generator that yields each of its items is handed."""

        def runs_hooks(self, scope: Scope, loop: "Loop") -> bool:
            """Is the loop a callback system's pass over its objects, running a hook on each?"""

        def module_of(self, scope: Scope) -> "cst.Module | None":
            """The module a scope's function is written in."""

        def predicate(self, walker: "ScopeWalker", test: cst.BaseExpression, ctx: Context, at: int | None = None) \
                -> "tuple[cst.BaseExpression, Scope] | None":
            """The expression a project predicate (function or property) returns, and its scope."""

_AUGMENTED = {"AddAssign": DefOp.ADD, "DivideAssign": DefOp.DIVIDE, "MultiplyAssign": DefOp.MULTIPLY,
              "SubtractAssign": DefOp.SUBTRACT, "FloorDivideAssign": DefOp.FLOOR_DIVIDE}
_ORIG_MOD = cat.COMPILED_INNER  # the module a torch.compile wrapper wraps
_ONE_DEEPSPEED = frozenset({Role.DEEPSPEED})


def _exits_within(with_stmt: cst.With) -> list[cst.If]:
    """The `if test: <exit>` statements (no else) at the top level of a `with` body, and of `with`s nested
    at its top level, in order."""
    found: list[cst.If] = []
    for stmt in with_stmt.body.body:
        if isinstance(stmt, cst.If) and stmt.orelse is None and _exit(stmt.body) is not None:
            found.append(stmt)
        elif isinstance(stmt, cst.With):
            found.extend(_exits_within(stmt))
    return found
_BACKWARD_METHODS = frozenset(api.name for api in cat.APIS if api.event is EventKind.BACKWARD)


class ScopeWalker:
    """Walks the statements of one scope in order. Nested defs are separate scopes."""

    def __init__(self, scope: Scope, imports: ImportMap, seed: dict[str, frozenset[Role]],
                 local_functions: set[str], counter: list[int], root: Scope | None = None,
                 inliner: Inliner | None = None, constants: dict[str, bool] | None = None) -> None:
        self.scope = scope
        # Where events and loops go: the scope itself, or for a called function walked in place of
        # its call (inlined), the scope of the loop that calls it, where its window is.
        self.root = root if root is not None else scope
        self.imports = imports
        self.env = scope.env  # the scope keeps the final bindings (module globals, self attributes)
        self.env.update(seed)
        self.local_functions = local_functions
        self.counter = counter  # shared across scopes so orders are file-wide
        self.inliner = inliner
        self.constants = constants or {}  # module flags bound once to a literal (bindings.module_constants)
        self._outer_names: set[str] | frozenset[str] | None = None  # see _before
        self.statement: cst.CSTNode | None = None
        self.ctx = Context()  # around the statement being walked: the guards a name's roles are read under
        # name -> (order, context, roles) of each binding under a test that added roles to it (see name_roles)
        self._guarded_roles: dict[str, list[tuple[int, Context, frozenset[Role]]]] = {}
        # id(test) -> what the project predicate it calls returns, and where (None: it calls none)
        self.predicates: dict[int, tuple[cst.BaseExpression, Scope] | None] = {}
        self._engine_names: frozenset[str] | None = None  # see _engines_by_use

    # -- bookkeeping --------------------------------------------------------------------------
    def tick(self) -> int:
        self.counter[0] += 1
        return self.counter[0]

    def roles(self, node: cst.CSTNode | None) -> frozenset[Role]:
        """Roles of an expression at the current point of the walk."""
        if node is None:
            return NO_ROLES
        if isinstance(node, cst.Call):
            receiver, method = call_receiver(node)
            if method == "getattr" and receiver is None:
                return NO_ROLES  # getattr(m, "_orig_mod", m): the unwrapped module
            roles = constructor_roles(node, self.imports, self.roles)
            if not roles and receiver is not None and method in cat.MODULE_RETURNING_METHODS:
                return self.roles(receiver)  # `model.to(device)`, `model.cuda()`: the module itself
            if not roles and method == cat.DEEP_COPY_FUNCTION and len(node.args) == 1:
                # `ema = deepcopy(model)` of a compiled model is another compiled wrapper
                return self.roles(node.args[0].value) & _COMPILED
            if not roles and self.inliner is not None:  # what a function of the project returns
                roles = self.inliner.returned_roles(self, node)
            return roles
        if isinstance(node, cst.IfExp):
            if _tests_orig_mod(node.test):
                return NO_ROLES  # `m._orig_mod if hasattr(m, "_orig_mod") else m`: never the wrapper
            return self.roles(node.body) | self.roles(node.orelse)
        if isinstance(node, cst.BooleanOperation):
            return self.roles(node.left) | self.roles(node.right)
        if isinstance(node, cst.Attribute) and node.attr.value == _ORIG_MOD:
            return NO_ROLES
        if isinstance(node, cst.Subscript):
            key = _element_key(node)
            if key in self.env:  # `prepared[0]`: an element of a sequence bound element by element
                return self.env[key]
            # `optimizers[name]`: any element of a container whose elements all hold the same roles
            base = dotted(node.value)
            if not base:
                return NO_ROLES
            if self.env.get(f"{base}[*]"):
                return self.env[f"{base}[*]"]
            # a container whose elements this file does not see (a parameter, a helper's result), named for them
            return roles_from_name(base)
        if isinstance(node, cst.Attribute) and node.attr.value == cat.ACCELERATE_ACCUMULATE.name:
            owner = self.roles(node.value)
            if Role.ACCELERATOR in owner:  # `accelerator.accumulate`, the bound method, entered later
                return owner | {Role.ACCUMULATE_CONTEXT}
        if isinstance(node, cst.Attribute) and node.attr.value == cat.DDP_NO_SYNC.name:
            owner = self.roles(node.value)
            if Role.DDP in owner and not owner & cat.DDP_NO_SYNC.receiver_lacks:
                return owner | {Role.NO_SYNC_CONTEXT}  # `model.no_sync`, the bound method, entered later
        if isinstance(node, cst.Attribute) and node.attr.value == "module":
            # ddp_model.module is what DDP wrapped: compiled if it wrapped a compiled module.
            if Role.WRAPS_COMPILED in self.roles(node.value):
                return frozenset({Role.COMPILED})
        name = dotted(node)
        if name is not None and name not in self.env:
            referenced = function_reference_roles(node, self.imports)
            if referenced:
                return referenced  # `Fitter(net, F.cross_entropy)`: the loss function itself, called later
        return self.name_roles(name) if name is not None else NO_ROLES

    def name_roles(self, name: str) -> frozenset[Role]:
        """Roles of a dotted name (`model`, `self.model`) at the current point of the walk."""
        if name in self.env:
            held = self.env[name] - self._roles_off_this_path(name)
            return held | (roles_from_name(name) if not held else NO_ROLES)
        return roles_from_name(name)

    def _roles_off_this_path(self, name: str) -> frozenset[Role]:
        """The roles a name gained only from bindings under a test that the statement being walked is
        on the other side of: `model = DDP(model)` under `if env == "ddp":` is no DDP model in the
        `elif env == "cpu":` branch, nor in a helper called from there, when nothing rebinds what the
        test reads in between (paths.excluded_by)."""
        bindings = self._guarded_roles.get(name)
        if not bindings or not self.ctx.guards:
            return NO_ROLES
        off, on = NO_ROLES, NO_ROLES
        for order, bound, roles in bindings:
            if excluded_by(bound, self.ctx, lambda read: rebound_since(self.scope, read, bound, order)):
                off |= roles
            else:
                on |= roles
        return off - on

    def bind(self, name: str, roles: frozenset[Role], ctx: Context) -> None:
        # A binding outside any branch replaces what the name was; inside one it may or may not run.
        if ctx.conditional:
            before = self._before(name)
            if ctx.guards and roles - before:
                self._guarded_roles.setdefault(name, []).append((self.counter[0], ctx, roles - before))
            self.env[name] = before | roles
        else:
            self._guarded_roles.pop(name, None)
            self.env[name] = roles

    def _before(self, name: str) -> frozenset[Role]:
        """What a name held before a binding that may not run. A plain name a function binds is local to
        the whole function (unless declared `global`): before its first binding it holds nothing (a
        parameter, what the caller passed), not the module's value of that name."""
        env, function = self.env, self.scope.node
        if isinstance(env, ChainMap) and isinstance(function, cst.FunctionDef) and "." not in name \
                and name not in env.maps[0]:
            if self._outer_names is None:  # parameters and `global` names: bound before the body runs
                self._outer_names = parameter_names(function, starred=True) | _declared_global(function)
            if name not in self._outer_names:
                return NO_ROLES
        return env.get(name, NO_ROLES)

    def add_def(self, d: Def) -> None:
        self.scope.defs.setdefault(d.name, []).append(d)

    def emit(self, kind: EventKind, node: cst.CSTNode, ctx: Context, **fields) -> Event:
        if self.scope.frame is not None:  # name the objects as the caller does, so events compare
            for name in ("target", "scaler"):
                if fields.get(name):
                    fields[name] = caller_name(fields[name], self.scope)
        event = Event(kind, node, ctx, self.tick(), stmt=self.statement, scope=self.scope, **fields)
        self.root.events.append(event)
        return event

    def guard(self, test: cst.BaseExpression, positive: bool, owner: cst.CSTNode, ctx: Context,
              exit: Exit | None = None) -> Guard:
        scope, negated = self.scope, False
        inner = test
        while isinstance(inner, cst.UnaryOperation) and isinstance(inner.operator, cst.Not):
            inner, negated = inner.expression, not negated
        if id(inner) not in self.predicates:  # both branches of an `if` read it once
            self.predicates[id(inner)] = self._predicate(inner, ctx)
        found = self.predicates[id(inner)]
        if found is not None:  # the test a project predicate stands for, read where it is written
            test, scope = found
            if negated:
                test = cst.UnaryOperation(operator=cst.Not(), expression=test)
        return Guard(test, positive, owner, len(ctx.loops), exit, scope)

    def _predicate(self, test: cst.BaseExpression, ctx: Context) -> tuple[cst.BaseExpression, Scope] | None:
        """What a test that calls a project predicate stands for (Inliner.predicate); also a name bound
        once, in this pass, to such a call (`update = self._need_update_step(n)` ... `if update:`)."""
        if self.inliner is None:
            return None
        if isinstance(test, cst.Name):
            defs = self.scope.defs_of(test.value)
            bound = defs[0] if len(defs) == 1 and defs[0].op is DefOp.ASSIGN and defs[0].scope is None else None
            if bound is None or not isinstance(bound.value, cst.Call) or bound.ctx.loops != ctx.loops:
                return None
            # read where it was called: a counter it was handed may have moved on since (Window._test_read_at)
            return self.inliner.predicate(self, bound.value, bound.ctx, at=bound.order)
        return self.inliner.predicate(self, test, ctx)

    def decided(self, test: cst.BaseExpression) -> bool | None:
        """The value of a test in a function walked in place of a call, when the call fixes it: a
        parameter given a literal (`clip_grad=False`) or left to its literal default, under `not`,
        `is None` or `is not None`; anywhere, a module flag bound once to a literal (`use_compile =
        False`: bindings.module_constants). None when it is not fixed."""
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            inner = self.decided(test.expression)
            return None if inner is None else not inner
        if self.scope.frame is None:
            return self._constant(test)
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 \
                and isinstance(test.comparisons[0].operator, (cst.Is, cst.IsNot)) \
                and isinstance(test.comparisons[0].comparator, cst.Name) and test.comparisons[0].comparator.value == "None":
            value = self._literal_parameter(test.left)
            if value is None:
                return None
            return (value == "None") == isinstance(test.comparisons[0].operator, cst.Is)
        value = self._literal_parameter(test)
        if value is None:
            return self._constant(test)
        return LITERAL_TRUTH.get(value)

    def _literal_parameter(self, node: cst.BaseExpression) -> str | None:
        """`True`, `False` or `None`: what the call gives a parameter of the function walked in place."""
        found = parameter_value(node.value, self.scope) if isinstance(node, cst.Name) else None
        value = found[0] if found is not None else None
        return value.value if isinstance(value, cst.Name) and value.value in ("True", "False", "None") else None

    # -- statements ---------------------------------------------------------------------------
    def walk_block(self, body, ctx: Context) -> None:
        for stmt in body:
            self.walk_stmt(stmt, ctx)
            if isinstance(stmt, cst.SimpleStatementLine) \
                    and isinstance(stmt.body[-1], (cst.Raise, cst.Return, cst.Continue, cst.Break)):
                return  # nothing after a `raise` (an abstract method's template), `return` or `continue` runs
            if isinstance(stmt, cst.If) and self.decided(stmt.test) is not None:
                if self.decided(stmt.test) and _exit(stmt.body) is not None and stmt.orelse is None:
                    return  # `if not clip: return` with clip=False at this call: nothing after it runs
                continue
            exit = _exit(stmt.body) if isinstance(stmt, cst.If) and stmt.orelse is None else None
            if exit is not None:
                # `if not need_update: continue` guards everything after it in this block
                ctx = ctx.push_guard(self.guard(stmt.test, False, stmt, ctx, exit))
            elif isinstance(stmt, cst.With):
                # a `with` is no block of its own to leave: `with autocast(): ... if isnan(loss): return`
                # guards what follows the `with` too
                for inner in _exits_within(stmt):
                    if self.decided(inner.test) is None:
                        ctx = ctx.push_guard(self.guard(inner.test, False, inner, ctx, _exit(inner.body)))
            elif isinstance(stmt, cst.If) and stmt.orelse is None:
                inner = self._boundary_exit_when_accumulating(stmt)
                if inner is not None:
                    ctx = ctx.push_guard(self.guard(inner.test, False, inner, ctx, _exit(inner.body)))

    def _boundary_exit_when_accumulating(self, stmt: cst.If) -> cst.If | None:
        """`if N > 1: if i % N != 0: return` (nothing else in the outer `if`): the inner exit, which
        guards what follows as if it stood alone, since with N == 1 its test never holds."""
        body = stmt.body.body
        inner = body[0] if len(body) == 1 else None
        if not isinstance(inner, cst.If) or inner.orelse is not None or _exit(inner.body) is None:
            return None
        found = analyze(inner.test, self.scope)
        if found is None or found.positive or not excludes_only_single_windows(stmt.test, True, found):
            return None
        return inner

    def walk_stmt(self, stmt: cst.CSTNode, ctx: Context) -> None:
        outer, self.ctx = self.ctx, ctx
        try:
            self._walk_stmt(stmt, ctx)
        finally:
            self.ctx = outer

    def _walk_stmt(self, stmt: cst.CSTNode, ctx: Context) -> None:
        self.statement = stmt
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                self.walk_small(small, ctx)
        elif isinstance(stmt, cst.If):
            self.walk_if(stmt, ctx)
        elif isinstance(stmt, (cst.For, cst.While)):
            self.walk_loop(stmt, ctx)
        elif isinstance(stmt, cst.With):
            calls = tuple(call for item in stmt.items for call in iter_calls(self._entered(item.item, ctx)))
            for item in stmt.items:
                self.scan_expression(item.item, ctx)
                if item.asname is not None and isinstance(item.asname.name, cst.Name):
                    self.add_def(Def(item.asname.name.value, item.item, self.tick(), ctx, node=stmt))
            self.walk_block(stmt.body.body, ctx.push_withs(calls))
        elif isinstance(stmt, cst.Try) or type(stmt).__name__ == "TryStar":
            self.walk_block(stmt.body.body, ctx)
            for handler in stmt.handlers:
                self.walk_block(handler.body.body, ctx.handler())
            if stmt.orelse is not None:
                self.walk_block(stmt.orelse.body.body, ctx)
            if stmt.finalbody is not None:
                self.walk_block(stmt.finalbody.body.body, ctx.handler())
        elif isinstance(stmt, cst.Match):
            self.scan_expression(stmt.subject, ctx)
            for case in stmt.cases:
                self.walk_block(case.body.body, ctx.handler())
        elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            pass  # separate scopes
        elif isinstance(stmt, cst.SimpleStatementSuite):
            for small in stmt.body:
                self.walk_small(small, ctx)

    def _entered(self, item: cst.BaseExpression, ctx: Context) -> cst.BaseExpression:
        """The context a `with` item enters: the value a plain name was bound to on the way here
        (`ctx = model.no_sync() if not do_step else nullcontext()`, then `with ctx:`), else the item."""
        name = item.value if isinstance(item, cst.Name) else None
        defs = self.scope.defs_of(name) if name else []
        if defs and defs[-1].op is DefOp.ASSIGN and defs[-1].value is not None \
                and set(defs[-1].ctx.guards) <= set(ctx.guards):
            return defs[-1].value
        return item

    def walk_if(self, stmt: cst.If, ctx: Context) -> None:
        decided = self.decided(stmt.test)
        if decided is not None:  # a branch this call can never take is not walked
            if decided:
                self.walk_block(stmt.body.body, ctx)
            elif isinstance(stmt.orelse, cst.If):
                self.walk_if(stmt.orelse, ctx)
            elif isinstance(stmt.orelse, cst.Else):
                self.walk_block(stmt.orelse.body.body, ctx)
            return
        self.scan_expression(stmt.test, ctx)
        self.walk_block(stmt.body.body, ctx.push_guard(self.guard(stmt.test, True, stmt, ctx)))
        orelse = stmt.orelse
        negated = ctx.push_guard(self.guard(stmt.test, False, stmt, ctx))
        if isinstance(orelse, cst.If):
            self.walk_if(orelse, negated)
        elif isinstance(orelse, cst.Else):
            self.walk_block(orelse.body.body, negated)

    def _constant(self, test: cst.BaseExpression) -> bool | None:
        """The value of a module constant tested by name, when no parameter or local here hides it."""
        if not isinstance(test, cst.Name) or test.value not in self.constants:
            return None
        node = self.scope.node
        if isinstance(node, cst.FunctionDef):  # a parameter or a local (of a call walked in place) of that name
            if test.value in self.scope.defs or test.value in parameter_names(node, starred=True):
                return None
        return self.constants[test.value]

    def walk_loop(self, loop: Loop, ctx: Context) -> None:
        if _over_loss_terms(loop) or self.inliner is not None and self.inliner.runs_hooks(self.scope, loop):
            # its passes are parts of one micro-batch's backward, or the hooks of one event: walked once,
            # as straight code
            self.scan_expression(loop.iter, ctx)
            for i, target in enumerate(_targets(loop.target)):
                self.add_def(Def(target, loop.iter, self.tick(), ctx, op=DefOp.LOOP_TARGET, index=i, node=loop))
                self.bind(target, NO_ROLES, ctx)
            self.walk_block(loop.body.body, ctx)
            if loop.orelse is not None:
                self.walk_block(loop.orelse.body.body, ctx)
            return
        self.root.loops.append(loop)
        inner = ctx.push_loop(loop)
        self.root.loop_start[id(loop)] = self.counter[0] + 1
        if isinstance(loop, cst.For):
            self.scan_expression(loop.iter, ctx)
            if self.inliner is not None:
                for call in iter_calls(loop.iter):
                    iterated = self.inliner.iterated_argument(self.scope, call)
                    if iterated is not None:
                        self.root.iterated[id(call)] = iterated
            for i, target in enumerate(_targets(loop.target)):
                self.add_def(Def(target, loop.iter, self.tick(), inner, op=DefOp.LOOP_TARGET, index=i, node=loop))
                self.bind(target, NO_ROLES, inner)
        else:
            self.scan_expression(loop.test, inner)
        self.walk_block(loop.body.body, inner)
        self.root.loop_end[id(loop)] = self.counter[0]
        if loop.orelse is not None:
            self.walk_block(loop.orelse.body.body, ctx)

    def walk_small(self, small: cst.BaseSmallStatement, ctx: Context) -> None:
        if isinstance(small, (cst.Import, cst.ImportFrom)):
            self.imports.add(small)
            return
        if isinstance(small, cst.Assign):
            self.scan_expression(small.value, ctx)
            for target in small.targets:
                self.assign(target.target, small.value, ctx, small)
            return
        if isinstance(small, cst.AnnAssign):
            if small.value is not None:
                self.scan_expression(small.value, ctx)
                self.assign(small.target, small.value, ctx, small)
            return
        if isinstance(small, cst.AugAssign):
            self.scan_expression(small.value, ctx)
            name = dotted(small.target) or item_name(small.target)  # `out["loss"] /= n` scales that entry
            if name:
                op = _AUGMENTED.get(type(small.operator).__name__, DefOp.OTHER_AUGMENTED)
                self.add_def(Def(name, small.value, self.tick(), ctx, op=op, node=small))
                if op is DefOp.ADD:
                    self.emit(EventKind.LOSS_TOTAL, small, ctx, target=name, expr=small.value)
                if op in (DefOp.DIVIDE, DefOp.MULTIPLY) and _on_grad(name):
                    self.emit(EventKind.GRAD_SCALE, small, ctx, target=name)
            return
        if isinstance(small, cst.Expr):
            self.scan_expression(small.value, ctx)
            self._wrapped_in_place(small.value, ctx)
            return
        if isinstance(small, cst.Return):
            if small.value is not None:
                self.scan_expression(small.value, ctx)
                elements = small.value.elements if isinstance(small.value, cst.Tuple) else ()
                self.emit(EventKind.RETURN, small, ctx, expr=small.value, roles=self.roles(small.value),
                          element_roles=tuple(self.roles(element.value) for element in elements),
                          item_roles=self._every_element_roles(small.value))
            return

    def assign(self, target: cst.BaseExpression, value: cst.BaseExpression, ctx: Context, node) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            names = [dotted(el.value) for el in target.elements]
            unpacked = None
            # `first, *rest, last = ...`: from the starred name on, which element a name gets depends
            # on the value's length
            starred = next((i for i, el in enumerate(target.elements) if isinstance(el, cst.StarredElement)),
                           len(names))
            if isinstance(value, cst.Call):
                unpacked = unpacked_roles(value, self.imports, self.roles, len(names), self._function_alias(value.func))
                if unpacked and Role.DEEPSPEED in unpacked[0] and self._deepspeed_config_accumulates(value) is False:
                    unpacked[0] = unpacked[0] | {Role.DEEPSPEED_WITHOUT_ACCUMULATION}
                if not unpacked and self.inliner is not None:  # `opt, sched, model = prep(args, model)`
                    unpacked = self.inliner.returned_element_roles(self, value, len(names))
                if not unpacked and names[0] in self._engines_by_use():
                    unpacked = [_ONE_DEEPSPEED] + [NO_ROLES] * (len(names) - 1)
            elif isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(names):
                unpacked = [self.roles(el.value) for el in value.elements]
            for i, name in enumerate(names):
                if not name:
                    continue
                self.add_def(Def(name, value, self.tick(), ctx, op=DefOp.UNPACK, index=i if i < starred else None,
                                 node=node))
                self.bind(name, unpacked[i] if unpacked else NO_ROLES, ctx)
            return
        if isinstance(target, cst.Subscript):
            # `ckpt["model"] = m.state_dict()` fills the container `ckpt`, as `rows[rank][a:b] = x` fills `rows`
            container = target.value
            while isinstance(container, cst.Subscript):
                container = container.value
            base = dotted(container)
            if base:
                self.add_def(Def(base, value, self.tick(), ctx, op=DefOp.ITEM, node=node))
            item = item_name(target)
            if item:  # and binds the entry itself, which the loss tracer reads (`out["loss"] = loss / n`)
                self.add_def(Def(item, value, self.tick(), ctx, node=node))
            return
        name = dotted(target)
        if not name:
            return
        self.add_def(Def(name, value, self.tick(), ctx, node=node))
        api = _bound_method_read(value)
        if api is not None:  # `ctx = model.no_sync`: the bound method, entered later
            self.emit(api.event, node, ctx, api=api, target=name)
        roles = self.roles(value)
        if not roles and isinstance(value, cst.Call) and name in self._engines_by_use():
            roles = _ONE_DEEPSPEED
        if isinstance(target, cst.Attribute):
            api = cat.ATTRIBUTES_SET.get(target.attr.value)
            if api is not None:
                self._attribute_set(api, target, value, node, ctx)
        if ctx.guards and _unwraps_compiled(name, value, ctx.guards[-1].test):
            # `if hasattr(m, "_orig_mod"): m = m._orig_mod`: compiled, it is unwrapped here; not, it was not
            self.env[name] = self.env.get(name, NO_ROLES) - {Role.COMPILED}
            return
        self.bind(name, roles, ctx)
        for i, element in enumerate(self._element_roles(value)):
            self.bind(f"{name}[{i}]", element, ctx)
        every = self._every_element_roles(value)
        if every or f"{name}[*]" in self.env:
            self.bind(f"{name}[*]", every, ctx)
        if isinstance(value, cst.Call) and Role.SCHEDULER in roles:
            self.emit(EventKind.SCHEDULER_BUILT, value, ctx, target=name)

    def _function_alias(self, func: cst.BaseExpression) -> cst.BaseExpression | None:
        """What a called name stands for when the function binds it once to a dotted name
        (`ds_init = deepspeed.initialize`, then `ds_init(...)`): the function that name reads."""
        defs = self.scope.defs_of(func.value) if isinstance(func, cst.Name) else []
        bound = defs[0].value if len(defs) == 1 and defs[0].op is DefOp.ASSIGN else None
        return bound if isinstance(bound, cst.Attribute) and dotted(bound) is not None else None

    def _engines_by_use(self) -> frozenset[str]:
        """The names this scope calls a method on that only a DeepSpeed engine has (catalogue
        DEEPSPEED_ENGINE_METHODS): bound to the result of a call that says nothing itself, they hold an engine."""
        if self._engine_names is None:
            node = self.scope.node
            statements = node.body.body if isinstance(node, cst.FunctionDef) else getattr(node, "body", ())
            names = set()
            for call in (call for statement in statements for call in iter_calls(statement)):
                receiver, method = call_receiver(call)
                if method in cat.DEEPSPEED_ENGINE_METHODS and not call.args and dotted(receiver) is not None:
                    names.add(dotted(receiver))
            self._engine_names = frozenset(names)
        return self._engine_names

    def _deepspeed_config_accumulates(self, call: cst.Call) -> bool | None:
        """What the config given to `deepspeed.initialize(...)` says of accumulation, when it is a dict
        written here or a name bound once to one (a JSON file or an argument: None, unknown)."""
        config = deepspeed_config(call, self.scope)
        return deepspeed_config_accumulates(config) if config is not None else None

    def _element_roles(self, value: cst.BaseExpression) -> list[frozenset[Role]]:
        """The roles of each element of a sequence value: a list or tuple written out (`[model,
        optimizer]`), or what `accelerator.prepare(*components)` returns for a sequence known so."""
        if isinstance(value, (cst.List, cst.Tuple)):
            elements = []
            for element in value.elements:
                if isinstance(element, cst.StarredElement):
                    break
                elements.append(self.roles(element.value))
            return elements
        if not isinstance(value, cst.Call) or len(value.args) != 1 or value.args[0].star != "*":
            return []
        receiver, method = call_receiver(value)
        sequence = dotted(value.args[0].value)
        owner = self.roles(receiver) if receiver is not None and method in cat.PREPARE_METHODS else NO_ROLES
        if not sequence or not owner & {Role.ACCELERATOR, Role.FABRIC}:
            return []
        elements = []
        while f"{sequence}[{len(elements)}]" in self.env:
            elements.append(prepared_roles(self.env[f"{sequence}[{len(elements)}]"], owner))
        return elements

    def _every_element_roles(self, value: cst.BaseExpression) -> frozenset[Role]:
        """The roles every element of a container value holds: a dict, list, tuple or set written out,
        a comprehension (`{name: AdamW(...) for name in names}`), or what a project function returns."""
        if isinstance(value, cst.Call):
            return self.inliner.returned_item_roles(self, value) if self.inliner is not None else NO_ROLES
        if isinstance(value, (cst.DictComp, cst.ListComp, cst.SetComp, cst.GeneratorExp)):
            return self.roles(value.value if isinstance(value, cst.DictComp) else value.elt)
        if isinstance(value, cst.Dict):
            elements = [e.value for e in value.elements if isinstance(e, cst.DictElement)]
        elif isinstance(value, (cst.List, cst.Tuple, cst.Set)):
            elements = [e.value for e in value.elements if not isinstance(e, cst.StarredElement)]
        else:
            return NO_ROLES
        if not elements:
            return NO_ROLES
        return frozenset.intersection(*(self.roles(e) for e in elements))

    def _wrapped_in_place(self, value: cst.BaseExpression, ctx: Context) -> None:
        """`fully_shard(model)`: the module itself becomes the wrapper (catalogue.IN_PLACE_WRAPPERS)."""
        if not isinstance(value, cst.Call):
            return
        module = positional(value, 0) or keyword(value, "module")
        name = dotted(module)
        if call_receiver(value)[1] in cat.IN_PLACE_WRAPPERS and name:
            self.bind(name, self.roles(module) | constructor_roles(value, self.imports, self.roles), ctx)

    def _attribute_set(self, api: Api, target: cst.Attribute, value: cst.BaseExpression, node, ctx: Context) -> None:
        owner = dotted(target.value)
        if api.grants is not None:
            if owner:  # `accelerator.gradient_accumulation_steps = n` turns accumulation on
                self.env[owner] = self.roles(target.value) | {api.grants}
        elif api.event is EventKind.ZERO_GRAD:
            if isinstance(value, cst.Name) and value.value == "None":  # `p.grad = None`
                self.emit(api.event, node, ctx, api=api, target=owner, model_wide=api.model_wide)
        elif api.event is not None:
            self.emit(api.event, node, ctx, api=api, target=owner, roles=self.roles(target.value))

    # -- calls --------------------------------------------------------------------------------
    def scan_expression(self, expr: cst.CSTNode, ctx: Context) -> None:
        for call in iter_calls(expr):
            self.classify_call(call, ctx)

    def classify_call(self, call: cst.Call, ctx: Context) -> None:
        receiver, method = call_receiver(call)
        target = dotted(receiver)
        owner = self.roles(receiver) if receiver is not None else NO_ROLES
        resolved = self.imports.qualify(call.func)
        qual = resolved or dotted(call.func) or ""
        candidates = cat.apis_named(method) if method else ()
        if qual and qual.rpartition(".")[2] != method:
            candidates += cat.apis_resolved(qual)  # an aliased import: `from torch import compile as c`
        if candidates and (receiver is None or target in SELF_NAMES) and self.inliner is not None \
                and self.inliner.runs_project_function(self, call):
            # the project's own function of that name (`clip_grad_norm_(...)`, a trainer's
            # `self.backward(loss)` or `self.step(batch)`): what it does is in its body
            candidates = ()
        elif candidates and self.inliner is not None and self.inliner.backpropagates(self, call) \
                and self.inliner.inline(self, call, ctx):
            # a method of the project's own class on another object that backpropagates
            # (`self.mp_trainer.backward(loss)`, whose body calls `loss.backward()` on the loss it is
            # given, unscaled): walked in place, as its body says, not read as a framework's backward
            # by its name. Other such methods (a helper's `zero_grad()`) keep the name's meaning.
            return
        for api in candidates:
            if self._matches(api, call, receiver, target, owner, qual):
                if api.event is EventKind.STEP and receiver is not None and target not in SELF_NAMES \
                        and self.inliner is not None and self.inliner.delegates_step(self, call) \
                        and self.inliner.inline(self, call, ctx):
                    return  # an accumulation wrapper's step(): its body steps the optimizer it wraps, when it says
                if api.event is not None:
                    self._emit_call(api, call, receiver, target, owner, ctx)
                elif self.inliner is not None and self.inliner.inline(self, call, ctx):
                    return  # not the library's method of that name (`env.step(a)`): the project's, as its body says
                if api.event is EventKind.STEP and receiver is not None and target not in SELF_NAMES \
                        and self.inliner is not None and self.inliner.runs_project_function(self, call):
                    # an optimizer of the project's own class: a step, and whatever else its step()
                    # does (a clear of the gradients it used)
                    self.inliner.inline(self, call, ctx)
                return
        if self.inliner is not None and self.inliner.inline(self, call, ctx):
            return  # a function with effects: walked in place of the call
        bound = self.roles(call.func) if receiver is not None or dotted(call.func) else NO_ROLES
        if Role.ACCUMULATE_CONTEXT in bound:
            # `with self.accum_scope(model):` where `self.accum_scope = self.accelerator.accumulate`
            self.root.accumulate_entries.add(id(call))
            self._emit_call(cat.ACCELERATE_ACCUMULATE, call, None, dotted(positional(call, 0)),
                            bound - {Role.ACCUMULATE_CONTEXT}, ctx)
            return
        if Role.NO_SYNC_CONTEXT in bound and not call.args:
            # `with context():` where `context = self.model.no_sync` (on some branch): that model's no_sync()
            self._emit_call(cat.DDP_NO_SYNC, call, None, self._bound_no_sync_model(dotted(call.func)),
                            bound - {Role.NO_SYNC_CONTEXT}, ctx)
            return
        callee = dotted(call.func)
        # the models a project function called in a loop calls itself (`self.compute_loss(batch)`
        # calling `self.model(x)`): that call is their forward
        forwarded = self.inliner.forwarded_roles(self, call) if ctx.loops and self.inliner is not None else NO_ROLES
        if callee and (callee in self.local_functions or (callee.startswith("self.") and
                                                          callee[5:] in self.local_functions)):
            # roles: what `self.model` holds when `model` is a property (a DDP wrapper it builds)
            self.emit(EventKind.HELPER_CALL, call, ctx, target=callee.removeprefix("self."), argument_roles=forwarded,
                      roles=self.env.get(callee, NO_ROLES),
                      backpropagates=self.inliner is not None and self.inliner.backpropagates(self, call))
            return
        if callee and not resolved and callee not in cat.INTROSPECTING_BUILTINS:
            # Any other call on a local object: forward passes (`model(x)`, `self.net(x)`) are among them.
            forward = method == "forward"
            handed = forwarded.union(*(self.roles(a.value) for a in call.args
                                       if not a.star and dotted(a.value) is not None),
                                     *(self._closure_forwards(a.value) for a in call.args))
            self.emit(EventKind.MODEL_CALL, call, ctx, target=target if forward else callee,
                      roles=self.roles(receiver if forward else call.func),
                      argument_names=frozenset(name for a in call.args for name in iter_names(a.value)),
                      argument_roles=handed)

    def _closure_forwards(self, argument: cst.BaseExpression) -> frozenset[Role]:
        """For a function defined in this one and handed over (by name, or first in `functools.partial(f,
        ...)`): the distributed models it calls by this scope's names (`def denoise_fn(x): return
        model(x)` with `model` a DDP wrapper here), whose forward runs when the callee calls it."""
        if isinstance(argument, cst.Call) and argument.args and self.imports.qualify(argument.func) == cat.PARTIAL:
            argument = argument.args[0].value
        if not isinstance(argument, cst.Name) or not isinstance(self.scope.node, cst.FunctionDef):
            return NO_ROLES
        function = next((statement for statement in self.scope.node.body.body if isinstance(statement, cst.FunctionDef)
                         and statement.name.value == argument.value), None)
        if function is None:
            return NO_ROLES
        own = parameter_names(function, starred=True) | {name for node in walk(function.body)
                                                         if isinstance(node, cst.AssignTarget)
                                                         for name in full_names(node.target)}
        found: frozenset[Role] = NO_ROLES
        for inner in iter_calls(function.body):
            callee = (dotted(inner.func) or "").removesuffix(".forward")
            if callee and callee.split(".")[0] not in own and callee.split(".")[0] not in SELF_NAMES:
                held = self.name_roles(callee)
                if held & cat.DISTRIBUTED_MODEL_ROLES and not held & cat.NOT_MODEL_ROLES:
                    found |= held
        return found

    def _bound_no_sync_model(self, name: str | None) -> str | None:
        """The model whose `no_sync` a name is bound to (`context = self.model.no_sync`)."""
        for d in self.scope.defs_of(name) if name else ():
            for value in (d.value.body, d.value.orelse) if isinstance(d.value, cst.IfExp) else (d.value,):
                if isinstance(value, cst.Attribute) and value.attr.value == cat.DDP_NO_SYNC.name:
                    return dotted(value.value)
        return None

    def _matches(self, api: Api, call: cst.Call, receiver, target: str | None, owner: frozenset[Role],
                 qual: str) -> bool:
        if api.has_receiver is not None and api.has_receiver != (receiver is not None):
            return False
        if (api.qualname is not None or api.qualname_prefix is not None) and not cat.matches_qualname(api, qual):
            return False
        if api.receiver is not None and api.receiver not in owner:
            return False
        if api.receiver_lacks & owner:
            return False
        if api.on_grad and not self._reaches_grad(target or dotted(_same_tensor(receiver))):
            return False
        if api.on_grad and api.event is EventKind.ZERO_GRAD and self._grad_of_made_tensor(target):
            return False
        if api.clips_by_factor and not clipping_factor(positional(call, 0) or keyword(call, "other"), self.scope):
            return False
        if api.arguments is not None and api.arguments != bool(call.args):
            return False
        if api.guessed_receiver_takes_no_arguments and target not in self.env and \
                any(a.keyword is None for a in call.args):
            return False  # a name that only looks like a scheduler, called like something else
        return True

    def _grad_of_made_tensor(self, target: str | None) -> bool:
        """Is `x.grad` the gradient of a tensor the code makes, no parameter: `x` walks `self.buffers`
        (or a name), every binding of which in the module is a list of tensors made by a torch factory
        (`[torch.zeros(shape, requires_grad=True) for _ in range(k)]`) or cut from another tensor
        (`torch.chunk(x, k)`): a pipeline stage's received activations, whose `.grad` it zeroes."""
        owner = target.split(".grad")[0] if target and ".grad" in target else None
        defs = self.scope.defs_of(owner) if owner and "." not in owner else []
        if len(defs) != 1 or defs[0].op is not DefOp.LOOP_TARGET or not isinstance(defs[0].value, (cst.Name,
                                                                                                      cst.Attribute)):
            return False
        container = code(defs[0].value)
        module = self.scope.module or (self.inliner.module_of(self.scope) if self.inliner is not None else None)
        if module is None:
            return False
        values = [small.value for node in walk(module) if isinstance(node, cst.SimpleStatementLine)
                  for small in node.body if isinstance(small, cst.Assign)
                  and any(code(t.target) == container for t in small.targets)]
        return bool(values) and all(_made_tensors(value) for value in values)

    def _reaches_grad(self, name: str | None) -> bool:
        """`p.grad`, or a name each of whose values is one: `for g in grads` over
        `grads = [p.grad for p in params if p.grad is not None]`."""
        if _on_grad(name):
            return True
        defs = self.scope.defs_of(name) if name and "." not in name else []
        if len(defs) != 1 or defs[0].op is not DefOp.LOOP_TARGET or defs[0].index != 0:
            return False
        source = defs[0].value
        if isinstance(source, cst.Name):
            bound = self.scope.defs_of(source.value)
            source = bound[0].value if len(bound) == 1 and bound[0].op is DefOp.ASSIGN else None
        return isinstance(source, (cst.ListComp, cst.GeneratorExp)) and _on_grad(dotted(_same_tensor(source.elt)))

    def _emit_call(self, api: Api, call: cst.Call, receiver, target: str | None, owner: frozenset[Role],
                   ctx: Context) -> None:
        if api.event is EventKind.CLIP and _never_clips(call):
            return  # `clip_grad_norm_(params, float("inf"))` measures the norm and leaves the gradients be
        first = positional(call, 0) or (keyword(call, api.first_keyword) if api.first_keyword else None)
        scaler = target if api.scaler is Operand.RECEIVER else None
        if api.event is EventKind.BACKWARD and Role.ACCELERATOR_FP16 in owner:
            scaler = target  # `accelerator.backward(loss)` scales the loss with the Accelerator's own GradScaler
        expr = None
        if api.loss is Operand.FIRST_ARGUMENT:
            expr = first
        elif api.loss is Operand.RECEIVER:
            expr = receiver
            if isinstance(receiver, cst.Call):
                inner_receiver, inner_method = call_receiver(receiver)
                if inner_method == "scale" and inner_receiver is not None:
                    expr = positional(receiver, 0) or receiver  # `scaler.scale(loss).backward()`
                    scaler = dotted(inner_receiver)
        if target is None and api.on_grad:
            target = dotted(_same_tensor(receiver))  # `p.grad.detach().mul_(c)`, `g.detach().mul_(c)`
        acted_on = {Operand.RECEIVER: target, Operand.FIRST_ARGUMENT: dotted(first),
                    Operand.GRAD_OWNER: target.split(".grad")[0] if target else None,
                    Operand.NOTHING: None}[api.target]
        roles = self.roles(first) if api.roles_of is Operand.FIRST_ARGUMENT else owner
        fields: dict = {}
        if api.event is EventKind.SAVE:
            fields["passed_names"] = frozenset(name for a in call.args if (name := dotted(a.value)))
        self.emit(api.event, call, ctx, api=api, target=acted_on, roles=roles, expr=expr, scaler=scaler,
                  model_wide=api.model_wide, **fields)


def _never_clips(call: cst.Call) -> bool:
    """Is the clip's bound infinite (`max_norm=float("inf")`, `math.inf` as its second argument)?"""
    bound = next(filter(None, (keyword(call, name) for name in cat.CLIP_BOUND_KEYWORDS)), None) or positional(call, 1)
    return bound is not None and is_infinite(bound)


def _element_key(node: cst.Subscript) -> str | None:
    """`x[0]` for a subscript of a name by a non-negative integer literal."""
    name = dotted(node.value)
    if name is None or len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return None
    index = node.slice[0].slice.value
    return f"{name}[{index.value}]" if isinstance(index, cst.Integer) else None


def _declared_global(function: cst.FunctionDef) -> frozenset[str]:
    """The names a function declares `global` or `nonlocal` (its own statements, not nested functions')."""
    names, stack = set(), list(function.body.body)
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is cst.Global or kind is cst.Nonlocal:
            names.update(item.name.value for item in node.names)
        elif kind is not cst.FunctionDef and kind is not cst.ClassDef and _may_hold_statements(kind):
            stack.extend(children(node))
    return frozenset(names)


_HOLDS_STATEMENTS: dict[type, bool] = {}


def _may_hold_statements(kind: type) -> bool:
    """Can a node of this type contain a statement? Not an expression, nor a small statement other than
    `global`/`nonlocal` (so a walk for those skips all expressions); answered once per type."""
    known = _HOLDS_STATEMENTS.get(kind)
    if known is None:
        known = _HOLDS_STATEMENTS[kind] = not issubclass(kind, (cst.BaseExpression, cst.BaseSmallStatement))
    return known


def _bound_method_read(value: cst.BaseExpression) -> Api | None:
    """The catalogue's attribute read in a value (`model.no_sync`), not called there: a call
    (`model.no_sync()`) is an event of its own."""
    called = {id(call.func) for call in iter_calls(value)}
    stack: list[cst.CSTNode] = [value]
    closed = (cst.Lambda, cst.FunctionDef)
    while stack:
        node = stack.pop()
        kind = type(node)  # exact types, as in names.iter_calls
        if kind is cst.Attribute and id(node) not in called:
            api = cat.ATTRIBUTES_READ.get(node.attr.value)
            if api is not None:
                return api
        if kind not in closed:
            stack.extend(children(node))
    return None


def _made_tensors(value: cst.BaseExpression) -> bool:
    """None, a list of tensors a torch factory makes (`[torch.zeros(...) for _ in range(k)]`), or the
    pieces `chunk`/`split` cut from a tensor: no parameters among them."""
    if isinstance(value, cst.Name) and value.value == "None":
        return True
    if isinstance(value, (cst.ListComp, cst.GeneratorExp)):
        value = value.elt
    return isinstance(value, cst.Call) and call_receiver(value)[1] in cat.TENSOR_FACTORIES


def _on_grad(name: str | None) -> bool:
    """`p.grad`, `p.grad.data`: the name reaches a parameter's gradient."""
    return name is not None and ".grad" in f"{name}."


def _same_tensor(node: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """The tensor an expression is a view of: `p.grad` for `p.grad.detach()`."""
    while isinstance(node, cst.Call) and not node.args:
        inner, method = call_receiver(node)
        if inner is None or method not in cat.SAME_TENSOR_METHODS:
            break
        node = inner
    return node


def _tests_orig_mod(test: cst.BaseExpression, name: str | None = None) -> bool:
    """`hasattr(m, "_orig_mod")` (the attribute name is part of the code, not prose), `isinstance(m,
    OptimizedModule)`: a test of whether `m` (`name`, when given) is a torch.compile wrapper."""
    if not isinstance(test, cst.Call) or len(test.args) != 2:
        return False
    function = call_receiver(test)[1]
    if name is not None and dotted(test.args[0].value) != name:
        return False
    tested = test.args[1].value
    if function == "hasattr":
        return isinstance(tested, cst.SimpleString) and tested.evaluated_value == _ORIG_MOD
    return function == "isinstance" and last_part(dotted(tested)) == cat.COMPILED_CLASS


def _unwraps_compiled(name: str, value: cst.BaseExpression, test: cst.BaseExpression) -> bool:
    """`m = m._orig_mod` under a test of whether `m` is compiled."""
    return isinstance(value, cst.Attribute) and value.attr.value == _ORIG_MOD and dotted(value.value) == name \
        and _tests_orig_mod(test, name)


def _exit(block: cst.BaseSuite) -> Exit | None:
    """How the block always leaves the enclosing block (continue, break, return, raise), if it does."""
    body = block.body
    last = body[-1] if body else None
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1]
    return _EXITS.get(type(last).__name__)


_EXITS = {"Continue": Exit.CONTINUE, "Break": Exit.BREAK, "Return": Exit.RETURN, "Raise": Exit.RAISE}


def _over_loss_terms(loop: Loop) -> bool:
    """A loop over the terms of one loss, each backpropagated through the graph they share
    (`for term in losses: scaler.scale(term / N).backward(retain_graph=not last)`): not a loop of
    micro-batches. Read from the loop's own statements: a backward that keeps the graph, of a loop
    target or of a name the body computes from one."""
    if not isinstance(loop, cst.For):
        return False
    derived = set(_targets(loop.target))
    for line in loop.body.body:
        for small in line.body if isinstance(line, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Assign) and len(small.targets) == 1:
                name = dotted(small.targets[0].target)
                if name is not None and _reads(small.value, derived):
                    derived.add(name)
            elif isinstance(small, cst.Expr) and _keeps_graph(small.value) and (_reads(small.value.func, derived) or any(
                    _reads(arg.value, derived) for arg in small.value.args if arg.keyword is None)):
                return True
    return False


def _keeps_graph(node: cst.BaseExpression) -> bool:
    """`x.backward(..., retain_graph=<anything but False>)`."""
    if not isinstance(node, cst.Call) or call_receiver(node)[1] not in _BACKWARD_METHODS:
        return False
    kept = keyword(node, cat.RETAIN_GRAPH_KEYWORD)
    return kept is not None and not (isinstance(kept, cst.Name) and kept.value == "False")


def _reads(node: cst.BaseExpression, names: set[str]) -> bool:
    return any(name.split(".")[0] in names for name in full_names(node))


def _targets(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, (cst.Tuple, cst.List)):
        out = []
        for el in target.elements:
            out.extend(_targets(el.value))
        return out
    name = dotted(target)
    return [name] if name else []
