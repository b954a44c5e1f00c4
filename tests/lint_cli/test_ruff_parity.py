"""Issue 15: the command line behaves the way a ruff user expects (one test per numbered item, and the
ruff habits: `check`, `--output-format`, `--extend-ignore`, `--extend-exclude`, `--show-files`,
`--fix-only`, JSON statistics and rule lists, severities with `--fail-on`)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_samples import BUGGY, CHECKPOINT, CHECKPOINT_FIXED, CLEAN

# ACC204 (a performance-only warning): the loss, with its graph, summed into a running total.
WARNING_ONLY = """\
import torch
optimizer = torch.optim.AdamW(model.parameters())
for epoch in range(3):
    epoch_loss = 0.0
    for i, batch in enumerate(loader):
        loss = model(batch) / accum
        loss.backward()
        epoch_loss += loss
        if (i + 1) % accum == 0 or i + 1 == len(loader):
            optimizer.step()
            optimizer.zero_grad()
    print(epoch_loss)
"""

SCHEMA = Path(__file__).parents[1] / "data" / "sarif-schema-2.1.0.json"


def sarif_log(result) -> dict:
    """The SARIF log a run printed, checked against the official SARIF 2.1.0 schema."""
    import jsonschema

    log = json.loads(result.stdout)
    jsonschema.validate(log, json.loads(SCHEMA.read_text()))
    return log


def codes(result) -> list[str]:
    return [line.split(": ")[1].split()[0] for line in result.stdout.splitlines()]


# 1
def test_output_file_in_a_missing_folder_is_created(run, project):
    result = run("lint", "-o", "sub/deeper/out.txt", "buggy.py")
    assert result.exit_code == 1, result.stderr
    assert (project / "sub" / "deeper" / "out.txt").read_text().startswith("buggy.py:4:5: ACC101")


def test_unwritable_output_file_is_one_line_and_exit_2(run, project):
    (project / "taken").write_text("a file, not a folder")
    result = run("lint", "-o", "taken/out.txt", "buggy.py")
    assert result.exit_code == 2 and "taken/out.txt: error: cannot write the output file" in result.stderr
    assert "Traceback" not in result.stderr


# 2
@pytest.fixture
def monorepo(tmp_path):
    """proj/ ignores ACC101 in its pyproject; projB/ has no configuration of its own."""
    (tmp_path / "proj" / "src").mkdir(parents=True)
    (tmp_path / "proj" / "pyproject.toml").write_text('[tool.accumcheck]\nignore = ["ACC101"]\n')
    (tmp_path / "proj" / "src" / "train.py").write_text(BUGGY)
    (tmp_path / "projB").mkdir()
    (tmp_path / "projB" / "train.py").write_text(BUGGY)
    return tmp_path


def test_each_file_takes_the_nearest_configuration(run, monorepo):
    forward = run("lint", "proj/src", "projB")
    backward = run("lint", "projB", "proj/src")
    assert sorted(forward.stdout.splitlines()) == sorted(backward.stdout.splitlines())
    assert [line.split(":")[0] for line in forward.stdout.splitlines()] == ["projB/train.py"]
    # a pre-commit batch names files, from the repository root
    assert [line.split(":")[0] for line in run("lint", "proj/src/train.py", "projB/train.py").stdout.splitlines()] \
        == ["projB/train.py"]
    # --config pins one file for everything
    pinned = run("lint", "--config", "proj/pyproject.toml", "proj/src", "projB")
    assert pinned.exit_code == 0, pinned.stdout


def test_extend_inherits_another_configuration(run, monorepo):
    (monorepo / "projB" / "pyproject.toml").write_text(
        '[tool.accumcheck]\nextend = "../proj/pyproject.toml"\nextend-select = []\n')
    assert run("lint", "projB").exit_code == 0
    (monorepo / "projB" / "pyproject.toml").write_text('[tool.accumcheck]\nextend = "pyproject.toml"\n')
    result = run("lint", "projB")
    assert result.exit_code == 2 and "cycle" in result.stderr


# 3
def test_stdin_takes_settings_and_excludes_from_its_file_name(run, monorepo):
    assert run("lint", "-", "--stdin-filename", "proj/src/train.py", input=BUGGY).exit_code == 0
    result = run("lint", "-", "--stdin-filename", "projB/train.py", input=BUGGY)
    assert result.exit_code == 1 and result.stdout.startswith("projB/train.py:4:5: ACC101")
    (monorepo / "projB" / "pyproject.toml").write_text('[tool.accumcheck]\nexclude = ["generated"]\n')
    assert run("lint", "-", "--stdin-filename", "projB/generated/train.py", input=BUGGY).exit_code == 0


def test_stdin_filename_without_a_dash_reads_standard_input(run, monorepo):
    result = run("lint", "--stdin-filename", "piped.py", input=BUGGY)
    assert result.exit_code == 1 and result.stdout.startswith("piped.py:4:5: ACC101")
    assert "projB" not in result.stdout  # not the current folder
    warned = run("lint", "projB", "--stdin-filename", "piped.py", input=CLEAN)
    assert warned.exit_code == 0 and "ignoring projB in favour of standard input" in warned.stderr


# 4
@pytest.mark.parametrize("env, option, colored", [
    ({}, (), False), ({"FORCE_COLOR": "1"}, (), True), ({"NO_COLOR": "1", "FORCE_COLOR": "1"}, (), False),
    ({"NO_COLOR": "1"}, ("--color", "always"), True), ({"FORCE_COLOR": "1"}, ("--color", "never"), False),
])
def test_colour_follows_no_color_force_color_and_the_option(run, project, monkeypatch, env, option, colored):
    for name in ("NO_COLOR", "FORCE_COLOR", "CLICOLOR_FORCE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for output_format in ("concise", "full"):
        result = run("lint", *option, "--output-format", output_format, "buggy.py")
        assert ("\x1b[" in result.stdout) == colored, (output_format, result.stdout)


# 5
@pytest.mark.parametrize("args, named", [
    (("--select", ""), "''"), (("--select", "A"), "'A'"), (("--select", "ACC999"), "'ACC999'"),
    (("--extend-select", "ACCX"), "'ACCX'"), (("--ignore", "ALL"), "no rules selected"),
    (("--select", "ACC1", "--ignore", "ACC1"), "no rules selected"),
])
def test_empty_unknown_or_emptying_selectors_are_usage_errors(run, project, args, named):
    result = run("lint", *args, "buggy.py")
    assert result.exit_code == 2 and named in result.stderr, result.stderr


# 6
def test_git_ignored_files_are_skipped_unless_told_otherwise(run, tmp_path):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / ".gitignore").write_text("wandb/\n*.tmp.py\n")
    (tmp_path / "wandb" / "run-1" / "files" / "code").mkdir(parents=True)
    (tmp_path / "wandb" / "run-1" / "files" / "code" / "train.py").write_text(BUGGY)
    (tmp_path / "scratch.tmp.py").write_text(BUGGY)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / ".gitignore").write_text("old_*.py\n!old_but_kept.py\n")
    (tmp_path / "src" / "old_train.py").write_text(BUGGY)
    (tmp_path / "src" / "old_but_kept.py").write_text(BUGGY)
    assert run("lint", "--show-files", ".").stdout.splitlines() == ["src/old_but_kept.py"]
    assert run("lint", "--show-files", "src").stdout.splitlines() == ["src/old_but_kept.py"]
    everything = run("lint", "--no-respect-gitignore", "--show-files", ".").stdout.splitlines()
    assert len(everything) == 4
    (tmp_path / "pyproject.toml").write_text("[tool.accumcheck]\nrespect-gitignore = false\n")
    assert len(run("lint", "--show-files", ".").stdout.splitlines()) == 4
    (tmp_path / "pyproject.toml").unlink()
    # a file named explicitly is linted, ignored or not (as with ruff and git add -f); so is a directory,
    # with the ignore files inside it
    assert run("lint", "scratch.tmp.py").exit_code == 1
    (tmp_path / ".gitignore").write_text("wandb/\n*.tmp.py\nvendor/\n")
    (tmp_path / "vendor" / "lib").mkdir(parents=True)
    (tmp_path / "vendor" / "lib" / "train.py").write_text(BUGGY)
    (tmp_path / "vendor" / "lib" / "x.tmp.py").write_text(BUGGY)
    (tmp_path / "vendor" / ".gitignore").write_text("old/\n")
    (tmp_path / "vendor" / "old").mkdir()
    (tmp_path / "vendor" / "old" / "train.py").write_text(BUGGY)
    assert run("lint", "--show-files", "vendor").stdout.splitlines() == ["vendor/lib/train.py", "vendor/lib/x.tmp.py"]
    assert "vendor" not in run("lint", "--show-files", ".").stdout


# 8
def test_diff_says_would_fix(run, tmp_path):
    (tmp_path / "t.py").write_text(BUGGY)
    result = run("lint", "--diff", "--unsafe-fixes", "t.py")
    assert "Would fix 1 finding." in result.stderr and "Fixed" not in result.stderr
    assert (tmp_path / "t.py").read_text() == BUGGY


# 10
CLI = f"'{sys.executable}' -c 'from gradcheck_accum.cli import main; main()'"


@pytest.mark.parametrize("command, lines", [
    (f"{CLI} rule --all | head -1", 1),
    # a reader that is gone before the first write (the race `head -1` usually loses, made certain)
    (f"{CLI} rule --all | head -n 0", 0), (f"{CLI} rule ACC101 | true", 0),
    # findings of enough files for the worker pool (more than runner.PARALLEL_THRESHOLD), none of them read
    (f"{CLI} lint --no-cache -q --exit-zero fixtures/accelerate_*.py | head -n 0", 0),
])
def test_a_closed_pipe_is_not_an_internal_error(command, lines):
    result = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True,
                            cwd=Path(__file__).parents[2])
    assert len(result.stdout.splitlines()) == lines
    assert "error" not in result.stderr.lower(), result.stderr
    assert result.returncode == 0


# 11
def test_progress_estimate_ignores_the_start_up_time():
    """A 26-second run over 2,000 files: 3 s of start-up (imports, starting workers) before the first
    file finishes, then ~100 files a second. The estimate at 12% must be about the 17 s left, not
    hours (click's bar divided the start-up among the first files)."""
    import io

    from gradcheck_accum.cli import _Progress

    now = [0.0]
    progress = _Progress(2000, clock=lambda: now[0], stream=io.StringIO())
    now[0] = 3.0
    progress(1)
    assert progress.eta() is None  # nothing to extrapolate from yet
    while progress.done < 240:  # 12%
        now[0] += 0.01
        progress(1)
    assert 15 < progress.eta() < 20, progress.eta()
    assert progress.line().endswith("240/2000  0:17 left")


# 14
def test_one_cache_at_the_project_root_and_clean_removes_every_cache_below(run, tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "train.py").write_text(BUGGY)
    monkeypatch.chdir(tmp_path / "src")
    assert run("lint", "pkg").exit_code == 1
    monkeypatch.chdir(tmp_path / "src" / "pkg")
    assert run("lint", "train.py").exit_code == 1
    assert [p.relative_to(tmp_path) for p in tmp_path.rglob(".accumcheck_cache")] == [Path(".accumcheck_cache")]
    [table] = [p for p in (tmp_path / ".accumcheck_cache").rglob("*.json") if "project" not in p.parts]
    assert len(json.loads(table.read_text())) == 1  # both runs share the entry of train.py
    stray = tmp_path / "src" / "old" / ".accumcheck_cache"
    stray.mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "src")
    result = run("clean")
    assert not stray.exists() and not (tmp_path / ".accumcheck_cache").exists(), result.stdout
    assert run("clean").stdout == "No cache to remove.\n"


