"""Order evidence for an attribute bound in one method and read in another may come from outside the
class: a script that calls `trainer.initialize_training()` and then `trainer.train_and_validate()` on
the same object runs the binding first. Without such evidence (the two calls on different objects,
in the other order, or in functions whose order is unknown) the linter stays silent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gradcheck_accum.lint import runner
from gradcheck_accum.lint.files import discover

TRAINER = """\
import torch


class Trainer:
    def __init__(self, config):
        self.config = config
        self.model = None

    def initialize_training(self):
        net = torch.nn.Linear(8, 8)
        self.model = torch.compile(net) if self.config.compile else net
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def save(self, path):
        torch.save(self.model.state_dict(), path)

    def train_and_validate(self, loader):
        for epoch in range(self.config.epochs):
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(self.model(x), y)
                loss.backward()
                self.optimizer.step()
                self.optimizer.zero_grad()
            self.save(f"epoch{epoch}.pt")
"""


def _findings(root: Path, script: str) -> list[tuple[str, int, str]]:
    (root / "pyproject.toml").write_text("")
    (root / "trainer.py").write_text(TRAINER)
    (root / "run.py").write_text(script)
    targets, _ = discover([str(root)])
    return [(Path(f.path).name, f.line, f.code) for r in runner.lint_targets(targets, jobs=1) for f in r.findings]


def test_a_script_that_sets_the_trainer_up_first_orders_the_methods(tmp_path: Path) -> None:
    script = ("from trainer import Trainer\n\n\ndef main(config, loader):\n    trainer = Trainer(config)\n"
              "    trainer.initialize_training()\n    trainer.train_and_validate(loader)\n")
    assert _findings(tmp_path, script) == [("trainer.py", 15, "ACC302")]


@pytest.mark.parametrize("body", [
    # the other order: the save runs before anything is compiled
    "    trainer = Trainer(config)\n    trainer.train_and_validate(loader)\n    trainer.initialize_training()\n",
    # two objects: the one trained was never set up here
    "    trainer = Trainer(config)\n    other = Trainer(config)\n    other.initialize_training()\n"
    "    trainer.train_and_validate(loader)\n",
])
def test_without_evidence_of_the_order_it_stays_silent(tmp_path: Path, body: str) -> None:
    script = "from trainer import Trainer\n\n\ndef main(config, loader):\n" + body
    assert _findings(tmp_path, script) == []


def test_a_second_caller_that_skips_the_set_up_leaves_the_order_unknown(tmp_path: Path) -> None:
    script = ("from trainer import Trainer\n\n\ndef main(config, loader):\n    trainer = Trainer(config)\n"
              "    trainer.initialize_training()\n    trainer.train_and_validate(loader)\n\n\n"
              "def resume(trainer, loader):\n    trainer.train_and_validate(loader)\n")
    assert _findings(tmp_path, script) == []
