"""A call made by name on each object of a collection (`for cb in callbacks: cb.on_step(...)`) runs the
project's overrides of that name as hooks. Only overrides that can take the call count: `model.train()`
on each model of a list is nn.Module's switch to training mode, not an engine's two-parameter
`train(engine, batch)` step function, whose GradScaler clip must not be reported at the mode switch.
"""

from __future__ import annotations

from pathlib import Path

from gradcheck_accum.lint import runner
from gradcheck_accum.lint.files import discover

BASE = """\
from ignite.engine import Engine


class StepEngine(Engine):
    @staticmethod
    def train(engine, batch):
        engine.model.train()
        engine.optimizer.zero_grad()
        loss = engine.model(batch).mean()
        loss.backward()
        engine.optimizer.step()
        return float(loss)
"""

SCALED = """\
import torch

from pkg.base import StepEngine


class ScaledEngine(StepEngine):
    @staticmethod
    def train(engine, batch):
        engine.model.train()
        engine.optimizer.zero_grad()
        loss = engine.model(batch).mean()
        engine.scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(engine.model.parameters(), 1.0)
        engine.scaler.step(engine.optimizer)
        engine.scaler.update()
        return float(loss)
"""

PAIR = """\
import torch
from ignite.engine import Engine


class PairEngine(Engine):
    @staticmethod
    def train(engine, batch):
        for model, optimizer in zip(engine.models, engine.optimizers):
            model.train()
            if engine.state.iteration % engine.every == 1 or engine.every == 1:
                optimizer.zero_grad()
        losses = [model(batch).mean() / engine.every for model in engine.models]
        for scaler, loss in zip(engine.scalers, losses):
            scaler.scale(loss).backward()
        if engine.state.iteration % engine.every == 0:
            for model, optimizer, scaler in zip(engine.models, engine.optimizers, engine.scalers):
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
        return 0.0
"""


def _findings(path: Path) -> list[tuple[str, str]]:
    targets, _ = discover([str(path)])
    return [(Path(f.path).name, f.code) for r in runner.lint_targets(targets, jobs=1) for f in r.findings]


def _project(root: Path, hook_call: str) -> Path:
    (root / "pyproject.toml").write_text("")
    package = root / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "base.py").write_text(BASE)
    (package / "scaled.py").write_text(SCALED)
    (package / "pair.py").write_text(PAIR.replace("model.train()", hook_call))
    return package / "pair.py"


def test_a_module_mode_switch_does_not_run_a_step_function_of_that_name(tmp_path: Path) -> None:
    assert _findings(_project(tmp_path, "model.train()")) == []


def test_a_call_that_fits_the_step_function_still_runs_it(tmp_path: Path) -> None:
    # the negative control: handed (engine, batch), the objects' `train` may be the scaled step function,
    # whose clip of scaled gradients then runs inside this loop
    assert ("pair.py", "ACC405") in _findings(_project(tmp_path, "model.train(engine, batch)"))
