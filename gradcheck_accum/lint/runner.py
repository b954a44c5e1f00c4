"""Lint many files: prefilter, parse once per file, suppressions and per-file ignores, fixes.

Results come back in the order of the targets, whatever the parallelism.
"""

from __future__ import annotations

import gc
import os
import sys
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, NamedTuple

from gradcheck_accum.lint import deep, lazy, registry
from gradcheck_accum.lint.cache import project_state
from gradcheck_accum.lint.config import Settings, expand
from gradcheck_accum.lint.diagnostics import RUN_FUNCTION, RUN_LINE, Finding
from gradcheck_accum.lint.digests import content_hash
from gradcheck_accum.lint.engine import FixResult, ParseFailure, analyze, fix_source, syntax_error
from gradcheck_accum.lint.files import Source, Target, UnreadableFile, UnwritableFile, matches, read_source, write_source
from gradcheck_accum.lint.lines import split_lines
from gradcheck_accum.lint.prefilter import screen
from gradcheck_accum.lint.inlining import project_evidence
from gradcheck_accum.lint.project import SummaryStore, project_for, refresh_all, save_all
from gradcheck_accum.lint.rule import Rule
from gradcheck_accum.lint.suppressions import UNUSED_SUPPRESSION, could_report_unused

if TYPE_CHECKING:
    from gradcheck_accum.lint.cache import Cache, Entry

# Below this many files a process pool costs more than it saves (and pre-commit runs stay in process).
PARALLEL_THRESHOLD = 32
# Files that pass the prefilter are analysed by the pool's workers only when there are this many: each
# worker pays libcst's import (~0.2 s) before its first parse.
PARALLEL_ANALYSIS = 8


class Options(NamedTuple):
    fix: bool = False
    unsafe_fixes: bool = False
    diff: bool = False  # compute fixes but write nothing; FileResult.diff holds the unified diff
    fix_edits: bool = False  # give each fixable finding its fix as a text edit (SARIF shows them)
    prefilter: bool = True
    summaries: Path | None = None  # where the project model caches file summaries (None: not kept)


@dataclass
class FileResult:
    target: Target
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    fixed: list[Finding] = field(default_factory=list)
    diff: str = ""
    new_text: str | None = None  # standard input under --fix: the fixed text, when a fix changed it
    stdout: bytes | None = None  # standard input under --fix: the bytes to print, fixed or not
    source: str | None = None  # standard input: the text read (it cannot be read again)
    warning: str | None = None  # said on stderr; the file's findings still count
    fingerprint: tuple | None = None  # (stat, content hash) for the cache


def lint_targets(targets: list[Target], settings: Settings | None = None, options: Options = Options(),
                 jobs: int | None = None, cache: Cache | None = None,
                 progress: Callable[[int], None] = lambda done: None) -> list[FileResult]:
    """Lint every target with its own settings (`Target.settings`, else `settings`)."""
    default = settings or Settings()
    rules_of: dict[int, list[type[Rule]]] = {}

    def configured(target: Target) -> tuple[Settings, list[type[Rule]]]:
        chosen = target.settings or default
        if id(chosen) not in rules_of:
            rules_of[id(chosen)] = registry.selected(set(chosen.selected()))
        return chosen, rules_of[id(chosen)]

    if cache is not None and options.summaries is None:
        options = options._replace(summaries=cache.linter_directory)
    refresh_all()  # a second run in this process sees the files as they are now
    results: dict[Target, FileResult] = {}
    work = []
    states: dict[Path, str] = {}

    def project_of(path: Path) -> str:
        """The state of the project `path` belongs to (cache entries depend on the other files)."""
        project = project_for(path, options.summaries)
        if project.root not in states:
            store = project.summaries
            states[project.root] = project_state([(str(file), store.state(file) if isinstance(store, SummaryStore)
                                                   else None) for file in project.files])
        return states[project.root]

    for target in targets:
        if target.path is None:
            continue
        chosen, rules = configured(target)
        entry = cache.fresh(target.path, chosen, project_of(target.path)) if cache else None
        if entry is not None:  # unchanged since the last run: not even read
            results[target] = FileResult(target, *entry.restore(target.display))
            progress(1)
        else:
            work.append((target, chosen, rules, options,
                         cache.candidate(target.path, chosen, project_of(target.path)) if cache else None,
                         cache is not None))
    workers = min(jobs or os.cpu_count() or 1, len(work))
    if len(work) >= PARALLEL_THRESHOLD and workers > 1:
        done = _in_pool(work, workers, progress)
    else:
        done = []
        for item in work:
            done.append(_run(item))
            progress(1)
    original = {target: target for target in targets}  # results from the pool carry copies of the settings
    for result in done:
        results[result.target] = result
        if cache is not None and result.fingerprint is not None:
            cache.store(result.target.path, configured(original[result.target])[0], project_of(result.target.path),
                        *result.fingerprint, result.findings, result.error)
    if cache is not None:
        cache.save()
    save_all()
    for target in targets:
        if target.path is None:
            chosen, rules = configured(target)
            results[target] = lint_file(target, chosen, rules, options, stdin=getattr(sys.stdin, "buffer", None))
    _leave_to_own_files([results[t] for t in targets])
    return [results[t] for t in targets]


