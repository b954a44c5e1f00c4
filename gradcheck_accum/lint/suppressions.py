"""The suppression stage, after the rules: comments on the reported line (`# noqa`,
`# noqa: ACC101,ACC302`, `# accumcheck: ignore[ACC101]`) hide findings, `# accumcheck: skip-file`
anywhere hides a file's, and ACC900 reports the codes a comment names that hide nothing.

Comments are found with the tokenize module (comments.py), so text inside strings never counts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, NamedTuple

from gradcheck_accum.lint.comments import Layout, layout_of
from gradcheck_accum.lint.diagnostics import Finding
from gradcheck_accum.lint.fixes import Fix
from gradcheck_accum.lint.lines import split_lines

if TYPE_CHECKING:
    Reported = dict[Finding, "Fix | None"]


class Check(NamedTuple):
    """A check that is not a rule class: its code, name and summary, as a rule has them."""

    code: str
    name: str
    summary: str
    severity: str = "error"  # as Rule.severity


UNUSED_SUPPRESSION = Check("ACC900", "unused-suppression",
                           "A noqa or accumcheck: ignore comment names an accumcheck code that suppresses nothing.",
                           severity="warning")  # about the comments, not the gradients
# A comment with noqa or accumcheck followed on its line by a code, in any case, as the comments are
# read below ("ACC" alone is in every "ACCURACY").
_NAMES_A_CODE = re.compile(r"#[^\n]*(?:noqa|accumcheck)[^\n]*acc", re.IGNORECASE)


def apply(source: str, path: str, reported: Reported, enabled: set[str], known: set[str]) -> Reported:
    """The findings the file's comments leave, with ACC900's when it is among the `enabled` codes (a code
    of a rule that is not enabled suppresses nothing either: see unused_codes)."""
    judge = UNUSED_SUPPRESSION.code in enabled
    if not reported and not (judge and could_report_unused(source)):
        return {}  # nothing to hide and no suppression to judge: the comments are never read
    suppressions = parse(source)
    if suppressions.skip_file:
        return {}
    kept = dict(reported)
    if judge:
        for finding, fix in _unused(path, suppressions, list(reported), enabled, known):
            kept.setdefault(finding, fix)
    return {finding: fix for finding, fix in kept.items() if not suppressions.hides(finding)}


def could_report_unused(text: str) -> bool:
    """Cheap necessary condition for ACC900 on a file's text."""
    return _NAMES_A_CODE.search(text) is not None


def _unused(path: str, suppressions: Suppressions, findings: list[Finding], enabled: set[str],
            known: set[str]) -> Iterator[tuple[Finding, Fix]]:
    check = UNUSED_SUPPRESSION
    for comment in suppressions.comments:
        codes = [code for code in unused_codes(comment, findings, suppressions.layout) if code != check.code]
        if not codes:
            continue
        fixed = without_codes(comment.text, codes)
        fix = Fix(True, "Remove the unused suppression" if not fixed else f"Remove {', '.join(codes)}",
                  line_edit=(comment.line, comment.text, fixed))
        yield Finding(path, comment.line, comment.column, comment.line, comment.column + len(comment.text),
                      check.code, check.name, _unused_message(codes, enabled, known), fix.safety, fix.description,
                      snippet=comment.source_line), fix


def _unused_message(codes: list[str], enabled: set[str], known: set[str]) -> str:
    silent = [code for code in codes if code in enabled]
    off = [code for code in codes if code in known and code not in enabled]
    unknown = [code for code in codes if code not in known]
    said = ([f"{', '.join(silent)} but nothing is reported here"] if silent else []) + \
        ([f"{', '.join(off)}, not selected for this file"] if off else []) + \
        ([f"{', '.join(unknown)}, which no rule has"] if unknown else [])
    return f"the suppression names {'; '.join(said)}; remove it so it does not hide a future finding"

ALL = "*"
_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)
_IGNORE = re.compile(r"#\s*accumcheck:\s*ignore(?:\[(?P<codes>[^\]]*)\])?")
_SKIP_FILE = re.compile(r"#\s*accumcheck:\s*skip-file\b")
_MAY_SUPPRESS = re.compile(r"noqa|accumcheck", re.IGNORECASE)  # in the text of every comment above


class Comment(NamedTuple):
    """A suppression comment that names codes."""

    line: int
    column: int  # 1-based
    text: str
    codes: tuple[str, ...]
    source_line: str  # the whole line the comment ends


@dataclass
class Suppressions:
    by_line: dict[int, set[str]]  # line of the comment -> codes ("*" for all)
    skip_file: bool = False
    comments: list[Comment] = field(default_factory=list)
    layout: Layout = field(default_factory=Layout)

    def hides(self, finding: Finding) -> bool:
        """A comment on the finding's line hides it; on a line that ends inside a string or a backslash
        continuation, the comment where the string or continuation ends does (comments.py)."""
        codes = self.by_line.get(self.layout.home(finding.line))
        return bool(codes) and (ALL in codes or finding.code in codes)


def parse(source: str) -> Suppressions:
    result = Suppressions({})
    if "#" not in source or not _MAY_SUPPRESS.search(source):
        return result  # no comment can name a suppression: the file is not tokenized
    result.layout = layout_of(source)
    lines = split_lines(source)
    for comment in result.layout.comments.values():
        if _SKIP_FILE.search(comment.text):
            result.skip_file = True
        for pattern in (_NOQA, _IGNORE):
            for match in pattern.finditer(comment.text):
                codes = match.group("codes")
                if codes is None:
                    result.by_line.setdefault(comment.line, set()).add(ALL)
                else:
                    found = [c.upper() for c in re.split(r"[\s,]+", codes) if c]
                    result.by_line.setdefault(comment.line, set()).update(found)
                    result.comments.append(Comment(comment.line, comment.column + 1, comment.text, tuple(found),
                                                   lines[comment.line - 1]))
    return result


def unused_codes(comment: Comment, findings: list[Finding], layout: Layout) -> list[str]:
    """accumcheck codes a comment names that suppress nothing on the lines it covers: unknown codes, codes of rules
    not enabled for the file (as ruff's RUF100: they hide nothing today, and would hide a finding the
    day the rule is turned on), and enabled rules that reported nothing there."""
    used = {f.code for f in findings if layout.home(f.line) == comment.line}
    return [code for code in comment.codes if code.startswith("ACC") and code not in used]


def without_codes(comment: str, stale: list[str]) -> str:
    """The comment with the stale codes removed; "" when nothing would be left of it."""
    def strip(match: re.Match, opening: str, closing: str) -> str:
        kept = [c for c in re.split(r"[\s,]+", match.group("codes")) if c and c.upper() not in stale]
        return f"{opening}{', '.join(kept)}{closing}" if kept else ""

    text = _NOQA.sub(lambda m: strip(m, "# noqa: ", "") if m.group("codes") else m.group(0), comment)
    text = _IGNORE.sub(lambda m: strip(m, "# accumcheck: ignore[", "]") if m.group("codes") is not None
                       else m.group(0), text)
    text = text.strip()
    # What followed the removed directive stays a comment: removing a `noqa: ACC101 * 10` directive leaves `# * 10`.
    return text if not text or text.startswith("#") else f"# {text}"
