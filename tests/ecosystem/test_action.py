"""The GitHub Action (action.yml) run locally, step by step, the way a runner runs a composite action:
`${{ }}` expressions filled in, `if:` conditions evaluated, bash steps run with `-eo pipefail`, step
outputs through $GITHUB_OUTPUT. The one step that needs GitHub (upload-sarif) is checked, not run:
the file it would upload must exist and be valid SARIF."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from lint_cli.cli_samples import BUGGY, CLEAN

ROOT = Path(__file__).parents[2]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


class Runner:
    """Runs the action's steps with the given inputs, as GitHub's runner would."""

    def __init__(self, workspace: Path, temp: Path, **inputs: str) -> None:
        self.workspace, self.temp = workspace, temp
        self.inputs = {name: spec.get("default", "") for name, spec in ACTION["inputs"].items()}
        self.inputs.update({name.replace("_", "-"): value for name, value in inputs.items()})
        self.outputs: dict[str, dict[str, str]] = {}
        self.skipped_uses: list[dict] = []

    def value(self, name: str) -> str:
        if name.startswith("inputs."):
            return self.inputs[name.removeprefix("inputs.")]
        if name == "github.action_path":
            return str(ROOT)
        if name == "runner.temp":
            return str(self.temp)
        step, _, output = name.removeprefix("steps.").partition(".outputs.")
        return self.outputs.get(step, {}).get(output, "")

    def expand(self, text: str) -> str:
        return EXPRESSION.sub(lambda match: self.value(match.group(1)), str(text))

    def condition(self, expression: str) -> bool:
        """`a == 'x' && b == 'y'` over inputs and step outputs (all this action uses)."""
        def compare(clause: str) -> bool:
            left, right = (side.strip() for side in clause.split("=="))
            return self.value(left) == right.strip("'")

        return all(compare(clause) for clause in expression.split("&&"))

    def run(self, steps: list[dict]) -> list[subprocess.CompletedProcess]:
        """Run `steps` in order until one fails; returns what each run step did."""
        done = []
        for step in steps:
            if "if" in step and not self.condition(step["if"]):
                continue
            if "uses" in step:
                self.skipped_uses.append({"uses": step["uses"], **{k: self.expand(v) for k, v in step["with"].items()}})
                continue
            output_file = self.temp / f"output-{len(done)}"
            output_file.write_text("")
            env = {**os.environ, **{k: self.expand(v) for k, v in step.get("env", {}).items()},
                   "GITHUB_OUTPUT": str(output_file), "GITHUB_WORKSPACE": str(self.workspace)}
            for name in ("VIRTUAL_ENV", "PYTHONPATH"):  # the runner's shell has neither
                env.pop(name, None)
            env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(sys.prefix))
            result = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", self.expand(step["run"])],
                                    cwd=self.workspace, env=env, capture_output=True, text=True, timeout=900)
            done.append(result)
            if "id" in step:
                self.outputs[step["id"]] = dict(line.split("=", 1) for line in output_file.read_text().splitlines())
            if result.returncode != 0:
                break
        return done


INSTALL, *AFTER_INSTALL = ACTION["runs"]["steps"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The install step, run once: accumcheck from this checkout into a fresh venv, without torch."""
    temp = tmp_path_factory.mktemp("runner-temp")
    [result] = Runner(tmp_path_factory.mktemp("workspace"), temp).run([INSTALL])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("accumcheck, version ")
    return temp


def workspace(tmp_path: Path) -> Path:
    (tmp_path / "ws" / "src").mkdir(parents=True)
    (tmp_path / "ws" / "src" / "train.py").write_text(BUGGY)
    (tmp_path / "ws" / "src" / "eval.py").write_text(CLEAN)
    return tmp_path / "ws"


pytestmark = pytest.mark.slow  # a pip install into a fresh virtual environment


def test_installs_without_torch(installed):
    venv = installed / "accumcheck-venv"
    assert subprocess.run([venv / "bin" / "python", "-c", "import torch"], capture_output=True).returncode != 0
    assert subprocess.run([venv / "bin" / "python", "-c", "import gradcheck_accum.lint.engine"]).returncode == 0


def test_sarif_mode_writes_a_valid_report_for_upload_then_fails_on_findings(installed, tmp_path):
    runner = Runner(workspace(tmp_path), installed, args="src")
    lint, fail = runner.run(AFTER_INSTALL)
    assert runner.outputs["lint"] == {"sarif-file": "accumcheck.sarif", "exit-code": "1"}, lint.stderr
    [upload] = runner.skipped_uses
    assert upload["uses"].startswith("github/codeql-action/upload-sarif@")
    log = json.loads((runner.workspace / upload["sarif_file"]).read_text())
    jsonschema.validate(log, SCHEMA)
    [result] = log["runs"][0]["results"]
    assert result["ruleId"] == "ACC101"
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("src/train.py")
    assert fail.returncode == 1 and "accumcheck reported findings" in fail.stderr


def test_annotation_mode_prints_workflow_commands(installed, tmp_path):
    runner = Runner(workspace(tmp_path), installed, args="src --ignore ACC204", sarif="false", fail_on_findings="false")
    [lint] = runner.run(AFTER_INSTALL)
    assert lint.returncode == 0, lint.stderr
    assert lint.stdout.startswith("::error file=src/train.py,line=4,col=5,")
    assert runner.skipped_uses == [] and runner.outputs["lint"] == {"exit-code": "1"}


def test_a_clean_tree_passes_and_a_usage_error_fails_at_once(installed, tmp_path):
    ws = workspace(tmp_path)
    (ws / "src" / "train.py").write_text(CLEAN)
    runner = Runner(ws, installed, args="src")
    assert [step.returncode for step in runner.run(AFTER_INSTALL)] == [0]
    assert runner.outputs["lint"]["exit-code"] == "0"
    bad = Runner(ws, installed, args="src --select ACC999")
    [lint] = bad.run(AFTER_INSTALL)
    assert lint.returncode != 0 and bad.outputs["lint"]["exit-code"] == "2" and bad.skipped_uses == []
