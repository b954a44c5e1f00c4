"""Suppression comments on the reported line: `# noqa`, `# noqa: ACC101,ACC302`,
`# accumcheck: ignore[ACC101]`, and `# accumcheck: skip-file` anywhere in a file.

Comments are found with the tokenize module, so text inside strings never counts.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass

from gradcheck_accum.lint.diagnostics import Finding

ALL = "*"
_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)
_IGNORE = re.compile(r"#\s*accumcheck:\s*ignore(?:\[(?P<codes>[^\]]*)\])?")
_SKIP_FILE = re.compile(r"#\s*accumcheck:\s*skip-file\b")


@dataclass
class Suppressions:
    by_line: dict[int, set[str]]  # line -> codes ("*" for all)
    skip_file: bool = False

    def hides(self, finding: Finding) -> bool:
        codes = self.by_line.get(finding.line)
        return bool(codes) and (ALL in codes or finding.code in codes)


def _comments(source: str) -> list[tuple[int, str]]:
    try:
        tokens = tokenize.generate_tokens(io.StringIO(source).readline)
        return [(tok.start[0], tok.string) for tok in tokens if tok.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError):
        # Only reached for sources libcst accepted but tokenize does not; fall back to a line scan.
        return [(i, line[line.index("#"):]) for i, line in enumerate(source.splitlines(), 1) if "#" in line]


def parse(source: str) -> Suppressions:
    result = Suppressions({})
    if "#" not in source:
        return result
    for line, comment in _comments(source):
        if _SKIP_FILE.search(comment):
            result.skip_file = True
        for pattern in (_NOQA, _IGNORE):
            for match in pattern.finditer(comment):
                codes = match.group("codes")
                if codes is None:
                    result.by_line.setdefault(line, set()).add(ALL)
                else:
                    found = {c.upper() for c in re.split(r"[\s,]+", codes) if c}
                    result.by_line.setdefault(line, set()).update(found)
    return result


def filter_suppressed(findings: list[Finding], source: str) -> list[Finding]:
    if not findings:
        return findings
    suppressions = parse(source)
    if suppressions.skip_file:
        return []
    return [f for f in findings if not suppressions.hides(f)]
