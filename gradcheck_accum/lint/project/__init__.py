"""The project model: the files around the ones being linted, summarised and cached, and calls
resolved between them (index.py). What one function does to an accumulation window in its
caller's loop, and what the caller's loop means for it, are built on this (inlining.py)."""

from __future__ import annotations

from pathlib import Path

from gradcheck_accum.lint import catalogue as cat
from gradcheck_accum.lint.project.index import (CALLABLE_METHODS, CallSite, ClassRef, FunctionRef, Project, find_root,
                                                is_marked, python_files)
from gradcheck_accum.lint.project.store import SummaryStore
from gradcheck_accum.lint.project.summary import GRADIENT_ONLY
from gradcheck_accum.lint.vocabulary import HELPER_EFFECTS

_OPEN: dict[tuple[Path, bool], Project] = {}  # (root, only its packages) -> the project, for this process
# (directory, working directory) -> its project root, until refresh_all: the root is looked for
# upwards with a few stats per directory, and asked for every file linted
_ROOTS: dict[tuple[Path, Path], Path] = {}


def project_for(path: Path, cache: Path | None = None) -> Project:
    """The project a file belongs to (one per root and process), its summaries cached in `cache`."""
    key = (path.parent, Path.cwd())
    root = _ROOTS.get(key)
    if root is None:
        root = _ROOTS[key] = find_root(path, fallback=key[1])
    # A script in a directory that no marker (nor the directory the linter runs in) makes a project,
    # a home or downloads folder, has for its project what it can import: not every file below it.
    loose = not is_marked(root) and root != key[1].absolute()
    project = _OPEN.get((root, loose))
    if project is None:
        summaries = SummaryStore(root, effect_names(), watched_names(), directory=cache, words=watched_words())
        project = _OPEN[root, loose] = Project(root, summaries, packages_only=loose)
    return project


def effect_names() -> frozenset[str]:
    """The names a function must call (or set) to have an effect a window sees: the catalogue's
    calls and attributes that make one of the events a helper brings into its caller. Summaries
    screen functions by them."""
    names = frozenset(api.name for api in cat.APIS if api.event in HELPER_EFFECTS)
    # an effect only on a gradient (`p.grad.clamp_(-v, v)`): a function that calls it on anything else
    # (`snr.clamp_(max=5.0)` in a forward) has no effect (summary.GRADIENT_ONLY marks such names)
    on_gradients = frozenset(name for name in names if all(api.on_grad for api in cat.APIS if api.name == name))
    # `update` is GradScaler's only next to its `step`, and every dict's: screening for it would make
    # half of all functions look like they matter
    return names - on_gradients - {"update"} | frozenset(GRADIENT_ONLY + name for name in on_gradients)


def watched_names() -> frozenset[str]:
    """Constructors whose keywords configure a framework from another file (summary.constructions)."""
    return frozenset({"Trainer", "Accelerator", "Fabric"}) | frozenset(
        name for hook in cat.HOOKS for name in hook.arguments_classes)


def watched_words() -> frozenset[str]:
    """Framework settings whose mention in code says a project may use them (summary.names): the
    keyword that makes a framework's loop accumulate, set from a command line or a config file."""
    return frozenset(driver.configured_by for driver in cat.DRIVERS if driver.configured_by) | frozenset(
        word for hook in cat.HOOKS for word in (hook.arguments_parser, hook.accumulation_keyword) if word)


def refresh_all() -> None:
    """Let every open project check its files again (between two runs in one process)."""
    _ROOTS.clear()
    for project in _OPEN.values():
        project.refresh()


def save_all() -> None:
    """Write the summaries computed in this process to their caches."""
    for project in _OPEN.values():
        if isinstance(project.summaries, SummaryStore):
            project.summaries.save()


__all__ = ["CALLABLE_METHODS", "CallSite", "ClassRef", "FunctionRef", "Project", "SummaryStore", "effect_names", "find_root",
           "python_files", "project_for", "refresh_all", "save_all", "watched_names", "watched_words"]
