"""The command line over a generated tree: no crash, no lost file, fixes that keep code valid.

Generated programs (Python's grammar and syntax trees, training loops around generated code) and
notebooks built from them are written to a tree, and `accumcheck lint` runs over it as a user runs
it: a process of its own, with its worker pool. Every file must be accounted for (the summary counts
it; an error is one line, only for code CPython rejects too), `--fix --unsafe-fixes` must leave
Python that parses and notebooks whose JSON differs only in code cells' sources, a second `--fix`
must change nothing, and `--diff` must name the files `--fix` changes.

CI runs a small derandomized tree; ACCUMCHECK_FUZZ_EXAMPLES=5000 (`pytest --nightly`) runs the
nightly size: 5,000 programs and 1,000 notebooks, new each night (generated.corpus; the seed is
printed, and ACCUMCHECK_FUZZ_SEED repeats a run).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from generated import corpus, notebook_corpus, seed

pytestmark = pytest.mark.slow
EXAMPLES = int(os.environ.get("ACCUMCHECK_FUZZ_EXAMPLES", "60"))
NIGHTLY = "ACCUMCHECK_FUZZ_EXAMPLES" in os.environ
SEED = seed() if NIGHTLY else 0
CLI = [sys.executable, "-c", "from gradcheck_accum.cli import main; main()", "lint", "--no-cache"]
SUMMARY = re.compile(r"(?:\bof |\()(\d+) files?\b")  # "in 3 of 120 files", "(120 files)"


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fuzz") / "tree"
    root.mkdir()
    programs, notebooks = corpus(EXAMPLES, NIGHTLY, SEED), notebook_corpus(max(EXAMPLES // 5, 1), NIGHTLY, SEED)
    for i, program in enumerate(programs):
        (root / f"program_{i:05}.py").write_text(program, encoding="utf-8", newline="")
    for i, notebook in enumerate(notebooks):
        (root / f"notebook_{i:04}.ipynb").write_text(notebook, encoding="utf-8", newline="")
    print(f"fuzz tree: {len(programs)} programs, {len(notebooks)} notebooks, seed {SEED}")
    return root


def lint(*args: str) -> subprocess.CompletedProcess:
    run = subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=3600)
    assert run.returncode in (0, 1, 2), run.stderr[-3000:]
    assert "internal error" not in run.stderr and "Traceback" not in run.stderr, run.stderr[-3000:]
    return run


def accounted(run: subprocess.CompletedProcess, root: Path) -> dict[str, str]:
    """Every file of the tree is in the summary; returns the errors by file name."""
    files = sorted(p.name for p in root.iterdir())
    summary = run.stderr.splitlines()[-1]
    counted = SUMMARY.findall(summary)
    assert counted and int(counted[-1]) == len(files), summary
    print(f"{' '.join(run.args[len(CLI):-1])}: {summary}")  # the nightly log's record of each run
    errors = {}
    for line in run.stderr.splitlines()[:-1]:
        name, _, reason = line.partition(": error: ")
        assert reason, line
        errors[Path(name).name] = reason
    return errors


def cpython_rejects(path: Path) -> bool:
    try:
        ast.parse(path.read_bytes())
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True
    return False


def test_every_file_is_linted_or_has_one_clear_error(tree):
    run = lint("--format", "json", "--exit-zero", str(tree))
    errors = accounted(run, tree)
    for name, reason in errors.items():
        assert name.endswith(".py") and (cpython_rejects(tree / name) or "nested more than" in reason), (name, reason)
    findings = json.loads(run.stdout)
    assert {Path(f["path"]).name for f in findings} <= {p.name for p in tree.iterdir()}


def without_sources(notebook: dict) -> dict:
    return {**notebook, "cells": [{k: v for k, v in cell.items() if k != "source"} for cell in notebook["cells"]]}


def test_fixes_keep_code_valid_and_reach_a_fixed_point(tree, tmp_path):
    copy = tmp_path / "tree"
    shutil.copytree(tree, copy)
    accounted(lint("--fix", "--unsafe-fixes", "--exit-zero", str(copy)), copy)
    changed = set()
    for original in sorted(tree.iterdir()):
        fixed = copy / original.name
        if fixed.read_bytes() == original.read_bytes():
            continue
        changed.add(original.name)
        if original.suffix == ".py":
            assert cpython_rejects(original) or not cpython_rejects(fixed), original.name
        else:
            before, after = (json.loads(p.read_text(encoding="utf-8-sig")) for p in (original, fixed))
            assert without_sources(after) == without_sources(before), original.name
    snapshot = {p.name: p.read_bytes() for p in copy.iterdir()}
    accounted(lint("--fix", "--unsafe-fixes", "--exit-zero", str(copy)), copy)
    assert [p.name for p in copy.iterdir() if p.read_bytes() != snapshot[p.name]] == []
    diff = lint("--diff", "--unsafe-fixes", "--exit-zero", str(tree))
    assert {Path(name).name for name in re.findall(r"^--- a/(.*)$", diff.stdout, re.M)} == changed