# ruff habits
def test_check_is_lint_and_output_format_is_format(run, project):
    assert run("check", "buggy.py").stdout == run("lint", "buggy.py").stdout
    assert run("check", "--output-format", "json", "buggy.py").stdout == run("lint", "--format", "json",
                                                                                "buggy.py").stdout


def test_extend_ignore_and_extend_exclude(run, project):
    (project / "pyproject.toml").write_text('[tool.accumcheck]\nexclude = ["vendored"]\n')
    (project / "vendored").mkdir()
    (project / "vendored" / "t.py").write_text(BUGGY)
    (project / "gen").mkdir()
    (project / "gen" / "t.py").write_text(BUGGY)
    assert run("lint", "--show-files", ".").stdout.splitlines() == ["buggy.py", "clean.py", "gen/t.py"]
    assert run("lint", "--extend-exclude", "gen/", "--show-files", ".").stdout.splitlines() == ["buggy.py", "clean.py"]
    assert run("lint", "--extend-ignore", "ACC101", ".").exit_code == 0
    (project / "pyproject.toml").write_text('[tool.accumcheck]\nexclude = ["vendored"]\nextend-exclude = ["gen"]\n'
                                            'extend-ignore = ["ACC1"]\n')
    assert run("lint", "--show-files", ".").stdout.splitlines() == ["buggy.py", "clean.py"]
    assert run("lint", ".").exit_code == 0


