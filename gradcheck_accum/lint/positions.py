"""Line/column ranges of the reported nodes, without generating code for the whole module.

libcst knows positions only through code generation, and generating a large module costs as much
as parsing it. A node's range is fixed by its innermost enclosing statement: generate that
statement alone (with the indentation of the blocks around it), and shift the ranges by the line it
starts at. CPython's tree of the same text says that line: its statements are libcst's, block by
block (`_Placer._ast_line`), and a few milliseconds of `ast.parse` replace a search of the source. A node in
a compound statement's header (a `with` item, a loop's iterable) needs only the header: the body is
left out of what is generated. Where CPython's tree cannot be matched, the statement's text is
looked up in the source: where it starts exactly one line (`_Lines`, by its lines, never by a
search of the whole source, which for a file with a finding every few lines would cost the square of
its size), or counted from a neighbouring simple statement whose text does; otherwise the next
enclosing statement is tried, and the whole module as a last resort. Every start is checked against
the source before it is used. The ranges are libcst's own (its code generation state computes them),
so they equal those of libcst's PositionProvider.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Iterable, Sequence

from gradcheck_accum.lint.lazy import cst

from gradcheck_accum.lint.lines import line_starts, split_lines
from gradcheck_accum.lint.names import children

if TYPE_CHECKING:
    from libcst.metadata.position_provider import PositionProvidingCodegenState

Ranges = dict["cst.CSTNode", "cst.metadata.CodeRange"]  # strings: libcst loads lazily


def node_positions(module: cst.Module, source: str, nodes: Iterable[cst.CSTNode], tree: ast.Module | None = None) \
        -> Ranges:
    """The ranges of `nodes` of `module`, parsed from `source`. `tree`: CPython's tree of the same
    source, which says where statements start (without it, their texts are looked up)."""
    wanted = set(nodes)
    paths = ancestor_paths(module, wanted)
    if len(paths) < len(wanted):  # a node outside the fields `children` reads: take the long road
        return whole_module(module)
    found: Ranges = {}
    # (id(statement), header only) -> the line it starts at (0-based) and its nodes' ranges within it
    # (None: it could not be placed); only the wanted nodes' ranges are shifted to the file's lines
    placed: dict[tuple[int, bool], tuple[int, Ranges] | None] = {}
    placer = _Placer(module, _Lines(source), tree)
    for node, path in paths.items():
        for index in range(len(path) - 1, 0, -1):
            statement = path[index]
            if not _is_statement(statement, path[index - 1]):
                continue
            header = index + 1 < len(path) and _in_header(statement, path[index + 1])
            key = (id(statement), header)
            if key not in placed:
                placed[key] = placer.place(path, index, header)
            here = placed[key]
            if here is not None and node in here[1]:
                found[node] = _shifted(here[1][node], here[0])
                break
        else:
            return whole_module(module)
    return found


def whole_module(module: cst.Module) -> Ranges:
    """Ranges of every node, from one code generation pass over the module."""
    state = _state(module)
    module._codegen(state)
    return state.provider._computed


class _Collector:
    """Stands in for libcst's PositionProvider: the codegen state writes into `_computed`."""

    def __init__(self) -> None:
        self._computed: Ranges = {}


def _state(module: cst.Module) -> PositionProvidingCodegenState:
    from libcst.metadata.position_provider import PositionProvidingCodegenState  # libcst loads lazily

    return PositionProvidingCodegenState(default_indent=module.default_indent,
                                         default_newline=module.default_newline, provider=_Collector())


def ancestor_paths(module: cst.Module, wanted: set[cst.CSTNode]) -> dict[cst.CSTNode, tuple[cst.CSTNode, ...]]:
    """The chain of ancestors (module first, the node itself last) of each wanted node that `children`
    reaches, from one depth-first walk."""
    # Looked up by id: a libcst node's own __hash__ is Python code, and this asks of every node.
    wanted_ids = {id(node) for node in wanted}
    paths: dict[cst.CSTNode, tuple[cst.CSTNode, ...]] = {}
    path: list[cst.CSTNode] = []
    stack: list[tuple[cst.CSTNode, int]] = [(module, 0)]
    while stack and len(paths) < len(wanted_ids):
        node, depth = stack.pop()
        del path[depth:]
        path.append(node)
        if id(node) in wanted_ids:
            paths[node] = tuple(path)
        below = depth + 1
        stack.extend([(child, below) for child in reversed(children(node))])
    return paths


def _is_statement(node: cst.CSTNode, parent: cst.CSTNode) -> bool:
    # An `elif` is an If inside an If's orelse; alone it would print as `if`, so it is never an anchor.
    return isinstance(node, cst.BaseStatement) and not (isinstance(node, cst.If) and isinstance(parent, cst.If))


