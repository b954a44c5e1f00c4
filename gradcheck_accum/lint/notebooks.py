"""Jupyter notebooks: the code cells, in order, linted as one program.

Each cell's lines go into the program after a marker statement that names the cell: a statement,
not a comment, so that no fix carries it along with a moved line (a cell always starts at the top
level, where a statement is always valid). IPython syntax is not Python: `%magic` and `!shell`
lines with their `\\` continuation lines, `%%cell magics`, `x = !cmd`, `obj?` help, `/f x` escapes.
Each such line becomes a placeholder comment (an indented one a `pass`, so its block stays a block)
that names the line, so the program parses, every line keeps its place, and `--fix` puts the line
back wherever its placeholder ends up. Markers and placeholders carry a token that occurs nowhere
in the notebook, so no line of the user's can be taken for one.

`--fix` splits the fixed program back into its cells and replaces, in the notebook's text, only the
`source` of each cell that changed, written in the style it had; every other byte is kept.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

from gradcheck_accum.lint.diagnostics import Finding
from gradcheck_accum.lint.digests import content_hash
from gradcheck_accum.lint.lines import first_line_break, split_lines


class NotebookError(Exception):
    """The file is not a notebook we can read; str(self) is a one-line reason."""


class NotPython(NotebookError):
    """A notebook of another language (R, Julia, ...): nothing to lint."""


@dataclass
class Notebook:
    data: dict
    code_cells: list[int]  # indices into data["cells"] of the code cells
    program: str
    # For each line of `program` (0-based): (cell number, 1-based, counting all cells; line in cell, 1-based)
    lines: list[tuple[int, int] | None]
    text: str  # the notebook file's text, as read
    token: str  # in every marker and placeholder; found nowhere in `text`
    ipython: list[str]  # the IPython lines, numbered as their placeholders

    def locate(self, finding: Finding) -> Finding:
        """The finding with its line counted inside its cell; the cell goes in `cell`."""
        start = self.lines[finding.line - 1] if finding.line - 1 < len(self.lines) else None
        end = self.lines[finding.end_line - 1] if finding.end_line - 1 < len(self.lines) else None
        if start is None:
            return finding
        end_line = end[1] if end is not None and end[0] == start[0] else start[1]
        return replace(finding, line=start[1], end_line=end_line, cell=start[0])


def load(text: str) -> Notebook:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise NotebookError(f"not a Jupyter notebook (invalid JSON: {exc})") from None
    cells = _cells(data)
    token = _unused_token(text)
    code_cells = [i for i, cell in enumerate(cells) if cell.get("cell_type") == "code"]
    program_lines: list[str] = []
    lines: list[tuple[int, int] | None] = []
    ipython: list[str] = []
    for index in code_cells:
        program_lines.append(_marker(token, index))
        lines.append(None)
        for number, line in enumerate(_python_lines(cell_source(cells[index]), token, ipython), start=1):
            program_lines.append(line)
            lines.append((index + 1, number))
    return Notebook(data, code_cells, "\n".join(program_lines) + "\n", lines, text, token, ipython)


def cell_source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _cells(data: object) -> list[dict]:
    """The notebook's cells, after checking the structure this module reads (nbformat 4)."""
    if not isinstance(data, dict):
        raise NotebookError(f"not a Jupyter notebook (the top level is {_kind(data)}, not an object)")
    metadata = data.get("metadata", {})
    if not isinstance(metadata, dict):
        raise NotebookError(f"malformed notebook: 'metadata' is {_kind(metadata)}, not an object")
    language = _language(metadata)
    if language.lower() not in ("python", "python3", "ipython", "ipython3"):
        raise NotPython(f"notebook language is {language!r}, not Python")
    if "cells" not in data:
        raise NotebookError("not a Jupyter notebook (no 'cells'; nbformat 3 notebooks, with 'worksheets', "
                            "are not supported)" if "worksheets" in data else "not a Jupyter notebook (no 'cells')")
    cells = data["cells"]
    if not isinstance(cells, list):
        raise NotebookError(f"malformed notebook: 'cells' is {_kind(cells)}, not a list")
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict):
            raise NotebookError(f"malformed notebook: cell {number} is {_kind(cell)}, not an object")
        source = cell.get("source", "")
        if not (isinstance(source, str) or isinstance(source, list) and all(isinstance(s, str) for s in source)):
            raise NotebookError(f"malformed notebook: the source of cell {number} is {_kind(source)}, "
                                "not text or a list of lines")
    return cells


def _language(metadata: dict) -> str:
    for key, field in (("language_info", "name"), ("kernelspec", "language")):
        table = metadata.get(key)
        if isinstance(table, dict) and isinstance(table.get(field), str):
            return table[field]
    return "python"


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number"}.get(type(value), type(value).__name__)


def _unused_token(text: str) -> str:
    digest = content_hash(text, size=8)
    while digest in text:
        digest = content_hash(digest, size=8)
    return digest


def _marker(token: str, index: int) -> str:
    return f"__accumcheck_cell_{token}__ = {index}"


