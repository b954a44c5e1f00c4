"""Parse once, build the file model, run the rules, turn reports into findings, apply suppressions."""

from __future__ import annotations

from typing import Iterable, Sequence

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from gradcheck_accum.lint.diagnostics import Finding
from gradcheck_accum.lint.model import FileModel
from gradcheck_accum.lint.rule import Rule
from gradcheck_accum.lint.suppressions import filter_suppressed


class ParseFailure(Exception):
    """The source is not Python this linter can parse; str(self) is a one-line reason."""


def lint_source(source: str, path: str, rules: Sequence[type[Rule]] | Iterable[type[Rule]]) -> list[Finding]:
    """Lint one file's text with the given rule classes. Raises ParseFailure on unparseable source."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise ParseFailure(f"syntax error at {exc.raw_line}:{exc.raw_column + 1}: {exc.message}") from None
    model = FileModel(module)
    reports = [(rule, report) for rule in rules for report in rule().check(model)]
    if not reports:
        return []
    # Positions are computed only for files that have something to report.
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    findings = []
    for rule, (node, message) in reports:
        span = positions[node]
        findings.append(
            Finding(path, span.start.line, span.start.column + 1, span.end.line, span.end.column + 1,
                    rule.code, rule.name, message)
        )
    return filter_suppressed(sorted(set(findings)), source)
