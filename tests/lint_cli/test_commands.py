"""`accumcheck rule`, fixes through the CLI, SARIF against the official schema, notebooks, no torch."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from cli_samples import BUGGY, CLEAN
from gradcheck_accum.lint import registry

SCHEMA = Path(__file__).parent.parent / "data" / "sarif-schema-2.1.0.json"
ROOT = Path(__file__).parents[2]


def test_rule_list_and_unknown_rule(run):
    listed = run("rule", "--all").stdout.splitlines()
    assert [line.split()[0] for line in listed] == [check.code for check in registry.checks()]
    result = run("rule", "ACC999")
    assert result.exit_code == 2 and "unknown rule 'ACC999'" in result.stderr


@pytest.mark.parametrize("key", ["ACC101", "acc101", "zero-grad-every-micro-batch"])
def test_rule_page_by_code_or_name(run, key):
    result = run("rule", key)
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0].startswith(("# ACC101", "ACC101 zero-grad-every-micro-batch"))


def test_fix_diff_and_unsafe_fixes(run, tmp_path):
    path = tmp_path / "t.py"
    path.write_text(BUGGY)
    result = run("lint", "--diff", "--unsafe-fixes", "t.py")
    assert result.exit_code == 1 and path.read_text() == BUGGY
    assert "-    optimizer.zero_grad()\n" in result.stdout and "+        optimizer.zero_grad()\n" in result.stdout
    result = run("lint", "--fix", "t.py")  # the only fix is unsafe: nothing changes
    assert result.exit_code == 1 and path.read_text() == BUGGY
    result = run("lint", "--fix", "--unsafe-fixes", "t.py")
    assert result.exit_code == 0 and path.read_text() == CLEAN
    assert "Fixed 1 finding." in result.stderr
    assert run("lint", "--fix", "--unsafe-fixes", "t.py").exit_code == 0 and path.read_text() == CLEAN


def test_fix_from_stdin_prints_the_fixed_source(run):
    result = run("lint", "--fix", "--unsafe-fixes", "-", input=BUGGY)
    assert result.stdout == CLEAN


def test_sarif_validates_against_the_official_schema(run, tmp_path):
    (tmp_path / "buggy.py").write_text(BUGGY)
    (tmp_path / "ckpt.py").write_text("import torch\nm = torch.compile(m)\ntorch.save(m.state_dict(), 'p')\n")
    result = run("lint", "--format", "sarif", ".")
    log = json.loads(result.stdout)
    jsonschema.validate(log, json.loads(SCHEMA.read_text()))
    run_ = log["runs"][0]
    assert [r["id"] for r in run_["tool"]["driver"]["rules"]] == [check.code for check in registry.checks()]
    results = {r["ruleId"]: r for r in run_["results"]}
    assert set(results) == {"ACC101", "ACC302"}
    [change] = results["ACC302"]["fixes"][0]["artifactChanges"]
    [replacement] = change["replacements"]
    source = (tmp_path / "ckpt.py").read_text()
    start, length = replacement["deletedRegion"]["charOffset"], replacement["deletedRegion"]["charLength"]
    fixed = source[:start] + replacement["insertedContent"]["text"] + source[start + length:]
    assert fixed.endswith("torch.save(getattr(m, \"_orig_mod\", m).state_dict(), 'p')\n")


def test_notebook_positions_by_cell(run, tmp_path):
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# hi\n"]},
             {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
              "source": ["%load_ext autoreload\n", *BUGGY.splitlines(keepends=True)]}]
    (tmp_path / "train.ipynb").write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                                      "nbformat_minor": 5}))
    result = run("lint", ".")
    assert result.stdout.startswith("train.ipynb:cell 2:5:5: ACC101 ")
    record = json.loads(run("lint", "--format", "json", "train.ipynb").stdout)[0]
    assert (record["cell"], record["line"]) == (2, 5)


def test_lint_never_imports_torch(tmp_path):
    (tmp_path / "t.py").write_text(BUGGY)
    code = ("import sys\nfrom gradcheck_accum.cli import main\n"
            "try:\n    main(['lint', '--no-cache', sys.argv[1], sys.argv[2]])\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\nprint('torch-free')\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path), str(ROOT / "fixtures")],
                         capture_output=True, text=True, cwd=tmp_path)
    assert "torch-free" in out.stdout, out.stderr


def test_console_script_exit_codes(tmp_path):
    exe = Path(sys.executable).with_name("accumcheck")
    (tmp_path / "t.py").write_text(BUGGY)
    assert subprocess.run([exe, "lint", "t.py"], cwd=tmp_path, capture_output=True).returncode == 1
    assert subprocess.run([exe, "lint", "--bogus"], cwd=tmp_path, capture_output=True).returncode == 2
    (tmp_path / "t.py").write_text(CLEAN)
    assert subprocess.run([exe, "lint", "t.py"], cwd=tmp_path, capture_output=True).returncode == 0


def test_console_script_output_and_cache_survive_its_quick_exit(tmp_path):
    """The console script ends without tearing the interpreter down (cli.console): whatever was still
    buffered for a pipe, and the cache, must be complete all the same."""
    exe = Path(sys.executable).with_name("accumcheck")
    for index in range(40):
        (tmp_path / f"t{index:02d}.py").write_text(BUGGY)
    runs = [subprocess.run([exe, "lint", "--format", "json", "."], cwd=tmp_path, capture_output=True, text=True)
            for _ in range(2)]  # the second from the cache the first wrote
    assert [run.returncode for run in runs] == [1, 1]
    first, second = (json.loads(run.stdout) for run in runs)
    assert len(first) == 40 and sorted(f["filename"] for f in first) == sorted(f["filename"] for f in second)
    assert (tmp_path / ".accumcheck_cache").is_dir()


def test_cycle_collection_is_paused_only_in_the_console_process(tmp_path):
    """The console's lint runs without the cycle collector (cli.lint); a lint called in a process that
    goes on (a test, a tool importing `main`) leaves it as it was, and the pool's workers, forked
    from a console that paused it, collect again: each goes through many files."""
    (tmp_path / "t.py").write_text(BUGGY)
    (tmp_path / "probe.py").write_text("import gc\n\ndef collecting(_):\n    return gc.isenabled()\n")
    code = ("import gc, sys\nfrom gradcheck_accum import cli\nfrom gradcheck_accum.lint.pool import Pool\n"
            "import probe\n"
            "try:\n    cli.main(['lint', '--no-cache', 't.py'])\nexcept SystemExit:\n    pass\n"
            "after_main = gc.isenabled()\ncli._process_ends_with_command = True\n"
            "try:\n    cli.main(['lint', '--no-cache', 't.py'])\nexcept SystemExit:\n    pass\n"
            "after_console = gc.isenabled()\n"
            "with Pool(2) as pool:\n    workers = set(pool.map(probe.collecting, [0, 1, 2, 3], lambda item, how: None))\n"
            "print(after_main, after_console, workers)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])})
    assert out.stdout.splitlines()[-1] == "True False {True}", out.stderr


def test_libcst_is_imported_only_when_a_file_needs_parsing(tmp_path):
    """A pre-commit run over files with no training loop never pays libcst's import (~0.2 s)."""
    (tmp_path / "util.py").write_text("def add(a, b):\n    return a + b\n")
    (tmp_path / "train.py").write_text(BUGGY)
    code = ("import sys\nfrom gradcheck_accum.cli import main\n"
            "try:\n    main(['lint', '--no-cache', *sys.argv[1:]])\nexcept SystemExit:\n    pass\n"
            "print('libcst' in sys.modules)\n")
    loaded = [subprocess.run([sys.executable, "-c", code, *files], capture_output=True, text=True,
                             cwd=tmp_path).stdout.splitlines()[-1] for files in (["util.py"], ["util.py", "train.py"])]
    assert loaded == ["False", "True"]
