"""`accumcheck lint`: output shapes, exit codes, selection, suppressions, configuration, stdin."""

import json

import pytest

from cli_samples import BUGGY, CLEAN


def test_concise_output_exit_code_and_summary(run, project):
    result = run("lint", ".")
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        "buggy.py:4:5: ACC101 gradients are cleared on every micro-batch but the optimizer steps once per window, "
        "so only the last micro-batch reaches the step; clear them right after the step, on the boundary"
    ]
    assert "Found 1 finding (ACC101 x1) in 1 of 2 files" in result.stderr


def test_clean_tree_exits_zero(run, project):
    result = run("lint", "clean.py")
    assert (result.exit_code, result.stdout) == (0, "")
    assert "All checks passed (1 file)." in result.stderr
    (project / "also_clean.py").write_text("x = 1\n")
    assert "All checks passed (2 files)." in run("lint", "clean.py", "also_clean.py", "clean.py").stderr


def test_json_records(run, project):
    result = run("lint", "--format", "json", "buggy.py")
    [record] = json.loads(result.stdout)
    assert {k: record[k] for k in ("path", "line", "column", "end_line", "end_column", "code", "name")} == {
        "path": "buggy.py", "line": 4, "column": 5, "end_line": 4, "end_column": 26, "code": "ACC101",
        "name": "zero-grad-every-micro-batch"}
    assert record["location"] == {"row": 4, "column": 5} and record["filename"] == "buggy.py"
    assert record["fix"] == {"applicability": "unsafe", "message": "Clear gradients after the step"}


@pytest.mark.parametrize("args, expected", [
    ((), 1), (("--ignore", "ACC101"), 0), (("--ignore", "ACC1"), 0), (("--select", "ACC4"), 0),
    (("--select", "ACC4", "--extend-select", "ACC101"), 1), (("--select", "ALL", "--ignore", "ACC"), 2),
    (("--select", "acc101,ACC302"), 1),
])
def test_selection(run, project, args, expected):
    assert run("lint", *args, "buggy.py").exit_code == expected


def test_unknown_selector_is_a_usage_error(run, project):
    result = run("lint", "--select", "ACC999", "buggy.py")
    assert result.exit_code == 2 and "unknown rule selector 'ACC999'" in result.stderr


@pytest.mark.parametrize("comment, hidden", [
    ("# noqa", True), ("# noqa: ACC101", True), ("# noqa:ACC101, E501", True), ("# noqa: E501", False),
    ("# accumcheck: ignore[ACC101]", True), ("# accumcheck: ignore[ACC302]", False), ("# NOQA", True),
])
def test_suppression_comments(run, tmp_path, comment, hidden):
    (tmp_path / "t.py").write_text(BUGGY.replace("optimizer.zero_grad()\n", f"optimizer.zero_grad()  {comment}\n"))
    assert run("lint", "t.py").exit_code == (0 if hidden else 1)


def test_noqa_inside_a_string_does_not_count(run, tmp_path):
    (tmp_path / "t.py").write_text(BUGGY.replace("optimizer.zero_grad()\n", "optimizer.zero_grad(); s = '# noqa'\n"))
    assert run("lint", "t.py").exit_code == 1


def test_skip_file(run, tmp_path):
    (tmp_path / "t.py").write_text("# accumcheck: skip-file\n" + BUGGY)
    assert run("lint", "t.py").exit_code == 0


def test_pyproject_settings(run, project):
    (project / "sub").mkdir()
    (project / "sub" / "buggy.py").write_text(BUGGY)
    (project / "gen").mkdir()
    (project / "gen" / "buggy.py").write_text(BUGGY)
    (project / "pyproject.toml").write_text(
        '[tool.accumcheck]\nexclude = ["gen"]\nper-file-ignores = {"sub/*.py" = ["ACC1"]}\n')
    result = run("lint", ".")
    assert [line.split(":")[0] for line in result.stdout.splitlines()] == ["buggy.py"]
    (project / "pyproject.toml").write_text('[tool.accumcheck]\nignore = ["ACC101"]\n')
    assert run("lint", ".").exit_code == 0


@pytest.mark.parametrize("toml, message", [
    ("[tool.accumcheck]\nselect = \"ACC1\"\n", "must be a list of strings"),
    ("[tool.accumcheck]\nselekt = []\n", "unknown key 'selekt'"),
    ("[tool.accumcheck]\nignore = [\"ACC77\"]\n", "unknown rule selector"),
    ("[tool.accumcheck\n", "invalid TOML"),
])
def test_bad_config_is_a_clear_error(run, project, toml, message):
    (project / "pyproject.toml").write_text(toml)
    result = run("lint", ".")
    assert result.exit_code == 2 and message in result.stderr
    assert "Traceback" not in result.stderr


def test_statistics_exit_zero_and_version(run, project):
    result = run("lint", "--statistics", "--exit-zero", ".")
    assert result.exit_code == 0
    assert result.stdout.split() == ["1", "ACC101", "zero-grad-every-micro-batch"]
    assert run("--version").stdout.startswith("accumcheck, version ")