def test_fix_only_applies_fixes_and_does_not_fail_on_the_rest(run, tmp_path):
    path = tmp_path / "t.py"
    path.write_text(BUGGY)
    result = run("lint", "--fix-only", "t.py")  # the only fix is unsafe: nothing to apply, nothing reported
    assert (result.exit_code, result.stdout, path.read_text()) == (0, "", BUGGY)
    assert "Fixed 0 findings." in result.stderr
    result = run("lint", "--fix-only", "--unsafe-fixes", "t.py")
    assert result.exit_code == 0 and path.read_text() == CLEAN and "Fixed 1 finding." in result.stderr


def test_statistics_and_rule_list_as_json(run, project):
    stats = json.loads(run("lint", "--statistics", "--output-format", "json", "buggy.py").stdout)
    assert stats == [{"code": "ACC101", "name": "zero-grad-every-micro-batch", "count": 1, "fixable": False,
                      "severity": "error"}]
    from gradcheck_accum.lint.registry import checks

    rules = json.loads(run("rule", "--all", "--output-format", "json").stdout)
    assert [r["code"] for r in rules] == [check.code for check in checks()]
    assert rules[0]["explanation"].startswith("# ACC101 zero-grad-every-micro-batch")
    one = json.loads(run("rule", "ACC204", "--output-format", "json").stdout)
    assert (one["name"], one["severity"]) == ("loss-graph-kept-alive", "warning")


