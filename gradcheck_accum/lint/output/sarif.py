"""SARIF 2.1.0: rule metadata and help from the rule pages, one result per finding, fixes as the
edits the findings carry (the run computes them when this format is asked for).

Paths are relative to the repository root (`%SRCROOT%` in `originalUriBaseIds`), results carry a
partial fingerprint that survives edits elsewhere in the file, and rule help links to the page in
the repository, as GitHub code scanning expects.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from urllib.parse import quote

from gradcheck_accum.version import __version__
from gradcheck_accum.lint import registry
from gradcheck_accum.lint.diagnostics import Finding
from gradcheck_accum.lint.pages import REPOSITORY, page_text, section
from gradcheck_accum.lint.registry import page_url

ROOT_ID = "%SRCROOT%"
FINGERPRINT = "accumcheck/v1"  # our own key: GitHub computes (and owns) primaryLocationLineHash
SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


def _rule(rule: registry.Check) -> dict:
    descriptor = {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": section(rule.code, "What it does") or rule.summary},
        "defaultConfiguration": {"level": registry.severity(rule.code)},
    }
    page = page_text(rule.code)
    if page:
        descriptor["help"] = {"text": page, "markdown": page}
    url = page_url(rule.code)
    if url:
        descriptor["helpUri"] = url
    return descriptor


def source_root(start: Path | None = None) -> Path:
    """What result paths are relative to: the git repository holding the working directory (code
    scanning matches alerts across runs by repository path), else the working directory."""
    start = (start or Path.cwd()).absolute()
    for directory in [start, *start.parents]:
        if (directory / ".git").exists():
            return directory
    return start


class _Locations:
    """Artifact locations relative to %SRCROOT% (the source root), or absolute `file:` URIs for files
    outside it; regions as stored (notebook cells carried to the raw JSON); fingerprints."""

    def __init__(self, root: Path, notebooks: dict[str, str]) -> None:
        from gradcheck_accum.lint.output.ipynb import FileRegions

        self.root = root
        self.regions = FileRegions(notebooks)
        self.seen: Counter = Counter()

    def artifact(self, path: str) -> dict:
        absolute = Path(os.path.normpath(Path(path).absolute()))
        try:
            relative = absolute.relative_to(self.root)
        except ValueError:
            return {"uri": absolute.as_uri()}
        return {"uri": quote(relative.as_posix()), "uriBaseId": ROOT_ID}

    def region(self, finding: Finding) -> dict:
        line, column, end_line, end_column = self.regions.region(finding)
        region = {"startLine": line, "startColumn": column, "endLine": end_line, "endColumn": end_column}
        if finding.snippet is not None and finding.cell is None:
            region["snippet"] = {"text": finding.snippet}
        return region

    def fingerprint(self, finding: Finding) -> str:
        """Rule, repository path and the reported line's text (not its number, so an edit above does not
        turn an old alert into a new one), and which occurrence of that line text it is."""
        artifact = self.artifact(finding.path)["uri"]
        key = f"{finding.code}\0{artifact}\0{finding.cell}\0{' '.join((finding.snippet or '').split())}"
        self.seen[key] += 1
        import hashlib  # imported when used (as in config.py): a run printing text never pays for OpenSSL
        return hashlib.sha256(f"{key}\0{self.seen[key]}".encode()).hexdigest()[:32]


def _result(finding: Finding, index: int, where: _Locations) -> dict:
    artifact = where.artifact(finding.path)
    result = {
        "ruleId": finding.code,
        "ruleIndex": index,
        "level": registry.severity(finding.code),
        "message": {"text": finding.message if finding.cell is None else
                    f"{finding.message} (cell {finding.cell}, line {finding.line})"},
        "locations": [{"physicalLocation": {"artifactLocation": artifact, "region": where.region(finding)}}],
        "partialFingerprints": {FINGERPRINT: where.fingerprint(finding)},
    }
    if finding.related:
        result["relatedLocations"] = [{
            "id": number,
            "message": {"text": related.message},
            "physicalLocation": {"artifactLocation": {"uri": related.path},
                                 "region": {"startLine": related.line, "startColumn": related.column}},
        } for number, related in enumerate(finding.related, 1)]
    if finding.cell is not None:
        result["properties"] = {"cell": finding.cell, "cellLine": finding.line, "cellColumn": finding.column}
    edit = finding.fix_edit
    if edit is not None:
        result["fixes"] = [{
            "description": {"text": f"{finding.fix_description} ({finding.fix_safety} fix)"},
            "artifactChanges": [{
                "artifactLocation": artifact,
                "replacements": [{"deletedRegion": {"charOffset": edit.offset, "charLength": edit.length},
                                  "insertedContent": {"text": edit.text}}],
            }],
        }]
    return result


def render(findings: list[Finding], notebooks: dict[str, str] | None = None, root: Path | None = None) -> str:
    """`notebooks`: each notebook's path -> its text, to place its findings on the file's own lines."""
    checks = registry.checks()
    index = {check.code: i for i, check in enumerate(checks)}
    where = _Locations(root or source_root(), notebooks or {})
    log = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "accumcheck", "version": __version__, "semanticVersion": __version__,
                                "informationUri": REPOSITORY, "rules": [_rule(check) for check in checks]}},
            "originalUriBaseIds": {ROOT_ID: {"uri": where.root.as_uri().rstrip("/") + "/"}},
            "results": [_result(f, index[f.code], where) for f in findings],
            "columnKind": "unicodeCodePoints",
        }],
    }
    import json

    return json.dumps(log, indent=2) + "\n"