def _leave_to_own_files(results: list[FileResult]) -> None:
    """A finding on a line of another file is reported at the call here that runs it, so that linting
    this file alone shows it. When the file of the function that call runs is linted in the same run
    and reports the same finding itself (on that line, or at its own call that runs the line), the
    call's copy only repeats it and is dropped."""
    def place(related) -> tuple[Path, int]:
        return Path(related.path).resolve(), related.line

    def run_line(finding: Finding) -> tuple[Path, int] | None:
        return next((place(r) for r in finding.related if r.message == RUN_LINE), None)

    paths = {id(result): result.target.path.resolve() for result in results if result.target.path is not None}
    # (file, line, code) of every finding, and (file, code, line run) of every finding moved to a call
    reported_on = {(paths.get(id(r)), f.line, f.code) for r in results for f in r.findings}
    reported_at_call = {(paths.get(id(r)), f.code, run_line(f)) for r in results for f in r.findings
                        if run_line(f) is not None}
    for result in results:
        kept = []
        for finding in result.findings:
            line = run_line(finding)
            callee = next((place(r)[0] for r in finding.related if r.message == RUN_FUNCTION), None)
            repeated = line is not None and ((*line, finding.code) in reported_on or (
                callee not in (None, paths.get(id(result))) and (callee, finding.code, line) in reported_at_call))
            if not repeated:
                kept.append(finding)
        result.findings = kept


