"""GitHub Actions workflow commands: one `::error` annotation per finding."""

from __future__ import annotations

from gradcheck_accum.lint.diagnostics import Finding


def _escape(value: str, property_: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return value.replace(":", "%3A").replace(",", "%2C") if property_ else value


def render(findings: list[Finding]) -> str:
    out = []
    for f in findings:
        where = f" (cell {f.cell})" if f.cell is not None else ""
        props = (f"file={_escape(f.path, True)},line={f.line},col={f.column},endLine={f.end_line},"
                 f"endColumn={f.end_column},title={_escape(f'{f.code} {f.name}', True)}")
        out.append(f"::error {props}::{_escape(f'{f.code} {f.message}{where}')}\n")
    return "".join(out)
