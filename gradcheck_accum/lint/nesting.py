"""Syntax nested deeper than libcst can take is refused with one line before libcst sees it.

libcst's parser needs time and memory that grow faster than the depth of an expression (1,000
nested calls: 43 s and 2 GB; a 1,000-term sum 0.75 s, a 7,000-term one four minutes), and its native
code overflows the stack of a process on a few thousand levels, killing it. CPython parses all of
these in milliseconds. So a file whose syntax tree is deeper than MAX_DEPTH gets one error.

Checking costs a scan of the text: an expression cannot be deeper than the number of characters of
its logical line, so CPython's parser (several times faster than libcst's) measures the depth only
in files with a logical line longer than MAX_DEPTH characters, or with more brackets open at once
than CPython accepts (it says why).
"""

from __future__ import annotations

import ast
import re
import sys
import warnings

from gradcheck_accum.lint.outline import blank_strings_and_comments, one_newline

MAX_DEPTH = 1000
MAX_BRACKETS = 200  # CPython's own limit on brackets open at once


def too_deep(source: str) -> str | None:
    """Why libcst must not parse `source`, or None when it may."""
    code = blank_strings_and_comments(one_newline(source))
    if not _may_be_too_deep(code):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes and the like: not ours to print
            tree = ast.parse(source)
    except SyntaxError as exc:
        if _newer_syntax(exc, source) and not _may_be_too_deep(code, max_line=None):
            return None  # libcst reads it, and says so if it is not Python after all
        return f"syntax error at line {exc.lineno}, column {exc.offset or 1}: {exc.msg}"
    except (RecursionError, MemoryError, ValueError):
        return f"nested too deeply to parse (accumcheck reads up to {MAX_DEPTH} levels)"
    line = _first_line_deeper_than(tree, MAX_DEPTH)
    if line is None:
        return None
    return f"nested more than {MAX_DEPTH} levels deep at line {line}; accumcheck does not analyse such files"


def _newer_syntax(exc: SyntaxError, source: str) -> bool:
    """Syntax that CPython before 3.12 rejects and 3.12 accepts: an f-string of PEP 701 (the enclosing
    quote reused inside a replacement field, backslashes and comments there), or PEP 695's `type X = ...`
    and type parameters (`class Box[T]:`, `def first[T](...)`). Code written for 3.12 is linted the same
    whatever Python runs the linter: without CPython's tree its depth is unmeasured, so such a file goes
    to libcst when its brackets are within CPython's limit."""
    if sys.version_info >= (3, 12):
        return False
    if (exc.msg or "").startswith("f-string"):
        return True
    lines = source.splitlines()
    line = lines[exc.lineno - 1] if exc.lineno is not None and 0 < exc.lineno <= len(lines) else ""
    return _TYPE_PARAMETERS.match(line) is not None


_TYPE_PARAMETERS = re.compile(r"\s*(?:type\s+\w+\s*[=\[]|(?:async\s+)?def\s+\w+\s*\[|class\s+\w+\s*\[)")


def _may_be_too_deep(code: str, max_line: int | None = MAX_DEPTH) -> bool:
    """Whether `code` (strings and comments blanked) has a logical line longer than `max_line`
    characters, or more brackets open than CPython allows (MAX_BRACKETS)."""
    current = depth = 0
    for line in code.split("\n"):
        current += len(line) + 1
        opened = line.count("(") + line.count("[") + line.count("{")
        if (max_line is not None and current > max_line) or depth + opened > MAX_BRACKETS:
            return True
        depth += opened - line.count(")") - line.count("]") - line.count("}")
        if depth <= 0 and not line.endswith("\\"):
            current = depth = 0
    return False


def _first_line_deeper_than(tree: ast.AST, limit: int) -> int | None:
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return getattr(node, "lineno", 1)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return None
