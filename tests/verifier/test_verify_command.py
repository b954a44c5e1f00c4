"""`accumcheck verify TARGET` on the demo targets in fixtures/verify_demo.py (eager mode, so no
compile cost), its exit codes, and the promise that the CLI does not import torch up front."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gradcheck_accum.cli import main

ROOT = Path(__file__).resolve().parents[2]
DEMO = "fixtures/verify_demo.py"


@pytest.fixture
def run(monkeypatch):
    monkeypatch.chdir(ROOT)

    def invoke(*args):
        return CliRunner().invoke(main, ["verify", *args])
    return invoke


@pytest.mark.parametrize("target, code, text", [
    ("token_sum", 0, "MATCH"),
    ("token_mean", 1, "mean-of-means"),
    ("unscaled", 1, "4.00x: loss not divided by the accumulation steps"),
    ("double_scaled", 1, "0.25x: scaled twice"),
    ("batchnorm", 1, "INHERENT"),
])
def test_demo_targets_exit_codes_and_diagnoses(run, target, code, text):
    result = run(f"{DEMO}:{target}", "--mode", "eager")
    assert result.exit_code == code, result.output
    assert text in result.output


def test_json_output_and_overrides(run):
    result = run(f"{DEMO}:token_sum", "--mode", "eager", "--steps", "2", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["verdict"] == "match" and data["settings"]["accumulation_steps"] == 2
    assert data["settings"]["modes"] == ["eager"] and data["rows"]


def test_module_target_and_dtype_override(run):
    result = run("fixtures.verify_demo:unscaled", "--mode", "eager", "--dtype", "bfloat16")
    assert result.exit_code == 1, result.output
    assert "4.00x" in result.output and "dtype=bfloat16" in result.output


@pytest.mark.parametrize("target, extra, message", [
    ("nowhere.py:f", [], "no such file"),
    ("fixtures/verify_demo.py", [], "TARGET must be"),
    (f"{DEMO}:missing", [], "has no attribute 'missing'"),
    (f"{DEMO}:VOCAB", [], "is not callable"),
    (f"{DEMO}:token_batch", [], "does not accept"),
    (f"{DEMO}:window_tokens", [], "raised TypeError"),
    ("no_such_package.mod:f", [], "cannot import no_such_package.mod"),
    (f"{DEMO}:double_scaled", ["--steps", "40"], "cannot be split into 40"),
])
def test_errors_exit_2_with_one_line_and_no_traceback(run, target, extra, message):
    result = run(target, "--mode", "eager", *extra)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output and result.output.count("\n") == 1


def test_importing_the_cli_does_not_import_torch():
    code = ("import sys, gradcheck_accum.cli, gradcheck_accum.verifier.command, gradcheck_accum.verifier.report; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_console_script_end_to_end():
    exe = Path(sys.executable).parent / "accumcheck"
    if not exe.exists():
        pytest.skip("console script not installed next to this interpreter")
    out = subprocess.run([str(exe), "verify", f"{DEMO}:unscaled", "--mode", "eager"], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 1 and "4.00x" in out.stdout


def test_install_hint_names_a_command_that_works_without_a_release(tmp_path):
    """Issue 15, item 17: accumcheck is not on PyPI yet, so `pip install 'accumcheck[verify]'` cannot work;
    the hint names torch itself (and the checkout's extra)."""
    code = "import sys; sys.modules['torch'] = None; from gradcheck_accum.cli import main; main(['verify', 'x.py:f'])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "pip install torch" in result.stderr and "accumcheck[verify]" not in result.stderr
