"""A JSON array; each record carries accumcheck's own fields and ruff's field names."""

from __future__ import annotations

from gradcheck_accum.lint.diagnostics import Finding
from gradcheck_accum.lint.registry import page_url
from gradcheck_accum.lint.registry import severity


def record(f: Finding) -> dict:
    return {
        "path": f.path, "line": f.line, "column": f.column, "end_line": f.end_line, "end_column": f.end_column,
        "code": f.code, "name": f.name, "message": f.message, "cell": f.cell, "severity": severity(f.code),
        "related": [{"path": r.path, "line": r.line, "column": r.column, "message": r.message} for r in f.related],
        # ruff's shape
        "filename": f.path,
        "location": {"row": f.line, "column": f.column},
        "end_location": {"row": f.end_line, "column": f.end_column},
        "url": page_url(f.code),
        "fix": {"applicability": f.fix_safety, "message": f.fix_description} if f.fix_safety else None,
    }


def render(findings: list[Finding]) -> str:
    import json

    return json.dumps([record(f) for f in findings], indent=2) + "\n"