# The blocks of a compound statement, after its header; `try` has no header worth generating alone.
_BLOCKS = ("body", "orelse", "handlers", "finalbody")
_PASS_BLOCK = None  # made on first use: libcst loads lazily


def _in_header(statement: cst.CSTNode, child: cst.CSTNode) -> bool:
    """Is `child` (a node directly below the statement) in its header: a `with` item, a loop's target or
    iterable, a test, a `def`'s decorators, parameters or annotations?"""
    if not isinstance(statement, (cst.For, cst.While, cst.If, cst.With, cst.FunctionDef, cst.ClassDef)):
        return False
    if not isinstance(statement.body, cst.IndentedBlock):
        return False  # `if done: break` is one line: nothing to leave out
    return all(child is not getattr(statement, name, None) for name in _BLOCKS)


def _header_only(statement: cst.CSTNode) -> cst.CSTNode:
    """The statement with `pass` for its body and no `else`: generating it places its header's nodes
    as in the whole statement, whose text starts with the header's."""
    global _PASS_BLOCK
    if _PASS_BLOCK is None:
        _PASS_BLOCK = cst.IndentedBlock(body=[cst.SimpleStatementLine(body=[cst.Pass()])])
    changes = {"body": _PASS_BLOCK.with_changes(header=statement.body.header)}  # the `:` line's comment
    if getattr(statement, "orelse", None) is not None:
        changes["orelse"] = None
    return statement.with_changes(**changes)


class _Lines:
    """The source's physical lines, indexed by their text: where a text that starts a line occurs."""

    def __init__(self, source: str) -> None:
        self.source, self.starts = source, line_starts(source)
        self.numbers: dict[str, list[int]] = {}  # a line's text (with its break) -> its 0-based numbers
        for number, line in enumerate(split_lines(source, keepends=True)):
            self.numbers.setdefault(line, []).append(number)

    def only_start(self, text: str) -> int | None:
        """The line at which `text` starts, when it starts exactly one line of the source. Looked up
        by its rarest line, so the candidates are few however long the source is."""
        lines = split_lines(text, keepends=True)
        if not lines:
            return None
        offset, key = min(enumerate(lines), key=lambda item: len(self.numbers.get(item[1], ())))
        found = None
        for number in self.numbers.get(key, ()):
            first = number - offset
            if first >= 0 and self.source.startswith(text, self.starts[first]):
                if found is not None:
                    return None
                found = first
        return found


