"""verify_lightning against the installed Lightning: Trainer.fit on tiny LightningModules."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pl = pytest.importorskip("lightning.pytorch")
pytestmark = pytest.mark.slow  # a Trainer per test

from trainer_cases import micro_batches, mse  # noqa: E402

from gradcheck_accum import verify_trainer  # noqa: E402
from gradcheck_accum.verifier.errors import VerifyError  # noqa: E402
from gradcheck_accum.verifier.trainers.lightning_trainer import verify_lightning  # noqa: E402

N = 4


class Regressor(pl.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))

    def forward(self, x):
        return self.net(x)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, 0.5), "interval": "step"}}


class Automatic(Regressor):
    """Automatic optimisation: Lightning divides the returned loss by accumulate_grad_batches."""

    def __init__(self, extra_division=1):
        super().__init__()
        self.extra_division = extra_division

    def training_step(self, batch, batch_idx):
        loss = mse(self, batch)
        self.log("loss", loss)
        return loss / self.extra_division


class ManualAccumulation(Regressor):
    """Manual optimisation that accumulates N batches itself, as Lightning's docs show."""

    def __init__(self, divide=True, flush=True):
        super().__init__()
        self.automatic_optimization = False
        self.divide, self.flush = divide, flush

    def training_step(self, batch, batch_idx):
        optimizer, scheduler = self.optimizers(), self.lr_schedulers()
        x, y = batch
        loss = F.mse_loss(self.net(x), y)  # the submodule, not self(x): Lightning never calls forward here
        self.log("loss", loss)
        self.manual_backward(loss / N if self.divide else loss)
        if (batch_idx + 1) % N == 0 or (self.flush and self.trainer.is_last_batch):
            optimizer.step()
            optimizer.zero_grad()
            scheduler.step()


def check(module, **kwargs):
    return verify_lightning(module, micro_batches(), N, loss_fn=mse, device="cpu", **kwargs)


def test_manual_accumulation_matches_with_the_modules_own_optimizer_and_scheduler():
    report = check(ManualAccumulation())
    assert report.ok, report.render()
    assert report.settings["optimizer_steps"] == 3
    # configure_optimizers' SGD(lr=0.05) and its per-step StepLR(gamma=0.5) drove the run.
    assert report.settings["learning_rates"] == [[0.05], [0.025], [0.0125]]
    assert report.settings["framework"] == f"lightning {pl.__version__}"


def test_manual_backward_without_division_is_named():
    report = verify_trainer(ManualAccumulation(divide=False), micro_batches(), accumulation_steps=N, loss_fn=mse,
                            device="cpu")
    assert report.settings["findings"][0] == "loss-not-divided"


def test_manual_loop_without_end_of_epoch_flush_drops_the_remainder():
    report = check(ManualAccumulation(flush=False))
    assert report.settings["findings"][0] == "remainder-dropped", report.render()


def test_manual_optimisation_needs_the_objective():
    with pytest.raises(VerifyError, match="manual optimisation"):
        verify_lightning(ManualAccumulation(), micro_batches(), N, device="cpu")


def test_automatic_accumulation_matches_every_step_with_clipping_that_binds():
    # The boundary batch runs inside optimizer.step(closure); gradient_clip_val clips after it.
    report = verify_lightning(Automatic(), micro_batches(), N, device="cpu", trainer_kwargs={"gradient_clip_val": 0.05})
    assert report.ok, report.render()
    assert report.settings["optimizer_steps"] == 3
    assert report.settings["learning_rates"] == [[0.05], [0.025], [0.0125]]
    assert all("clipped to" in m.diagnosis for m in report.modes)


def test_automatic_with_a_manual_division_on_top_is_scaled_twice():
    # The default objective is training_step's own loss, which holds the division too; the
    # intended objective (loss_fn) exposes it.
    report = verify_lightning(Automatic(extra_division=N), micro_batches(), N, device="cpu", loss_fn=mse)
    assert report.settings["findings"][0] == "scaled-twice", report.render()
