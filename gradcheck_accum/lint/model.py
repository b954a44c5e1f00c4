"""The file model that rules query: scopes with their events, helper summaries, windows, loss facts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

from gradcheck_accum.lint.lazy import cst

from gradcheck_accum.lint import bindings as b
from gradcheck_accum.lint import events as ev
from gradcheck_accum.lint.bindings import is_accumulation_name
from gradcheck_accum.lint.names import ImportMap, call_receiver, contains, dotted, keyword
from gradcheck_accum.lint.predicates import resolve_n
from gradcheck_accum.lint.windows import Window, build_windows


@dataclass
class LossFacts:
    """What the dataflow says about a backpropagated loss expression."""

    known: bool = True  # every definition was traced to something we understand
    scaled: bool = False  # divided or multiplied after it was computed
    divisions: list[tuple[cst.CSTNode, cst.BaseExpression]] = field(default_factory=list)
    token_level: bool = False  # a mean over a variable number of valid items
    sum_reduced: bool = False
    detached: bool = False
    names: set[str] = field(default_factory=set)


class FileModel:
    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self.imports = ImportMap()
        self.scopes: list[ev.Scope] = []
        self.functions: dict[str, list[ev.Scope]] = {}
        self._build()

    # -- construction -----------------------------------------------------------------------------
    def _build(self) -> None:
        functions = list(_function_defs(self.module))
        local_names = {fn.name.value for fn, _ in functions}
        counter = [0]
        module_scope = ev.Scope(self.module, "<module>")
        ev.ScopeWalker(module_scope, self.imports, {}, local_names, counter).walk_block(self.module.body, ev.Context())
        self.scopes.append(module_scope)
        globals_env = {k: v for k, v in module_scope.env.items()}
        class_env: dict[int, dict[str, frozenset[str]]] = {}
        # __init__ first so that `self.x` attributes are known in the other methods
        functions.sort(key=lambda item: item[0].name.value != "__init__")
        for fn, cls in functions:
            attrs = class_env.setdefault(id(cls), {}) if cls is not None else {}
            scope = ev.Scope(fn, fn.name.value, _bases(cls))
            ev.ScopeWalker(scope, self.imports, {**globals_env, **attrs}, local_names, counter).walk_block(
                fn.body.body, ev.Context())
            if cls is not None:
                for name, kinds in scope.env.items():
                    if name.startswith("self.") and kinds:
                        attrs[name] = attrs.get(name, b.NONE) | kinds
            scope.env = {}
            self.scopes.append(scope)
            self.functions.setdefault(fn.name.value, []).append(scope)
        self._expand_helpers()

    def _expand_helpers(self) -> None:
        """Replace calls to same-file helpers by the effects they have (step, zero_grad, ...)."""
        effects: dict[str, set[str]] = {
            name: {e.kind for s in scopes for e in s.events if e.kind in ev.HELPER_EFFECTS}
            for name, scopes in self.functions.items()
        }
        calls = {name: {e.target for s in scopes for e in s.events if e.kind == ev.HELPER_CALL}
                 for name, scopes in self.functions.items()}
        changed = True
        while changed:
            changed = False
            for name, callees in calls.items():
                for callee in callees:
                    extra = effects.get(callee or "", set()) - effects[name]
                    if extra:
                        effects[name] |= extra
                        changed = True
        for scope in self.scopes:
            added = []
            for event in scope.events:
                if event.kind == ev.HELPER_CALL:
                    for kind in sorted(effects.get(event.target or "", ())):
                        added.append(ev.Event(kind, event.node, event.ctx, event.order, via_helper=event.target))
            if added:
                scope.events = sorted(scope.events + added, key=lambda e: e.order)

    # -- queries ----------------------------------------------------------------------------------
    @cached_property
    def drop_last(self) -> bool:
        """Some DataLoader in the file drops its incomplete last batch."""
        return any(scope.drop_last for scope in self.scopes)

    @cached_property
    def windows(self) -> list[Window]:
        return [w for scope in self.scopes for w in build_windows(scope)]

    def events(self, *kinds: str) -> list[tuple[ev.Scope, ev.Event]]:
        return [(s, e) for s in self.scopes for e in s.events if e.kind in kinds]

    def constructed_unprepared(self, scope: ev.Scope, name: str | None) -> bool:
        """Is `name` bound here by a scheduler constructor and never passed through prepare()?"""
        defs = [d for s in (scope, self.scopes[0]) for d in s.defs_of(name or "")]
        built = any(d.op == "=" and isinstance(d.value, cst.Call) and
                    b.SCHEDULER in b.constructor_kinds(d.value, self.imports, lambda _: b.NONE) for d in defs)
        return built and not any(d.op == "unpack" for d in defs)

    def is_saved(self, scope: ev.Scope, state_dict: ev.Event) -> bool:
        """Is this `x.state_dict()` written to disk: inside a save call's arguments, or in a
        container (`ckpt = {...}`, `ckpt["model"] = ...`) that is passed to one?"""
        saves = [e for e in scope.events if e.kind == ev.SAVE]
        if any(contains(save.node, state_dict.node) for save in saves):
            return True
        for name in set().union(*(save.extra["names"] for save in saves)) if saves else ():
            if any(d.value is not None and contains(d.value, state_dict.node) for d in scope.defs_of(name)):
                return True
        return False

    def is_accumulation_count(self, node: cst.BaseExpression, window: Window | None, scope: ev.Scope) -> bool:
        """Is this expression N (the window's count, or a name that says accumulation)?"""
        if is_accumulation_name(node):
            return True
        name = dotted(node)
        if name is not None:
            for d in scope.defs_of(name):
                if d.op == "=" and d.value is not None and is_accumulation_name(d.value):
                    return True
        if window is not None and window.n is not None:
            return resolve_n(node, scope) == resolve_n(window.n, scope)
        return False

    def loss_facts(self, expr: cst.BaseExpression | None, scope: ev.Scope, before: int) -> LossFacts:
        facts = LossFacts()
        if expr is None:
            facts.known = False
            return facts
        self._trace(expr, scope, before, facts, 0)
        return facts

    def _trace(self, node: cst.BaseExpression, scope: ev.Scope, before: int, facts: LossFacts, depth: int) -> None:
        if depth > 8:
            facts.known = False
            return
        if isinstance(node, cst.BinaryOperation):
            if isinstance(node.operator, (cst.Divide, cst.Multiply, cst.FloorDivide)):
                facts.scaled = True
                if isinstance(node.operator, cst.Divide):
                    facts.divisions.append((node, node.right))
                    if _is_count_of_items(node.right):
                        facts.token_level = True
                self._trace(node.left, scope, before, facts, depth + 1)
                return
            self._trace(node.left, scope, before, facts, depth + 1)
            self._trace(node.right, scope, before, facts, depth + 1)
            return
        if isinstance(node, cst.Call):
            receiver, method = call_receiver(node)
            if method in {"div", "div_", "mul", "mul_", "true_divide"} and receiver is not None:
                facts.scaled = True
                if method.startswith("div") or method == "true_divide":
                    if node.args:
                        facts.divisions.append((node, node.args[0].value))
                self._trace(receiver, scope, before, facts, depth + 1)
                return
            if method in {"scale", "scale_loss"} and node.args:
                # scaler.scale(loss) / amp.scale_loss(loss, opt): the loss scale, not accumulation
                self._trace(node.args[0].value, scope, before, facts, depth + 1)
                return
            if method in {"item", "detach", "tolist", "cpu"} or (receiver is None and method == "float"):
                facts.detached = True
                return
            if method in {"mean", "sum", "squeeze", "float", "to", "view", "reshape", "contiguous"} \
                    and receiver is not None:
                self._trace(receiver, scope, before, facts, depth + 1)
                return
            callee = dotted(node.func)
            kinds = b.constructor_kinds(node, self.imports, lambda _: b.NONE) | self._kinds_of(callee, scope)
            if b.SUM_LOSS in kinds:
                facts.sum_reduced = True
            if b.TOKEN_LOSS in kinds:
                facts.token_level = True
            # Only producers whose reduction we know count: torch losses and criteria, and model
            # forwards (HF-style `.loss`). Anything else (`compute_loss(...)`) may sum or scale inside.
            if any(self.is_accumulation_count(a.value, None, scope) for a in node.args) or any(
                    a.keyword is not None and "num_items" in a.keyword.value for a in node.args):
                facts.known = False  # N, or the window's item count, is handed to the producer
            elif not (b.CRITERION in kinds or (self.imports.qualify(node.func) or "").startswith("torch")
                      or _is_model_like(callee, scope)):
                facts.known = False
            return
        if isinstance(node, (cst.Subscript, cst.Attribute)) and dotted(node) is None or (
                isinstance(node, cst.Attribute) and node.attr.value == "data"):
            if isinstance(node, cst.Attribute) and node.attr.value == "data":
                facts.detached = True
            self._trace(node.value, scope, before, facts, depth + 1)
            return
        name = dotted(node)
        if name is None:
            return
        facts.names.add(name)
        if isinstance(node, cst.Attribute) and node.attr.value == "loss" and not scope.defs_of(name, before):
            # `outputs.loss`: a model's mean loss, over valid tokens only when labels carry -100
            if self._masked_labels(node.value, scope, before):
                facts.token_level = True
            return
        defs = scope.defs_of(name, before)
        if not defs:
            if isinstance(node, cst.Attribute):
                self._trace(node.value, scope, before, facts, depth + 1)
            else:
                facts.known = False  # a parameter or global we cannot follow
            return
        # The definitions that can reach `before`: the last unconditional one and any later ones.
        reaching = []
        for d in reversed(defs):
            reaching.append(d)
            if not d.ctx.guards and not d.ctx.in_handler and d.op in {"=", "unpack"} \
                    and d.ctx.loops == (defs[-1].ctx.loops):
                break
        for d in reaching:
            if d.op in {"/=", "*=", "//="}:
                facts.scaled = True
                if d.op == "/=" and d.value is not None:
                    facts.divisions.append((d.node, d.value))
            elif d.op == "for":
                facts.known = False
            elif d.value is not None:
                if d.op == "unpack" and isinstance(d.value, (cst.Tuple, cst.List)) and d.index is not None:
                    self._trace(d.value.elements[d.index].value, scope, d.order, facts, depth + 1)
                else:
                    self._trace(d.value, scope, d.order, facts, depth + 1)

    def _masked_labels(self, outputs: cst.BaseExpression, scope: ev.Scope, before: int) -> bool:
        """`outputs = model(..., labels=y)` where `y[...] = -100` masks items out in this scope."""
        calls = [d.value for d in scope.defs_of(dotted(outputs) or "", before) if isinstance(d.value, cst.Call)]
        if isinstance(outputs, cst.Call):
            calls.append(outputs)
        for call in calls:
            labels = dotted(keyword(call, "labels"))
            if labels and any(d.op == "item" and _is_ignore_label(d.value) for d in scope.defs_of(labels)):
                return True
        return False

    def _kinds_of(self, name: str | None, scope: ev.Scope) -> frozenset[str]:
        if not name:
            return b.NONE
        kinds: frozenset[str] = b.NONE
        for d in scope.defs_of(name):
            if isinstance(d.value, cst.Call):
                kinds |= b.constructor_kinds(d.value, self.imports, lambda _: b.NONE)
        for s in self.scopes:
            if s.node is self.module or name.startswith("self."):
                for d in s.defs_of(name):
                    if isinstance(d.value, cst.Call):
                        kinds |= b.constructor_kinds(d.value, self.imports, lambda _: b.NONE)
        return kinds


_MODEL_WORDS = re.compile(r"model|net|module|engine|encoder|decoder|transformer|gpt|bert|unet|policy", re.I)


_CRITERION_NAMES = re.compile(r"^(criterion\w*|loss_fn|loss_func|loss_fct|lossfn|loss_function)$")


def _is_model_like(callee: str | None, scope: ev.Scope) -> bool:
    """A forward pass or a criterion called by its conventional name: both return a mean loss."""
    if not callee:
        return False
    last = callee.split(".")[-1]
    return last in {"forward", "__call__"} or bool(_MODEL_WORDS.search(last) or _CRITERION_NAMES.match(last))


def _is_ignore_label(value: cst.BaseExpression | None) -> bool:
    """The literal -100, the ignore_index of torch's and Hugging Face's cross-entropy."""
    return isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus) and \
        isinstance(value.expression, cst.Integer) and value.expression.value == "100"


def _is_count_of_items(node: cst.BaseExpression) -> bool:
    """`mask.sum()`, `(labels != -100).sum()`, `num_valid`: a per-micro-batch item count."""
    if isinstance(node, cst.Call):
        receiver, method = call_receiver(node)
        if method in {"sum", "count_nonzero"} and receiver is not None:
            return True
        if method == "clamp" and receiver is not None:
            return _is_count_of_items(receiver)
    return False


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

