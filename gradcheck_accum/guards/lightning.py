"""The guard inside Lightning: ``L.Trainer(..., callbacks=[GuardCallback()])``.

One guard per optimizer, with the Trainer's `accumulate_grad_batches` (or `accumulation_steps`, for
manual optimisation, where Lightning does not know it), the scheduler configured for that optimizer,
the precision plugin's GradScaler and, under a DDP strategy, the wrapper. Epoch ends come from
`on_train_epoch_end`. Lightning divides the loss by N itself, so the loss factor is left to
`accumcheck verify`.
"""

from __future__ import annotations

from typing import Optional

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the standalone package
    from pytorch_lightning.callbacks import Callback

from gradcheck_accum.guards.core import Guard, OnError


class GuardCallback(Callback):
    def __init__(self, accumulation_steps: Optional[int] = None, on_error: OnError = "raise"):
        self.accumulation_steps = accumulation_steps
        self.on_error = on_error
        self.guards: list[Guard] = []

    def on_train_start(self, trainer, pl_module) -> None:
        self._close(check=False)
        steps = self.accumulation_steps or trainer.accumulate_grad_batches
        schedulers = {id(c.scheduler.optimizer): c.scheduler for c in trainer.lr_scheduler_configs
                      if hasattr(c.scheduler, "optimizer")}
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        model = trainer.strategy.model
        self.guards = [Guard(optimizer, steps, model=model, scheduler=schedulers.get(id(optimizer)), scaler=scaler,
                             on_error=self.on_error, epoch_ends=True) for optimizer in trainer.optimizers]

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        for guard in self.guards:
            guard.end_epoch()

    def on_train_end(self, trainer, pl_module) -> None:
        self._close(check=True)

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._close(check=False)

    def _close(self, check: bool) -> None:
        guards, self.guards = self.guards, []
        for guard in guards:
            guard.close(check=check)