class _Placer:
    """Where statements start: by their own text when it starts exactly one line of the source, else
    counted from a neighbouring simple statement of the same block whose text does (the statements of
    a block generate consecutive lines), else not at all (the caller tries the enclosing statement)."""

    NEIGHBOURS = 4  # simple statements tried on each side: each costs one small code generation

    def __init__(self, module: cst.Module, lines: _Lines, tree: ast.Module | None) -> None:
        self.module, self.lines, self.tree = module, lines, tree
        self._offsets_of: dict[int, tuple[Sequence[cst.CSTNode], dict[int, int]]] = {}  # see _offsets
        self._indices: dict[int, dict[int, int]] = {}  # id(block) -> id(statement) -> index in its body

    def place(self, path: tuple[cst.CSTNode, ...], index: int, header: bool) -> tuple[int, Ranges] | None:
        """The line path[index] (a statement) starts at (0-based) and its nodes' ranges counted from
        there; with `header`, those of its header only."""
        statement, ancestors = path[index], path[:index]
        line = self._line_from_tree(path, index)
        if line is not None:
            text, ranges = self._generate(_header_only(statement) if header else statement, ancestors)
            if header:  # the text up to the generated `pass`, which the source does not have
                text = "".join(split_lines(text, keepends=True)[:-1])
            if self._verified(line, text) is not None:
                return line, ranges
        text, ranges = self._generate(statement, ancestors)
        line = self.lines.only_start(text)
        if line is None:
            line = self._by_neighbours(statement, ancestors, text)
        return (line, ranges) if line is not None else None

    def _line_from_tree(self, path: tuple[cst.CSTNode, ...], index: int) -> int | None:
        """Where CPython's tree has the statement start, less the comment and blank lines libcst
        generates with it (its own, and those of its first decorator)."""
        if self.tree is None:
            return None
        first = self._ast_line(path, index, self.tree)
        if first is None:
            return None
        statement = path[index]
        decorators = getattr(statement, "decorators", ())
        leading = len(statement.leading_lines) + (len(decorators[0].leading_lines) if decorators else 0)
        return first - 1 - leading

    def _generate(self, statement: cst.CSTNode, ancestors: tuple[cst.CSTNode, ...]) -> tuple[str, Ranges]:
        module = self.module
        state = _state(module)
        state.indent_tokens = [block.indent if block.indent is not None else module.default_indent
                               for block in ancestors if isinstance(block, cst.IndentedBlock)]
        statement._codegen(state)
        return "".join(state.tokens), state.provider._computed

    def _by_neighbours(self, statement: cst.CSTNode, ancestors: tuple[cst.CSTNode, ...], text: str) -> int | None:
        block = ancestors[-1]
        body = getattr(block, "body", None)
        if not isinstance(body, (list, tuple)):
            return None
        index = self._index(block, body).get(id(statement))
        if index is None:
            return None
        between = 0  # lines from the neighbour's start to the statement's
        for neighbour in reversed(body[max(0, index - self.NEIGHBOURS):index]):
            start, length = self._simple(neighbour, ancestors)
            if length is None:
                break
            between += length
            if start is not None:
                return self._verified(start + between, text)
        between = _line_count(text)
        for neighbour in body[index + 1:index + 1 + self.NEIGHBOURS]:
            start, length = self._simple(neighbour, ancestors)
            if length is None:
                break
            if start is not None:
                return self._verified(start - between, text)
            between += length
        return None

    def _simple(self, neighbour: cst.CSTNode, ancestors: tuple[cst.CSTNode, ...]) -> tuple[int | None, int | None]:
        """A simple statement's start line (None: its text is not unique either) and its line count;
        (None, None) for a compound statement, too costly to generate for this."""
        if not isinstance(neighbour, cst.SimpleStatementLine):
            return None, None
        text, _ = self._generate(neighbour, ancestors)
        return self.lines.only_start(text), _line_count(text)

    def _verified(self, line: int, text: str) -> int | None:
        starts = self.lines.starts
        return line if 0 <= line < len(starts) and self.lines.source.startswith(text, starts[line]) else None

    def _ast_line(self, path: tuple[cst.CSTNode, ...], index: int, tree: ast.Module) -> int | None:
        """The line (1-based) at which CPython's tree has the statement path[index] start (its first
        decorator, for a decorated definition), by descending both trees along the path: a block's
        statements are CPython's, one for one, except that a line of `a; b` is several. None where the
        trees do not match (a construct this does not follow, such as `match`)."""
        statements: list[ast.stmt] = tree.body  # CPython's statements of the block being descended
        block: Sequence[cst.CSTNode] = path[0].body  # libcst's
        current: ast.stmt | None = None  # CPython's statement for the last libcst statement on the path
        clause: str | int = "body"  # which block of `current` the next indented block is
        for depth in range(1, index + 1):
            node = path[depth]
            if isinstance(node, cst.If) and isinstance(path[depth - 1], cst.If):  # an `elif`
                if not (isinstance(current, ast.If) and len(current.orelse) == 1
                        and isinstance(current.orelse[0], ast.If)):
                    return None
                current = current.orelse[0]
            elif isinstance(node, cst.BaseStatement):
                at = self._offsets(block).get(id(node))
                if at is None or at >= len(statements):
                    return None
                current, clause = statements[at], "body"
            elif isinstance(node, cst.Else):
                clause = "orelse"
            elif isinstance(node, cst.Finally):
                clause = "finalbody"
            elif isinstance(node, cst.ExceptHandler) and isinstance(path[depth - 1], cst.Try):
                clause = next((i for i, handler in enumerate(path[depth - 1].handlers) if handler is node), None)
                if clause is None:
                    return None
            elif isinstance(node, cst.IndentedBlock) and current is not None:
                if isinstance(clause, int):
                    handlers = getattr(current, "handlers", [])
                    statements = handlers[clause].body if clause < len(handlers) else []
                else:
                    statements = getattr(current, clause, None) or []
                block = node.body
            else:
                return None
        if current is None:
            return None
        decorators = getattr(current, "decorator_list", None)
        return decorators[0].lineno if decorators else current.lineno

    def _offsets(self, block: Sequence[cst.CSTNode]) -> dict[int, int]:
        """id(statement) -> the index of its first statement in CPython's block (a line of `a; b` is
        two there), once per block: a module of many loops has a finding in each."""
        known = self._offsets_of.get(id(block))
        if known is None or known[0] is not block:
            offsets, at = {}, 0
            for statement in block:
                offsets[id(statement)] = at
                at += len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1
            known = self._offsets_of[id(block)] = (block, offsets)
        return known[1]

    def _index(self, block: cst.CSTNode, body) -> dict[int, int]:
        if id(block) not in self._indices:
            self._indices[id(block)] = {id(statement): i for i, statement in enumerate(body)}
        return self._indices[id(block)]


def _line_count(text: str) -> int:
    return len(split_lines(text))


def _shifted(span: cst.metadata.CodeRange, lines: int) -> cst.metadata.CodeRange:
    return cst.metadata.CodeRange(cst.metadata.CodePosition(span.start.line + lines, span.start.column),
                                  cst.metadata.CodePosition(span.end.line + lines, span.end.column))
