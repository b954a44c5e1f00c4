"""A cheap outline of a file on CPython's parser: its statements, and the names called in each.

Only statements are walked in Python; the calls inside a statement are the call-shaped names
(`name(`) within its lines, found by one regular-expression pass over the file with comments and
plain strings blanked out (f-strings are kept: they may hold calls). That over-approximates (a
nested function's calls count for its parent, `def f(` counts as a call of `f`), which is what the
prefilter and the hollowing need: both must only ever keep more than the analysis uses, never less.
"""

from __future__ import annotations

import ast
import bisect
import re
import warnings
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

from gradcheck_accum.lint.evidence import backward_names, process_function_engines

BACKWARDS = backward_names()  # from the catalogue: the calls that backpropagate


@dataclass
class TopLevel:
    """What one top-level statement holds (nested statements included)."""

    node: ast.stmt
    loop_calls: set[str] = field(default_factory=set)  # names called inside its loops
    defines: set[str] = field(default_factory=set)  # names of the functions and classes defined in it, at any depth
    counting: set[str] = field(default_factory=set)  # its classes' methods that add to a `self.` attribute
    imports: bool = False


class Outline:
    def __init__(self, text: str, code: str, tree: ast.Module) -> None:
        self.text, self.code, self.tree = text, code, tree
        self.line_starts = [0] + [m.end() for m in _NEWLINE.finditer(text)] + [len(text) + 1]
        self._calls = [(m.start(), m.group(1)) for m in _CALL.finditer(code)]
        self._offsets = [offset for offset, _ in self._calls]
        self.calls_of: dict[str, set[str]] = {}  # function name -> names it calls (same-named functions merged)
        self._engine_built = _engine_built(code)
        self.tops = [self._summarize(node) for node in tree.body]

    @classmethod
    def parse(cls, text: str, code: str) -> "Outline | None":
        """`text` with \\n line breaks only, `code` the same text blanked by `blank_strings_and_comments`.
        None when CPython rejects the text."""
        tree = python_tree(text)
        return cls(text, code, tree) if tree is not None else None

    def span(self, node: ast.stmt) -> tuple[int, int]:
        """Character offsets of the lines the statement covers, decorators included."""
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())])
        last = node.end_lineno or node.lineno
        return self.line_starts[first - 1], self.line_starts[min(last, len(self.line_starts) - 1)]

    def called_in(self, node: ast.stmt) -> set[str]:
        start, end = self.span(node)
        lo, hi = bisect.bisect_left(self._offsets, start), bisect.bisect_left(self._offsets, end)
        return {name for _, name in self._calls[lo:hi]}

    @cached_property
    def reaching(self) -> set[str]:
        """backward, manual_backward, and every function of this file that (transitively) calls one."""
        reaching = set(BACKWARDS)
        changed = True
        while changed:
            changed = False
            for function, callees in self.calls_of.items():
                if function not in reaching and callees & reaching:
                    reaching.add(function)
                    changed = True
        return reaching

    def holds_training_loop(self, top: TopLevel) -> bool:
        """Does a `for`/`while` loop in this statement reach a backward call? When a class of the file
        backpropagates in its `__call__` (a loss scaler's `scaler(loss, optimizer, update_grad=...)`),
        any call in a loop may be a call of an instance of it.
        A method that counts its calls in an attribute (`self.n_accumulated += 1`) and backpropagates
        may be a loop's body by itself: each call a micro-batch (inlining.Inliner.walk_call_counted)."""
        return (bool(top.loop_calls & self.reaching) or (_CALL_METHOD in self.reaching and bool(top.loop_calls))
                or bool(top.counting & self.reaching))

    def _summarize(self, node: ast.stmt) -> TopLevel:
        top = TopLevel(node)
        # `trainer = Engine(update)`: the engine's `run` calls `update` once per batch, a loop's call
        top.loop_calls.update(match.group(1).rsplit(".", 1)[-1]
                              for match in self._engine_built.finditer(self.code, *self.span(node)))
        stack: list[ast.AST] = [node]
        while stack:
            current = stack.pop()
            if isinstance(current, (ast.For, ast.AsyncFor, ast.While)):
                top.loop_calls |= self.called_in(current)
            elif isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef)):
                top.defines.add(current.name)
                self.calls_of.setdefault(current.name, set()).update(self.called_in(current))
            elif isinstance(current, ast.ClassDef):
                top.defines.add(current.name)  # `Net(...)` builds an instance whose forward a later call runs
                for method in current.body:
                    if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                            _ADDS_TO_SELF.search(self.code, *self.span(method)):
                        top.counting.add(method.name)
            elif isinstance(current, (ast.Import, ast.ImportFrom)):
                top.imports = True
            for name in _BODIES:
                for child in getattr(current, name, ()):
                    if isinstance(child, (ast.stmt, ast.ExceptHandler, ast.match_case)):
                        stack.append(child)
        return top


