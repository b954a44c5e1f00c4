"""Skip what cannot match, before libcst ever sees a file.

Stage 1 is textual: each rule requires model facts (`Rule.requires`), and evidence.py says, from
the call catalogue, what text each needs; a rule whose needs are missing from the file's text
cannot report anything there. Stage 2 is for the rules that only report inside a training loop
(they require Fact.TRAINING_LOOP): the calls a rule needs must appear in code, not only in comments
or docstrings, and CPython's own parser (several times faster than libcst) checks that some loop
reaches a backward call, directly or through a function of the same file. Both stages are
necessary conditions of the analysis, never heuristics: tests lint a large corpus with and without
them and compare. A file that passes may still have definitions no training loop reaches; hollow.py
leaves those out of what libcst parses.
"""

from __future__ import annotations

import ast
import functools
import re
from typing import Callable

from gradcheck_accum.lint.evidence import (Need, any_present, backward_call_pattern, calls_only, checkpoint_call_names,
                                           effect_call_names, tokens)
from gradcheck_accum.lint.hollow import hollow
from gradcheck_accum.lint.outline import Outline, blank_comments, blank_strings_and_comments, one_newline, python_tree
from gradcheck_accum.lint.rule import Rule
from gradcheck_accum.lint.vocabulary import EventKind


def screen(text: str, rules: list[type[Rule]], hollowing: bool = True,
           project: Callable[[], tuple[bool, str]] | None = None) -> tuple[list[type[Rule]], str | None]:
    """The rules that could fire on `text`, and what libcst needs to parse for them: None for the file
    as it is, or (with `hollowing`) the file with the definitions that cannot matter left out (hollow.py).

    `project`: for a file that calls, or is called by, code with training effects elsewhere in its
    project (inlining.project_evidence): whether a training loop reaches it that way, and the source
    of the functions elsewhere that take part. Their words count as the file's own, and nothing is
    hollowed (the file's functions may run inside loops the file does not show)."""
    reached_elsewhere, elsewhere, code, tree = False, "", None, None
    if project is not None and (_EFFECT_CALL.search(text) or _ON_GRAD.search(text) or _BUILDS_SCHEDULER(text)):
        # The project summarises this file first, from the same blanked text and CPython tree that
        # the second stage reads: made here (outline.py keeps the last few), they are made once.
        text = one_newline(text)
        code, tree = blank_strings_and_comments(text), python_tree(text)
        reached_elsewhere, elsewhere = project()
        if reached_elsewhere or elsewhere:
            hollowing = False
    present = _Presence(f"{text}\n{elsewhere}")
    candidates = [rule for rule in rules if rule.could_fire(present.text, present)]
    if not any(rule.needs_training_loop(present) for rule in candidates):
        return candidates, None
    # The few files that get this far are worth a closer look before libcst parses them.
    text = one_newline(text)
    code = code if code is not None else blank_strings_and_comments(text)
    in_code = _Presence(f"{code}\n{blank_strings_and_comments(one_newline(elsewhere))}" if elsewhere else code)
    # what a rule needs is read in code (calls), or in code and strings (the words of a setting): never
    # in comments alone, which say nothing the program does
    written = blank_comments(text)
    uncommented = _Presence(f"{written}\n{blank_comments(one_newline(elsewhere))}" if elsewhere else written)
    candidates = [rule for rule in candidates
                  if all(in_code(need) if calls_only(need) else uncommented(need) or not tokens(need)
                         for need in rule.requires)]
    if not any(rule.needs_training_loop(present) for rule in candidates):
        return candidates, None
    reached, outline = _loops_reach_backward(text, code, tree)
    if not reached and not reached_elsewhere:
        candidates = [rule for rule in candidates if not rule.needs_training_loop(present)]
    return candidates, hollow(outline, candidates) if hollowing and outline is not None and candidates else None


class _Presence:
    """Whether each need's evidence is in one text, each need looked up once."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.known: dict[Need, bool] = {}

    def __call__(self, need: Need) -> bool:
        found = self.known.get(need)
        if found is None:
            found = self.known[need] = any_present(need, self.text)
        return found


def loop_reaches_backward(text: str) -> bool:
    """Does a `for`/`while` loop call `.backward(...)`/`manual_backward(...)`, or a function defined in
    this file that (transitively) does? Unparseable text with a backward call answers True: libcst
    will say why."""
    text = one_newline(text)
    return _loops_reach_backward(text, blank_strings_and_comments(text))[0]


def _loops_reach_backward(text: str, code: str, tree: ast.Module | None = None) -> tuple[bool, Outline | None]:
    """The answer, and the file's outline when CPython could parse it (`tree`: its tree, if made)."""
    if not _BACKWARD_CALL.search(code):  # only in docstrings, messages or comments: no need to parse
        return False, None
    outline = Outline(text, code, tree) if tree is not None else Outline.parse(text, code)
    return outline is None or any(outline.holds_training_loop(top) for top in outline.tops), outline


# A call of a backward (`loss.backward(`, `self.manual_backward(`) in blanked code, from the catalogue
_BACKWARD_CALL = backward_call_pattern()
# A call of anything that has an effect on an accumulation window (backward, step, zero_grad, clip...),
# or that takes a model's weights: only a file with one can take part in a window spread over several
# files, or save a model compiled in another.
_EFFECT_CALL = re.compile(r"\b(?:" + "|".join(sorted(map(re.escape, effect_call_names() | checkpoint_call_names())))
                          + r")\s*\(")
# ... or a write to a gradient (`p.grad = None`, `p.grad.data.mul_(coef)`: a clear or a clip by hand)
_ON_GRAD = re.compile(r"\.grad\b")
# ... or a scheduler built, which a training function of another file may step once per window
_BUILDS_SCHEDULER = functools.partial(any_present, EventKind.SCHEDULER_BUILT)
