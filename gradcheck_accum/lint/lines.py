"""Physical lines as Python counts them: broken by `\\r\\n`, `\\r` or `\\n` and nothing else.

`str.splitlines` also breaks at form feeds, `\\x1c`-`\\x1e`, `\\x85`, U+2028 and U+2029, which may sit
inside a line of code (a form feed between functions, U+2028 in a string literal); counting lines
with it puts edits and positions on the wrong line.
"""

from __future__ import annotations

import re

LINE_BREAK = re.compile(r"\r\n|\r|\n")
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(text: str, keepends: bool = False) -> list[str]:
    """The physical lines of `text`; like `str.splitlines`, no empty last line after a final break."""
    lines = _LINE.findall(text)
    return lines if keepends else [line.rstrip("\r\n") for line in lines]


def line_starts(text: str) -> list[int]:
    """The offset at which each physical line starts (line 1 at index 0)."""
    return [0] + [match.end() for match in LINE_BREAK.finditer(text)]


def first_line_break(text: str, default: str = "\n") -> str:
    match = LINE_BREAK.search(text)
    return match.group() if match else default
