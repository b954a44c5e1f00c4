"""The real pre-commit, `try-repo` against this checkout, on staged buggy and clean scripts."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lint_cli.cli_samples import BUGGY

ROOT = Path(__file__).parents[2]
PRE_COMMIT = Path(sys.executable).with_name("pre-commit")
CLEAN = "print('no training here')\n"

pytestmark = pytest.mark.skipif(not PRE_COMMIT.exists() or shutil.which("git") is None,
                                reason="pre-commit and git are needed")


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    repo = tmp_path_factory.mktemp("scratch")
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.invalid")
    git(repo, "config", "user.name", "t")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path_factory.mktemp("pre-commit-home"))}
    return repo, env


def try_repo(repo: Path, env: dict, *files: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(PRE_COMMIT), "try-repo", str(ROOT), "accumcheck-lint", "--verbose", "--files", *files],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=600)


def test_hook_fails_on_a_buggy_script_and_passes_a_clean_one(scratch):
    repo, env = scratch
    (repo / "train.py").write_text(BUGGY)
    (repo / "util.py").write_text(CLEAN)
    git(repo, "add", "train.py", "util.py")
    failed = try_repo(repo, env, "train.py", "util.py")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "train.py:4:5: ACC101" in failed.stdout
    passed = try_repo(repo, env, "util.py")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "Passed" in passed.stdout


def test_no_python_files_is_a_pass(scratch):
    repo, env = scratch
    (repo / "README.md").write_text("hello\n")
    git(repo, "add", "README.md")
    result = try_repo(repo, env, "README.md")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no files to check" in result.stdout
