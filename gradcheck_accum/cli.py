"""Command line: thin click commands over the linter and the verifier.

`accumcheck lint` never imports torch: the verify command imports it only when it runs.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import click

from gradcheck_accum import __version__

FORMATS = ("concise", "full", "json", "github", "sarif")


def _codes(values: tuple[str, ...]) -> list[str]:
    """`--select ACC1,ACC302 --select ACC5` -> ["ACC1", "ACC302", "ACC5"]."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


class _Group(click.Group):
    """Unexpected exceptions become one line and exit status 2, not a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - the last line of defence of a command-line tool
            click.echo(f"accumcheck: internal error: {exc.__class__.__name__}: {exc}", err=True)
            sys.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="accumcheck")
def main() -> None:
    """accumcheck: prove gradient accumulation in PyTorch training code correct."""


@main.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--format", "output_format", type=click.Choice(FORMATS), default="concise", show_default=True,
              help="Output format.")
@click.option("--output-file", "-o", type=click.Path(dir_okay=False), help="Write findings here instead of stdout.")
@click.option("--select", multiple=True, help="Rules to enable: codes, prefixes (ACC4) or ALL. Replaces config.")
@click.option("--extend-select", multiple=True, help="Rules to enable on top of the selection.")
@click.option("--ignore", multiple=True, help="Rules to disable: codes or prefixes.")
@click.option("--fix", is_flag=True, help="Apply safe fixes.")
@click.option("--unsafe-fixes", is_flag=True, help="With --fix or --diff, also apply unsafe fixes.")
@click.option("--diff", is_flag=True, help="Print the fixes as a unified diff; write nothing.")
@click.option("--statistics", is_flag=True, help="Print the number of findings per rule instead of the findings.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the cache.")
@click.option("--cache-dir", type=click.Path(file_okay=False), help="Cache directory [default: .accumcheck_cache].")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="pyproject.toml to read settings from.")
@click.option("--stdin-filename", help="The file name to report for source read from standard input (`-`).")
@click.option("--add-noqa", is_flag=True, help="Add `# noqa: CODE` to every reported line (a baseline).")
@click.option("--show-settings", is_flag=True, help="Print the effective settings and exit.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Worker processes [default: number of CPUs].")
@click.option("--quiet", "-q", is_flag=True, help="No summary line on stderr.")
def lint(paths, output_format, output_file, select, extend_select, ignore, fix, unsafe_fixes, diff, statistics,
         exit_zero, no_cache, cache_dir, config_path, stdin_filename, add_noqa, show_settings, jobs, quiet) -> None:
    """Lint PATHS (files and directories; `-` reads standard input) for gradient-accumulation bugs.

    Exit status: 0 no findings, 1 findings, 2 usage errors or files that could not be linted.
    """
    from gradcheck_accum.lint import config as config_mod
    from gradcheck_accum.lint.files import discover
    from gradcheck_accum.lint.output import FORMATS as RENDERERS
    from gradcheck_accum.lint.runner import Options, lint_targets, summarize

    paths = paths or (".",)
    try:
        if config_path:
            settings = config_mod.load(Path(config_path))
        else:
            real = [Path(p) for p in paths if p != "-"]
            settings = config_mod.load(config_mod.find_config(real[0] if real else Path.cwd()))
        if select:
            settings.select = _codes(select)
        settings.extend_select += _codes(extend_select)
        settings.ignore += _codes(ignore)
        settings.selected()  # validates the selectors
    except config_mod.ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    if show_settings:
        click.echo(settings.show())
        return

    targets, errors = discover(paths, settings.exclude, settings.root, stdin_filename)
    options = Options(fix=fix, unsafe_fixes=unsafe_fixes, diff=diff, fix_edits=output_format == "sarif")
    cache = None
    if not (no_cache or fix or diff):
        from gradcheck_accum.lint.cache import Cache

        cache = Cache(Path(cache_dir) if cache_dir else None, settings, fix_edits=options.fix_edits)
    if _interactive() and not quiet and len(targets) >= 200:
        with click.progressbar(length=len(targets), label="Linting", file=sys.stderr) as bar:
            results = lint_targets(targets, settings, options, jobs=jobs, cache=cache, progress=bar.update)
    else:
        results = lint_targets(targets, settings, options, jobs=jobs, cache=cache)

    if add_noqa:
        _add_noqa(results)
        return
    for result in results:
        if result.error:
            errors.append((result.target.display, result.error))
        if result.new_text is not None:
            sys.stdout.write(result.new_text)
    findings = [f for r in results for f in r.findings]

    if diff:
        text = "".join(r.diff for r in results)
    elif statistics:
        text = _statistics(findings)
    elif output_format == "full":
        from gradcheck_accum.lint.output.full import render

        text = render(findings, color=output_file is None and sys.stdout.isatty())
    else:
        text = RENDERERS[output_format](findings)
    if output_file:
        Path(output_file).write_text(text, encoding="utf-8")
    else:
        click.echo(text, nl=False)

    for path, reason in errors:
        click.echo(f"{path}: error: {reason}", err=True)
    stats = summarize(results)
    if not quiet:
        click.echo(_summary(stats, len(errors), fix or diff, Counter(f.code for f in findings)), err=True)
    if errors:
        sys.exit(2)
    changed = any(r.diff for r in results)
    if (findings or (diff and changed)) and not exit_zero:
        sys.exit(1)


def _interactive() -> bool:
    """A person at a terminal: no progress bar in pipes, files or CI logs."""
    import os

    return sys.stderr.isatty() and not os.environ.get("CI")


def _add_noqa(results) -> None:
    from gradcheck_accum.lint.baseline import add_noqa
    from gradcheck_accum.lint.files import UnreadableFile, UnwritableFile, read_source, write_source

    total = 0
    for result in results:
        if not result.findings or result.target.path is None or result.target.is_notebook:
            continue
        try:
            source = read_source(result.target)
            text, changed = add_noqa(source.text, result.findings)
            if changed:
                write_source(result.target.path, source.encode(text))
        except (UnreadableFile, UnwritableFile) as exc:
            click.echo(f"{result.target.display}: error: {exc}", err=True)
            continue
        if changed:
            total += changed
        elif result.findings:
            click.echo(f"{result.target.display}: could not add noqa comments", err=True)
    click.echo(f"Added noqa comments to {total} line{'s' * (total != 1)}.", err=True)


def _statistics(findings) -> str:
    counts = Counter((f.code, f.name) for f in findings)
    fixable = {f.code for f in findings if f.fix_safety == "safe"}
    return "".join(f"{count:>5}  {code}  {name}{'  [*]' if code in fixable else ''}\n"
                   for (code, name), count in sorted(counts.items()))


def _summary(stats: dict, errors: int, fixing: bool, per_rule: Counter) -> str:
    parts = []
    if stats["fixed"]:
        parts.append(f"Fixed {stats['fixed']} finding{'s' * (stats['fixed'] != 1)}.")
    if stats["findings"]:
        noun = "finding" if stats["findings"] == 1 else "findings"
        rules = ", ".join(f"{code} x{count}" for code, count in sorted(per_rule.items()))
        line = f"Found {stats['findings']} {noun} ({rules}) in {stats['files_with_findings']} of {_files(stats['files'])}"
        hints = []
        if stats["fixable"] and not fixing:
            hints.append(f"{stats['fixable']} fixable with --fix")
        if stats["unsafe_fixable"]:
            hints.append(f"{stats['unsafe_fixable']} more with --unsafe-fixes")
        parts.append(line + (f" ({'; '.join(hints)})." if hints else "."))
    elif not errors:
        parts.append(f"All checks passed ({_files(stats['files'])}).")
    if errors:
        parts.append(f"{errors} file{'s' * (errors != 1)} could not be linted.")
    return " ".join(parts)


def _files(count: int) -> str:
    return f"{count} file{'s' * (count != 1)}"


@main.command()
@click.argument("code", required=False)
@click.option("--all", "show_all", is_flag=True, help="List every rule: code, name and summary.")
def rule(code: str | None, show_all: bool) -> None:
    """Print the documentation page of a rule (by code or name), or list all rules."""
    from gradcheck_accum.lint.pages import page_text
    from gradcheck_accum.lint.registry import checks

    if show_all or not code:
        for item in checks():
            click.echo(f"{item.code}  {item.name:<38} {item.summary}")
        return
    wanted = code.strip()
    matches = [r for r in checks() if wanted.upper() == r.code or wanted.lower() == r.name]
    if not matches:
        raise click.UsageError(f"unknown rule {code!r}; `accumcheck rule --all` lists them")
    text = page_text(matches[0].code)
    if text is None:
        click.echo(f"{matches[0].code} {matches[0].name}: {matches[0].summary}\n(no documentation page installed)")
        return
    click.echo(text, nl=not text.endswith("\n"))


@main.command()
@click.option("--cache-dir", type=click.Path(file_okay=False), help="Cache directory [default: .accumcheck_cache].")
def clean(cache_dir: str | None) -> None:
    """Remove the lint cache."""
    from gradcheck_accum.lint.cache import remove

    removed = remove(Path(cache_dir) if cache_dir else None)
    click.echo(f"Removed {removed}" if removed else "No cache to remove.")


# The verifier's command imports torch only when it runs, so `accumcheck lint` stays torch-free.
from gradcheck_accum.verifier.command import verify_command  # noqa: E402

main.add_command(verify_command, "verify")
