"""What text a file must contain for the model to hold a fact, derived from the catalogue.

Rules say what they need (`Rule.requires`: events, roles, facts, boundary kinds) and what they read
outside the windows (`Rule.reads_outside_windows`); the prefilter (prefilter.py) and hollowing
(hollow.py) turn that into words through this module, so no rule lists tokens of its own. Every
set below is a necessary condition: a file (or definition) without any of a need's tokens cannot
hold what the need names.
"""

from __future__ import annotations

import functools
import re
from typing import Union

from gradcheck_accum.lint import catalogue as cat
from gradcheck_accum.lint.catalogue import LossOp, LossScaling
from gradcheck_accum.lint.predicates import BoundaryKind
from gradcheck_accum.lint.vocabulary import EventKind, Fact, Role

# A need is one of these (an Api: that very entry of the catalogue), or a tuple of needs of which
# any one will do.
Need = Union[EventKind, Role, Fact, BoundaryKind, cat.Api, tuple]

# Events that assignments make, besides the catalogue's calls and attributes (walker.py).
_ASSIGNMENT_TOKENS = {
    EventKind.LOSS_TOTAL: ("+=",),  # `total += loss`
    EventKind.GRAD_SCALE: ("/=", "*="),  # `p.grad /= n`
}


@functools.lru_cache(maxsize=None)
def tokens(need: Need) -> frozenset[str]:
    """Any one of these is in every file that holds `need`. A token ending in "(" stands for a call
    of that name (prefilter.present)."""
    if isinstance(need, cat.Api):  # before the tuple test: an Api is a NamedTuple
        return frozenset({need.token})
    if isinstance(need, tuple):
        return frozenset().union(*(tokens(part) for part in need))
    if isinstance(need, EventKind):
        return _event_tokens(need)
    if isinstance(need, Role):
        return _role_tokens(need)
    if isinstance(need, BoundaryKind):
        return frozenset(need.evidence_tokens)
    return _fact_tokens(need)


def training_loop(need: Need) -> bool:
    """Does the need also require a loop that reaches a backward call (checked on CPython's tree)?"""
    return need is Fact.TRAINING_LOOP


def backward_names() -> frozenset[str]:
    """The names whose calls are backward calls, whatever the receiver (outline.py finds loops by them)."""
    return frozenset(api.name for api in cat.APIS if api.event is EventKind.BACKWARD and not api.follows_aliases)


def process_function_engines() -> tuple[frozenset[str], str]:
    """The names of the engines that call the function they are built with once per batch (`Engine` of
    `Engine(update)`), and the keyword it may be given by: outline.py counts such a function as called
    in a loop."""
    return frozenset(qualified.rsplit(".", 1)[-1] for qualified in cat.PROCESS_FUNCTION_ENGINES), cat.PROCESS_FUNCTION


def effect_call_names() -> frozenset[str]:
    """Names whose calls change what an accumulation window holds (backward, step, clear, clip, sync)."""
    from gradcheck_accum.lint.vocabulary import HELPER_EFFECTS

    return frozenset(api.name for api in cat.APIS if api.event in HELPER_EFFECTS and api.form is cat.Form.CALL
                     and not api.on_grad)


def checkpoint_call_names() -> frozenset[str]:
    """Names whose calls take a module's weights (`state_dict`): a function of one file may write the
    checkpoint of a model that another file compiled."""
    return frozenset(api.name for api in cat.APIS if api.event is EventKind.STATE_DICT and api.form is cat.Form.CALL)


def backward_call_pattern() -> re.Pattern[str]:
    """A backward call in code whose comments and strings are blanked: not `has_backward(`, not `def backward(`."""
    names = "|".join(sorted(map(re.escape, backward_names()), key=len, reverse=True))
    return re.compile(rf"(?<!def )\b(?:{names})(?:\s|\\)*\(")


def _event_tokens(kind: EventKind) -> frozenset[str]:
    found = {api.token for api in cat.APIS if api.event is kind}
    found.update(_ASSIGNMENT_TOKENS.get(kind, ()))
    if kind is EventKind.SCHEDULER_BUILT:
        found |= _constructor_words(Role.SCHEDULER)
    if not found:
        raise ValueError(f"{kind} is not something the prefilter can look for")
    return frozenset(found)


