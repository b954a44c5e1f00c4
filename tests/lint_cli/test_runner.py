"""The run over many files: prefilter equivalence, process pool order, cache behaviour."""

import os
import shutil
import sys
from pathlib import Path

import pytest

from cli_samples import BUGGY, CLEAN
from gradcheck_accum.lint import runner
from gradcheck_accum.lint.cache import Cache
from gradcheck_accum.lint.config import Overrides, Resolver
from gradcheck_accum.lint.files import discover

ROOT = Path(__file__).parents[2]
TORCH = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" / "torch"


# CI lints every other fixture; the nightly run (ACCUMCHECK_FUZZ_EXAMPLES set) lints them all
FIXTURE_STRIDE = 1 if "ACCUMCHECK_FUZZ_EXAMPLES" in os.environ else 2


def corpus() -> list[Path]:
    """Fixtures, plus torch's own files that mention training words (where the prefilter decides)."""
    paths = sorted((ROOT / "fixtures").glob("*.py"))[::FIXTURE_STRIDE]
    if TORCH.is_dir():
        near = [p for p in sorted(TORCH.rglob("*.py")) if any(w in p.read_text(errors="replace")
                                                               for w in ("backward", "zero_grad", "compile("))]
        paths += near[::max(1, len(near) // 120)]
    return paths


def lint(paths, **options):
    targets, errors = discover([str(p) for p in paths])
    results = runner.lint_targets(targets, options=runner.Options(**options), jobs=1)
    return [(f.path, f.line, f.column, f.code) for r in results for f in r.findings], \
        sorted((r.target.display, r.error) for r in results if r.error)


@pytest.mark.slow
def test_prefilter_never_changes_results():
    paths = corpus()
    assert len(paths) > 100
    with_prefilter = lint(paths, prefilter=True)
    without = lint(paths, prefilter=False)
    assert with_prefilter == without
    assert with_prefilter[0]  # the corpus does have findings


@pytest.mark.parametrize("other", [CLEAN, "def add(a, b):\n    return a + b\n"],
                         ids=["workers analyse", "main process analyses"])
def test_process_pool_keeps_the_order(tmp_path, other):
    # Many files past the prefilter (CLEAN is a training loop too) are analysed by the workers, a
    # few by the main process.
    for i in range(runner.PARALLEL_THRESHOLD + 8):
        (tmp_path / f"m{i:03d}.py").write_text(BUGGY if i % 8 == 1 else other)
    targets, _ = discover([str(tmp_path)])
    serial = runner.lint_targets(targets, jobs=1)
    parallel = runner.lint_targets(targets, jobs=2)
    assert [r.findings for r in serial] == [r.findings for r in parallel]
    assert [r.target for r in parallel] == targets


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "a.py").write_text(BUGGY)
    (tmp_path / "b.py").write_text(CLEAN)
    return tmp_path


def run_cached(tree, overrides=Overrides()):
    targets, _ = discover([str(tree)], Resolver(overrides))
    cache = Cache(tree / ".cache")
    return [(r.target.display, [f.code for f in r.findings]) for r in runner.lint_targets(targets, jobs=1, cache=cache)]


def test_warm_run_only_stats_files(tree, monkeypatch):
    cold = run_cached(tree)

    def no_reading(*args, **kwargs):
        raise AssertionError("a warm run read a file")

    monkeypatch.setattr(runner, "read_source", no_reading)
    assert run_cached(tree) == cold


def test_touched_but_unchanged_file_is_not_parsed_again(tree, monkeypatch):
    cold = run_cached(tree)
    os.utime(tree / "a.py", ns=(1, 1))

    def no_parsing(*args, **kwargs):
        raise AssertionError("an unchanged file was parsed again")

    monkeypatch.setattr(runner, "analyze", no_parsing)
    assert run_cached(tree) == cold


def test_changed_content_and_settings_invalidate(tree):
    assert dict(run_cached(tree))[str(tree / "a.py")] == ["ACC101"]
    (tree / "a.py").write_text(CLEAN + "\n")
    assert dict(run_cached(tree))[str(tree / "a.py")] == []
    (tree / "b.py").write_text(BUGGY)
    assert dict(run_cached(tree, Overrides(ignore=("ACC101",))))[str(tree / "b.py")] == []
    assert dict(run_cached(tree))[str(tree / "b.py")] == ["ACC101"]


def test_a_change_in_another_file_of_the_project_invalidates(tmp_path, monkeypatch):
    """engine_pretrain.py's ACC501 comes from the backward in util/misc.py: unchanged itself, the file
    is linted again once that helper no longer backpropagates."""
    project = tmp_path / "project"
    shutil.copytree(ROOT / "fixtures" / "projects" / "loss_scaler_buggy", project)
    monkeypatch.chdir(project)
    assert dict(run_cached(project))[str(project / "engine_pretrain.py")] == ["ACC501"]
    helper = project / "util" / "misc.py"
    helper.write_text(helper.read_text().replace("self._scaler.scale(loss).backward()", "pass"))
    assert dict(run_cached(project))[str(project / "engine_pretrain.py")] == []


def test_clean_command(run, tmp_path):
    (tmp_path / "t.py").write_text(BUGGY)
    run("lint", "t.py")
    assert (tmp_path / ".accumcheck_cache").is_dir()
    assert "Removed" in run("clean").stdout
    assert not (tmp_path / ".accumcheck_cache").exists()
    assert run("lint", "--no-cache", "t.py").exit_code == 1 and not (tmp_path / ".accumcheck_cache").exists()
