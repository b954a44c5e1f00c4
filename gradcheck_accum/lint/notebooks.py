"""Jupyter notebooks: the code cells, in order, linted as one program.

IPython syntax (`%magic`, `!shell`, `%%cell magics`, `obj?`) is not Python; such lines are replaced
by a marker comment so the program parses and every line keeps its place. Positions map back to
(cell, line). `--fix` rewrites the program and splits it back into the same cells; outputs and
metadata are left untouched.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

from gradcheck_accum.lint.diagnostics import Finding

_CELL_MARK = "# accumcheck-cell {index}"
_CELL_MARK_RE = re.compile(r"^# accumcheck-cell (\d+)$")
_MAGIC_MARK = "# accumcheck-magic"


class NotebookError(Exception):
    """The file is not a notebook we can read; str(self) is a one-line reason."""


@dataclass
class Notebook:
    data: dict
    code_cells: list[int]  # indices into data["cells"] of the code cells
    program: str
    # For each line of `program` (0-based): (cell number, 1-based, counting all cells; line in cell, 1-based)
    lines: list[tuple[int, int] | None]

    def locate(self, finding: Finding) -> Finding:
        """The finding with its line counted inside its cell; the cell goes in `cell`."""
        start = self.lines[finding.line - 1] if finding.line - 1 < len(self.lines) else None
        end = self.lines[finding.end_line - 1] if finding.end_line - 1 < len(self.lines) else None
        if start is None:
            return finding
        end_line = end[1] if end is not None and end[0] == start[0] else start[1]
        return replace(finding, line=start[1], end_line=end_line, cell=start[0])


def load(text: str) -> Notebook:
    try:
        data = json.loads(text)
        cells = data["cells"]
    except (ValueError, KeyError, TypeError) as exc:
        raise NotebookError(f"not a Jupyter notebook ({exc.__class__.__name__}: {exc})") from None
    language = (data.get("metadata", {}).get("language_info", {}) or {}).get("name", "python")
    if language not in ("python", "python3"):
        raise NotebookError(f"notebook language is {language!r}, not Python")
    code_cells = [i for i, cell in enumerate(cells) if isinstance(cell, dict) and cell.get("cell_type") == "code"]
    program_lines: list[str] = []
    lines: list[tuple[int, int] | None] = []
    for index in code_cells:
        program_lines.append(_CELL_MARK.format(index=index))
        lines.append(None)
        source = _cell_source(cells[index])
        is_cell_magic = source.lstrip().startswith("%%")
        for number, line in enumerate(source.splitlines(), start=1):
            program_lines.append(_MAGIC_MARK if is_cell_magic or _is_magic(line) else line)
            lines.append((index + 1, number))
    return Notebook(data, code_cells, "\n".join(program_lines) + "\n", lines)


def _cell_source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _is_magic(line: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(("%", "!", "?")) or (stripped.endswith("?") and not stripped.startswith("#"))


def write_back(notebook: Notebook, program: str) -> str | None:
    """The notebook's JSON with the fixed program split back into its cells, or None when the fixed
    program no longer has the cell structure (then nothing is written)."""
    chunks: dict[int, list[str]] = {}
    current: int | None = None
    for line in program.splitlines():
        match = _CELL_MARK_RE.match(line.strip())
        if match:
            current = int(match.group(1))
            chunks[current] = []
        elif current is not None:
            chunks[current].append(line)
    if sorted(chunks) != sorted(notebook.code_cells):
        return None
    data = json.loads(json.dumps(notebook.data))
    for index in notebook.code_cells:
        cell = data["cells"][index]
        original = _cell_source(cell).splitlines()
        fixed = chunks[index]
        # Restore the IPython lines, which stand as markers in the program.
        magics = iter(line for line in original if _is_magic(line) or _cell_source(cell).lstrip().startswith("%%"))
        restored = [next(magics, line) if line.strip() == _MAGIC_MARK else line for line in fixed]
        if restored == original:
            continue
        text = "\n".join(restored)
        if _cell_source(notebook.data["cells"][index]).endswith("\n"):
            text += "\n"
        cell["source"] = text.splitlines(keepends=True)
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"
