"""Autofixes: rules attach a Fix (node replacements) to a report; the engine applies them.

A fix is a set of replacements keyed by the original nodes of the parsed module: a node may be
replaced by a new node, removed, or flattened into several statements (how a statement is moved).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Union

from gradcheck_accum.lint.lazy import cst

from gradcheck_accum.lint.lines import split_lines
from gradcheck_accum.lint.names import source
from gradcheck_accum.lint.vocabulary import Event

if TYPE_CHECKING:  # annotations only: libcst is loaded lazily (see gradcheck_accum/lint/__init__.py)
    Replacement = Union[cst.CSTNode, cst.RemovalSentinel, cst.FlattenSentinel, Callable[[cst.CSTNode], cst.CSTNode]]


@dataclass(frozen=True)
class Fix:
    safe: bool
    description: str
    replacements: tuple[tuple[cst.CSTNode, Replacement], ...] = field(default_factory=tuple)
    line_edit: tuple[int, str, str] | None = None  # (line, old text, new text): for comments, which are not nodes

    @property
    def safety(self) -> str:
        return "safe" if self.safe else "unsafe"

    def apply(self, module: cst.Module) -> str:
        """The module's code with this fix applied."""
        code = module.visit(_replacer()({id(node): new for node, new in self.replacements})).code \
            if self.replacements else module.code
        if self.line_edit is not None:
            number, old, new = self.line_edit
            lines = split_lines(code, keepends=True)
            body = lines[number - 1].rstrip("\r\n")
            ending = lines[number - 1][len(body):]
            # A comment ends its line: edit that end, never an earlier copy of its text (in a string).
            if body.endswith(old):
                body = body[:len(body) - len(old)] + new
                if not new:  # the comment went away: so do the spaces that preceded it
                    body = body.rstrip()
            lines[number - 1] = body + ending
            code = "".join(lines)
        return code


@functools.cache
def _replacer() -> type:
    """The transformer class, made on first use: a class statement at import time would load libcst."""

    class Replace(cst.CSTTransformer):
        def __init__(self, replacements: dict[int, Replacement]) -> None:
            super().__init__()
            self.replacements = replacements

        def on_leave(self, original_node, updated_node):
            new = self.replacements.get(id(original_node))
            if new is None:
                return updated_node
            return new(updated_node) if callable(new) and not isinstance(new, cst.CSTNode) else new

    return Replace


def lone_statement(event: Event) -> cst.SimpleStatementLine | None:
    """The event's statement when it holds nothing but this one call (so it can be moved whole)."""
    stmt = event.stmt
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    value = getattr(small, "value", None)
    return stmt if value is event.node else None


def move_statement(event: Event, anchor: Event, after: bool, description: str) -> Fix | None:
    """Move the event's statement right before or after the anchor's statement (unsafe: order changes)."""
    stmt, target = lone_statement(event), anchor.stmt
    if stmt is None or not isinstance(target, cst.SimpleStatementLine) or stmt is target:
        return None
    return Fix(False, description, ((stmt, cst.RemoveFromParent()), (target, _place(stmt, after))))


def hoist_statement(event: Event, loop: cst.CSTNode, description: str) -> Fix | None:
    """Move the event's statement to just before `loop` (a statement)."""
    stmt = lone_statement(event)
    if stmt is None:
        return None
    return Fix(False, description, ((stmt, cst.RemoveFromParent()), (loop, _place(stmt, after=False))))


def _place(stmt: cst.SimpleStatementLine, after: bool) -> Callable[[cst.CSTNode], cst.FlattenSentinel]:
    """Insert `stmt` next to the anchor. Comments written above the moved statement travel with it;
    blank lines do not. Placed before the anchor, it takes over the anchor's leading lines, so the
    comments above the anchor stay on top."""
    moved = stmt.with_changes(leading_lines=[line for line in stmt.leading_lines if line.comment is not None])

    def place(anchor: cst.CSTNode) -> cst.FlattenSentinel:
        if after:
            return cst.FlattenSentinel([anchor, moved])
        leading = list(anchor.leading_lines) + list(moved.leading_lines)
        return cst.FlattenSentinel([moved.with_changes(leading_lines=leading), anchor.with_changes(leading_lines=())])

    return place


def divide_loss(backward: Event, n: cst.BaseExpression | None, description: str) -> Fix | None:
    """Divide the loss a backward call receives by `n` (unsafe: gradients change)."""
    if n is None or backward.expr is None:
        return None
    # `loss.backward()` needs parentheses around the division; an argument does not.
    receiver = isinstance(backward.node, cst.Call) and isinstance(backward.node.func, cst.Attribute) \
        and backward.node.func.value is backward.expr
    text = f"{source(backward.expr)} / {source(n)}"
    return Fix(False, description, ((backward.expr, cst.parse_expression(f"({text})" if receiver else text)),))


def unwrap_compiled(state_dict: Event, description: str) -> Fix | None:
    """`m.state_dict()` -> `getattr(m, "_orig_mod", m).state_dict()`. Safe: on an eager module
    getattr returns the module itself, so nothing changes there."""
    call = state_dict.node
    if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Attribute):
        return None
    owner = source(call.func.value)
    unwrapped = cst.parse_expression(f'getattr({owner}, "_orig_mod", {owner})')
    return Fix(True, description, ((call.func, call.func.with_changes(value=unwrapped)),))