def test_severity_per_rule_and_fail_on(run, tmp_path):
    from gradcheck_accum.lint.registry import checks, severity

    warnings = {check.code for check in checks() if severity(check.code) == "warning"}
    assert {"ACC204", "ACC501"} <= warnings and not warnings & {"ACC101", "ACC201", "ACC302", "ACC406"}
    (tmp_path / "t.py").write_text(WARNING_ONLY)
    assert codes(run("lint", "t.py")) == ["ACC204"]
    assert run("lint", "t.py").exit_code == 1
    assert run("lint", "--fail-on", "error", "t.py").exit_code == 0
    (tmp_path / "pyproject.toml").write_text('[tool.accumcheck]\nfail-on = "error"\n')
    assert run("lint", "t.py").exit_code == 0
    assert run("lint", "--fail-on", "warning", "t.py").exit_code == 1
    (tmp_path / "b.py").write_text(BUGGY)
    assert run("lint", "t.py", "b.py").exit_code == 1
    record = json.loads(run("lint", "--output-format", "json", "t.py").stdout)[0]
    assert record["severity"] == "warning"
    assert run("lint", "--output-format", "github", "t.py").stdout.startswith("::warning file=t.py,")
    sarif = sarif_log(run("lint", "--output-format", "sarif", "t.py"))
    assert sarif["runs"][0]["results"][0]["level"] == "warning"


