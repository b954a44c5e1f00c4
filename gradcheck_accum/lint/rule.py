"""The rule base class. A rule is a small class that queries the file model; it never walks loops itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Iterator, NamedTuple

import libcst as cst

if TYPE_CHECKING:
    from gradcheck_accum.lint.model import FileModel


class Report(NamedTuple):
    node: cst.CSTNode
    message: str


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    # Prefilter: a file containing none of these substrings cannot trigger the rule, so it is not parsed.
    tokens: ClassVar[tuple[str, ...]] = ("backward",)
    # Most rules report inside a loop that reaches a backward call, so "backward" must appear as well.
    needs_backward: ClassVar[bool] = True

    @classmethod
    def could_fire(cls, text: str) -> bool:
        """Cheap necessary condition on the file's text; False means the rule cannot report anything."""
        if cls.needs_backward and "backward" not in text:
            return False
        return any(token in text for token in cls.tokens)

    def check(self, model: "FileModel") -> Iterator[Report]:
        raise NotImplementedError
