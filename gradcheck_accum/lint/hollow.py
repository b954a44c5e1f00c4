"""Parse only what can matter: a top-level function or class that no training loop depends on is
given to libcst with its body replaced by `...`, its other lines left blank, so every line and
column of the code that is parsed stays where it was. A 3,000-line test module with one training
function then costs libcst a few hundred lines.

A definition is left out only when each of these holds (checked on CPython's tree and on the text
with comments and plain strings blanked, see outline.py):
1. none of its loops reaches a backward call, so it holds no accumulation window;
2. it imports nothing (an import qualifies names in every scope walked after it);
3. no kept code calls or names a function or class defined in it (a helper brings its effects into
   the window; one passed by name, a DataLoader's collate_fn or a callback, is read where it is passed);
4. kept code names none of the `self.` attributes it mentions (the loss tracer reads every
   assignment to `self.criterion` in the file);
5. it contains none of the words of what the candidate rules read outside windows
   (`Rule.reads_outside_windows`, turned into words by evidence.py from the catalogue);
6. when a candidate rule reads the callers of the functions that hold windows (`Fact.CALLERS`:
   is an epoch repeated?), it calls no function defined in kept code;
7. no kept code looks its module's names up by a name chosen at run time (`globals()[arch]()`,
   a registry of model factories): any definition may be the one it runs.
Kept code is everything else; 3, 4 and 6 are applied again whenever a definition is kept, until
nothing changes. These follow what the file model reads (model.py, events.py); tests compare
findings on hollowed and whole files over the fixtures and a corpus of real code.
"""

from __future__ import annotations

import ast
import bisect
import re
import warnings

from gradcheck_accum.lint.evidence import tokens
from gradcheck_accum.lint.outline import Outline, TopLevel
from gradcheck_accum.lint.rule import Rule
from gradcheck_accum.lint.vocabulary import Fact

_NAME = re.compile(r"\b[^\W\d]\w*")  # an identifier (Unicode letters too)
_LOOKS_UP_GLOBALS = re.compile(r"\bglobals\s*\(\s*\)")
_SELF_ATTRIBUTE = re.compile(r"\bself(?:\s|\\)*\.(?:\s|\\)*(\w+)")


def hollow(outline: Outline, rules: list[type[Rule]]) -> str | None:
    """The outlined text with every definition the rules cannot need reduced to `...`, or None when
    nothing can be left out."""
    words: set[str] = set()
    callers = False
    for rule in rules:
        if rule.reads_outside_windows is None:
            return None
        for need in rule.reads_outside_windows:
            words.update(token.removesuffix("(") for token in tokens(need))  # calls are names in any form
            callers = callers or need is Fact.CALLERS
    code = outline.code
    left_out: dict[int, TopLevel] = {}  # id(top) -> top, in file order
    for top in outline.tops:
        start, end = outline.span(top.node)
        if _body_lines(outline, top.node) is not None and not top.imports \
                and not outline.holds_training_loop(top) and not any(w in code[start:end] for w in words):
            left_out[id(top)] = top
    kept = [top for top in outline.tops if id(top) not in left_out]
    if any(_LOOKS_UP_GLOBALS.search(code, *outline.span(top.node)) for top in kept):
        return None
    names_in = _defined_names_in(outline, left_out)
    named = set().union(*(names_in.get(id(top), set()) for top in kept))
    attributes = set().union(*(_attributes(outline, top) for top in kept))
    defined = set().union(*(top.defines for top in kept)) if callers else set()
    mentions = {key: _attributes(outline, top) for key, top in left_out.items()}
    changed = True
    while changed and left_out:
        changed = False
        for key, top in list(left_out.items()):
            mentioned = mentions[key]
            if top.defines & named or mentioned & attributes or (callers and outline.called_in(top.node) & defined):
                del left_out[key]
                named |= names_in.get(key, set())
                attributes |= mentioned
                if callers:
                    defined |= top.defines
                changed = True
    if not left_out:
        return None
    lines = outline.text.split("\n")
    for top in left_out.values():
        first, last = _body_lines(outline, top.node)
        line = lines[first - 1]
        lines[first - 1] = line[: len(line) - len(line.lstrip(" \t\x0c"))] + "..."
        for index in range(first, last):
            lines[index] = ""
    text = "\n".join(lines)
    try:  # cheap (the text is mostly blank lines) and keeps an unforeseen layout from reaching libcst
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes and the like: not ours to print
            ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return text


def _defined_names_in(outline: Outline, left_out: dict[int, TopLevel]) -> dict[int, set[str]]:
    """id(top) -> the names of the definitions left out that the statement mentions in code (called or
    not), found by one scan of the blanked text."""
    defined = set().union(*(top.defines for top in left_out.values()))
    if not defined:
        return {}
    starts = [outline.span(top.node)[0] for top in outline.tops]
    found: dict[int, set[str]] = {}
    for match in _NAME.finditer(outline.code):  # every name, filtered: one pattern, whatever `defined` holds
        if match.group() in defined:
            index = bisect.bisect_right(starts, match.start()) - 1
            if index >= 0:
                found.setdefault(id(outline.tops[index]), set()).add(match.group())
    return found


def _body_lines(outline: Outline, node: ast.stmt) -> tuple[int, int] | None:
    """First and last line of a function's or class's body, when the body starts on a line of its own."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or node.end_lineno is None:
        return None
    first = node.body[0]
    decorators = getattr(first, "decorator_list", None)
    start = decorators[0] if decorators else first
    line = outline.text[outline.line_starts[start.lineno - 1]:outline.line_starts[start.lineno]]
    before = line.encode("utf-8")[: start.col_offset].strip(b" \t\x0c")
    if before != (b"@" if decorators else b""):
        return None  # `def f(): return x`: the body shares the header's line (or an odd decorator)
    return start.lineno, node.end_lineno


def _attributes(outline: Outline, top: TopLevel) -> set[str]:
    start, end = outline.span(top.node)
    return set(_SELF_ATTRIBUTE.findall(outline.code, start, end))