def notebook(*cells: str, indent: int = 1) -> str:
    """A notebook with a markdown cell first, then one code cell per source (stored as lists of lines)."""
    data = [{"cell_type": "markdown", "metadata": {}, "source": ["# Training\n"]}]
    data += [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
              "source": source.splitlines(keepends=True)} for source in cells]
    return json.dumps({"cells": data, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=indent) + "\n"


# 9
def test_add_noqa_on_a_notebook_and_on_standard_input(run, tmp_path):
    (tmp_path / "train.ipynb").write_text(notebook("%matplotlib inline\nimport torch\n", BUGGY))
    result = run("lint", "--add-noqa", "train.ipynb")
    assert "Added noqa comments to 1 line." in result.stderr
    cells = json.loads((tmp_path / "train.ipynb").read_text())["cells"]
    assert "    optimizer.zero_grad()  # noqa: ACC101\n" in cells[2]["source"]
    assert cells[1]["source"] == ["%matplotlib inline\n", "import torch\n"]
    assert run("lint", "train.ipynb").exit_code == 0
    piped = run("lint", "--add-noqa", "-", input=BUGGY)
    assert piped.stdout == BUGGY.replace("optimizer.zero_grad()\n", "optimizer.zero_grad()  # noqa: ACC101\n")
    assert "Added noqa comments to 1 line." in piped.stderr
    assert run("lint", "--add-noqa", "-", input=CLEAN).stdout == CLEAN


# 12


def test_standard_input_keeps_its_snippet_in_full_and_its_fixes_in_sarif(run, tmp_path):
    full = run("lint", "--output-format", "full", "-", "--stdin-filename", "train.py", input=BUGGY)
    assert full.stdout.splitlines()[1:3] == ["4 |     optimizer.zero_grad()", "        " + "^" * 21]
    sarif = sarif_log(run("lint", "--output-format", "sarif", "-", "--stdin-filename", "ckpt.py", input=CHECKPOINT))
    [result] = sarif["runs"][0]["results"]
    [replacement] = result["fixes"][0]["artifactChanges"][0]["replacements"]
    start, length = replacement["deletedRegion"]["charOffset"], replacement["deletedRegion"]["charLength"]
    fixed = CHECKPOINT[:start] + replacement["insertedContent"]["text"] + CHECKPOINT[start + length:]
    assert fixed == CHECKPOINT_FIXED


# 13
@pytest.mark.parametrize("indent", [1, None], ids=["nbformat", "one-line json"])
def test_notebook_findings_sit_on_the_ipynb_lines_in_github_and_sarif(run, tmp_path, indent):
    raw = notebook("%matplotlib inline\nimport torch\n", BUGGY, indent=indent)
    (tmp_path / "train.ipynb").write_text(raw)
    stored = raw.splitlines()
    github = run("lint", "--output-format", "github", "train.ipynb").stdout
    fields = dict(part.split("=", 1) for part in github.split("::")[1].split(" ", 1)[1].split(","))
    line, column = int(fields["line"]), int(fields["col"])
    assert stored[line - 1][column - 1:].startswith("optimizer.zero_grad()"), (fields, stored[line - 1])
    assert github.rstrip().endswith("(cell 3, line 4)")
    sarif = sarif_log(run("lint", "--output-format", "sarif", "train.ipynb"))
    [result] = sarif["runs"][0]["results"]
    region = result["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"]) == (line, column)
    assert stored[region["endLine"] - 1][:region["endColumn"] - 1].endswith("optimizer.zero_grad()")
    assert result["properties"] == {"cell": 3, "cellLine": 4, "cellColumn": 5}
    # the concise format keeps the cell's own numbering, which is what a person reads
    assert run("lint", "train.ipynb").stdout.startswith("train.ipynb:cell 3:4:5: ACC101")


