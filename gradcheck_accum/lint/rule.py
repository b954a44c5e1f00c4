"""The rule base class. A rule is a small class that queries the file model; it never walks loops itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Iterator, NamedTuple

import libcst as cst

if TYPE_CHECKING:
    from gradcheck_accum.lint.fixes import Fix
    from gradcheck_accum.lint.model import FileModel


class Report(NamedTuple):
    node: cst.CSTNode
    message: str
    fix: "Fix | None" = None


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    # Prefilter: a file lacking any of `needs`, or containing none of `tokens`, cannot trigger the
    # rule, so it is never parsed for it. Most rules report inside a loop that reaches backward.
    tokens: ClassVar[tuple[str, ...]] = ("backward",)
    needs: ClassVar[tuple[str, ...]] = ("backward",)

    @classmethod
    def could_fire(cls, text: str) -> bool:
        """Cheap necessary condition on the file's text; False means the rule cannot report anything."""
        return all(token in text for token in cls.needs) and any(token in text for token in cls.tokens)

    def check(self, model: "FileModel") -> Iterator[Report]:
        raise NotImplementedError
