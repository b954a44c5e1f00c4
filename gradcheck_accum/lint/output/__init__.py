"""Output formats. Each module renders the findings of a run as one string, from the findings alone
(they carry their source line and fix: nothing is read again)."""

from __future__ import annotations

from typing import Callable

from gradcheck_accum.lint.diagnostics import Finding
from gradcheck_accum.lint.output import concise, full, github, json_format, sarif

Renderer = Callable[[list[Finding]], str]

# name -> render(findings)
FORMATS: dict[str, Renderer] = {
    "concise": concise.render,
    "full": full.render,
    "json": json_format.render,
    "github": github.render,
    "sarif": sarif.render,
}


def location(finding: Finding) -> str:
    """`path:line:col`, or `path:cell N:line:col` in a notebook."""
    cell = f"cell {finding.cell}:" if finding.cell is not None else ""
    return f"{finding.path}:{cell}{finding.line}:{finding.column}"
