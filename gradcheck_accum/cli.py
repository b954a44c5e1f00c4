"""Command line: thin click commands over the linter and the verifier.

`accumcheck lint` never imports torch: the verify command imports it only when it runs.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

import click

from gradcheck_accum.version import __version__
from gradcheck_accum.lint.diagnostics import SEVERITIES

FORMATS = ("concise", "full", "json", "github", "sarif")


def _codes(values: tuple[str, ...]) -> list[str]:
    """`--select ACC1,ACC302 --select ACC5` -> ["ACC1", "ACC302", "ACC5"]. An empty value (`--select ""`)
    stays, so that it is reported as the empty selector it is rather than selecting nothing."""
    codes = []
    for value in values:
        codes += [part.strip() for part in value.split(",") if part.strip()] or [value.strip()]
    return codes


class _Group(click.Group):
    """Unexpected exceptions become one line and exit status 2, not a traceback. Commands of other
    parts of the package (`verify`) are imported when they are asked for: `accumcheck lint` on one
    file, run by pre-commit on every commit, does not pay for them."""

    _elsewhere = {"verify": ("gradcheck_accum.verifier.command", "verify_command")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._elsewhere})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self._elsewhere and name not in self.commands:
            import importlib

            module, attribute = self._elsewhere[name]
            self.add_command(getattr(importlib.import_module(module), attribute), name)
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # `accumcheck rule --all | head -1`: the reader has all it wants
            _stdout_gone()
            sys.exit(0)
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - the last line of defence of a command-line tool
            click.echo(f"accumcheck: internal error: {exc.__class__.__name__}: {exc}", err=True)
            sys.exit(2)


def _stdout_gone() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush does not fail on the closed pipe too."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _echo(text: str) -> None:
    """Write to stdout; a reader that stopped reading (`| head`) is not an error of ours."""
    try:
        click.echo(text, nl=False, color=True)  # colour codes are present only when _color() said so
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_gone()


def _echo_bytes(data: bytes) -> None:
    """Write bytes to stdout as they are (a fixed source in its own encoding)."""
    try:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_gone()


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="accumcheck")
def main() -> None:
    """accumcheck: prove gradient accumulation in PyTorch training code correct."""


def _format_option(function):
    return click.option("--output-format", "--format", "output_format", type=click.Choice(FORMATS),
                        default="concise", show_default=True, envvar="ACCUMCHECK_OUTPUT_FORMAT",
                        help="Output format (`--format` is the same option).")(function)


@main.command()
@click.argument("paths", nargs=-1, type=click.Path())
@_format_option
@click.option("--output-file", "-o", type=click.Path(dir_okay=False), help="Write findings here instead of stdout.")
@click.option("--select", multiple=True, help="Rules to enable: codes, prefixes (ACC4) or ALL. Replaces config.")
@click.option("--extend-select", multiple=True, help="Rules to enable on top of the selection.")
@click.option("--ignore", multiple=True, help="Rules to disable: codes or prefixes.")
@click.option("--extend-ignore", multiple=True, help="Rules to disable on top of `ignore` (ruff's older spelling).")
@click.option("--extend-exclude", multiple=True, help="Globs of files and directories to skip, on top of `exclude`.")
@click.option("--respect-gitignore/--no-respect-gitignore", default=None,
              help="Skip files that git ignores (.gitignore, .git/info/exclude) [default: respect].")
@click.option("--force-exclude", is_flag=True, hidden=True,
              help="Accepted for ruff compatibility: excluded files are always skipped, even when named.")
@click.option("--fix", is_flag=True, help="Apply safe fixes.")
@click.option("--unsafe-fixes", is_flag=True, help="With --fix or --diff, also apply unsafe fixes.")
@click.option("--fix-only", is_flag=True, help="Apply fixes; do not report, or fail on, the findings left.")
@click.option("--diff", is_flag=True, help="Print the fixes as a unified diff; write nothing.")
@click.option("--statistics", is_flag=True, help="Print the number of findings per rule instead of the findings.")
@click.option("--show-files", is_flag=True, help="Print the files that would be linted, and exit.")
@click.option("--show-settings", is_flag=True, help="Print the effective settings (of the first path) and exit.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("--fail-on", type=click.Choice(SEVERITIES), default=None,
              help="Exit 1 only for findings at least this severe: `error` (wrong gradients) or `warning` "
                   "(also performance-only findings) [default: warning].")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the cache.")
@click.option("--cache-dir", type=click.Path(file_okay=False), envvar="ACCUMCHECK_CACHE_DIR",
              help="Cache directory [default: .accumcheck_cache at the project root].")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="The one pyproject.toml to read settings from (instead of the nearest one per file).")
@click.option("--stdin-filename", help="Lint standard input, reported (and configured) as this file.")
@click.option("--add-noqa", is_flag=True, help="Add `# noqa: CODE` to every reported line (a baseline).")
@click.option("--color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
              help="Colour the findings; `auto` follows NO_COLOR, FORCE_COLOR and whether stdout is a terminal.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Worker processes [default: number of CPUs].")
@click.option("--quiet", "-q", is_flag=True, help="No summary line on stderr.")
def lint(paths, output_format, output_file, select, extend_select, ignore, extend_ignore, extend_exclude,
         respect_gitignore, force_exclude, fix, unsafe_fixes, fix_only, diff, statistics, show_files, show_settings,
         exit_zero, fail_on, no_cache, cache_dir, config_path, stdin_filename, add_noqa, color, jobs, quiet) -> None:
    """Lint PATHS (files and directories; `-` reads standard input) for gradient-accumulation bugs.

    Exit status: 0 no findings, 1 findings, 2 usage errors or files that could not be linted.
    """
    if _process_ends_with_command:
        # Everything the lint allocates (the analysis's modules and classes, each file's tree and
        # model) is kept, or freed by reference counting, until the quick exit: the cycle collector's
        # passes over it find nothing, and cost a one-file lint (pre-commit, an editor's save) about
        # 4% of its time. Pool workers, which go through many files, collect as usual (pool.py).
        import gc

        gc.disable()
    from gradcheck_accum.lint.cache import Cache, default_directory
    from gradcheck_accum.lint.config import ConfigError, Overrides, Resolver, anchored_glob
    from gradcheck_accum.lint.files import discover
    from gradcheck_accum.lint.registry import severity
    from gradcheck_accum.lint.runner import Options, lint_targets, summarize

    if stdin_filename is not None:  # as ruff: a stdin file name means the source comes from stdin
        for path in paths:
            if path != "-":
                click.echo(f"accumcheck: warning: ignoring {path} in favour of standard input "
                           f"(--stdin-filename)", err=True)
        paths = ("-",)
    paths = paths or (".",)
    overrides = Overrides(
        select=tuple(_codes(select)) if select else None, extend_select=tuple(_codes(extend_select)),
        ignore=tuple(_codes(ignore) + _codes(extend_ignore)),
        # a glob with a `/` inside is relative to the working directory
        extend_exclude=tuple(anchored_glob(glob, Path.cwd()) for glob in _codes(extend_exclude)),
        fail_on=fail_on, respect_gitignore=respect_gitignore)
    try:
        resolver = Resolver(overrides, Path(config_path) if config_path else None)
        first = next((Path(p) for p in paths if p != "-"), Path(stdin_filename or "-"))
        if show_settings:
            click.echo(resolver.for_path(first).show())
            return
        targets, errors = discover(paths, resolver, stdin_filename)
        project = resolver.for_directory(Path.cwd()).root
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    if show_files:
        _echo("".join(f"{target.display}\n" for target in targets))
        return

    fix = fix or fix_only
    options = Options(fix=fix, unsafe_fixes=unsafe_fixes, diff=diff, fix_edits=output_format == "sarif")
    cache = None
    if not (no_cache or fix or diff):
        cache = Cache(Path(cache_dir) if cache_dir else default_directory(Path.cwd(), project),
                      fix_edits=options.fix_edits)
    if _interactive() and not quiet and len(targets) >= 200:
        with _Progress(len(targets)) as progress:
            results = lint_targets(targets, options=options, jobs=jobs, cache=cache, progress=progress)
    else:
        results = lint_targets(targets, options=options, jobs=jobs, cache=cache)

    if add_noqa:
        _add_noqa(results)
        return
    for result in results:
        if result.error:
            errors.append((result.target.display, result.error))
        if result.warning:
            click.echo(f"{result.target.display}: warning: {result.warning}", err=True)
        if result.stdout is not None:
            _echo_bytes(result.stdout)
    findings = [] if fix_only else [f for r in results for f in r.findings]
    text = _render(results, findings, output_format, diff, statistics,
                   _color(color, stream=None if output_file else sys.stdout))
    if output_file:
        try:
            Path(output_file).parent.mkdir(parents=True, exist_ok=True)
            Path(output_file).write_text(text, encoding="utf-8")
        except OSError as exc:
            errors.append((output_file, f"cannot write the output file: {exc.strerror or exc}"))
    elif any(r.stdout is not None for r in results):  # fixing standard input: stdout holds the source alone
        click.echo(text, nl=False, err=True)
    else:
        _echo(text)

    for path, reason in errors:
        click.echo(f"{path}: error: {reason}", err=True)
    stats = summarize(results)
    if not quiet:
        mode = "diff" if diff else "fix-only" if fix_only else "fix" if fix else "check"
        click.echo(_summary(stats, len(errors), mode, Counter(f.code for f in findings)), err=True)
    if errors:
        sys.exit(2)
    failing = [f for r in results for f in r.findings if r.target.settings.fails(severity(f.code))]
    changed = any(r.diff for r in results)
    if ((failing and not fix_only) or (diff and changed)) and not exit_zero:
        sys.exit(1)


def _render(results, findings, output_format: str, diff: bool, statistics: bool, color: bool) -> str:
    from gradcheck_accum.lint.output import FORMATS as RENDERERS

    if diff:
        return "".join(r.diff for r in results)
    if statistics:
        return _statistics(findings, output_format)
    if output_format in ("concise", "full"):
        return RENDERERS[output_format](findings, color=color)
    if output_format in ("github", "sarif"):
        return RENDERERS[output_format](findings, notebooks=_notebooks(results, findings))
    return RENDERERS[output_format](findings)


def _color(option: str, stream) -> bool:
    """--color always/never; else NO_COLOR turns colour off and FORCE_COLOR (or CLICOLOR_FORCE) on
    (https://no-color.org, https://force-color.org); else colour only on a terminal."""
    import os

    if option != "auto":
        return option == "always"
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR") or os.environ.get("CLICOLOR_FORCE", "0") != "0":
        return True
    return stream is not None and stream.isatty()


def _interactive() -> bool:
    """A person at a terminal: no progress bar in pipes, files or CI logs."""
    import os

    return sys.stderr.isatty() and not os.environ.get("CI")


class _Progress:
    """A progress line on stderr, fed by the runner one file at a time.

    The estimate extrapolates the rate at which files have finished since the first one did: the
    time before it (imports, starting the workers) is not per-file work, and counting it as such
    (as click's bar does) made the first estimates hours long for a run of seconds."""

    def __init__(self, total: int, clock=None, stream=None) -> None:
        import time

        self.total, self.done = total, 0
        self.clock = clock or time.monotonic
        self.stream = stream or sys.stderr
        self.first: tuple[float, int] | None = None  # (time, files done) when the first file finished
        self.shown = -1.0

    def __enter__(self) -> "_Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.stream.write("\r\x1b[2K")
        self.stream.flush()

    def __call__(self, files: int) -> None:
        self.done += files
        now = self.clock()
        if self.first is None:
            self.first = (now, self.done)
        if now - self.shown >= 0.1 or self.done == self.total:
            self.shown = now
            self.stream.write(f"\r\x1b[2K{self.line()}")
            self.stream.flush()

    def eta(self) -> float | None:
        """Seconds left, once at least a second of steady progress says something about the rate."""
        if self.first is None:
            return None
        start, done_then = self.first
        elapsed, progressed = self.clock() - start, self.done - done_then
        if elapsed < 1.0 or progressed <= 0:
            return None
        return (self.total - self.done) * elapsed / progressed

    def line(self) -> str:
        width = 30
        filled = width * self.done // max(1, self.total)
        eta = self.eta()
        left = f"  {int(eta) // 60}:{int(eta) % 60:02d} left" if eta is not None else ""
        return f"Linting [{'#' * filled}{'-' * (width - filled)}] {self.done}/{self.total}{left}"


def _add_noqa(results) -> None:
    """Write the baseline into each file (its bytes kept but for the comments); standard input gets its
    text back with the comments, on stdout."""
    from gradcheck_accum.lint.baseline import add_noqa, add_noqa_notebook
    from gradcheck_accum.lint.files import UnreadableFile, UnwritableFile, read_source, write_source
    from gradcheck_accum.lint.notebooks import NotebookError

    total = 0
    for result in results:
        stdin = result.target.path is None
        if not result.findings:
            if stdin and result.source is not None:
                _echo(result.source)
            continue
        edit = add_noqa_notebook if result.target.is_notebook else add_noqa
        try:
            if stdin:
                text, changed = edit(result.source, result.findings)
                _echo(text)
            else:
                source = read_source(result.target)
                text, changed = edit(source.text, result.findings)
                if changed:
                    write_source(result.target.path, source.encode(text))
        except (UnreadableFile, UnwritableFile, NotebookError) as exc:
            click.echo(f"{result.target.display}: error: {exc}", err=True)
            continue
        if not changed:
            click.echo(f"{result.target.display}: could not add noqa comments", err=True)
        total += changed
    click.echo(f"Added noqa comments to {total} line{'s' * (total != 1)}.", err=True)


def _notebooks(results, findings) -> dict[str, str]:
    """The text of each notebook with findings: github and sarif place them on the file's own lines."""
    from gradcheck_accum.lint.files import UnreadableFile, read_text

    reported = {f.path for f in findings if f.cell is not None}
    texts = {}
    for result in results:
        if result.target.display in reported:
            try:
                texts[result.target.display] = result.source or read_text(result.target)
            except UnreadableFile:
                continue
    return texts


def _statistics(findings, output_format: str) -> str:
    from gradcheck_accum.lint.registry import severity

    counts = Counter((f.code, f.name) for f in findings)
    fixable = {f.code for f in findings if f.fix_safety == "safe"}
    if output_format == "json":
        import json

        return json.dumps([{"code": code, "name": name, "count": count, "fixable": code in fixable,
                            "severity": severity(code)} for (code, name), count in sorted(counts.items())],
                          indent=2) + "\n"
    return "".join(f"{count:>5}  {code}  {name}{'  [*]' if code in fixable else ''}\n"
                   for (code, name), count in sorted(counts.items()))


def _summary(stats: dict, errors: int, mode: str, per_rule: Counter) -> str:
    parts = []
    if stats["fixed"] or mode == "fix-only":
        verb = "Would fix" if mode == "diff" else "Fixed"
        parts.append(f"{verb} {stats['fixed']} finding{'s' * (stats['fixed'] != 1)}.")
    if per_rule:
        total = sum(per_rule.values())
        noun = "finding" if total == 1 else "findings"
        rules = ", ".join(f"{code} x{count}" for code, count in sorted(per_rule.items()))
        line = f"Found {total} {noun} ({rules}) in {stats['files_with_findings']} of {_files(stats['files'])}"
        hints = []
        if stats["fixable"] and mode == "check":
            hints.append(f"{stats['fixable']} fixable with --fix")
        if stats["unsafe_fixable"]:
            hints.append(f"{stats['unsafe_fixable']} more with --unsafe-fixes")
        parts.append(line + (f" ({'; '.join(hints)})." if hints else "."))
    elif not errors and mode != "fix-only":
        parts.append(f"All checks passed ({_files(stats['files'])}).")
    if errors:
        parts.append(f"{errors} file{'s' * (errors != 1)} could not be linted.")
    return " ".join(parts)


def _files(count: int) -> str:
    return f"{count} file{'s' * (count != 1)}"


main.add_command(lint, "check")  # ruff's name for the same command


@main.command()
@click.argument("code", required=False)
@click.option("--all", "show_all", is_flag=True, help="List every rule: code, name and summary.")
@click.option("--output-format", "--format", "output_format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="`json`: code, name, summary, severity, url and the page of each rule.")
def rule(code: str | None, show_all: bool, output_format: str) -> None:
    """Print the documentation page of a rule (by code or name), or list all rules."""
    from gradcheck_accum.lint.pages import page_text
    from gradcheck_accum.lint.registry import checks, page_url, severity

    if show_all or not code:
        chosen = list(checks())
    else:
        wanted = code.strip()
        chosen = [r for r in checks() if wanted.upper() == r.code or wanted.lower() == r.name]
        if not chosen:
            raise click.UsageError(f"unknown rule {code!r}; `accumcheck rule --all` lists them")
    if output_format == "json":
        import json

        records = [{"code": r.code, "name": r.name, "summary": r.summary, "severity": severity(r.code),
                    "url": page_url(r.code), "explanation": page_text(r.code)} for r in chosen]
        _echo(json.dumps(records if show_all or not code else records[0], indent=2) + "\n")
        return
    if show_all or not code:
        _echo("".join(f"{item.code}  {item.name:<38} {item.summary}\n" for item in chosen))
        return
    text = page_text(chosen[0].code)
    if text is None:
        _echo(f"{chosen[0].code} {chosen[0].name}: {chosen[0].summary}\n(no documentation page installed)\n")
        return
    _echo(text if text.endswith("\n") else text + "\n")


@main.command()
@click.option("--cache-dir", type=click.Path(file_okay=False), envvar="ACCUMCHECK_CACHE_DIR",
              help="Also remove this cache directory [default: the project root's].")
def clean(cache_dir: str | None) -> None:
    """Remove the lint caches: the project root's, and every one at or below this directory."""
    from gradcheck_accum.lint.cache import default_directory, remove
    from gradcheck_accum.lint.config import find_config

    config = find_config(Path.cwd())
    extra = Path(cache_dir) if cache_dir else default_directory(Path.cwd(), config.parent if config else None)
    removed = remove(Path.cwd(), extra)
    click.echo("".join(f"Removed {path}\n" for path in removed) or "No cache to remove.\n", nl=False)


@main.command()
@click.option("--stdio", is_flag=True, help="Talk over standard input and output (the default; editors pass it).")
def server(stdio: bool) -> None:
    """Run the Language Server: diagnostics, rule pages on hover, fixes and noqa as code actions."""
    try:
        from gradcheck_accum.server import main as serve
    except ImportError as exc:
        raise click.UsageError(f"the language server needs pygls and lsprotocol ({exc}): "
                               "pip install pygls lsprotocol") from None
    serve()


# True when this process is the `accumcheck` command, which ends when its command does (console).
_process_ends_with_command = False


def console() -> None:
    """The `accumcheck` command: `main`, then an exit that skips tearing the interpreter down.

    Freeing every module, syntax tree and summary one at a time costs a one-file lint (what pre-commit
    and editors run) about 40 ms, a sixth of its time, for nothing: the process is ending. The quick exit
    is taken only when nothing else may still need the normal one: no torch (its compile workers and
    process groups shut down from atexit handlers), no child processes, no other threads."""
    global _process_ends_with_command
    _process_ends_with_command = True
    try:
        main()
    except SystemExit as ending:
        status = ending.code
    else:  # pragma: no cover - click's standalone mode always ends with SystemExit
        status = 0
    if not isinstance(status, int) or "torch" in sys.modules or "multiprocessing" in sys.modules:
        sys.exit(status)
    import threading

    if threading.active_count() > 1:
        sys.exit(status)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):  # a reader gone, or a stream closed: the output is done either way
        pass
    os._exit(status)
