"""The real pre-commit installs this repository's hooks (.pre-commit-hooks.yaml) as a user's config
names them, and runs them on staged files. The hooks come from a commit of this working tree, so
uncommitted edits are tested too; pre-commit builds their environment once for the module (`try-repo`
would build a fresh one for every call)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ecosystem.working_tree import copy_working_tree
from lint_cli.cli_samples import BUGGY, STALE_NOQA, STALE_NOQA_FIXED

PRE_COMMIT = Path(sys.executable).with_name("pre-commit")
NOT_TRAINING = "print('no training here')\n"

pytestmark = [pytest.mark.skipif(not PRE_COMMIT.exists() or shutil.which("git") is None,
                                 reason="pre-commit and git are needed"),
              pytest.mark.slow]  # pre-commit pip-installs accumcheck into a fresh environment


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def new_repository(path: Path) -> Path:
    git(path, "init", "-q")
    git(path, "config", "user.email", "t@example.invalid")
    git(path, "config", "user.name", "t")
    return path


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A user's repository whose config names both hooks of a commit of this working tree."""
    hooks = new_repository(copy_working_tree(tmp_path_factory.mktemp("accumcheck")))
    git(hooks, "add", "-A")
    git(hooks, "commit", "-q", "--no-verify", "-m", "the working tree")
    repo = new_repository(tmp_path_factory.mktemp("scratch"))
    (repo / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {hooks}\n    rev: {git(hooks, 'rev-parse', 'HEAD')}\n"
        "    hooks:\n      - id: accumcheck-lint\n      - id: accumcheck-fix\n")
    git(repo, "add", ".pre-commit-config.yaml")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path_factory.mktemp("pre-commit-home"))}
    return repo, env


def pre_commit(scratch, hook: str, *files: str) -> subprocess.CompletedProcess:
    repo, env = scratch
    for name, text in files:
        (repo / name).write_text(text)
    git(repo, "add", *(name for name, _ in files))
    return subprocess.run([str(PRE_COMMIT), "run", hook, "--verbose", "--files", *(name for name, _ in files)],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=600)


def test_lint_hook_fails_on_a_buggy_script_and_passes_a_clean_one(scratch):
    failed = pre_commit(scratch, "accumcheck-lint", ("train.py", BUGGY), ("util.py", NOT_TRAINING))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "train.py:4:5: ACC101" in failed.stdout
    passed = pre_commit(scratch, "accumcheck-lint", ("util.py", NOT_TRAINING))
    assert passed.returncode == 0 and "Passed" in passed.stdout, passed.stdout + passed.stderr


def test_no_python_files_is_a_pass(scratch):
    result = pre_commit(scratch, "accumcheck-lint", ("README.md", "hello\n"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no files to check" in result.stdout


def test_fix_hook_applies_the_safe_fix(scratch):
    result = pre_commit(scratch, "accumcheck-fix", ("save.py", STALE_NOQA))
    assert result.returncode == 1 and "files were modified by this hook" in result.stdout, result.stdout
    assert (scratch[0] / "save.py").read_text() == STALE_NOQA_FIXED
    again = pre_commit(scratch, "accumcheck-fix", ("save.py", STALE_NOQA_FIXED))
    assert again.returncode == 0, again.stdout + again.stderr
