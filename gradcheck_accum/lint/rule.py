"""The rule base class. A rule is a small class that queries the file model (model.py) and builds
fixes (fixes.py); it never walks syntax itself.

What a rule needs from a file is declared as model facts, never as text: `requires` (events,
roles, facts, boundary kinds that must all be possible in the file) and `reads_outside_windows`
(what it reads beyond the training loops). evidence.py turns both into the words the prefilter and
hollowing look for, from the call catalogue.
"""

from __future__ import annotations

import abc
import functools
from typing import TYPE_CHECKING, Callable, ClassVar, Iterator, NamedTuple

from gradcheck_accum.lint.evidence import Need, any_present, calls_only
from gradcheck_accum.lint.vocabulary import Event, Fact

if TYPE_CHECKING:
    from gradcheck_accum.lint.fixes import Fix
    from gradcheck_accum.lint.lazy import cst
    from gradcheck_accum.lint.model import FileModel, Scope


class Report(NamedTuple):
    node: cst.CSTNode
    message: str
    fix: "Fix | None" = None
    # the scope the node was walked in, when it was reached through a call (an event's `scope`): a
    # function walked in place of several calls has one node for all of them, and this says which
    scope: "Scope | None" = None

    @classmethod
    def on(cls, event: Event, message: str, fix: "Fix | None" = None) -> Report:
        """A report at an event's node, in the scope the event was walked in."""
        return cls(event.node, message, fix, event.scope)


class Rule(abc.ABC):
    code: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    # "error": the gradients or weights come out wrong; "warning": right, but slow or memory-hungry.
    severity: ClassVar[str] = "error"
    # Every one of these must be possible in a file for the rule to report there (the prefilter
    # parses no file for a rule that cannot fire). Most rules report inside a training loop.
    requires: ClassVar[tuple[Need, ...]] = (Fact.TRAINING_LOOP,)
    # What the rule reads outside the windows (their scopes, the helpers they call, module-level
    # bindings): () for nothing, None for anything anywhere (which keeps every definition parsed).
    # Hollowing (hollow.py) keeps every top-level definition that may hold one of these.
    reads_outside_windows: ClassVar[tuple[Need, ...] | None] = None

    def __init_subclass__(cls, **kwargs) -> None:
        """A class that defines a code is a rule: it registers itself (registry.py lists them)."""
        super().__init_subclass__(**kwargs)
        if "code" in vars(cls):
            other = _REGISTERED.get(cls.code)
            if other is not None and other.__qualname__ != cls.__qualname__:
                raise TypeError(f"{cls.code} is defined twice: {other.__qualname__} and {cls.__qualname__}")
            _REGISTERED[cls.code] = cls

    @abc.abstractmethod
    def check(self, model: FileModel) -> Iterator[Report]:
        """The rule's findings on one file."""

    @classmethod
    def needs_training_loop(cls, present: Callable[[Need], bool] | None = None) -> bool:
        """Can the rule report only inside a loop that reaches a backward: it requires one outright, or
        as one of a group of needs (`(TRAINING_LOOP, HOOKS)`) none of whose others the file shows?"""
        def alone(group: tuple[Need, ...]) -> bool:
            return present is not None and not any(present(other) for other in group if other is not Fact.TRAINING_LOOP)
        return any(need is Fact.TRAINING_LOOP or isinstance(need, tuple) and Fact.TRAINING_LOOP in need and alone(need)
                   for need in cls.requires)

    @classmethod
    def could_fire(cls, text: str, present: Callable[[Need], bool] | None = None) -> bool:
        """Cheap necessary condition on the file's text; False means the rule cannot report anything.
        `present(need)` answers for `text` (the prefilter shares one among all rules)."""
        return all((present or functools.partial(any_present, text=text))(need) for need in cls.requires)

    @classmethod
    def could_fire_in_code(cls, code: str) -> bool:
        """The call-shaped part of that condition, on the file with comments and plain strings blanked:
        a call in a docstring or a message is no call. Other tokens may live in strings on purpose
        (`{"gradient_accumulation_steps": 4}`), so only needs made of calls are checked again."""
        return all(any_present(need, code) for need in cls.requires if calls_only(need))


_REGISTERED: dict[str, type[Rule]] = {}


def registered() -> list[type[Rule]]:
    """The rules defined so far (registry.rules() imports every rule module first)."""
    return list(_REGISTERED.values())
