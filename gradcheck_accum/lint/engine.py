"""Parse once, build the file model, run the rules, turn reports into findings, apply suppressions."""

from __future__ import annotations

import ast
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from gradcheck_accum.lint.lazy import cst

from gradcheck_accum.lint.diagnostics import Finding
from gradcheck_accum.lint.fixes import Fix
from gradcheck_accum.lint.model import FileModel
from gradcheck_accum.lint.positions import node_positions
from gradcheck_accum.lint.rule import Rule
from gradcheck_accum.lint import registry
from gradcheck_accum.lint.rules.housekeeping import UnusedSuppression
from gradcheck_accum.lint.suppressions import parse as parse_suppressions

Rules = Iterable[type[Rule]]


class ParseFailure(Exception):
    """The source is not Python this linter can parse; str(self) is a one-line reason."""


@dataclass
class Analysis:
    module: cst.Module
    findings: list[Finding]
    fixes: dict[Finding, Fix] = field(default_factory=dict)


def parse(source: str) -> cst.Module:
    try:
        with _parser_output_trusted():
            return cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise ParseFailure(_syntax_message(source) or
                           f"syntax error at line {exc.raw_line}, column {exc.raw_column + 1}") from None
    except RecursionError:
        raise ParseFailure("nesting too deep to parse") from None


@contextmanager
def _parser_output_trusted() -> Iterator[None]:
    """Skip libcst's per-node validation while its parser builds the tree: the parser's output is
    valid by construction, and validating ~20 nodes per line costs about a quarter of the parse.
    Nodes built later (by fixes) are validated as usual."""
    validating = cst.CSTNode.__post_init__
    cst.CSTNode.__post_init__ = _no_validation  # type: ignore[method-assign]
    try:
        yield
    finally:
        cst.CSTNode.__post_init__ = validating  # type: ignore[method-assign]


def _no_validation(self: cst.CSTNode) -> None:
    pass


def _syntax_message(source: str) -> str | None:
    """CPython's wording of the error (clearer than libcst's), when CPython rejects the code too."""
    try:
        compile(source, "<file>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as exc:
        return f"syntax error at line {exc.lineno}, column {exc.offset or 1}: {exc.msg}"
    except (ValueError, RecursionError, MemoryError) as exc:
        return f"cannot parse: {exc}"
    return None


def analyze(source: str, path: str, rules: Rules, enabled: set[str] | None = None,
            hollowed: str | None = None) -> Analysis:
    """Lint one file's text with the given rule classes. Raises ParseFailure on unparseable source.

    `enabled` are the codes selected for this file (default: those of `rules`); ACC900 judges a
    suppression unused only for those, since a prefiltered rule can report nothing here.
    `hollowed`: the same file with the definitions these rules cannot need left out (hollow.py),
    parsed instead of `source`; every line and column the rules can report on is the same in both.
    """
    rules = list(rules)
    parsed = source if hollowed is None else hollowed
    module = parse(parsed)
    model = FileModel(module)
    reports = [(rule, report) for rule in rules for report in rule().check(model)]
    entries: dict[Finding, Fix | None] = {}
    if reports:
        # Positions are computed only for files that have something to report.
        positions = node_positions(module, parsed, (report.node for _, report in reports))
        for rule, report in reports:
            span, fix = positions[report.node], report.fix
            finding = Finding(path, span.start.line, span.start.column + 1, span.end.line, span.end.column + 1,
                              rule.code, rule.name, report.message,
                              fix.safety if fix else None, fix.description if fix else None)
            entries.setdefault(finding, fix)
    if not entries and UnusedSuppression not in rules:
        return Analysis(module, [])  # nothing to hide and no suppression to judge: skip reading comments
    suppressions = parse_suppressions(source)
    if suppressions.skip_file:
        return Analysis(module, [])
    if UnusedSuppression in rules:
        enabled = enabled if enabled is not None else {rule.code for rule in rules}
        known = set(registry.codes())
        for finding, fix in UnusedSuppression.stale(path, suppressions, list(entries), enabled, known):
            entries.setdefault(finding, fix)
    findings = sorted(f for f in entries if not suppressions.hides(f))
    return Analysis(module, findings, {f: entries[f] for f in findings if entries[f] is not None})


def lint_source(source: str, path: str, rules: Rules) -> list[Finding]:
    return analyze(source, path, rules).findings


@dataclass
class FixResult:
    source: str
    fixed: list[Finding]
    remaining: list[Finding]


def fix_source(source: str, path: str, rules: Rules, unsafe: bool = False, max_passes: int = 25,
               enabled: set[str] | None = None) -> FixResult:
    """Apply fixes one at a time, re-linting after each, until none applies (ruff's fixed-point loop).

    A fix whose result does not parse, or changes nothing, is skipped and its finding kept.
    """
    rules = list(rules)
    fixed: list[Finding] = []
    skipped: set[tuple[str, int, int]] = set()
    for _ in range(max_passes):
        analysis = analyze(source, path, rules, enabled)
        candidates = [(f, fix) for f, fix in analysis.fixes.items()
                      if (fix.safe or unsafe) and (f.code, f.line, f.column) not in skipped]
        if not candidates:
            return FixResult(source, fixed, analysis.findings)
        finding, fix = candidates[0]
        new_source = fix.apply(analysis.module)
        try:
            parse(new_source)
        except ParseFailure:
            new_source = source
        if new_source == source:
            skipped.add((finding.code, finding.line, finding.column))
            continue
        source = new_source
        fixed.append(finding)
    return FixResult(source, fixed, analyze(source, path, rules, enabled).findings)
