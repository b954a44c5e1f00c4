"""Which checks exist, in two views that a test keeps in agreement.

- `codes()`: every code with its name, read from the rule pages' file names
  (`rules/ACC101-zero-grad-every-micro-batch.md`). A directory listing is all it costs, so settings
  validate selectors and report codes without loading a single rule.
- `rules()`: the rule classes. Every module of `gradcheck_accum.lint.rules` is imported and each
  Rule subclass registers itself on definition (rule.py), so adding a rule is adding its module (or
  its class to a family module) and its page: nothing else lists rules.
- `checks()`: the rules and the suppression stage's ACC900 (suppressions.py), which has a code, a
  name and a page like a rule, and judges the rules' findings after they ran.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from typing import TYPE_CHECKING, Protocol

from gradcheck_accum.lint.pages import REPOSITORY, pages_dir

if TYPE_CHECKING:
    from gradcheck_accum.lint.rule import Rule


class Check(Protocol):
    """What every check has: a rule class, or the suppression stage's ACC900."""

    code: str
    name: str
    summary: str

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
    if not found:  # an installation without its pages: ask the checks themselves
        found = {check.code: check.name for check in checks()}
    return dict(sorted(found.items()))


def page_url(code: str) -> str | None:
    """The rule's page in the repository: the same on every machine, unlike a path to the installed file."""
    name = codes().get(code)
    return f"{REPOSITORY}/blob/main/rules/{code}-{name}.md" if name is not None else None


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


@functools.cache
def checks() -> tuple[Check, ...]:
    """Every check, ordered by code: the rules and ACC900."""
    from gradcheck_accum.lint.suppressions import UNUSED_SUPPRESSION

    return tuple(sorted((*rules(), UNUSED_SUPPRESSION), key=lambda check: check.code))


def severity(code: str) -> str:
    """A check's severity: "error" (the gradients come out wrong) or "warning" (slow or memory-hungry)."""
    found = {check.code: check for check in checks()}.get(code)
    return getattr(found, "severity", "error")
