"""A finding whose window spans files names the other place: the message says where, JSON gives
`related` (path, line, column), SARIF `relatedLocations` (schema-valid), `full` prints both lines.

The project is fixtures/projects/loss_scaler_buggy, copied so the CLI runs in it as a user would:
the ACC501 is reported at the call in engine_pretrain.py, and the backward that all-reduces is in
util/misc.py, which the scaler call runs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from gradcheck_accum.cli import main

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "projects" / "loss_scaler_buggy"
SCHEMA = Path(__file__).resolve().parents[1] / "data" / "sarif-schema-2.1.0.json"
BACKWARD = "self._scaler.scale(loss).backward()"


@pytest.fixture
def lint(tmp_path, monkeypatch):
    shutil.copytree(FIXTURE, tmp_path / "project")
    monkeypatch.chdir(tmp_path / "project")

    def invoke(*args):
        result = CliRunner().invoke(main, ["lint", "--no-cache", *args, "engine_pretrain.py"],
                                    catch_exceptions=False)
        assert result.exit_code == 1, result.output
        return result.stdout

    return invoke


def backward_line() -> int:
    return line_of(BACKWARD)


def line_of(text: str) -> int:
    lines = (FIXTURE / "util" / "misc.py").read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


CALLED = "def __call__"  # the scaler's method that the call in engine_pretrain.py runs


def test_json_names_the_line_in_the_other_file(lint):
    [finding] = json.loads(lint("--format", "json"))
    assert (finding["path"], finding["code"]) == ("engine_pretrain.py", "ACC501")
    line, function = finding["related"]  # the line the call runs, and the function it calls there
    assert (line["path"], line["line"]) == ("util/misc.py", backward_line())
    assert (function["path"], function["line"]) == ("util/misc.py", line_of(CALLED))
    assert line["column"] >= 1 and line["message"] and function["message"]
    assert f"util/misc.py:{backward_line()}" in finding["message"]


def test_sarif_related_locations_validate(lint):
    log = json.loads(lint("--format", "sarif"))
    jsonschema.validate(log, json.loads(SCHEMA.read_text()))
    [result] = log["runs"][0]["results"]
    location, _function = result["relatedLocations"]
    physical = location["physicalLocation"]
    assert physical["artifactLocation"]["uri"] == "util/misc.py"
    assert physical["region"]["startLine"] == backward_line()
    assert location["message"]["text"]


def test_full_shows_both_lines(lint):
    out = lint("--format", "full")
    assert "loss_scaler(loss, optimizer" in out  # the call here
    assert f"util/misc.py:{backward_line()}:" in out and BACKWARD in out  # the line it runs there


def test_concise_message_names_the_other_place(lint):
    out = lint()
    assert "engine_pretrain.py:15:" in out and f"util/misc.py:{backward_line()}" in out
