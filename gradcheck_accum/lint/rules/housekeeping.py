"""Housekeeping (ACC9xx): rules about accumcheck's own comments."""

from __future__ import annotations

import re
from typing import Iterator

from gradcheck_accum.lint.diagnostics import Finding
from gradcheck_accum.lint.fixes import Fix
from gradcheck_accum.lint.model import FileModel
from gradcheck_accum.lint.rule import Report, Rule
from gradcheck_accum.lint.suppressions import Suppressions, unused_codes, without_codes

_NAMES_A_CODE = re.compile(r"#[^\n]*(?:noqa|accumcheck)[^\n]*acc", re.IGNORECASE)


class UnusedSuppression(Rule):
    code = "ACC900"
    name = "unused-suppression"
    summary = "A noqa or accumcheck: ignore comment names an accumcheck code that suppresses nothing."
    requires = ()
    reads_outside_windows = ()  # judges the other rules' findings only

    @classmethod
    def could_fire(cls, text: str, present=None) -> bool:
        # Sharper than tokens can say (and "ACC" is in every "ACCURACY"): a comment with noqa or
        # accumcheck followed on its line by a code, in any case, as the suppressions read codes.
        return _NAMES_A_CODE.search(text) is not None

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())  # needs the other rules' findings: the engine calls `stale` after them

    @classmethod
    def stale(cls, path: str, suppressions: Suppressions, findings: list[Finding], enabled: set[str],
              known: set[str]) -> Iterator[tuple[Finding, Fix]]:
        for comment in suppressions.comments:
            codes = unused_codes(comment, findings, enabled - {cls.code}, known)
            if not codes:
                continue
            fixed = without_codes(comment.text, codes)
            fix = Fix(True, "Remove the unused suppression" if not fixed else f"Remove {', '.join(codes)}",
                      line_edit=(comment.line, comment.text, fixed))
            finding = Finding(path, comment.line, comment.column, comment.line, comment.column + len(comment.text),
                              cls.code, cls.name, f"the suppression names {', '.join(codes)} but nothing is "
                              "reported here; remove it so it does not hide a future finding",
                              fix.safety, fix.description)
            yield finding, fix
