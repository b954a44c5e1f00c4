"""A method that overrides a base's and has effects may be a hook that code in other files fires by
its name (`cb.on_backward_end(self)`): the loops around every function naming it are walked as its
callers. `__init__` and `forward` are not such hooks: Python runs the first (every
`super().__init__()` of the project names it) and a module's call runs the second (every module of
a model names it). Taking them for hooks walked hundreds of unrelated functions for one file of a
large project (a diffusion pipeline stage whose forward steps a noise scheduler: ~50 s).
"""

from __future__ import annotations

from pathlib import Path

from gradcheck_accum.lint import engine
from gradcheck_accum.lint.inlining import ProjectContext
from gradcheck_accum.lint.model import FileModel
from gradcheck_accum.lint.project import project_for

STAGE = """\
import torch
from base import Stage


class DenoiseStage(Stage):
    def __init__(self, model, scheduler):
        super().__init__()
        self.model = torch.compile(model)
        self.scheduler = scheduler

    def forward(self, latents, steps):
        for t in steps:
            noise = self.model(latents, t)
            latents = self.scheduler.step(noise, t, latents)
        return latents

    def on_backward_end(self, optimizer):
        optimizer.zero_grad()
"""

BASE = """\
import torch.nn as nn


class Stage(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, *args):
        raise NotImplementedError

    def on_backward_end(self, optimizer):
        pass
"""

# Each names `__init__` and `forward` in a loop, as a model's blocks do.
BLOCK = """\
import torch.nn as nn


class Block{index}(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer.forward(x)
        return x
"""

# Fires the callback hook by name in its loop: the one function that is a caller to walk.
RUNNER = """\
def fit(model, stage, optimizer, loader):
    for batch in loader:
        model(batch).backward()
        stage.on_backward_end(optimizer)
        optimizer.step()
"""


def test_init_and_forward_are_not_walked_as_hooks_fired_by_name(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "pipeline"\n')
    (tmp_path / "base.py").write_text(BASE)
    (tmp_path / "stage.py").write_text(STAGE)
    (tmp_path / "runner.py").write_text(RUNNER)
    for index in range(20):
        (tmp_path / f"block{index}.py").write_text(BLOCK.format(index=index))
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "stage.py"
    module = engine.parse(STAGE)
    model = FileModel(module, ProjectContext(project_for(path), path, module, STAGE, engine._parse_or_none), text=STAGE)
    walked = {scope.name for scope in model.inliner.roots}
    assert walked == {"fit"}
