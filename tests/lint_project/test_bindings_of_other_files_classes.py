"""Reading what another file's class binds to `self` walks the functions its methods call (what they
return): those walks hold no window of the linted file, and a finding reached through them is the other
file's to report, at a call written there.

Here the linted file's `TTSTrainer._train_epoch` overrides a base method that `NoroTrainer.train_loop`,
in another file, runs in its loop; walking that loop reads NoroTrainer's attribute bindings, among them
`total, losses = self._train_step(batch)`, whose step clears the gradients inside accumulate() (ACC101,
noro.py's finding). Linting tts.py once raised KeyError on the call in noro.py.
"""

from __future__ import annotations

from pathlib import Path

from gradcheck_accum.lint import engine
from gradcheck_accum.lint.project import project_for

FILES = {
    "pyproject.toml": '[project]\nname = "trainers"\n',
    "base.py": """\
class BaseTrainer:
    def _train_step(self, batch):
        raise NotImplementedError

    def _train_epoch(self):
        raise NotImplementedError
""",
    "tts.py": """\
from base import BaseTrainer


class TTSTrainer(BaseTrainer):
    def _train_epoch(self):
        for batch in self.loader:
            with self.accelerator.accumulate(self.model):
                total, losses = self._train_step(batch)
            self.current_loss = total

    def _train_step(self, batch):
        pass
""",
    "losses.py": """\
import torch


def diff_loss(prediction, target):
    scale = torch.compile(torch.nn.Identity())
    return torch.nn.functional.l1_loss(scale(prediction), target)
""",
    "noro.py": """\
from accelerate import Accelerator
import torch
from base import BaseTrainer
from losses import diff_loss


class NoroTrainer(BaseTrainer):
    def __init__(self, model, loader):
        self.accelerator = Accelerator(gradient_accumulation_steps=4)
        self.loader = loader
        self.model, self.optimizer = self.accelerator.prepare(model, torch.optim.AdamW(model.parameters()))

    def _train_step(self, batch):
        self.optimizer.zero_grad()
        loss = diff_loss(self.model(batch), batch)
        self.accelerator.backward(loss)
        self.optimizer.step()
        return loss, {}

    def _train_epoch(self):
        for batch in self.loader:
            with self.accelerator.accumulate(self.model):
                total, losses = self._train_step(batch)
            self.current_loss = total

    def train_loop(self):
        for epoch in range(10):
            self._train_epoch()
""",
}


def findings(root: Path, name: str) -> list[tuple[int, str]]:
    path = root / name
    analysis = engine.analyze(path.read_text(), name, project=project_for(path))
    return [(f.line, f.code) for f in analysis.findings]


def test_a_finding_reached_through_another_files_class_bindings_is_that_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    assert findings(tmp_path, "tts.py") == []
    assert findings(tmp_path, "noro.py") == [(14, "ACC101")]
