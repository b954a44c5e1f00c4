"""The guard inside a real Lightning Trainer: automatic optimisation (Lightning accumulates, clears
and steps) and manual optimisation (the module does), clean and with bugs written the way Lightning
users write them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

L = pytest.importorskip("lightning.pytorch")

from gradcheck_accum.guards import GuardError  # noqa: E402
from gradcheck_accum.guards.lightning import GuardCallback  # noqa: E402

pytestmark = pytest.mark.slow  # a Trainer per test

N = 3


def loader():
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(14, 4, generator=g), torch.randn(14, 2, generator=g))
    return torch.utils.data.DataLoader(data, batch_size=2)  # 7 batches per epoch: windows of 3, 3, 1


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def fit(module, callback=None, **trainer_args):
    settings = dict(max_epochs=2, accumulate_grad_batches=N, gradient_clip_val=1.0)
    settings.update(trainer_args)
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[callback or GuardCallback()], **settings)
    try:
        trainer.fit(module, loader())
    except GuardError as exc:
        return exc.violation, trainer
    return None, trainer


def test_automatic_optimisation_runs_clean():
    violation, trainer = fit(Regressor())
    assert violation is None and trainer.global_step == 6


class ZeroGradInTrainingStep(Regressor):
    def training_step(self, batch, batch_idx):
        self.optimizers().zero_grad()
        return super().training_step(batch, batch_idx)


class SkipsZeroGrad(Regressor):
    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        pass


class ZeroGradBeforeStep(Regressor):
    def on_before_optimizer_step(self, optimizer):
        optimizer.zero_grad()


class SchedulerInTrainingStep(Regressor):
    def training_step(self, batch, batch_idx):
        self.lr_schedulers().step()
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("module_class, code, window, steps", [
    (ZeroGradInTrainingStep, "ACC101", 1, 0),
    (SkipsZeroGrad, "ACC102", 2, 1),
    (ZeroGradBeforeStep, "ACC103", 1, 0),
    (SchedulerInTrainingStep, "ACC401", 1, 0),
], ids=["zero_grad in training_step", "optimizer_zero_grad skipped", "zero_grad before step", "scheduler in training_step"])
def test_automatic_optimisation_bug_raises_at_its_window(module_class, code, window, steps):
    violation, trainer = fit(module_class())
    assert violation is not None
    assert (violation.code, violation.window, trainer.global_step) == (code, window, steps), str(violation)


class Manual(Regressor):
    """Manual optimisation: the module accumulates by itself, so the callback is told N."""

    def __init__(self, boundary):
        super().__init__()
        self.automatic_optimization = False
        self.boundary = boundary

    def training_step(self, batch, batch_idx):
        optimizer = self.optimizers()
        x, y = batch
        self.manual_backward(F.mse_loss(self.net(x), y) / N)
        if self.boundary(batch_idx, self.trainer.num_training_batches):
            optimizer.step()
            optimizer.zero_grad()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def flushed(i, total):
    return (i + 1) % N == 0 or i + 1 == total


@pytest.mark.parametrize("boundary, code, window", [
    (flushed, None, None),
    (lambda i, total: True, "ACC104", 2),
    (lambda i, total: i % N == 0 or i + 1 == total, "ACC407", 1),
    (lambda i, total: (i + 1) % N == 0, "ACC406", 3),  # named at the end of epoch 1
], ids=["flushed", "every batch", "off by one", "remainder dropped"])
def test_manual_optimisation(boundary, code, window):
    violation, _ = fit(Manual(boundary), GuardCallback(accumulation_steps=N), accumulate_grad_batches=1,
                       gradient_clip_val=None)
    if code is None:
        assert violation is None
    else:
        assert (violation.code, violation.window) == (code, window), str(violation)
