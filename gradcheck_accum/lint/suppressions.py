"""Suppression comments on the reported line: `# noqa`, `# noqa: ACC101,ACC302`,
`# accumcheck: ignore[ACC101]`, and `# accumcheck: skip-file` anywhere in a file.

Comments are found with the tokenize module, so text inside strings never counts.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

from gradcheck_accum.lint.diagnostics import Finding

ALL = "*"
_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)
_IGNORE = re.compile(r"#\s*accumcheck:\s*ignore(?:\[(?P<codes>[^\]]*)\])?")
_SKIP_FILE = re.compile(r"#\s*accumcheck:\s*skip-file\b")


@dataclass(frozen=True)
class Comment:
    """A suppression comment that names codes."""

    line: int
    column: int  # 1-based
    text: str
    codes: tuple[str, ...]


@dataclass
class Suppressions:
    by_line: dict[int, set[str]]  # line -> codes ("*" for all)
    skip_file: bool = False
    comments: list[Comment] = field(default_factory=list)

    def hides(self, finding: Finding) -> bool:
        codes = self.by_line.get(finding.line)
        return bool(codes) and (ALL in codes or finding.code in codes)


def _comments(source: str) -> list[tuple[int, int, str]]:
    try:
        tokens = tokenize.generate_tokens(io.StringIO(source).readline)
        return [(tok.start[0], tok.start[1] + 1, tok.string) for tok in tokens if tok.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError):
        # Only reached for sources libcst accepted but tokenize does not; fall back to a line scan.
        return [(i, line.index("#") + 1, line[line.index("#"):])
                for i, line in enumerate(source.splitlines(), 1) if "#" in line]


def parse(source: str) -> Suppressions:
    result = Suppressions({})
    if "#" not in source:
        return result
    for line, column, comment in _comments(source):
        if _SKIP_FILE.search(comment):
            result.skip_file = True
        for pattern in (_NOQA, _IGNORE):
            for match in pattern.finditer(comment):
                codes = match.group("codes")
                if codes is None:
                    result.by_line.setdefault(line, set()).add(ALL)
                else:
                    found = [c.upper() for c in re.split(r"[\s,]+", codes) if c]
                    result.by_line.setdefault(line, set()).update(found)
                    result.comments.append(Comment(line, column, comment, tuple(found)))
    return result


def unused_codes(comment: Comment, findings: list[Finding], enabled: set[str], known: set[str]) -> list[str]:
    """accumcheck codes a comment names that suppress nothing on its line: unknown codes, and enabled
    rules that reported nothing there. Codes of disabled rules are left alone (they may fire elsewhere)."""
    used = {f.code for f in findings if f.line == comment.line}
    return [code for code in comment.codes if code.startswith("ACC") and code not in used
            and (code not in known or code in enabled)]


def without_codes(comment: str, stale: list[str]) -> str:
    """The comment with the stale codes removed; "" when nothing would be left of it."""
    def strip(match: re.Match, opening: str, closing: str) -> str:
        kept = [c for c in re.split(r"[\s,]+", match.group("codes")) if c and c.upper() not in stale]
        return f"{opening}{', '.join(kept)}{closing}" if kept else ""

    text = _NOQA.sub(lambda m: strip(m, "# noqa: ", "") if m.group("codes") else m.group(0), comment)
    text = _IGNORE.sub(lambda m: strip(m, "# accumcheck: ignore[", "]") if m.group("codes") is not None
                       else m.group(0), text)
    return text.strip()