# 19
def test_sarif_has_repository_paths_fingerprints_and_stable_help(run, tmp_path, monkeypatch):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "train loop.py").write_text(BUGGY)
    monkeypatch.chdir(tmp_path / "src")

    def sarif(*args):
        return sarif_log(run("lint", "--output-format", "sarif", *args))["runs"][0]

    run_ = sarif("pkg")
    assert run_["originalUriBaseIds"] == {"%SRCROOT%": {"uri": tmp_path.as_uri() + "/"}}
    [result] = run_["results"]
    assert result["locations"][0]["physicalLocation"]["artifactLocation"] == {
        "uri": "src/pkg/train%20loop.py", "uriBaseId": "%SRCROOT%"}
    assert sarif(str(tmp_path / "src" / "pkg"))["results"][0]["locations"] == result["locations"]
    for rule in run_["tool"]["driver"]["rules"]:
        assert rule["helpUri"].startswith("https://github.com/") and rule["helpUri"].endswith(
            f"/rules/{rule['id']}-{rule['name']}.md")
    json_url = json.loads(run("lint", "--output-format", "json", "pkg").stdout)[0]["url"]
    assert json_url == run_["tool"]["driver"]["rules"][0]["helpUri"]
    # the fingerprint follows the code, not its line number; a second identical line gets its own
    fingerprint = result["partialFingerprints"]
    (tmp_path / "src" / "pkg" / "train loop.py").write_text("import os\n\n" + BUGGY)
    moved = sarif("pkg")["results"][0]
    assert moved["locations"][0]["physicalLocation"]["region"]["startLine"] == 6
    assert moved["partialFingerprints"] == fingerprint
    twice = BUGGY + BUGGY.replace("import torch\n", "")
    (tmp_path / "src" / "pkg" / "train loop.py").write_text(twice)
    prints = [r["partialFingerprints"]["accumcheck/v1"] for r in sarif("pkg")["results"]]
    assert len(prints) == 2 and len(set(prints)) == 2 and fingerprint["accumcheck/v1"] in prints
    # a file outside the repository gets an absolute file URI
    outside = tmp_path.parent / f"{tmp_path.name}-outside.py"
    outside.write_text(BUGGY)
    try:
        location = sarif(str(outside))["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
        assert location == {"uri": outside.as_uri()}
    finally:
        outside.unlink()


def test_unused_suppression_also_names_codes_of_rules_not_selected(run, tmp_path):
    """As ruff's RUF100 (non-enabled): such a code hides nothing today and would hide a finding the day
    the rule is selected; per-file ignores count as not selected."""
    (tmp_path / "t.py").write_text(CLEAN.replace("loss.backward()", "loss.backward()  # noqa: ACC404, E501"))
    result = run("lint", "--ignore", "ACC4", "t.py")
    assert result.exit_code == 1
    assert codes(result) == ["ACC900"] and "ACC404, not selected for this file" in result.stdout
    assert run("lint", "--ignore", "ACC4", "--fix", "t.py").exit_code == 0
    assert "loss.backward()  # noqa: E501\n" in (tmp_path / "t.py").read_text()
    (tmp_path / "t.py").write_text(BUGGY.replace("optimizer.zero_grad()\n", "optimizer.zero_grad()  # noqa: ACC101\n"))
    (tmp_path / "pyproject.toml").write_text('[tool.accumcheck]\nper-file-ignores = {"t.py" = ["ACC1"]}\n')
    assert "ACC101, not selected for this file" in run("lint", "t.py").stdout
    (tmp_path / "pyproject.toml").unlink()
    assert run("lint", "t.py").exit_code == 0  # selected and used: nothing to say
    # a suppression of ACC900 itself is never called unused
    (tmp_path / "t.py").write_text(CLEAN.replace("loss.backward()", "loss.backward()  # noqa: ACC900"))
    assert codes(run("lint", "t.py")) == []