_CALL_METHOD = "__call__"  # what calling an instance runs
_ENGINES, _PROCESS_KEYWORD = process_function_engines()
_ENGINE_SUBCLASS = re.compile(r"\bclass\s+(\w+)\s*\([^)]*\b(?:" + "|".join(sorted(map(re.escape, _ENGINES))) + r")\b")


@lru_cache(maxsize=64)
def _engine_pattern(engines: frozenset[str]) -> re.Pattern[str]:
    """`Engine(update`, `Engine(process_function=update`, `Engine(Trainer.update` (the function's name last)."""
    return re.compile(r"\b(?:" + "|".join(sorted(map(re.escape, engines))) + r")\s*\(\s*(?:"
                      + _PROCESS_KEYWORD + r"\s*=\s*)?((?:\w+\.)*\w+)")


def _engine_built(code: str) -> re.Pattern[str]:
    """The engines a process function may be handed to in this file: the library's, and this file's
    subclasses of them (`class Trainer(Engine)`, built as `Trainer(Trainer.update, ...)`, which
    over-approximates an `__init__` that hands its first argument on)."""
    subclasses = frozenset(_ENGINE_SUBCLASS.findall(code)) if any(e in code for e in _ENGINES) else frozenset()
    return _engine_pattern(frozenset(_ENGINES) | subclasses)
# Compound statements keep their statements in these fields (handlers and match cases hold bodies too).
_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")
# A name followed by "(", allowing what may sit between them in real code: spaces, line breaks,
# backslash continuations and comments (a comment runs to its line break, so the pattern cannot
# backtrack exponentially).
_CALL = re.compile(r"\b(\w+)(?:\s|\\|#[^\n]*\n)*\(")
_NEWLINE = re.compile("\n")
_ADDS_TO_SELF = re.compile(r"\bself\.\w+\s*\+=")


def one_newline(text: str) -> str:
    """Line breaks as CPython's tokenizer counts them: \\r\\n, \\r and \\n end a line, nothing else does."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


# The last few texts' results are kept: the prefilter's screen and the project summary of the file
# being linted read the same text, one after the other (a parse and a scan each, on every such file).
@lru_cache(maxsize=4)
def python_tree(text: str) -> ast.Module | None:
    """CPython's tree of `text` (\n line breaks only), None when CPython rejects it. Read-only: the
    tree may be shared."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a file's invalid escapes are its own business, not a line of ours
            return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


@lru_cache(maxsize=4)
def blank_strings_and_comments(text: str) -> str:
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


@lru_cache(maxsize=4)
def blank_comments(text: str) -> str:
    """`text` with the insides of its comments replaced by spaces, strings kept (a setting such as
    `strategy="ddp"` is written in one); read as blank_strings_and_comments reads it."""
    pieces, last = [], 0
    for match in _STRING_OR_COMMENT.finditer(text):
        if match.group().startswith("#"):
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
