"""Parse once, build the file model, run the rules, turn reports into findings, then the suppression
stage (suppressions.py)."""

from __future__ import annotations

import ast
import os
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from gradcheck_accum.lint import registry, suppressions
from gradcheck_accum.lint.diagnostics import Edit, Finding, Related
from gradcheck_accum.lint.fixes import Fix, fixed_source, independent, same_fix
from gradcheck_accum.lint.inlining import ProjectContext
from gradcheck_accum.lint.lazy import cst
from gradcheck_accum.lint.lines import split_lines
from gradcheck_accum.lint.model import FileModel
from gradcheck_accum.lint.names import forget_children
from gradcheck_accum.lint.nesting import too_deep
from gradcheck_accum.lint.outline import one_newline, python_tree
from gradcheck_accum.lint.positions import node_positions
from gradcheck_accum.lint.rule import Rule

if TYPE_CHECKING:
    from gradcheck_accum.lint.project import Project

Rules = Iterable[type[Rule]]


class ParseFailure(Exception):
    """The source is not Python this linter can parse; str(self) is a one-line reason."""


@dataclass
class Analysis:
    module: cst.Module
    findings: list[Finding]
    fixes: dict[Finding, Fix] = field(default_factory=dict)


def parse(source: str) -> cst.Module:
    reason = too_deep(source)
    if reason is not None:
        raise ParseFailure(reason)
    try:
        with _parser_output_trusted():
            return cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise ParseFailure(_syntax_message(source) or
                           f"syntax error at line {exc.raw_line}, column {exc.raw_column + 1}") from None
    except RecursionError:
        raise ParseFailure("nesting too deep to parse") from None


def _parse_or_none(source: str) -> cst.Module | None:
    """Another file of the project, parsed as this one is; None when it cannot be (calls into it stay
    unresolved)."""
    try:
        return parse(source)
    except ParseFailure:
        return None


def syntax_error(source: str, path: Path | None = None) -> str | None:
    """Why the source cannot be parsed, or None: for files that no rule needs parsed, which must still
    be reported when they are broken. A file that this Python has compiled as it is now (`path`, see
    compiled_already) parses. Otherwise CPython's compiler answers for most files in a fraction of a
    libcst parse (bytecode is cheaper to produce than Python AST objects); what it rejects is put to
    libcst, so that newer syntax, or code that only fails CPython's later checks, is judged as it is
    in the files that are analysed."""
    import warnings

    if path is not None and compiled_already(path):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like are not our business
            compile(source, "<file>", "exec", dont_inherit=True)
        return None
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    try:
        parse(source)
    except ParseFailure as exc:
        return str(exc)
    return None


def compiled_already(path: Path) -> bool:
    """Has this Python compiled the file as it is now? Its bytecode cache (`__pycache__/*.pyc`, this
    interpreter's magic number) records the modification time and size of the source it was
    compiled from, which the import system checks the same way before trusting it. Installed
    packages come compiled; a project's modules are once imported. Hash-checked caches are not read."""
    import importlib.util
    import struct

    try:
        with open(importlib.util.cache_from_source(os.fspath(path)), "rb") as cache:
            header = cache.read(16)
        stat = os.stat(path)
    except (OSError, ValueError, NotImplementedError):
        return False
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags, mtime, size = struct.unpack("<III", header[4:16])
    return flags == 0 and mtime == int(stat.st_mtime) & 0xFFFFFFFF and size == stat.st_size & 0xFFFFFFFF


@contextmanager
def _parser_output_trusted() -> Iterator[None]:
    """Skip libcst's per-node validation while its parser builds the tree: the parser's output is
    valid by construction, and validating ~20 nodes per line costs about a quarter of the parse.
    Nodes built later (by fixes) are validated as usual."""
    validating = cst.CSTNode.__post_init__
    cst.CSTNode.__post_init__ = _no_validation  # type: ignore[method-assign]
    try:
        yield
    finally:
        cst.CSTNode.__post_init__ = validating  # type: ignore[method-assign]


def _no_validation(self: cst.CSTNode) -> None:
    pass


