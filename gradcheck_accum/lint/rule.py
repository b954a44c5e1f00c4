"""The rule base class. A rule is a small class that queries the file model; it never walks loops itself."""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, ClassVar, Iterator, NamedTuple

from gradcheck_accum.lint.lazy import cst

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
    tokens: ClassVar[tuple[str, ...]] = ("backward(",)
    needs: ClassVar[tuple[str, ...]] = ("backward(",)
    # Hollowing (hollow.py): the words without which a top-level function or class that holds no
    # training loop cannot change this rule's findings. () for a rule that reads only the windows
    # (their scopes, the helpers they call, module-level bindings); None for one that may read
    # anything anywhere, which keeps every definition parsed. Each rule states its own.
    outside_windows: ClassVar[tuple[str, ...] | None] = None

    @classmethod
    def could_fire(cls, text: str) -> bool:
        """Cheap necessary condition on the file's text; False means the rule cannot report anything.

        A token ending in "(" stands for a call: the name, optional whitespace, then "(", not after `def`.
        """
        return all(_present(token, text) for token in cls.needs) and any(_present(t, text) for t in cls.tokens)

    @classmethod
    def could_fire_in_code(cls, code: str) -> bool:
        """The call-shaped part of that condition, on the file with comments and plain strings blanked:
        a call in a docstring or a message is no call. Other tokens may live in strings on purpose
        (`{"gradient_accumulation_steps": 4}`), so only calls are checked again."""
        if not all(_present(token, code) for token in cls.needs if token.endswith("(")):
            return False
        return not all(t.endswith("(") for t in cls.tokens) or any(_present(t, code) for t in cls.tokens)


@functools.lru_cache(maxsize=None)
def _call_pattern(name: str) -> re.Pattern[str]:
    return re.compile(re.escape(name) + r"\s*\(")


def _present(token: str, text: str) -> bool:
    if not token.endswith("("):
        return token in text
    name = token[:-1]
    if name not in text:
        return False
    # a call, not a definition: `def backward(ctx, grad)` is everywhere in autograd code
    return any(text[max(0, m.start() - 4):m.start()] != "def " for m in _call_pattern(name).finditer(text))

    def check(self, model: "FileModel") -> Iterator[Report]:
        raise NotImplementedError