def test_stdin(run, project):
    result = run("lint", "-", "--stdin-filename", "train.py", input=BUGGY)
    assert result.exit_code == 1 and result.stdout.startswith("train.py:4:5: ACC101")
    assert run("lint", "-", input=CLEAN).exit_code == 0


def test_show_settings(run, project):
    result = run("lint", "--show-settings", "--ignore", "ACC4")
    assert result.exit_code == 0 and "ACC401" not in result.stdout and "ACC101" in result.stdout


def test_output_file(run, project):
    assert run("lint", "-o", "out.txt", "buggy.py").exit_code == 1
    assert (project / "out.txt").read_text().startswith("buggy.py:4:5: ACC101")


def test_github_annotations(run, project):
    result = run("lint", "--format", "github", "buggy.py")
    assert result.stdout.startswith("::error file=buggy.py,line=4,col=5,endLine=4,endColumn=26,"
                                    "title=ACC101 zero-grad-every-micro-batch::ACC101 gradients are cleared")


def test_full_format_shows_the_line_and_a_caret(run, project):
    lines = run("lint", "--format", "full", "buggy.py").stdout.splitlines()
    assert lines[1] == "4 |     optimizer.zero_grad()"
    assert lines[2] == "        " + "^" * 21


def test_unused_suppression_is_reported_and_fixed(run, tmp_path):
    source = BUGGY.replace("optimizer.zero_grad()\n", "optimizer.zero_grad()  # noqa: ACC101, ACC302\n")
    source = source.replace("loss.backward()\n", "loss.backward()  # accumcheck: ignore[ACC201]\n")
    (tmp_path / "t.py").write_text(source)
    result = run("lint", "t.py")
    assert result.stdout.splitlines() == [
        "t.py:4:28: ACC900 the suppression names ACC302 but nothing is reported here; remove it so it does not "
        "hide a future finding",
        "t.py:6:22: ACC900 the suppression names ACC201 but nothing is reported here; remove it so it does not "
        "hide a future finding",
    ]
    assert run("lint", "--fix", "t.py").exit_code == 0
    fixed = (tmp_path / "t.py").read_text()
    assert "optimizer.zero_grad()  # noqa: ACC101\n" in fixed and "    loss.backward()\n" in fixed
    # bare noqa and other tools' codes are left alone
    (tmp_path / "t.py").write_text(CLEAN.replace("loss.backward()", "loss.backward()  # noqa: E501"))
    assert run("lint", "t.py").exit_code == 0
    (tmp_path / "t.py").write_text(CLEAN.replace("loss.backward()", "loss.backward()  # noqa"))
    assert run("lint", "t.py").exit_code == 0


def test_unused_suppression_outside_training_code(run, tmp_path):
    """Codes are read in any case, and the prefilter lets such files through even with no loop."""
    (tmp_path / "u.py").write_text("accuracy = 1  # noqa: acc101\n")
    (tmp_path / "v.py").write_text("x = 2  # accumcheck: ignore[ACC302]\n")
    (tmp_path / "w.py").write_text("ACCURACY = 1  # noqa: E501\n# accumcheck: skip-file\n")
    result = run("lint", "--no-cache", "u.py", "v.py", "w.py")
    assert [line.split(" ACC900")[0] for line in result.stdout.splitlines() if "ACC900" in line] == \
        ["u.py:1:15:", "v.py:1:8:"]


def test_add_noqa_baselines_every_finding(run, tmp_path):
    (tmp_path / "t.py").write_text(BUGGY.replace("    loss.backward()\n", "    loss.backward()  # noqa: E501\n")
                                   .replace("/ accum", ""))
    assert run("lint", "t.py").exit_code == 1
    result = run("lint", "--add-noqa", "t.py")
    assert "Added noqa comments to 2 lines." in result.stderr
    text = (tmp_path / "t.py").read_text()
    assert "optimizer.zero_grad()  # noqa: ACC101\n" in text
    assert "loss.backward()  # noqa: E501, ACC201\n" in text
    assert run("lint", "t.py").exit_code == 0


@pytest.mark.parametrize("output_format", ["full", "sarif"])
def test_outputs_render_from_the_findings_without_reading_files_again(run, project, monkeypatch, output_format):
    """A warm run reads no file and parses nothing, and still shows source lines and fixes."""
    from gradcheck_accum.lint import engine, runner

    (project / "ckpt.py").write_text("import torch\nm = torch.compile(m)\ntorch.save(m.state_dict(), 'p')\n")
    cold = run("lint", "--format", output_format, ".").stdout

    def forbidden(*args, **kwargs):
        raise AssertionError("a warm run read or analysed a file")

    monkeypatch.setattr(runner, "read_source", forbidden)
    monkeypatch.setattr(runner, "analyze", forbidden)
    monkeypatch.setattr(engine, "analyze", forbidden)
    warm = run("lint", "--format", output_format, ".").stdout
    assert warm == cold
    if output_format == "full":
        assert "3 | torch.save(m.state_dict(), 'p')" in warm.splitlines()
    else:
        assert any("fixes" in result for result in json.loads(warm)["runs"][0]["results"])
