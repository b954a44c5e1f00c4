"""The guard inside the Hugging Face Trainer: ``Trainer(..., callbacks=[GuardCallback()])``.

The Trainer hands callbacks its optimizer (accelerate's wrapper: the guard hooks the optimizer
inside it and takes its GradScaler), its scheduler and the bare model; under DDP the wrapper is
found from the model. Epoch ends come from `on_epoch_end`, so a short window is accepted only there.
The Trainer scales the loss itself (by N, or by the window's item count), so the loss factor is
left to `accumcheck verify`.
"""

from __future__ import annotations

from transformers import TrainerCallback

from gradcheck_accum.guards.core import Guard, OnError, ddp_wrapper_of


class GuardCallback(TrainerCallback):
    def __init__(self, on_error: OnError = "raise"):
        self.on_error = on_error
        self.guard: Guard | None = None

    def on_train_begin(self, args, state, control, model=None, optimizer=None, lr_scheduler=None, **kwargs):
        if self.guard is not None:
            self.guard.close(check=False)
        self.guard = Guard(optimizer, args.gradient_accumulation_steps, model=ddp_wrapper_of(model),
                           scheduler=lr_scheduler, on_error=self.on_error, epoch_ends=True)

    def on_epoch_end(self, args, state, control, **kwargs):
        if self.guard is not None:
            self.guard.end_epoch()

    def on_train_end(self, args, state, control, **kwargs):
        if self.guard is not None:
            self.guard.close()