def _in_pool(work: list, workers: int, progress: Callable[[int], None]) -> list[FileResult]:
    """Workers screen every file (reading, hashing, prefilter); the few files that pass are analysed
    here, many of them by the workers. The main process loads libcst while the workers screen."""
    from gradcheck_accum.lint.pool import Pool  # not paid for by single-file (pre-commit) runs

    done: list[FileResult] = []
    pending: list[Pending] = []
    with Pool(workers) as pool:
        screened = pool.map(_screen, work, lambda item, how: _crashed(item[0], how),
                            chunksize=max(1, len(work) // (workers * 8)))
        lazy.load()  # now, in parallel with the screening
        for item in screened:
            if isinstance(item, Pending):
                pending.append(item)
            else:
                done.append(item)
                progress(1)
        if len(pending) >= PARALLEL_ANALYSIS:
            pending.sort(key=lambda item: -len(item.text))  # the longest first, so none is left for last
            analysed = pool.map(analyze_file, pending, lambda item, how: _crashed(item.result.target, how))
        else:
            analysed = map(analyze_file, pending)
        for result in analysed:
            done.append(result)
            progress(1)
    return done


def _crashed(target: Target, how: str) -> FileResult:
    return FileResult(target, error=f"the analysis of this file crashed its process ({how}); "
                                    "the other files are not affected")


def _screen(item) -> FileResult | Pending:
    target, settings, rules, options, cached, fingerprint = item
    return screen_file(target, settings, rules, options, cached=cached, fingerprint=fingerprint)


def _run(item) -> FileResult:
    target, settings, rules, options, cached, fingerprint = item
    return lint_file(target, settings, rules, options, cached=cached, fingerprint=fingerprint)


@dataclass
class Pending:
    """A file the prefilter let through: what its analysis needs."""

    result: FileResult
    text: str
    codec: str  # how the file's bytes were decoded: fixed text is encoded the same way
    rules: list[type[Rule]]  # those that could fire here
    enabled: set[str]  # every code selected for the file (ACC900 judges suppressions against them)
    hollowed: str | None
    options: Options


def lint_file(target: Target, settings: Settings, rules: list[type[Rule]], options: Options,
              stdin=None, cached: Entry | None = None, fingerprint: bool = False) -> FileResult:
    item = screen_file(target, settings, rules, options, stdin, cached, fingerprint)
    return analyze_file(item) if isinstance(item, Pending) else item


def screen_file(target: Target, settings: Settings, rules: list[type[Rule]], options: Options,
                stdin=None, cached: Entry | None = None, fingerprint: bool = False) -> FileResult | Pending:
    """Read the file and decide whether it needs libcst: a finished result when it does not."""
    result = FileResult(target)
    try:
        with _no_cycle_collection():
            return _screen_file(result, settings, rules, options, stdin, cached, fingerprint)
    except Exception as exc:  # noqa: BLE001 - a bug of ours costs this file, not the run
        return _internal_error(result, exc)


def _screen_file(result: FileResult, settings: Settings, rules: list[type[Rule]], options: Options,
                 stdin, cached: Entry | None, fingerprint: bool) -> FileResult | Pending:
    target = result.target
    try:
        stat = target.path.stat() if fingerprint and target.path is not None else None
        source = read_source(target, stdin)
    except (UnreadableFile, OSError) as exc:
        result.error = str(exc) if isinstance(exc, UnreadableFile) else (exc.strerror or str(exc))
        return result
    if target.path is None:
        result.source = source.text
    if stat is not None:
        digest = content_hash(source.text)
        result.fingerprint = (stat, digest)
        if cached is not None and cached.digest == digest:  # touched but unchanged
            result.findings, result.error = cached.restore(target.display)
            return result
    text = source.text
    if target.path is None and options.fix and not options.diff:
        result.stdout = source.encode(text)  # an editor replaces its buffer with what is printed
    enabled = _enabled_for_file(target, settings, set(settings.selected()))
    rules = [rule for rule in rules if rule.code in enabled]
    hollowed = None
    if options.prefilter and not target.is_notebook:
        # Fixes rewrite the whole parsed module, so they parse it whole: no hollowing for them.
        project = project_for(target.path, options.summaries) if target.path is not None else None
        evidence = (lambda: project_evidence(project, target.path.absolute(), text)) if project is not None else None
        rules, hollowed = screen(text, rules, hollowing=not (options.fix or options.diff or options.fix_edits),
                                 project=evidence)
        if not rules and not (UNUSED_SUPPRESSION.code in enabled and could_report_unused(text)):
            # No enabled check can report here: libcst never sees the file, CPython checks it parses.
            result.error = syntax_error(text, target.path)
            return result
    return Pending(result, text, source.codec, rules, enabled, hollowed, options)


def analyze_file(item: Pending) -> FileResult:
    with _no_cycle_collection():
        return deep.call(_analyze_file, item)


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Python's cycle collector paused while one file is screened or analysed. Parsing allocates a
    tree of hundreds of thousands of objects (libcst's, CPython's), and every full collection those
    allocations trigger walks all of them to find nothing: the trees hold no cycles. On a
    17,927-line file that was a quarter of the lint's CPU time. Whatever cycles a file's work leaves
    are collected after it, as usual."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _analyze_file(item: Pending) -> FileResult:
    result = item.result
    try:
        if result.target.is_notebook:
            return _lint_notebook(result, item.text, item.codec, item.rules, item.enabled, item.options)
        return _lint_python(item)
    except ParseFailure as exc:
        result.error = str(exc)
    except RecursionError:
        result.error = "nesting too deep to analyse"
    except Exception as exc:  # noqa: BLE001 - a bug of ours costs this file, not the run
        return _internal_error(result, exc)
    return result


def _internal_error(result: FileResult, exc: Exception) -> FileResult:
    """The file's result when its analysis raised what no input should make it raise: one line naming
    the exception and where it was raised (for a bug report), no findings; every other file is still
    linted and reported, and the run exits 2 as for a file that cannot be read."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    said = " ".join(str(exc).split())
    result.findings, result.fingerprint = [], None  # not cached: the next run tries again
    result.error = (f"internal error while linting this file: {type(exc).__name__}{': ' if said else ''}{said}{where}"
                    "; please report it (the other files are linted)")
    return result


def _enabled_for_file(target: Target, settings: Settings, codes: set[str]) -> set[str]:
    ignored: set[str] = set()
    for glob, selectors in settings.per_file_ignores.items():
        if matches(Path(target.display), [glob], settings.root):
            ignored |= expand(selectors)
    return codes - ignored


def _lint_python(item: Pending) -> FileResult:
    result, text, rules, options = item.result, item.text, item.rules, item.options
    display = result.target.display
    if not (options.fix or options.diff):
        project = project_for(result.target.path, options.summaries) if result.target.path is not None else None
        result.findings = analyze(text, display, rules, item.enabled, item.hollowed, options.fix_edits,
                                  project).findings
        return result
    fixed = fix_source(text, display, rules, unsafe=options.unsafe_fixes, enabled=item.enabled)
    result.findings, result.fixed = fixed.remaining, fixed.fixed
    _say_if_unconverged(result, fixed)
    if fixed.source != text:
        _record_change(result, text, fixed.source, options, item.codec)
    return result


def _lint_notebook(result: FileResult, text: str, codec: str, rules: list[type[Rule]], enabled: set[str],
                   options: Options) -> FileResult:
    from gradcheck_accum.lint import notebooks  # imported by runs that meet a notebook, not by every lint

    try:
        return _lint_loaded_notebook(notebooks, result, text, codec, rules, enabled, options)
    except notebooks.NotPython:
        return result  # an R or Julia notebook in the tree: not ours to lint
    except notebooks.NotebookError as exc:
        result.error = str(exc)
        return result


def _lint_loaded_notebook(notebooks, result: FileResult, text: str, codec: str, rules: list[type[Rule]],
                          enabled: set[str], options: Options) -> FileResult:
    notebook = notebooks.load(text)
    display = result.target.display
    if options.fix or options.diff:
        fixed = fix_source(notebook.program, display, rules, unsafe=options.unsafe_fixes, enabled=enabled)
        _say_if_unconverged(result, fixed)
        new_text = notebooks.write_back(notebook, fixed.source) if fixed.fixed else None
        if new_text is not None and new_text != text:
            result.fixed = [notebook.locate(f) for f in fixed.fixed]
            _record_change(result, text, new_text, options, codec)
            if result.error is None:
                notebook = notebooks.load(new_text)
    # Edits would count in the program, not in the notebook's JSON: notebooks get none.
    result.findings = [notebook.locate(f) for f in analyze(notebook.program, display, rules, enabled).findings]
    return result


def _say_if_unconverged(result: FileResult, fixed: FixResult) -> None:
    if not fixed.converged:
        result.warning = (f"fixes did not settle after {len(fixed.fixed)} were applied (two fixes undo each "
                          "other?); what remains is reported")


def _record_change(result: FileResult, old: str, new: str, options: Options, codec: str) -> None:
    display = result.target.display
    if options.diff:
        import difflib

        result.diff = "".join(difflib.unified_diff(split_lines(old, keepends=True), split_lines(new, keepends=True),
                                                   f"a/{display}", f"b/{display}"))
    elif result.target.path is None:
        try:
            result.stdout, result.new_text = Source(old, codec).encode(new), new
        except UnwritableFile as exc:  # what is printed is the input: so are its findings
            result.error = str(exc)
            result.findings, result.fixed = sorted(result.findings + result.fixed), []
    else:
        try:
            write_source(result.target.path, Source(old, codec).encode(new))
        except UnwritableFile as exc:  # the file keeps what it had: so do its findings
            result.error = str(exc)
            result.findings, result.fixed = sorted(result.findings + result.fixed), []


def summarize(results: list[FileResult]) -> dict:
    findings = [f for r in results for f in r.findings]
    return {
        "files": len(results),
        "findings": len(findings),
        "files_with_findings": sum(1 for r in results if r.findings),
        "errors": sum(1 for r in results if r.error),
        "fixed": sum(len(r.fixed) for r in results),
        "fixable": sum(1 for f in findings if f.fix_safety == "safe"),
        "unsafe_fixable": sum(1 for f in findings if f.fix_safety == "unsafe"),
    }


