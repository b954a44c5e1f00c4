"""One ordered walk over each scope that records the calls accumulation rules care about.

Every event carries its context: the `if` guards, loops and `with` items around it, and its place
in program order. The window model (windows.py) is built from these events; rules never walk code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from gradcheck_accum.lint.lazy import cst

from gradcheck_accum.lint import bindings as b
from gradcheck_accum.lint.names import ImportMap, call_receiver, dotted, iter_calls, iter_names, keyword, positional

if TYPE_CHECKING:  # annotations only: libcst is loaded lazily (see gradcheck_accum/lint/__init__.py)
    Loop = cst.For | cst.While

# Event kinds
BACKWARD = "backward"
ZERO_GRAD = "zero_grad"
STEP = "step"  # an optimizer update: optimizer.step(), scaler.step(opt), engine.step()
SCALER_UPDATE = "scaler_update"
UNSCALE = "unscale"
SCHED_STEP = "sched_step"
CLIP = "clip"
COMPILE = "compile"
SYNC_CONTROL = "sync_control"  # no_sync(), require_backward_grad_sync=, accumulate(), no_backward_sync()
MODEL_CALL = "model_call"  # `m(...)` / `m.forward(...)` on a local object
LOAD_STATE = "load_state"
STATE_DICT = "state_dict"
SAVE = "save"
LOSS_TOTAL = "loss_total"  # `total += x` / `xs.append(x)`: candidates for ACC204
HELPER_CALL = "helper_call"  # a call to a function defined in this file
SCHED_CTOR = "sched_ctor"
RETURN = "return"

GRAD_SCALE = "grad_scale"  # `p.grad.div_(n)`, `p.grad /= n`: the accumulated gradient is rescaled

HELPER_EFFECTS = (BACKWARD, ZERO_GRAD, STEP, SCALER_UPDATE, UNSCALE, SCHED_STEP, CLIP, SYNC_CONTROL, GRAD_SCALE)


@dataclass(frozen=True)
class Guard:
    test: cst.BaseExpression
    positive: bool  # True in the `if` body, False in `else`/`elif`
    owner: cst.CSTNode  # the If statement
    depth: int  # how many loops enclose the If: the guard sits inside loops[:depth]


@dataclass(frozen=True)
class Context:
    guards: tuple[Guard, ...] = ()
    loops: tuple[Loop, ...] = ()
    withs: tuple[cst.Call, ...] = ()  # calls in enclosing `with` items
    in_handler: bool = False  # inside except/finally/match: conditions we cannot read

    def push_guard(self, guard: Guard) -> "Context":
        return Context(self.guards + (guard,), self.loops, self.withs, self.in_handler)

    def push_loop(self, loop: Loop) -> "Context":
        return Context(self.guards, self.loops + (loop,), self.withs, self.in_handler)

    def push_withs(self, calls: tuple[cst.Call, ...]) -> "Context":
        return Context(self.guards, self.loops, self.withs + calls, self.in_handler)

    def handler(self) -> "Context":
        return Context(self.guards, self.loops, self.withs, True)

    @property
    def conditional(self) -> bool:
        return bool(self.guards or self.loops or self.in_handler)


@dataclass
class Event:
    kind: str
    node: cst.CSTNode
    ctx: Context
    order: int
    target: str | None = None  # dotted name of the object acted on (optimizer, scaler, model...)
    kinds: frozenset[str] = b.NONE  # kinds of that object at this point
    api: str = ""  # backward: tensor/accelerate/fabric/deepspeed/autograd/lightning; clip: torch/accelerate
    expr: cst.BaseExpression | None = None  # backward: the loss expression; loss_total: the added value
    via_helper: str | None = None  # the helper function's name when this event stands for a call to it
    stmt: cst.CSTNode | None = None  # the statement the event belongs to (what a fix moves)
    extra: dict = field(default_factory=dict)


@dataclass
class Def:
    """An assignment `name = value` (or `name op= value`) seen in a scope."""

    name: str
    value: cst.BaseExpression | None
    order: int
    ctx: Context
    op: str = "="  # "=", "+=", "/=", ..., "for" (loop target), "unpack"
    index: int | None = None  # element index for tuple unpacking
    node: cst.CSTNode | None = None


@dataclass
class Scope:
    node: cst.Module | cst.FunctionDef
    name: str
    class_bases: tuple[str, ...] = ()  # bases of the enclosing class, for methods
    events: list[Event] = field(default_factory=list)
    defs: dict[str, list[Def]] = field(default_factory=dict)
    loops: list[Loop] = field(default_factory=list)
    loop_end: dict[int, int] = field(default_factory=dict)  # id(loop) -> last order inside it
    loop_start: dict[int, int] = field(default_factory=dict)
    env: dict[str, frozenset[str]] = field(default_factory=dict)
    drop_last: bool = False  # a DataLoader here drops its incomplete last batch

    def defs_of(self, name: str, before: int | None = None) -> list[Def]:
        found = self.defs.get(name, [])
        return [d for d in found if before is None or d.order < before]


# Ways to skip or control the gradient all-reduce: torch DDP, accelerate, Fabric, apex, DeepSpeed.
_SYNC_METHODS = {"no_sync", "accumulate", "no_backward_sync", "skip_synchronize", "disable_allreduce",
                 "enable_allreduce", "disable_need_reduction", "enable_need_reduction",
                 "set_gradient_accumulation_boundary"}
_SAVE_QUALNAMES = {"torch.save", "safetensors.torch.save_file", "safetensors.torch.save_model"}


class ScopeWalker:
    """Walks the statements of one scope in order. Nested defs are separate scopes."""

    def __init__(self, scope: Scope, imports: ImportMap, seed: dict[str, frozenset[str]],
                 local_functions: set[str], counter: list[int]) -> None:
        self.scope = scope
        self.imports = imports
        self.env = scope.env  # the scope keeps the final bindings (module globals, self attributes)
        self.env.update(seed)
        self.local_functions = local_functions
        self.counter = counter  # shared across scopes so orders are file-wide
        self.statement: cst.CSTNode | None = None

    # -- bookkeeping --------------------------------------------------------------------------
    def tick(self) -> int:
        self.counter[0] += 1
        return self.counter[0]

    def kinds(self, node: cst.CSTNode | None) -> frozenset[str]:
        """Kinds of an expression at the current point of the walk."""
        if node is None:
            return b.NONE
        if isinstance(node, cst.Call):
            receiver, method = call_receiver(node)
            if method == "getattr" and receiver is None:
                return b.NONE  # getattr(m, "_orig_mod", m): the unwrapped module
            return b.constructor_kinds(node, self.imports, self.kinds)
        if isinstance(node, cst.IfExp):
            if _tests_orig_mod(node.test):
                return b.NONE  # `m._orig_mod if hasattr(m, "_orig_mod") else m`: never the wrapper
            return self.kinds(node.body) | self.kinds(node.orelse)
        if isinstance(node, cst.BooleanOperation):
            return self.kinds(node.left) | self.kinds(node.right)
        if isinstance(node, cst.Attribute) and node.attr.value == "_orig_mod":
            return b.NONE
        if isinstance(node, cst.Attribute) and node.attr.value == "module":
            # ddp_model.module is what DDP wrapped: compiled if it wrapped a compiled module.
            if b.WRAPS_COMPILED in self.kinds(node.value):
                return frozenset({b.COMPILED})
        name = dotted(node)
        if name is None:
            return b.NONE
        if name in self.env:
            return self.env[name] | (b.kinds_from_name(name) if not self.env[name] else b.NONE)
        return b.kinds_from_name(name)

    def bind(self, name: str, kinds: frozenset[str], ctx: Context) -> None:
        # A binding outside any branch replaces what the name was; inside one it may or may not run.
        if ctx.conditional:
            self.env[name] = self.env.get(name, b.NONE) | kinds
        else:
            self.env[name] = kinds

    def add_def(self, d: Def) -> None:
        self.scope.defs.setdefault(d.name, []).append(d)

    def emit(self, kind: str, node: cst.CSTNode, ctx: Context, **fields) -> Event:
        event = Event(kind, node, ctx, self.tick(), stmt=self.statement, **fields)
        self.scope.events.append(event)
        return event

    # -- statements ---------------------------------------------------------------------------
    def walk_block(self, body, ctx: Context) -> None:
        for stmt in body:
            self.walk_stmt(stmt, ctx)
            if isinstance(stmt, cst.If) and stmt.orelse is None and _exits(stmt.body):
                # `if not need_update: continue` guards everything after it in this block
                ctx = ctx.push_guard(Guard(stmt.test, False, stmt, len(ctx.loops)))

    def walk_stmt(self, stmt: cst.CSTNode, ctx: Context) -> None:
        self.statement = stmt
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                self.walk_small(small, ctx)
        elif isinstance(stmt, cst.If):
            self.walk_if(stmt, ctx)
        elif isinstance(stmt, (cst.For, cst.While)):
            self.walk_loop(stmt, ctx)
        elif isinstance(stmt, cst.With):
            calls = tuple(call for item in stmt.items for call in iter_calls(item.item))
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

    def walk_if(self, stmt: cst.If, ctx: Context) -> None:
        self.scan_expression(stmt.test, ctx)
        self.walk_block(stmt.body.body, ctx.push_guard(Guard(stmt.test, True, stmt, len(ctx.loops))))
        orelse = stmt.orelse
        negated = ctx.push_guard(Guard(stmt.test, False, stmt, len(ctx.loops)))
        if isinstance(orelse, cst.If):
            self.walk_if(orelse, negated)
        elif isinstance(orelse, cst.Else):
            self.walk_block(orelse.body.body, negated)

    def walk_loop(self, loop: Loop, ctx: Context) -> None:
        self.scope.loops.append(loop)
        inner = ctx.push_loop(loop)
        self.scope.loop_start[id(loop)] = self.counter[0] + 1
        if isinstance(loop, cst.For):
            self.scan_expression(loop.iter, ctx)
            for i, target in enumerate(_targets(loop.target)):
                self.add_def(Def(target, loop.iter, self.tick(), inner, op="for", index=i, node=loop))
                self.bind(target, b.NONE, inner)
        else:
            self.scan_expression(loop.test, inner)
        self.walk_block(loop.body.body, inner)
        self.scope.loop_end[id(loop)] = self.counter[0]
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
            name = dotted(small.target)
            op = small.operator.__class__.__name__
            if name:
                sign = {"AddAssign": "+=", "DivideAssign": "/=", "MultiplyAssign": "*=",
                        "SubtractAssign": "-=", "FloorDivideAssign": "//="}.get(op, "op=")
                self.add_def(Def(name, small.value, self.tick(), ctx, op=sign, node=small))
                if sign == "+=":
                    self.emit(LOSS_TOTAL, small, ctx, target=name, expr=small.value)
                if sign in {"/=", "*="} and ".grad" in f"{name}.":
                    self.emit(GRAD_SCALE, small, ctx, target=name)
            return
        if isinstance(small, cst.Expr):
            self.scan_expression(small.value, ctx)
            return
        if isinstance(small, cst.Return):
            if small.value is not None:
                self.scan_expression(small.value, ctx)
                self.emit(RETURN, small, ctx, expr=small.value)
            return

    def assign(self, target: cst.BaseExpression, value: cst.BaseExpression, ctx: Context, node) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            names = [dotted(el.value) for el in target.elements]
            unpacked = None
            if isinstance(value, cst.Call):
                unpacked = b.unpacked_kinds(value, self.imports, self.kinds, len(names))
            elif isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(names):
                unpacked = [self.kinds(el.value) for el in value.elements]
            for i, name in enumerate(names):
                if not name:
                    continue
                self.add_def(Def(name, value, self.tick(), ctx, op="unpack", index=i, node=node))
                self.bind(name, unpacked[i] if unpacked else b.NONE, ctx)
            return
        if isinstance(target, cst.Subscript):
            # `ckpt["model"] = m.state_dict()` fills the container `ckpt`
            base = dotted(target.value)
            if base:
                self.add_def(Def(base, value, self.tick(), ctx, op="item", node=node))
            return
        name = dotted(target)
        if not name:
            return
        self.add_def(Def(name, value, self.tick(), ctx, node=node))
        if any(ref.endswith(".no_sync") for ref in iter_names(value)):
            self.emit(SYNC_CONTROL, node, ctx, target=name, api="no_sync")
        kinds = self.kinds(value)
        if isinstance(target, cst.Attribute) and target.attr.value == "grad" and isinstance(value, cst.Name) \
                and value.value == "None":
            self.emit(ZERO_GRAD, node, ctx, target=dotted(target.value), extra={"model": True})
        if isinstance(target, cst.Attribute) and target.attr.value == "gradient_accumulation_steps":
            owner = dotted(target.value)
            if owner:  # `accelerator.gradient_accumulation_steps = n` turns accumulation on
                self.env[owner] = self.kinds(target.value) | {b.ACCELERATOR_ACCUMULATES}
        if isinstance(target, cst.Attribute) and target.attr.value == "require_backward_grad_sync":
            self.emit(SYNC_CONTROL, node, ctx, target=dotted(target.value), api="require_backward_grad_sync")
        self.bind(name, kinds, ctx)
        if isinstance(value, cst.Call) and b.SCHEDULER in kinds:
            self.emit(SCHED_CTOR, value, ctx, target=name)

    # -- calls --------------------------------------------------------------------------------
    def scan_expression(self, expr: cst.CSTNode, ctx: Context) -> None:
        for call in iter_calls(expr):
            self.classify_call(call, ctx)

    def classify_call(self, call: cst.Call, ctx: Context) -> None:
        receiver, method = call_receiver(call)
        target = dotted(receiver)
        owner = self.kinds(receiver) if receiver is not None else b.NONE
        qual = self.imports.qualify(call.func) or dotted(call.func) or ""
        drop_last = keyword(call, "drop_last")
        if isinstance(drop_last, cst.Name) and drop_last.value == "True":
            self.scope.drop_last = True
        emit: Callable[..., Event] = lambda kind, **kw: self.emit(kind, call, ctx, **kw)  # noqa: E731

        if method == "backward" and (qual.startswith("torch.distributed") or target == "dist_autograd"):
            return  # distributed autograd keeps gradients in its context, not in .grad
        if method == "backward":
            if receiver is not None and b.OPTIMIZER in owner:
                # apex/DeepSpeed FP16 optimizers: `optimizer.backward(loss)` applies only the loss scale
                emit(BACKWARD, target=target, kinds=owner, api="tensor", expr=positional(call, 0))
            elif receiver is not None and (owner & {b.ACCELERATOR, b.FABRIC, b.DEEPSPEED}):
                api = "accelerate" if b.ACCELERATOR in owner else "fabric" if b.FABRIC in owner else "deepspeed"
                emit(BACKWARD, target=target, kinds=owner, api=api, expr=positional(call, 0))
            elif qual in {"torch.autograd.backward"}:
                emit(BACKWARD, api="autograd", expr=positional(call, 0))
            elif receiver is not None:
                loss = receiver
                scaled_by = None
                if isinstance(receiver, cst.Call):
                    inner_recv, inner_method = call_receiver(receiver)
                    if inner_method == "scale" and inner_recv is not None:
                        loss = positional(receiver, 0) or receiver
                        scaled_by = dotted(inner_recv)
                emit(BACKWARD, target=target, api="tensor", expr=loss, extra={"scaler": scaled_by})
            return
        if method == "manual_backward":
            emit(BACKWARD, api="lightning", expr=positional(call, 0))
            return
        if method == "zero_grad":
            emit(ZERO_GRAD, target=target, kinds=owner, extra={"model": b.OPTIMIZER not in owner})
            return
        if method in {"div_", "mul_"} and target is not None and ".grad" in f"{target}.":
            emit(GRAD_SCALE, target=target)
            return
        if method == "zero_" and target is not None and ".grad" in f"{target}.":
            emit(ZERO_GRAD, target=target.split(".grad")[0], extra={"model": True})  # p.grad.zero_(), .data.zero_()
            return
        if method == "step" and receiver is not None:
            if b.SCALER in owner:
                opt = positional(call, 0)
                emit(STEP, target=dotted(opt), kinds=self.kinds(opt), api="scaler", extra={"scaler": target})
            elif b.SCHEDULER in owner and b.OPTIMIZER not in owner:
                # A scheduler known only by its name must look like one: `lr_scheduler.step()`.
                if target in self.env or not any(a.keyword is None for a in call.args):
                    emit(SCHED_STEP, target=target, kinds=owner)
            elif b.DEEPSPEED in owner:
                emit(STEP, target=target, kinds=owner, api="deepspeed")
            elif b.OPTIMIZER in owner:
                emit(STEP, target=target, kinds=owner, api="optimizer")
            return
        if method == "update" and b.SCALER in owner:
            emit(SCALER_UPDATE, target=target, kinds=owner)
            return
        if method == "unscale_":
            emit(UNSCALE, target=dotted(positional(call, 0)), extra={"scaler": target})
            return
        if method in {"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_gradients"}:
            api = "accelerate" if b.ACCELERATOR in owner else "fabric" if b.FABRIC in owner else "torch"
            emit(CLIP, target=target, kinds=owner, api=api)
            return
        if qual == "torch.compile" or (method == "compile" and target == "torch"):
            emit(COMPILE)
            return
        if method in _SYNC_METHODS:
            module = dotted(positional(call, 0)) if method != "no_sync" or b.ACCELERATOR in owner else target
            emit(SYNC_CONTROL, target=module, kinds=owner, api=method,
                 extra={"framework": "accelerate" if b.ACCELERATOR in owner else
                        "fabric" if b.FABRIC in owner else "ddp"})
            return
        if method == "load_state_dict" and receiver is not None:
            emit(LOAD_STATE, target=target, kinds=owner)
            return
        if method == "state_dict" and receiver is not None and not call.args:
            emit(STATE_DICT, target=target, kinds=owner)
            return
        if qual in _SAVE_QUALNAMES or (method in {"save", "save_file"} and (
                owner & {b.ACCELERATOR, b.FABRIC} or target in {"torch", "safetensors.torch"})):
            names = {dotted(a.value) for a in call.args} - {None}
            emit(SAVE, target=target, extra={"names": names, "args": [a.value for a in call.args]})
            return
        if method == "append" and receiver is not None and call.args:
            emit(LOSS_TOTAL, target=target, expr=positional(call, 0))
            return
        callee = dotted(call.func)
        if callee and (callee in self.local_functions or (callee.startswith("self.") and
                                                          callee[5:] in self.local_functions)):
            emit(HELPER_CALL, target=callee.removeprefix("self."))
            return
        if callee and not self.imports.qualify(call.func):
            # Any other call on a local object: forward passes (`model(x)`, `self.net(x)`) are among them.
            model = target if method == "forward" else callee
            arg_names = {name for a in call.args for name in iter_names(a.value)}
            emit(MODEL_CALL, target=model, kinds=self.kinds(receiver if method == "forward" else call.func),
                 extra={"args": arg_names})


def _tests_orig_mod(test: cst.BaseExpression) -> bool:
    """`hasattr(m, "_orig_mod")`: the attribute name is part of the code, not prose."""
    if isinstance(test, cst.Call) and call_receiver(test)[1] == "hasattr" and len(test.args) == 2:
        name = test.args[1].value
        return isinstance(name, cst.SimpleString) and name.evaluated_value == "_orig_mod"
    return False


def _exits(block: cst.BaseSuite) -> bool:
    """Does the block always leave the enclosing block (continue, break, return, raise)?"""
    body = block.body
    last = body[-1] if body else None
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1]
    return isinstance(last, (cst.Continue, cst.Break, cst.Return, cst.Raise))


def _targets(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, (cst.Tuple, cst.List)):
        out = []
        for el in target.elements:
            out.extend(_targets(el.value))
        return out
    name = dotted(target)
    return [name] if name else []


