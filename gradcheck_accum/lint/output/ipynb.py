"""Where a notebook finding sits in the `.ipynb` file itself.

Findings in notebooks count lines inside their cell (`cell 3, line 2`), which is what a person reads.
GitHub's annotations and code scanning place a result on a line of the file as stored, JSON and all,
so for them the cell position becomes the line and column of that character inside the cell's
`source` string in the raw JSON.
"""

from __future__ import annotations

from gradcheck_accum.lint.diagnostics import Finding
from gradcheck_accum.lint.lines import line_starts


class FileRegions:
    """Each finding's region in its file as stored: unchanged outside notebooks; inside them, the cell
    position carried to the raw JSON (or to line 1 when the notebook text is not at hand)."""

    def __init__(self, sources: dict[str, str]) -> None:
        self.sources = sources
        self._strings: dict[str, dict[int, list[tuple[int, str]]]] = {}

    def region(self, finding: Finding) -> tuple[int, int, int, int]:
        if finding.cell is None:
            return finding.line, finding.column, finding.end_line, finding.end_column
        raw = self.sources.get(finding.path, "")
        if finding.path not in self._strings:
            self._strings[finding.path] = _source_strings(raw)
        strings = self._strings[finding.path].get(finding.cell - 1, [])
        start = raw_position(raw, strings, finding.line, finding.column) or (1, 1)
        end = raw_position(raw, strings, finding.end_line, finding.end_column)
        return (*start, *(end if end is not None and end >= start else start))


def _source_strings(raw: str) -> dict[int, list[tuple[int, str]]]:
    from gradcheck_accum.lint.notebooks import source_strings

    try:
        return source_strings(raw)
    except (ValueError, IndexError, KeyError, TypeError):  # not the notebook it was when linted
        return {}


def raw_position(raw: str, strings: list[tuple[int, str]], line: int, column: int) -> tuple[int, int] | None:
    """(line, column), 1-based, in the file of the character at (line, column) of a cell whose source
    is stored as `strings` (quote offset, decoded text): one string per line, or the whole cell in one."""
    if len(strings) == 1 and line >= 1:
        quote, text = strings[0]
        starts = line_starts(text)
        if line > len(starts):
            return None
        index = starts[line - 1] + column - 1
    elif 0 < line <= len(strings):
        quote, index = strings[line - 1][0], column - 1
    else:
        return None
    offset = _raw_offset(raw, quote, index)
    return raw.count("\n", 0, offset) + 1, offset - raw.rfind("\n", 0, offset)


def _raw_offset(raw: str, quote: int, decoded: int) -> int:
    """Offset in the file of the `decoded`-th character of the JSON string whose quote is at `quote`."""
    position = quote + 1
    for _ in range(decoded):
        if raw[position] == '"':
            break
        if raw[position] != "\\":
            position += 1
        elif raw[position + 1] != "u":
            position += 2
        elif raw[position + 2:position + 4].lower() in ("d8", "d9", "da", "db") and raw[position + 6:position + 8] == "\\u":
            position += 12  # a surrogate pair: one character
        else:
            position += 6
    return position
