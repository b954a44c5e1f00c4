"""`--add-noqa`: suppress every current finding with a `# noqa: CODE` on its line (a baseline)."""

from __future__ import annotations

import re

from gradcheck_accum.lint.diagnostics import Finding
from gradcheck_accum.lint.engine import ParseFailure, parse

_NOQA_CODES = re.compile(r"#\s*noqa:\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*)")


def add_noqa(text: str, findings: list[Finding]) -> tuple[str, int]:
    """The text with noqa comments added, and how many lines changed. Unchanged when the result
    would not parse (a reported line that ends inside a string)."""
    wanted: dict[int, set[str]] = {}
    for finding in findings:
        wanted.setdefault(finding.line, set()).add(finding.code)
    lines = text.splitlines(keepends=True)
    changed = 0
    for number, codes in wanted.items():
        line = lines[number - 1]
        body = line.rstrip("\r\n")
        ending = line[len(body):]
        match = _NOQA_CODES.search(body)
        if match:
            present = re.split(r"[\s,]+", match.group("codes"))
            merged = present + sorted(codes - {c.upper() for c in present})
            body = body[:match.start("codes")] + ", ".join(merged) + body[match.end("codes"):]
        elif re.search(r"#\s*noqa\b", body):
            continue  # a bare noqa already hides everything
        else:
            body = f"{body}  # noqa: {', '.join(sorted(codes))}"
        lines[number - 1] = body + ending
        changed += 1
    new_text = "".join(lines)
    try:
        parse(new_text)
    except ParseFailure:
        return text, 0
    return new_text, changed
