"""Autofixes: rules attach a Fix (node replacements) to a report; the engine applies them.

A fix is a set of replacements keyed by the original nodes of the parsed module: a node may be
replaced by a new node, removed, or flattened into several statements (how a statement is moved).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable, NamedTuple, TypeVar, Union

from gradcheck_accum.lint.lazy import cst

from gradcheck_accum.lint.lines import split_lines
from gradcheck_accum.lint.names import source
from gradcheck_accum.lint.positions import ancestor_paths
from gradcheck_accum.lint.vocabulary import Event, Guard

T = TypeVar("T", bound=tuple)

if TYPE_CHECKING:  # annotations only: libcst is loaded lazily (see gradcheck_accum/lint/__init__.py)
    from gradcheck_accum.lint.windows import Window
    Replacement = Union[cst.CSTNode, cst.RemovalSentinel, cst.FlattenSentinel, Callable[[cst.CSTNode], cst.CSTNode]]


class Fix(NamedTuple):
    safe: bool
    description: str
    replacements: tuple[tuple[cst.CSTNode, Replacement], ...] = ()
    line_edit: tuple[int, str, str] | None = None  # (line, old text, new text): for comments, which are not nodes

    @property
    def safety(self) -> str:
        return "safe" if self.safe else "unsafe"

    def apply(self, source: str, module: cst.Module) -> str:
        """`source` (which `module` was parsed from) with this fix applied."""
        return fixed_source(source, module, [self])


def same_fix(one: Fix | None, other: Fix | None) -> bool:
    """Whether two fixes make the same change: the same nodes replaced by equal code."""
    if one is None or other is None:
        return False
    if (one.safe, one.description, one.line_edit, len(one.replacements)) != \
            (other.safe, other.description, other.line_edit, len(other.replacements)):
        return False
    return all(node is node_b and _equal(_replaced(node, new), _replaced(node, new_b))
               for (node, new), (node_b, new_b) in zip(one.replacements, other.replacements))


def _replaced(node: cst.CSTNode, new: Replacement) -> list:
    """What a replacement puts in place of `node`, as a list of nodes (or the removal sentinel)."""
    if callable(new) and not isinstance(new, cst.CSTNode):
        new = new(node)
    return list(new.nodes) if isinstance(new, cst.FlattenSentinel) else [new]


def _equal(one: list, other: list) -> bool:
    return len(one) == len(other) and all(
        a is b or (isinstance(a, cst.CSTNode) and isinstance(b, cst.CSTNode) and a.deep_equals(b))
        for a, b in zip(one, other))


def fixed_source(source: str, module: cst.Module, fixes: list[Fix]) -> str:
    """`source` (which `module` was parsed from) with `fixes` applied in one pass, every byte they do
    not touch kept. Fixes applied together are chosen by `independent`: no replacement touches a node
    another one replaces, or its ancestors or descendants, and comment edits are on distinct lines."""
    replacements = {id(node): new for fix in fixes for node, new in fix.replacements}
    code = _kept_bytes(source, module, module.visit(_replacer()(replacements)).code) if replacements else source
    edits = [fix.line_edit for fix in fixes if fix.line_edit is not None]
    if not edits:
        return code
    lines = split_lines(code, keepends=True)
    for number, old, new in edits:
        body = lines[number - 1].rstrip("\r\n")
        ending = lines[number - 1][len(body):]
        # A comment ends its line: edit that end, never an earlier copy of its text (in a string).
        if body.endswith(old):
            body = body[:len(body) - len(old)] + new
            if not new:  # the comment went away: so do the spaces that preceded it
                body = body.rstrip()
        lines[number - 1] = body + ending
    return "".join(lines)


def _kept_bytes(source: str, module: cst.Module, new: str) -> str:
    """libcst's code generation drops a form feed that starts a statement's line and the last CR of
    a file whose lines end in CR alone: the lines a fix leaves alone come back from `source`."""
    if "\x0c" not in source and not source.endswith("\r"):
        return new  # nothing libcst loses
    roundtrip = module.code
    old_lines, kept_lines = split_lines(source, keepends=True), split_lines(roundtrip, keepends=True)
    if roundtrip == source or len(old_lines) != len(kept_lines):
        return new
    import difflib

    new_lines = split_lines(new, keepends=True)
    out: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, kept_lines, new_lines, autojunk=False).get_opcodes():
        out.extend(old_lines[i1:i2] if tag == "equal" else new_lines[j1:j2])
    text = "".join(out)
    if source.endswith("\r") and not text.endswith(("\r", "\n")):
        text += "\r"  # the fix changed the last line
    return text


def independent(module: cst.Module, fixes: list[T]) -> list[T]:
    """The first of `fixes` ((finding, Fix) pairs) and each later one that can join it in one pass, as
    ruff applies non-overlapping edits together: node fixes whose nodes are neither the same as, nor
    ancestors or descendants of, the nodes of those taken; or comment edits on distinct lines. The two
    kinds never mix (a node fix can move lines under a comment edit)."""
    first = fixes[0][1]
    if first.line_edit is not None:
        if first.replacements:
            return fixes[:1]
        lines: set[int] = set()
        taken = []
        for item in fixes:
            edit = item[1].line_edit
            if edit is not None and not item[1].replacements and edit[0] not in lines:
                lines.add(edit[0])
                taken.append(item)
        return taken
    candidates = [item for item in fixes if item[1].line_edit is None and item[1].replacements]
    paths = ancestor_paths(module, {node for _, fix in candidates for node, _ in fix.replacements})
    taken, taken_nodes, taken_lineage = [], set(), set()
    for item in candidates:
        nodes = [node for node, _ in item[1].replacements]
        if any(node not in paths for node in nodes):  # out of reach of the walk: alone or not at all
            if not taken:
                return [item]
            continue
        own = {id(node) for node in nodes}
        lineage = {id(ancestor) for node in nodes for ancestor in paths[node]}
        if own & taken_lineage or lineage & taken_nodes:
            continue
        taken.append(item)
        taken_nodes |= own
        taken_lineage |= lineage
    return taken


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


def move_statement(window: Window, event: Event, anchor: Event, after: bool, description: str) -> Fix | None:
    """Move the event's statement right before or after the anchor's statement (unsafe: order changes).
    None when what lands next to the anchor would not run on every boundary of the window."""
    stmt, target = lone_statement(event), anchor.stmt
    if stmt is None or not isinstance(target, cst.SimpleStatementLine) or stmt is target:
        return None
    if not _on_every_boundary(window, event, anchor):
        return None
    return Fix(False, description, ((stmt, cst.RemoveFromParent()), (target, _place(stmt, after))))


def _on_every_boundary(window: Window, moved: Event, anchor: Event) -> bool:
    """Whether the anchor runs on every boundary of the window, so a statement placed next to it does
    too: beyond what encloses the moved statement, only the boundary test of a guarded window may
    enclose it; not another branch (the step under `if use_amp:` / `else:`), a loop, a handler, or a
    `try` (a step that may raise)."""
    ctx = anchor.ctx
    if ctx.in_handler or any(loop not in moved.ctx.loops for loop in ctx.loops):
        return False
    shared = {(id(guard.owner), guard.positive) for guard in moved.ctx.guards}
    extra = [guard for guard in ctx.guards if (id(guard.owner), guard.positive) not in shared]
    if len(extra) > 1 or (extra and not _tests_the_boundary(window, extra[0])):
        return False
    root = extra[0].owner if extra else ctx.loops[-1] if ctx.loops else window.scope.node
    path = ancestor_paths(root, {anchor.stmt}).get(anchor.stmt, ())
    return bool(path) and not any(isinstance(node, (cst.Try, cst.TryStar)) for node in path)


def _tests_the_boundary(window: Window, guard: Guard) -> bool:
    from gradcheck_accum.lint.windows import WindowShape  # the suppression stage imports this module, not windows

    boundary = window.boundary
    if not guard.positive or boundary is None or window.shape is not WindowShape.GUARDED:
        return False
    return boundary.comparison is None or bool(ancestor_paths(guard.test, {boundary.comparison}))


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
    """Divide the loss a backward call receives by `n` (unsafe: gradients change). Both sides are
    parenthesized unless they are atoms: `scaler.scale(a + b)` becomes `scaler.scale((a + b) / n)`."""
    if n is None or backward.expr is None:
        return None
    # `loss.backward()` needs parentheses around the division; an argument does not.
    receiver = isinstance(backward.node, cst.Call) and isinstance(backward.node.func, cst.Attribute) \
        and backward.node.func.value is backward.expr
    text = f"{_operand(backward.expr)} / {_operand(n)}"
    return Fix(False, description, ((backward.expr, cst.parse_expression(f"({text})" if receiver else text)),))


_ATOMS = ("Name", "Attribute", "Call", "Subscript", "Integer", "Float", "Imaginary", "SimpleString")


def _operand(node: cst.BaseExpression) -> str:
    """The node's text, parenthesized unless it binds at least as tightly as a division's operand."""
    text = source(node)
    return text if type(node).__name__ in _ATOMS or getattr(node, "lpar", ()) else f"({text})"


def unwrap_compiled(state_dict: Event, description: str) -> Fix | None:
    """`m.state_dict()` -> `getattr(m, "_orig_mod", m).state_dict()`. Unsafe: on a compiled module the
    saved keys change, which is the point, but code that loads them back into a compiled module expects
    the prefix. (On an eager module getattr returns the module itself.)"""
    call = state_dict.node
    if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Attribute):
        return None
    owner = source(call.func.value)
    unwrapped = cst.parse_expression(f'getattr({owner}, "_orig_mod", {owner})')
    return Fix(False, description, ((call.func, call.func.with_changes(value=unwrapped)),))
