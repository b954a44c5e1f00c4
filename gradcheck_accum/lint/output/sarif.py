"""SARIF 2.1.0: rule metadata and help from the rule pages, one result per finding, fixes as the
edits the findings carry (the run computes them when this format is asked for)."""

from __future__ import annotations

from gradcheck_accum import __version__
from gradcheck_accum.lint import registry
from gradcheck_accum.lint.diagnostics import Finding
from gradcheck_accum.lint.pages import page_text, page_url, section

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


def _rule(rule: registry.Check) -> dict:
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


def _result(finding: Finding, index: int) -> dict:
    region = {"startLine": finding.line, "startColumn": finding.column,
              "endLine": finding.end_line, "endColumn": finding.end_column}
    if finding.snippet is not None:
        region["snippet"] = {"text": finding.snippet}
    result = {
        "ruleId": finding.code,
        "ruleIndex": index,
        "level": "error",
        "message": {"text": finding.message},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": finding.path}, "region": region}}],
    }
    if finding.cell is not None:
        result["properties"] = {"cell": finding.cell}
    edit = finding.fix_edit
    if edit is not None:
        result["fixes"] = [{
            "description": {"text": f"{finding.fix_description} ({finding.fix_safety} fix)"},
            "artifactChanges": [{
                "artifactLocation": {"uri": finding.path},
                "replacements": [{"deletedRegion": {"charOffset": edit.offset, "charLength": edit.length},
                                  "insertedContent": {"text": edit.text}}],
            }],
        }]
    return result


def render(findings: list[Finding]) -> str:
    checks = registry.checks()
    index = {check.code: i for i, check in enumerate(checks)}
    log = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "accumcheck", "version": __version__, "semanticVersion": __version__,
                                "rules": [_rule(check) for check in checks]}},
            "results": [_result(f, index[f.code]) for f in findings],
        }],
    }
    import json

    return json.dumps(log, indent=2) + "\n"
