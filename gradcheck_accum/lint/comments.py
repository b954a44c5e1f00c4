"""Comments, and the lines a comment can end, read from tokens (never from patterns over the text).

A `# noqa` belongs at the end of a line, but not every line has an end a comment can follow: a line
inside a triple-quoted string ends inside the string, and a line ending in a backslash continues on
the next one. As in ruff, such a line's comment goes where its string or continuation ends: that is
the line's *home*, where a suppression for it is read and where `--add-noqa` writes one.

Lines are physical lines as Python counts them (lines.py): a form feed or U+2028 breaks none.
"""

from __future__ import annotations

import io
import tokenize
from dataclasses import dataclass, field
from typing import NamedTuple

from gradcheck_accum.lint.lines import split_lines

_FSTRING_START = getattr(tokenize, "FSTRING_START", None)  # Python 3.12+ splits f-strings into parts
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)


class Comment(NamedTuple):
    line: int
    column: int  # 0-based, in characters
    text: str  # from "#" to the end of the line


@dataclass
class Layout:
    comments: dict[int, Comment] = field(default_factory=dict)  # line -> the comment that ends it
    homes: dict[int, int] = field(default_factory=dict)  # line -> line where its comment goes (when not itself)

    def home(self, line: int) -> int:
        return self.homes.get(line, line)


def layout_of(source: str) -> Layout:
    """The comments of `source` and the home of every line whose end no comment can follow. Source
    that tokenize rejects (libcst accepted it) falls back to comments found on whole lines only."""
    lines = split_lines(source)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source, newline=None).readline))
    except (tokenize.TokenError, SyntaxError):
        return Layout({i: Comment(i, line.index("#"), line[line.index("#"):])
                       for i, line in enumerate(lines, 1) if line.lstrip().startswith("#")})
    result = Layout()
    closed_inside: dict[int, int] = {}  # line ending inside a string -> the line the string ends
    fstrings: list[int] = []
    for token in tokens:
        if token.type == tokenize.COMMENT:
            result.comments[token.start[0]] = Comment(token.start[0], token.start[1], token.string)
        elif token.type == _FSTRING_START:
            fstrings.append(token.start[0])
        elif token.type == _FSTRING_END and fstrings:
            _spans(closed_inside, fstrings.pop(), token.end[0])
        elif token.type == tokenize.STRING and not fstrings:
            _spans(closed_inside, token.start[0], token.end[0])
    for number in range(len(lines), 0, -1):  # last line first, so a chain resolves in one pass
        if number in closed_inside:
            target = closed_inside[number]
        elif lines[number - 1].endswith("\\") and number not in result.comments and number < len(lines):
            target = number + 1
        else:
            continue
        result.homes[number] = result.homes.get(target, target)
    return result


def _spans(closed_inside: dict[int, int], first: int, last: int) -> None:
    for line in range(first, last):
        closed_inside[line] = last