def _placeholder(token: str, number: int, indent: str, statement: bool) -> str:
    comment = f"# accumcheck-ipython-{token} {number}"
    return f"{indent}pass  {comment}" if statement else indent + comment


# IPython's help syntax at the end of a line (`obj?`, `np.*load*??`, `%timeit?`), after IPython's own pattern.
_HELP = re.compile(r"%{0,2}(?!\d)[\w*]+(?:\.(?!\d)[\w*]+|\[[0-9]+\])*\?\??")
# `files = !ls`, `a, b = %sx cmd`: a system or magic command whose output is assigned.
_ASSIGNED_COMMAND = re.compile(r"[\w.,\s\[\]()*]+=\s*[!%]")
# What moves the scanner across a line: a comment, a string opening, a bracket.
_SCAN = re.compile(r"#|(?P<quote>[rRbBuUfF]{0,2}(?:'''|\"\"\"|'|\"))|(?P<open>[(\[{])|(?P<close>[)\]}])")


def _python_lines(source: str, token: str, ipython: list[str]) -> list[str]:
    """The cell's lines with every IPython line replaced by a numbered placeholder (its text appended
    to `ipython`). Only the start of a logical line can be IPython, as IPython itself reads it: `%`
    on a line that continues an open bracket is Python's modulo."""
    out: list[str] = []
    cell_magic = source.lstrip().startswith("%%")
    state = _LineState()
    command_continues = False
    opens_block = False  # the last logical line of code ends with ":"
    for line in split_lines(source):
        stripped = line.strip()
        if cell_magic or command_continues or (state.at_logical_start and _is_ipython(stripped)):
            indent = line[:len(line) - len(line.lstrip())]
            # An indented command right after `for ...:` stands as `pass`, so the block is not empty.
            statement = bool(indent) and opens_block and not (cell_magic or command_continues)
            out.append(_placeholder(token, len(ipython), indent, statement))
            ipython.append(line)
            command_continues = stripped.endswith("\\")
            opens_block = opens_block and not statement
            continue
        state.feed(line)
        code = line[:state.code_end].strip()
        if code and state.at_logical_start:
            opens_block = code.endswith(":")
        out.append(line)
    return out


def _is_ipython(stripped: str) -> bool:
    return stripped.startswith(("%", "!", "?", "/", ",", ";")) or _HELP.fullmatch(stripped) is not None \
        or _ASSIGNED_COMMAND.match(stripped) is not None and not stripped.startswith("#") \
        or _is_automagic(stripped)


# Line magics (and IPython's default shell aliases) that IPython's automagic runs without their `%`
# (`cd VL-T5`, `pip install peft`): a line starting with one is a command when it is not Python.
_AUTOMAGICS = frozenset({"cd", "pwd", "pip", "conda", "mamba", "env", "set_env", "ls", "mkdir", "rmdir", "rm", "cp",
                         "mv", "cat", "less", "man", "clear", "load_ext", "reload_ext", "matplotlib", "autoreload",
                         "time", "timeit", "run", "who", "whos", "reset", "bookmark", "dhist", "pushd", "popd"})


def _is_automagic(stripped: str) -> bool:
    word = stripped.split(None, 1)[0] if stripped else ""
    if word not in _AUTOMAGICS or stripped.endswith((":", "\\")):
        return False  # a block header or a continued line is Python's to judge, whole
    try:
        compile(stripped, "<cell line>", "exec")
    except SyntaxError:
        return True
    except (ValueError, OverflowError, MemoryError, RecursionError):  # null bytes, a huge literal
        return False
    return False


class _LineState:
    """Where the Python lines fed so far leave the next one: inside brackets, a string or a
    backslash continuation, or at the start of a logical line."""

    def __init__(self) -> None:
        self.depth = 0
        self.string: str | None = None  # the closing quote of a string that spans lines
        self.backslash = False
        self.code_end = 0  # in the last line fed: where its comment starts, or its length

    @property
    def at_logical_start(self) -> bool:
        return self.depth == 0 and self.string is None and not self.backslash

    def feed(self, line: str) -> None:
        position = 0
        self.backslash = False
        self.code_end = len(line)
        if self.string is not None:
            position = self._close_string(line, 0)
            if position < 0:
                return
        while True:
            match = _SCAN.search(line, position)
            if match is None:
                break
            if match.group() == "#":
                self.code_end = match.start()
                return
            if match.group("open"):
                self.depth += 1
            elif match.group("close"):
                self.depth = max(0, self.depth - 1)
            else:
                quote = match.group("quote").lstrip("rRbBuUfF")
                self.string = quote
                position = self._close_string(line, match.end())
                if position < 0:
                    return
                continue
            position = match.end()
        self.backslash = line.rstrip().endswith("\\")

    def _close_string(self, line: str, start: int) -> int:
        """Past the closing quote of the open string, or -1 when the string goes on past this line."""
        quote = self.string
        i = start
        while i < len(line):
            if line[i] == "\\":
                i += 2
                continue
            if line.startswith(quote, i):
                self.string = None
                return i + len(quote)
            i += 1
        if len(quote) == 1 and not line.endswith("\\"):
            self.string = None  # an unterminated one-line string: Python will say so
        return -1


