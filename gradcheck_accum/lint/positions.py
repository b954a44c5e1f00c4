"""Line/column ranges of the reported nodes, without generating code for the whole module.

libcst knows positions only through code generation, and generating a large module costs as much
as parsing it. A node's range is fixed by its innermost enclosing statement: generate that
statement alone (with the indentation of the blocks around it), find its text in the source, and
shift the ranges by where it starts. The text must occur exactly once in the source for that to be
certain; otherwise the next enclosing statement is tried, and the whole module as a last resort.
A statement starts a line, so its text is looked up by its lines (`_Lines`), never by a search of
the whole source, which for a file with a finding every few lines would cost the square of its size.
The ranges are libcst's own (its code generation state computes them), so they equal those of
libcst's PositionProvider.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from gradcheck_accum.lint.lazy import cst

from gradcheck_accum.lint.lines import line_starts, split_lines
from gradcheck_accum.lint.names import children

if TYPE_CHECKING:
    from libcst.metadata.position_provider import PositionProvidingCodegenState

Ranges = dict["cst.CSTNode", "cst.metadata.CodeRange"]  # strings: libcst loads lazily


def node_positions(module: cst.Module, source: str, nodes: Iterable[cst.CSTNode]) -> Ranges:
    wanted = set(nodes)
    paths = ancestor_paths(module, wanted)
    if len(paths) < len(wanted):  # a node outside the fields `children` reads: take the long road
        return whole_module(module)
    found: Ranges = {}
    # id(statement) -> the line it starts at (0-based) and its nodes' ranges within it (None: it could
    # not be placed); only the wanted nodes' ranges are shifted to the file's lines
    placed: dict[int, tuple[int, Ranges] | None] = {}
    placer = _Placer(module, _Lines(source))
    for node, path in paths.items():
        for index in range(len(path) - 1, 0, -1):
            statement = path[index]
            if not _is_statement(statement, path[index - 1]):
                continue
            if id(statement) not in placed:
                placed[id(statement)] = placer.place(statement, path[:index])
            here = placed[id(statement)]
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

    def __init__(self, module: cst.Module, lines: _Lines) -> None:
        self.module, self.lines = module, lines
        self._indices: dict[int, dict[int, int]] = {}  # id(block) -> id(statement) -> index in its body

    def place(self, statement: cst.CSTNode, ancestors: tuple[cst.CSTNode, ...]) -> tuple[int, Ranges] | None:
        """The line the statement starts at (0-based) and its nodes' ranges counted from there."""
        text, ranges = self._generate(statement, ancestors)
        line = self.lines.only_start(text)
        if line is None:
            line = self._by_neighbours(statement, ancestors, text)
        return (line, ranges) if line is not None else None

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

    def _index(self, block: cst.CSTNode, body) -> dict[int, int]:
        if id(block) not in self._indices:
            self._indices[id(block)] = {id(statement): i for i, statement in enumerate(body)}
        return self._indices[id(block)]


def _line_count(text: str) -> int:
    return len(split_lines(text))


def _shifted(span: cst.metadata.CodeRange, lines: int) -> cst.metadata.CodeRange:
    return cst.metadata.CodeRange(cst.metadata.CodePosition(span.start.line + lines, span.start.column),
                                  cst.metadata.CodePosition(span.end.line + lines, span.end.column))
