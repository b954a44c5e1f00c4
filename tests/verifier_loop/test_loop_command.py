"""`accumcheck verify TARGET` on loop targets: a dict holding train_fn (or --loop) runs verify_loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gradcheck_accum.cli import main

DEMO = str(Path(__file__).resolve().parents[2] / "fixtures" / "verify_loop_demo.py")


def invoke(*args):
    return CliRunner().invoke(main, ["verify", *args])


@pytest.mark.parametrize(
    "target, code, phrase",
    [
        ("correct", 0, "every optimizer step used its window's big-batch gradient"),
        ("ddp", 0, "on 2 DDP ranks"),
        ("ddp_sync_every_micro_batch", 0, "all-reduced on every micro-batch"),
        ("never_cleared", 1, "gradients never cleared"),
        ("remainder_dropped", 1, "remainder dropped: the last 2 micro-batch(es)"),
    ],
)
def test_loop_targets(target, code, phrase):
    result = invoke(f"{DEMO}:{target}")
    assert result.exit_code == code, result.output
    assert phrase in result.output


def test_json_and_steps_override():
    result = invoke(f"{DEMO}:step_every_micro_batch", "--format", "json", "--steps", "5")
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["settings"]["findings"][0] == "step-every-micro-batch"
    assert data["settings"]["accumulation_steps"] == 5 and data["settings"]["expected_steps"] == 2


def test_loop_flag_with_a_verify_target_is_a_clear_error():
    result = invoke(str(Path(DEMO).with_name("verify_demo.py")) + ":token_sum", "--loop")
    assert result.exit_code == 2
    assert "error:" in result.output and "Traceback" not in result.output