def write_back(notebook: Notebook, program: str) -> str | None:
    """The notebook's text with the fixed program split back into its cells, or None when the fixed
    program no longer has the cell structure (then nothing is written)."""
    cell_of = {_marker(notebook.token, index): index for index in notebook.code_cells}
    placeholder = re.compile(rf"(\s*)(?:pass  )?# accumcheck-ipython-{notebook.token} (\d+)")
    chunks: dict[int, list[str]] = {}
    order: list[int] = []
    restored_ipython: set[int] = set()
    current: list[str] | None = None
    for line in split_lines(program):
        if line in cell_of:
            order.append(cell_of[line])
            current = chunks[cell_of[line]] = []
            continue
        if current is None:
            return None  # code before the first cell
        match = placeholder.fullmatch(line)
        if match:
            number = int(match.group(2))
            if number >= len(notebook.ipython) or number in restored_ipython:
                return None
            restored_ipython.add(number)
            original = notebook.ipython[number]
            indent = match.group(1)
            if indent and not original.startswith(indent) or original.startswith(indent + " "):
                original = indent + original.lstrip()
            line = original
        current.append(line)
    if order != notebook.code_cells or len(restored_ipython) != len(notebook.ipython):
        return None
    cells = notebook.data["cells"]
    new_sources = {}
    for index in notebook.code_cells:
        old = cell_source(cells[index])
        text = first_line_break(old).join(chunks[index])
        if chunks[index] and (old.endswith(("\n", "\r")) or not old):
            text += first_line_break(old)
        if text != old:
            new_sources[index] = text
    return replace_sources(notebook.text, new_sources) if new_sources else notebook.text


def replace_sources(text: str, sources: dict[int, str]) -> str:
    """`text` with the `source` of the given cells replaced, every other byte kept."""
    spans = _source_spans(text)
    ascii_only = text.isascii()
    pieces, last = [], 0
    for index in sorted(sources):
        start, end = spans[index]
        pieces += [text[last:start], _format_source(text[start:end], sources[index], ascii_only)]
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def _format_source(old: str, new: str, ascii_only: bool) -> str:
    """`new` as a JSON value in the form `old` had: a string, or a list of lines laid out the same way."""
    if old.startswith('"'):
        return json.dumps(new, ensure_ascii=ascii_only)
    items = [json.dumps(line, ensure_ascii=ascii_only) for line in _json_lines(new)]
    inner = old[1:-1]
    if "\n" not in inner and "\r" not in inner:  # on one line: ["a\n", "b"]
        return "[" + ", ".join(items) + "]"
    lead = re.match(r"\s*", inner).group()  # the break and indentation before the first item
    close = re.search(r"\s*$", inner).group()  # and before the closing bracket
    if not items:
        return "[" + close + "]"
    return "[" + lead + ("," + lead).join(items) + close + "]"


def _json_lines(text: str) -> list[str]:
    """nbformat's list form: every line keeps its line break."""
    return split_lines(text, keepends=True)


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _source_spans(text: str) -> dict[int, tuple[int, int]]:
    """Where each cell's `source` value lies in the notebook's text: (start, end) by cell index."""
    spans = {}
    cells = [(start, end) for key, start, end in _members(text, _skip(text, 0)) if key == "cells"][-1]
    for index, (start, _) in enumerate(_elements(text, cells[0])):
        for key, value_start, value_end in _members(text, start):
            if key == "source":
                spans[index] = (value_start, value_end)
    return spans


def source_strings(text: str) -> dict[int, list[tuple[int, str]]]:
    """Each cell's `source` as stored, by cell index: for each of its JSON strings (a list of lines, or
    one string), the offset of its opening quote in `text` and the decoded string. For placing a
    cell position on the file's own lines (GitHub annotations, SARIF)."""
    strings: dict[int, list[tuple[int, str]]] = {}
    for index, (start, end) in _source_spans(text).items():
        items = _elements(text, start) if text[start] == "[" else [(start, end)]
        strings[index] = [(at, _DECODER.raw_decode(text, at)[0]) for at, _ in items if text[at] == '"']
    return strings


def _skip(text: str, position: int) -> int:
    return _WHITESPACE.match(text, position).end()


def _members(text: str, position: int) -> list[tuple[str, int, int]]:
    """(key, value start, value end) of each member of the object that starts at `position`."""
    members = []
    position = _skip(text, position + 1)  # past "{"
    while text[position] != "}":
        key, position = _DECODER.raw_decode(text, position)
        position = _skip(text, _skip(text, position) + 1)  # past ":"
        _, end = _DECODER.raw_decode(text, position)
        members.append((key, position, end))
        position = _skip(text, end)
        if text[position] == ",":
            position = _skip(text, position + 1)
    return members


def _elements(text: str, position: int) -> list[tuple[int, int]]:
    """(start, end) of each element of the array that starts at `position`."""
    elements = []
    position = _skip(text, position + 1)  # past "["
    while text[position] != "]":
        _, end = _DECODER.raw_decode(text, position)
        elements.append((position, end))
        position = _skip(text, end)
        if text[position] == ",":
            position = _skip(text, position + 1)
    return elements
