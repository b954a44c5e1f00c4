"""Skip what cannot match, before libcst ever sees a file.

Stage 1 is textual: each rule declares substrings it `needs` (all) and `tokens` (any); a rule whose
condition fails on the file's text cannot report anything there. Stage 2 is for the rules that
only report inside a training loop (their needs include "backward("): the calls a rule needs must
appear in code, not only in comments or docstrings, and CPython's own parser (several times faster
than libcst) checks that some loop reaches a backward call, directly or through a function of the
same file. Both stages are necessary conditions of the analysis, never heuristics:
tests lint a large corpus with and without them and compare.
"""

from __future__ import annotations

import ast
import bisect
import re

from gradcheck_accum.lint.rule import Rule

LOOP_MARK = "backward("


def rules_that_could_fire(text: str, rules: list[type[Rule]]) -> list[type[Rule]]:
    candidates = [rule for rule in rules if rule.could_fire(text)]
    if any(LOOP_MARK in rule.needs for rule in candidates):
        # The few files that get this far are worth a closer look before libcst parses them.
        text = _one_newline(text)
        code = _blank_strings_and_comments(text)
        candidates = [rule for rule in candidates if rule.could_fire_in_code(code)]
        if any(LOOP_MARK in rule.needs for rule in candidates) and not loop_reaches_backward(text, code):
            candidates = [rule for rule in candidates if LOOP_MARK not in rule.needs]
    return candidates


def loop_reaches_backward(text: str, code: str | None = None) -> bool:
    """Does a `for`/`while` loop call `.backward(...)`/`manual_backward(...)`, or a function defined in
    this file that (transitively) does? Unparseable text with a backward call answers True: libcst
    will say why.

    Only statements are walked in Python; the calls inside a loop or a function are the call-shaped
    names (`name(`) within its lines, found by one regular-expression pass over the file with
    comments and plain strings blanked out (f-strings are kept: they may hold calls). That
    over-approximates (a nested function's calls count for its parent), which is safe for a
    necessary condition and several times cheaper than visiting every node. `code`: when the caller
    has it, the text blanked by `_blank_strings_and_comments`; both then have \\n line breaks only.
    """
    if code is None:
        text = _one_newline(text)
        code = _blank_strings_and_comments(text)
    if not _BACKWARD_CALL.search(code):  # only in docstrings, messages or comments: no need to parse
        return False
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True
    line_starts = [0] + [m.end() for m in _NEWLINE.finditer(text)] + [len(text) + 1]
    calls = [(m.start(), m.group(1)) for m in _CALL.finditer(code)]
    offsets = [offset for offset, _ in calls]

    def called_in(node: ast.stmt) -> set[str]:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())])
        last = node.end_lineno or node.lineno
        lo = bisect.bisect_left(offsets, line_starts[first - 1])
        hi = bisect.bisect_left(offsets, line_starts[min(last, len(line_starts) - 1)])
        return {name for _, name in calls[lo:hi]}

    in_loops: set[str] = set()
    calls_of: dict[str, set[str]] = {}
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            in_loops |= called_in(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            calls_of.setdefault(node.name, set()).update(called_in(node))
        for field in _BODIES:
            for child in getattr(node, field, ()):
                if isinstance(child, (ast.stmt, ast.ExceptHandler, ast.match_case)):
                    stack.append(child)
    reaching = {"backward", "manual_backward"}
    changed = True
    while changed:
        changed = False
        for function, callees in calls_of.items():
            if function not in reaching and callees & reaching:
                reaching.add(function)
                changed = True
    return bool(in_loops & reaching)


# Compound statements keep their statements in these fields (handlers and match cases hold bodies too).
_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")
# A name followed by "(", allowing what may sit between them in real code: spaces, line breaks,
# backslash continuations and comments (a comment runs to its line break, so the pattern cannot
# backtrack exponentially).
_CALL = re.compile(r"\b(\w+)(?:\s|\\|#[^\n]*\n)*\(")
_NEWLINE = re.compile("\n")
_BACKWARD_CALL = re.compile(r"backward(?:\s|\\)*\(")  # in blanked code; also matches manual_backward(


def _one_newline(text: str) -> str:
    """Line breaks as CPython's tokenizer counts them: \\r\\n, \\r and \\n end a line, nothing else does."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _blank_strings_and_comments(text: str) -> str:
    """`text` with the insides of comments and of string literals other than f-strings replaced by
    spaces (line breaks kept, so offsets and line numbers stay). Scanned left to right like the
    tokenizer, so a quote in a comment or a `#` in a string is read as Python reads it."""
    pieces, last = [], 0
    for match in _STRING_OR_COMMENT.finditer(text):
        if "f" in (match.group("prefix") or "").lower():
            continue
        pieces += [text[last:match.start()], _NOT_NEWLINE.sub(" ", match.group())]
        last = match.end()
    pieces.append(text[last:])
    return "".join(pieces)


_STRING_OR_COMMENT = re.compile(
    r"#[^\n]*"
    r"|(?P<prefix>[rRbBuUfF]{0,2})(?:"
    r"'''(?:\\[\s\S]|[^\\])*?'''"  # triple-quoted: up to the first unescaped closing triple
    r'|"""(?:\\[\s\S]|[^\\])*?"""'
    r"|'(?:\\[\s\S]|[^'\\\n])*'"  # single-quoted: one line, unless a backslash continues it
    r'|"(?:\\[\s\S]|[^"\\\n])*"'
    r")"
)
_NOT_NEWLINE = re.compile(r"[^\n]")
