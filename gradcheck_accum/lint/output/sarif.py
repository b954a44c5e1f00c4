"""SARIF 2.1.0: rule metadata and help from the rule pages, one result per finding, fixes as edits."""

from __future__ import annotations

from gradcheck_accum import __version__
from gradcheck_accum.lint.diagnostics import Finding
from gradcheck_accum.lint.pages import page_text, page_url, section
from gradcheck_accum.lint.registry import rules

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


def _rule(rule) -> dict:
    descriptor = {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": section(rule.code, "What it does") or rule.summary},
        "defaultConfiguration": {"level": "error"},
    }
    page = page_text(rule.code)
    if page:
        descriptor["help"] = {"text": page, "markdown": page}
    url = page_url(rule.code)
    if url:
        descriptor["helpUri"] = url
    return descriptor


def _result(finding: Finding, index: int, edits: dict[Finding, tuple[int, int, str]]) -> dict:
    region = {"startLine": finding.line, "startColumn": finding.column,
              "endLine": finding.end_line, "endColumn": finding.end_column}
    result = {
        "ruleId": finding.code,
        "ruleIndex": index,
        "level": "error",
        "message": {"text": finding.message},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": finding.path}, "region": region}}],
    }
    if finding.cell is not None:
        result["properties"] = {"cell": finding.cell}
    edit = edits.get(finding)
    if edit is not None:
        offset, length, text = edit
        result["fixes"] = [{
            "description": {"text": f"{finding.fix_description} ({finding.fix_safety} fix)"},
            "artifactChanges": [{
                "artifactLocation": {"uri": finding.path},
                "replacements": [{"deletedRegion": {"charOffset": offset, "charLength": length},
                                  "insertedContent": {"text": text}}],
            }],
        }]
    return result


def render(findings: list[Finding], sources: dict[str, str]) -> str:
    index = {rule.code: i for i, rule in enumerate(rules())}
    edits = fix_edits(findings, sources)
    log = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "accumcheck", "version": __version__, "semanticVersion": __version__,
                                "rules": [_rule(rule) for rule in rules()]}},
            "results": [_result(f, index[f.code], edits) for f in findings],
        }],
    }
    import json

    return json.dumps(log, indent=2) + "\n"


def fix_edits(findings: list[Finding], sources: dict[str, str]) -> dict[Finding, tuple[int, int, str]]:
    """Each fixable finding's fix as one text replacement (offset, length, new text) of its file."""
    from gradcheck_accum.lint.engine import ParseFailure, analyze

    edits: dict[Finding, tuple[int, int, str]] = {}
    by_path: dict[str, list[Finding]] = {}
    for f in findings:
        if f.fix_safety and f.cell is None and f.path in sources:
            by_path.setdefault(f.path, []).append(f)
    wanted_rules = [rule for rule in rules() if any(f.code == rule.code for f in findings)]
    for path, wanted in by_path.items():
        old = sources[path]
        try:
            analysis = analyze(old, path, wanted_rules)
        except ParseFailure:
            continue
        for finding, fix in analysis.fixes.items():
            if finding in wanted:
                edits[finding] = _replacement(old, fix.apply(analysis.module))
    return edits


def _replacement(old: str, new: str) -> tuple[int, int, str]:
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    end_old, end_new = len(old), len(new)
    while end_old > start and end_new > start and old[end_old - 1] == new[end_new - 1]:
        end_old, end_new = end_old - 1, end_new - 1
    return start, end_old - start, new[start:end_new]
