"""`accumcheck verify TARGET` on trainer targets, and verify_trainer's dispatch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from gradcheck_accum import verify_trainer
from gradcheck_accum.cli import main
from gradcheck_accum.verifier.errors import VerifyError

DEMO = str(Path(__file__).resolve().parents[2] / "fixtures" / "verify_trainer_demo.py")


@pytest.mark.parametrize("target, code, phrase", [
    ("accelerate_accumulate", 0, "every optimizer step used its window's big-batch gradient"),
    ("accelerate_divides_again", 1, "divided by the accumulation steps twice"),
])
def test_accelerate_targets(target, code, phrase):
    pytest.importorskip("accelerate")
    result = CliRunner().invoke(main, ["verify", f"{DEMO}:{target}"])
    assert result.exit_code == code, result.output
    assert phrase in result.output and "accelerate" in result.output


def test_verify_trainer_names_what_it_takes():
    with pytest.raises(VerifyError, match="transformers.Trainer or a LightningModule"):
        verify_trainer(torch.nn.Linear(2, 2))
