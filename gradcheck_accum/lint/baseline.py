"""`--add-noqa`: suppress every current finding with a `# noqa: CODE` on its line (a baseline).

The comment goes on the finding's home line (comments.py): its own line, or where the string or
backslash continuation its line ends inside closes. An existing `# noqa: CODES` there gains the new
codes; only comment tokens are read, so a `# noqa` inside a string is never taken for one.
"""

from __future__ import annotations

import re

from gradcheck_accum.lint.comments import layout_of
from gradcheck_accum.lint.diagnostics import Finding
from gradcheck_accum.lint.engine import ParseFailure, parse
from gradcheck_accum.lint.lines import split_lines

_NOQA_CODES = re.compile(r"#\s*noqa:\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*)", re.IGNORECASE)
_BARE_NOQA = re.compile(r"#\s*noqa(?!:\s*[A-Za-z]+[0-9])", re.IGNORECASE)


def add_noqa(text: str, findings: list[Finding]) -> tuple[str, int]:
    """The text with noqa comments added, and how many lines changed. Unchanged when the result
    would not parse."""
    lines = split_lines(text, keepends=True)
    changed = add_to_lines(lines, findings)
    new_text = "".join(lines)
    try:
        parse(new_text)
    except ParseFailure:
        return text, 0
    return new_text, changed


def add_noqa_notebook(text: str, findings: list[Finding]) -> tuple[str, int]:
    """The same in a notebook's code cells (findings count lines inside their cell); only the changed
    cells' `source` is rewritten, every other byte kept. Unchanged when the notebook's program would
    no longer parse."""
    from gradcheck_accum.lint import notebooks

    cells = notebooks.load(text).data["cells"]
    sources: dict[int, str] = {}
    changed = 0
    for cell in sorted({f.cell for f in findings if f.cell is not None}):
        lines = split_lines(notebooks.cell_source(cells[cell - 1]), keepends=True)
        count = add_to_lines(lines, [f for f in findings if f.cell == cell])
        if count:
            sources[cell - 1], changed = "".join(lines), changed + count
    if not changed:
        return text, 0
    new_text = notebooks.replace_sources(text, sources)
    try:
        parse(notebooks.load(new_text).program)
    except ParseFailure:
        return text, 0
    return new_text, changed


def add_to_lines(lines: list[str], findings: list[Finding]) -> int:
    """Add each finding's code to a noqa comment on its home line, in place; returns how many lines
    changed."""
    layout = layout_of("".join(lines))
    wanted: dict[int, set[str]] = {}
    for finding in findings:
        wanted.setdefault(layout.home(finding.line), set()).add(finding.code)
    changed = 0
    for number, codes in sorted(wanted.items()):
        if not 0 < number <= len(lines):
            continue
        line = lines[number - 1]
        body = line.rstrip("\r\n")
        ending = line[len(body):]
        comment = layout.comments.get(number)
        match = _NOQA_CODES.search(comment.text) if comment else None
        if comment and match:
            present = re.split(r"[\s,]+", match.group("codes"))
            missing = sorted(codes - {c.upper() for c in present})
            if not missing:
                continue
            at = comment.column + match.end("codes")
            body = body[:at] + ", " + ", ".join(missing) + body[at:]
        elif comment and _BARE_NOQA.search(comment.text):
            continue  # a bare noqa already hides everything
        else:
            body = f"{body}  # noqa: {', '.join(sorted(codes))}"
        lines[number - 1] = body + ending
        changed += 1
    return changed
