"""`path:line:col: CODE message`, one line per finding (ruff's concise shape)."""

from __future__ import annotations

from gradcheck_accum.lint.diagnostics import Finding


def render(findings: list[Finding]) -> str:
    from gradcheck_accum.lint.output import location

    return "".join(f"{location(f)}: {f.code} {f.message}\n" for f in findings)
