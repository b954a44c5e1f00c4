"""Every fixture project yields exactly the findings its files' `# expect:` markers name.

A fixture project is a directory under fixtures/projects/ with its own root marker (pyproject.toml):
a training loop, a helper, a base class or a loss spread over several files, in a buggy and a
correct twin. Each is linted twice: whole (every file a target), and one file at a time as
pre-commit runs it, where the project model must still see the other files (both ways: what the
file calls, and the loops elsewhere that call it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gradcheck_accum.lint.config import Settings
from gradcheck_accum.lint.diagnostics import RUN_LINE, Finding
from gradcheck_accum.lint.files import Target
from gradcheck_accum.lint.runner import Options, lint_targets
from tests.test_fixtures import expected_findings

PROJECTS = Path(__file__).resolve().parent.parent / "fixtures" / "projects"
NAMES = sorted(p.name for p in PROJECTS.iterdir() if p.is_dir())


def expected(project: Path) -> set[tuple[str, int, str]]:
    return {(path.relative_to(project).as_posix(), line, code)
            for path in sorted(project.rglob("*.py")) for line, code in expected_findings(path.read_text())}


def findings(project: Path, files: list[Path]) -> list[Finding]:
    targets = [Target(path.relative_to(project).as_posix(), path) for path in files]
    results = lint_targets(targets, Settings(), Options(), jobs=1)
    assert not [r.error for r in results if r.error]
    return [f for r in results for f in r.findings]


def lint(project: Path, files: list[Path]) -> set[tuple[str, int, str]]:
    return {(f.path, f.line, f.code) for f in findings(project, files)}


def test_every_project_has_a_root_marker_and_twins():
    assert all((PROJECTS / name / "pyproject.toml").is_file() for name in NAMES)
    stems = {name.rsplit("_", 1)[0] for name in NAMES}
    assert all(f"{stem}_buggy" in NAMES and f"{stem}_correct" in NAMES for stem in stems)
    assert all(expected(PROJECTS / f"{stem}_buggy") and not expected(PROJECTS / f"{stem}_correct") for stem in stems)


@pytest.mark.parametrize("name", NAMES)
def test_project_findings_match_markers(name, monkeypatch):
    project = PROJECTS / name
    monkeypatch.chdir(project)
    files = sorted(project.rglob("*.py"))
    assert lint(project, files) == expected(project)


@pytest.mark.parametrize("name", NAMES)
def test_each_file_alone_sees_its_project(name, monkeypatch):
    """Pre-commit passes only the changed file: its findings are those of a whole run, and the copies,
    at its calls, of what the whole run reports in the file that call runs (a whole run leaves those
    to that file)."""
    project = PROJECTS / name
    monkeypatch.chdir(project)
    want = expected(project)
    for path in sorted(project.rglob("*.py")):
        relative = path.relative_to(project).as_posix()
        alone = findings(project, [path])
        copies = {(f.path, f.line, f.code) for f in alone
                  if any(r.message == RUN_LINE and (r.path, r.line, f.code) in want for r in f.related)}
        own = {item for item in want if item[0] == relative}
        assert {(f.path, f.line, f.code) for f in alone} - copies == own, relative