def _syntax_message(source: str) -> str | None:
    """CPython's wording of the error (clearer than libcst's), when CPython rejects the code too."""
    try:
        compile(source, "<file>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as exc:
        return f"syntax error at line {exc.lineno}, column {exc.offset or 1}: {exc.msg}"
    except (ValueError, RecursionError, MemoryError) as exc:
        return f"cannot parse: {exc}"
    return None


def analyze(source: str, path: str, rules: Rules | None = None, enabled: set[str] | None = None,
            hollowed: str | None = None, fix_edits: bool = False, project: Project | None = None) -> Analysis:
    """Lint one file's text. Raises ParseFailure on unparseable source.

    `rules`: the rule classes to run (default: every rule). `enabled`: the codes selected for this
    file (default: those of `rules`, and every other check when `rules` is the default); the
    suppression stage runs ACC900 when it is enabled, judging suppressions for enabled codes only.
    `hollowed`: the same file with the definitions these rules cannot need left out (hollow.py),
    parsed instead of `source`; every line and column the rules can report on is the same in both.
    `fix_edits`: also give each fixable finding its fix as a text edit (one code generation each).
    `project`: the project the file belongs to (calls resolve into its other files); without one the
    file stands alone.
    """
    if rules is None:
        rules, enabled = registry.rules(), set(registry.codes()) if enabled is None else enabled
    rules = list(rules)
    enabled = {rule.code for rule in rules} if enabled is None else enabled
    parsed = source if hollowed is None else hollowed
    module = parse(parsed)
    context = ProjectContext(project, Path(path).absolute(), module, parsed, _parse_or_none) \
        if project is not None else ProjectContext.alone(module, parsed, source=source)
    try:
        reported = _run_rules(rules, FileModel(module, context, text=parsed), module, parsed, path)
    finally:
        forget_children()
    kept = suppressions.apply(source, path, reported, enabled, set(registry.codes()))
    findings = sorted(kept)
    fixes = {f: kept[f] for f in findings if kept[f] is not None}
    if fix_edits and fixes and hollowed is None:  # a hollowed module cannot write the file back
        with_edits = {f: replace(f, fix_edit=text_edit(source, fixed_source(source, module, [fix])))
                      for f, fix in fixes.items()}
        findings = sorted(with_edits.get(f, f) for f in findings)
        fixes = {with_edits[f]: fix for f, fix in fixes.items()}
    return Analysis(module, findings, fixes)


def _run_rules(rules: list[type[Rule]], model: FileModel, module: cst.Module, parsed: str,
               path: str) -> dict[Finding, Fix | None]:
    reports = [(rule, report) for rule in rules for report in rule().check(model)]
    if not reports:
        return {}
    foreign = model.foreign_nodes()
    placed = []
    for rule, report in reports:
        scope, entry = report.scope, None
        if id(report.node) in foreign:  # a line of another file, walked in place of a call
            walks = foreign[id(report.node)]  # the one the report's window walked, if it says
            entry, scope = next((walk for walk in walks if walk[1] is report.scope), walks[0])
            if entry is None:
                continue  # reached from a loop in that other file: reported when it is linted
        note, places = model.places(report.node, scope)
        if entry is not None:
            report = report._replace(node=entry, fix=None)  # at the call here that runs it
        placed.append((rule, report, note, places))
    if not placed:
        return {}
    # Positions (and source lines) only for files that have something to report.
    here = [place.node for *_, places in placed for place in places if place.module.module is module]
    positions = node_positions(module, parsed, [report.node for _, report, *_ in placed] + here, _tree(parsed))
    lines = split_lines(parsed)
    reported: dict[Finding, Fix | None] = {}
    first: dict[tuple[int, int, str], Finding] = {}
    for rule, report, note, places in placed:
        span, fix = positions[report.node], report.fix
        related = tuple(_related(place, module, path, positions, lines) for place in places)
        message = report.message
        if note:
            message += f" ({note.format(*(f'{r.path}:{r.line}' for r in related))})"
        finding = Finding(path, span.start.line, span.start.column + 1, span.end.line, span.end.column + 1,
                          rule.code, rule.name, message,
                          snippet=lines[span.start.line - 1] if span.start.line <= len(lines) else None,
                          related=related)
        # A statement reached from two loops (the per-batch loop and the epoch loop that calls it) is one
        # finding: the first window's, whose names are the nearest caller's (`self.model`, not `trainer.model`)
        finding = first.setdefault((finding.line, finding.column, finding.code), finding)
        # Windows that share a statement (the paths through a branch) report it once. Its fix is
        # offered only when every one of them offers the same: a fix placed for one path (the clip
        # moved before the step that runs when `warmup_done` is false) can be wrong on another.
        reported[finding] = (fix if same_fix(reported[finding], fix) else None) if finding in reported else fix
    return {replace(f, fix_safety=fix.safety, fix_description=fix.description) if fix else f: fix
            for f, fix in reported.items()}


def _related(place, module: cst.Module, path: str, positions, lines: list[str]) -> Related:
    """A place as a location: in this file from the positions already computed, in another file from
    its own module."""
    if place.module.module is module:
        span = positions[place.node]
        where, text = path, lines
    else:
        other = place.module
        span = node_positions(other.module, other.text, [place.node], _tree(other.text))[place.node]
        where, text = _display(place.module.path, path), split_lines(place.module.text)
    line = span.start.line
    return Related(where, line, span.start.column + 1, place.message, text[line - 1] if line <= len(text) else None)


def _tree(text: str) -> ast.Module | None:
    """CPython's tree of a parsed text, which places its statements for node_positions (the last few
    are kept: the prefilter and the project summaries read the same texts)."""
    return python_tree(one_newline(text))


def _display(other: Path, path: str) -> str:
    """Another file's path as the linted file's path is shown: relative to the same directory."""
    here = Path(path)
    base = Path(path).absolute().parent
    try:
        return Path(os.path.normpath(here.parent / os.path.relpath(other, base))).as_posix()
    except ValueError:
        return other.as_posix()


def text_edit(old: str, new: str) -> Edit:
    """The smallest single replacement that turns `old` into `new`."""
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    end_old, end_new = len(old), len(new)
    while end_old > start and end_new > start and old[end_old - 1] == new[end_new - 1]:
        end_old, end_new = end_old - 1, end_new - 1
    return Edit(start, end_old - start, new[start:end_new])


def lint_source(source: str, path: str, rules: Rules | None = None) -> list[Finding]:
    return analyze(source, path, rules).findings


@dataclass
class FixResult:
    source: str
    fixed: list[Finding]
    remaining: list[Finding]
    converged: bool = True  # False: fixes still applied after `max_passes` passes (a cycle)


def fix_source(source: str, path: str, rules: Rules | None = None, unsafe: bool = False, max_passes: int = 100,
               enabled: set[str] | None = None) -> FixResult:
    """Apply fixes until none applies (ruff's fixed-point loop): each pass lints and applies every
    fix that overlaps none taken before it in that pass (fixes.independent), so the passes grow with
    how deeply fixes nest, not with how many there are.

    A fix whose result does not parse, or changes nothing, is skipped and its finding kept.
    """
    if rules is None:
        rules, enabled = registry.rules(), set(registry.codes()) if enabled is None else enabled
    rules = list(rules)
    fixed: list[Finding] = []
    skipped: set[tuple[str, int, int]] = set()
    for _ in range(max_passes):
        analysis = analyze(source, path, rules, enabled)
        candidates = [(f, fix) for f, fix in analysis.fixes.items()
                      if (fix.safe or unsafe) and (f.code, f.line, f.column) not in skipped]
        if not candidates:
            return FixResult(source, fixed, analysis.findings)
        batch = independent(analysis.module, candidates) or candidates[:1]
        new_source = _applied(source, analysis.module, batch)
        if new_source is None and len(batch) > 1:  # together they break the code: the first alone
            batch = batch[:1]
            new_source = _applied(source, analysis.module, batch)
        if new_source is None or new_source == source:
            finding = batch[0][0]
            skipped.add((finding.code, finding.line, finding.column))
            continue
        source = new_source
        fixed.extend(finding for finding, _ in batch)
    return FixResult(source, fixed, analyze(source, path, rules, enabled).findings, converged=False)


def _applied(source: str, module: cst.Module, batch: list[tuple[Finding, Fix]]) -> str | None:
    """The source with the batch's fixes applied, or None when the result does not parse."""
    new_source = fixed_source(source, module, [fix for _, fix in batch])
    try:
        parse(new_source)
    except ParseFailure:
        return None
    return new_source