def _constructor_words(role: Role) -> frozenset[str]:
    return frozenset().union(*(c.words for c in cat.CONSTRUCTORS if c.role is role))


def _role_tokens(role: Role) -> frozenset[str]:
    if role is Role.DEEPSPEED:
        return frozenset({cat.DEEPSPEED_INITIALIZE.split(".")[0]})
    if role is Role.ACCELERATOR_ACCUMULATES:  # the constructor keyword, or the attribute set later
        return frozenset({cat.ACCUMULATION_STEPS_KEYWORD, cat.ACCUMULATION_PLUGIN_KEYWORD})
    if role is Role.NO_SYNC_CONTEXT:  # the bound method, `context = self.model.no_sync`
        return frozenset({"." + cat.DDP_NO_SYNC.name})
    if role is Role.WRAPS_COMPILED:
        role = Role.DDP
    found = set(_constructor_words(role))
    for guess in cat.NAME_GUESSES:
        if guess.role is role:
            found.update(guess.words)
    if not found:
        raise ValueError(f"{role} is not something the prefilter can look for")
    return frozenset(found)


def _fact_tokens(fact: Fact) -> frozenset[str]:
    if fact is Fact.TRAINING_LOOP:
        return frozenset(name + "(" for name in backward_names())
    if fact is Fact.LOSS_DIVIDED:
        return frozenset({"/"} | {name + "(" for name, op in cat.LOSS_OPERATIONS.items() if op is LossOp.DIVIDES})
    if fact is Fact.AMP_SCALED_LOSS:  # `scaler.scale(loss)`, or an Accelerator built to scale its backward
        return frozenset({name + "(" for name, op in cat.LOSS_OPERATIONS.items() if op is LossOp.AMP_SCALES}
                         | {cat.MIXED_PRECISION_KEYWORD})
    if fact is Fact.DATA_LENGTH:
        return frozenset({cat.LENGTH_FUNCTION + "("})
    if fact is Fact.CALLERS:
        return frozenset()  # a structural need: hollowing keeps the callers of kept functions
    if fact is Fact.HOOKS:
        return frozenset(word for hook in cat.HOOKS for word in (hook.name, hook.switch))
    if fact is Fact.FRAMEWORK_DIVIDES_LOSS:
        scalings = {api.divides_loss for api in cat.APIS} | {hook.divides_loss for hook in cat.HOOKS}
        return frozenset().union(*(_scaling_tokens(s) for s in scalings - {LossScaling.NEVER}))
    raise ValueError(f"no evidence known for {fact}")


def _scaling_tokens(scaling: LossScaling) -> frozenset[str]:
    """What a file says when a framework's scaling is switched on."""
    if scaling is LossScaling.WITH_ACCUMULATION_STEPS:
        return _role_tokens(Role.ACCELERATOR_ACCUMULATES)
    if scaling is LossScaling.WHEN_ENGINE_OWNS_WINDOW:
        return _role_tokens(Role.DEEPSPEED)
    return frozenset(hook.base for hook in cat.HOOKS if hook.divides_loss is scaling)


def present(token: str, text: str) -> bool:
    """Is the token in the text? A token ending in "(" must be a call: the name, optional whitespace,
    then "(", and not a definition (`def backward(ctx, grad)` is everywhere in autograd code)."""
    if not token.endswith("("):
        return token in text
    name = token[:-1]
    if name not in text:
        return False
    return any(text[max(0, m.start() - 4):m.start()] != "def " for m in _call_pattern(name).finditer(text))


def any_present(need: Need, text: str) -> bool:
    return any(present(token, text) for token in tokens(need))


def calls_only(need: Need) -> bool:
    """Are all of the need's tokens calls (so that they can be checked again on code alone)?"""
    return all(token.endswith("(") for token in tokens(need))


@functools.lru_cache(maxsize=None)
def _call_pattern(name: str) -> re.Pattern[str]:
    return re.compile(re.escape(name) + r"\s*\(")
