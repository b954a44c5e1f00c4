"""GitHub Actions workflow commands: one `::error` (or `::warning`) annotation per finding."""

from __future__ import annotations

from gradcheck_accum.lint.diagnostics import Finding
from gradcheck_accum.lint.registry import severity


def _escape(value: str, property_: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return value.replace(":", "%3A").replace(",", "%2C") if property_ else value


def render(findings: list[Finding], notebooks: dict[str, str] | None = None) -> str:
    """In a notebook the annotation goes on the line of the `.ipynb` file that holds the code (GitHub
    shows the file as stored; `notebooks` maps each notebook's path to its text); the message names
    the cell and the line in it."""
    from gradcheck_accum.lint.output.ipynb import FileRegions

    regions = FileRegions(notebooks or {})
    out = []
    for f in findings:
        where = f" (cell {f.cell}, line {f.line})" if f.cell is not None else ""
        line, column, end_line, end_column = regions.region(f)
        props = (f"file={_escape(f.path, True)},line={line},col={column},endLine={end_line},"
                 f"endColumn={end_column},title={_escape(f'{f.code} {f.name}', True)}")
        out.append(f"::{severity(f.code)} {props}::{_escape(f'{f.code} {f.message}{where}')}\n")
    return "".join(out)
