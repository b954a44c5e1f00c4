"""Which checks exist, in two views that a test keeps in agreement.

- `codes()`: every code with its name, read from the rule pages' file names
  (`rules/ACC101-zero-grad-every-micro-batch.md`). A directory listing is all it costs, so settings
  validate selectors and report codes without loading a single rule.
- `rules()`: the rule classes. Every module of `gradcheck_accum.lint.rules` is imported and each
  Rule subclass registers itself on definition (rule.py), so adding a rule is adding its module (or
  its class to a family module) and its page: nothing else lists rules.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from typing import TYPE_CHECKING

from gradcheck_accum.lint.pages import pages_dir

if TYPE_CHECKING:
    from gradcheck_accum.lint.rule import Rule

_PAGE_NAME = re.compile(r"^(ACC\d{3})-([a-z0-9-]+)\.md$")


@functools.cache
def codes() -> dict[str, str]:
    """code -> name of every check, in code order."""
    directory = pages_dir()
    found = {}
    if directory is not None:
        for path in directory.iterdir():
            match = _PAGE_NAME.match(path.name)
            if match:
                found[match[1]] = match[2]
    if not found:  # an installation without its pages: ask the rules themselves
        found = {rule.code: rule.name for rule in rules()}
    return dict(sorted(found.items()))


@functools.cache
def rules() -> tuple[type[Rule], ...]:
    """Every rule class, ordered by code."""
    import gradcheck_accum.lint.rules as package
    from gradcheck_accum.lint.rule import registered

    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")
    return tuple(sorted(registered(), key=lambda rule: rule.code))


def by_code() -> dict[str, type[Rule]]:
    return {rule.code: rule for rule in rules()}


def selected(selection: set[str]) -> list[type[Rule]]:
    """The rule classes of the selected codes."""
    return [rule for rule in rules() if rule.code in selection]
