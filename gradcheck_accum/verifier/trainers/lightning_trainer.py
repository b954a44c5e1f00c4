"""`verify_lightning`: run Lightning's `Trainer.fit` on a copy of a LightningModule and check every step.

What Lightning does (lightning/pytorch/loops/optimization/automatic.py, loops/training_epoch_loop.py,
plugins/precision/precision.py; read in 2.6.6):

- automatic optimisation with `Trainer(accumulate_grad_batches=N)`: the loss `training_step`
  returns is divided by N (`ClosureResult.from_training_step_output(..., normalize=N)`), every
  batch; gradients are zeroed before the first batch of a window; the optimizer steps when the
  batch count reaches a multiple of N or on the last batch of the epoch, so a last, partial
  window of k < N steps with k/N of its mean gradient (accepted, as for a loop dividing by N).
  The step is closure-based: the boundary batch's forward and backward run inside
  `optimizer.step(closure)`, with `gradient_clip_val` clipping after that closure.
- manual optimisation (`automatic_optimization = False`): Lightning divides by nothing and steps
  when `training_step` calls `opt.step()`; `accumulate_grad_batches` must stay 1, and the
  window is the module's own business, so the adapter's `accumulation_steps` says what N it means.

The adapter gives the fit an in-order DataLoader over the micro-batches, one epoch, no logger,
checkpoints, progress bar or sanity validation, and the module's own `configure_optimizers`
(its optimizer and schedulers) built for verify_loop's recording.
"""

from __future__ import annotations

import tempfile
from typing import Any, Callable, Optional, Sequence

import torch

from gradcheck_accum.verifier.errors import VerifyError
from gradcheck_accum.verifier.report import Report
from gradcheck_accum.verifier.trainers.common import (
    MicroBatchRows,
    bind_parameters,
    check_micro_batches,
    framework_report,
    quiet,
)


def verify_lightning(
    module: Any,
    micro_batches: Sequence[Any],
    accumulation_steps: int = 4,
    *,
    loss_fn: Optional[Callable] = None,
    trainer_kwargs: Optional[dict] = None,
    item_counts_fn: Optional[Callable[[Any], int]] = None,
    device: Optional[str] = None,
    dtype: Any = None,
) -> Report:
    """Fit a copy of ``module`` for one epoch over ``micro_batches`` and check every optimizer step.

    module: a LightningModule (lightning.pytorch or pytorch_lightning), never modified.
    accumulation_steps: N, passed as ``accumulate_grad_batches`` under automatic optimisation; under
    manual optimisation, the window the module's own training_step accumulates over.
    loss_fn(model, batch) -> the objective of a whole window (mean over its items); default, under
    automatic optimisation, the loss ``training_step`` returns for the window's batch (a division
    by N written inside training_step is then part of the objective: pass loss_fn to catch it).
    trainer_kwargs: more ``Trainer`` arguments (e.g. ``gradient_clip_val``, ``precision``).
    """
    pl = _lightning_of(module)
    micro_batches = check_micro_batches(micro_batches, "Lightning")
    automatic = bool(module.automatic_optimization)
    kwargs = dict(trainer_kwargs or {})
    if "accumulate_grad_batches" in kwargs:
        raise VerifyError("pass accumulate_grad_batches as accumulation_steps, not in trainer_kwargs")
    if loss_fn is None:
        if not automatic:
            raise VerifyError("under manual optimisation training_step runs its own backward: pass loss_fn(model, "
                              "batch) -> the loss of a whole window (the mean over its items)")
        loss_fn = training_step_loss

    from gradcheck_accum.verifier.loop import verify_loop

    run = _FitRun(pl, kwargs, automatic)
    report = verify_loop(run, module, micro_batches, _quiet_loss(loss_fn), accumulation_steps, run.optimizer_factory(module),
                         device=device, dtype=dtype, item_counts_fn=item_counts_fn)
    how = (f"accumulate_grad_batches={accumulation_steps}: each training_step loss divided by {accumulation_steps}"
           if automatic else "manual optimisation: training_step's own backward and steps")
    package = f"{pl.__name__.split('.')[0]} {pl.__version__}"
    return framework_report(report, package, [f"ran Trainer.fit of {package} ({how})", *run.notes])


def _lightning_of(module: Any):
    """The Lightning package the module belongs to (lightning.pytorch and pytorch_lightning are distinct)."""
    for name in ("lightning.pytorch", "pytorch_lightning"):
        try:
            pl = __import__(name, fromlist=["LightningModule"])
        except ImportError:
            continue
        if isinstance(module, pl.LightningModule):
            return pl
    raise VerifyError(f"module must be a LightningModule, got {type(module).__name__}")


def training_step_loss(model: Any, batch: Any) -> torch.Tensor:
    """What automatic optimisation backpropagates: training_step's loss (a tensor or output["loss"])."""
    out = model.training_step(batch, 0)
    loss = out.get("loss") if isinstance(out, dict) else out
    if not isinstance(loss, torch.Tensor):
        raise VerifyError("training_step returned no loss for the window (pass loss_fn)")
    return loss


def _quiet_loss(loss_fn: Callable) -> Callable:
    def quiet(model, batch):
        with _quiet():  # self.log() outside a fit warns once per call
            return loss_fn(model, batch)

    return quiet


class _FitRun:
    """verify_loop's train_fn: Trainer.fit on the run's copy, whose configure_optimizers returns the
    recorded optimizer (built from the module's own configure_optimizers where it can be)."""

    def __init__(self, pl: Any, trainer_kwargs: dict, automatic: bool):
        self.pl = pl
        self.trainer_kwargs = trainer_kwargs
        self.automatic = automatic
        self.configured: list[Any] = []  # what configure_optimizers returned, for the run's copy
        self.notes: list[str] = []

    def optimizer_factory(self, template: torch.nn.Module) -> Callable:
        def build(params: Sequence[torch.nn.Parameter]) -> torch.optim.Optimizer:
            try:
                with _quiet():
                    config = bind_parameters(template, params).configure_optimizers()
                optimizer = _single_optimizer(config)
            except VerifyError:
                raise
            except Exception as exc:  # noqa: BLE001 - e.g. it reads self.trainer, which a copy lacks
                self.notes.append(f"configure_optimizers could not run outside the fit ({type(exc).__name__}: "
                                  f"{exc}): the check used SGD(lr=0.1) and no scheduler")
                config = optimizer = torch.optim.SGD(params, lr=0.1)
            self.configured.append(config)
            return optimizer

        return build

    def __call__(self, model, optimizer, micro_batches, steps) -> None:
        rows = MicroBatchRows(micro_batches)
        loader = torch.utils.data.DataLoader(rows, batch_size=1, shuffle=False, collate_fn=rows.unwrap_rows)
        config = self.configured.pop()
        model.configure_optimizers = lambda: config  # this copy's optimizer is the recorded one
        _step_through_call(model)
        on_cpu = next(model.parameters()).device.type == "cpu"
        with tempfile.TemporaryDirectory(prefix="accumcheck-lightning-") as root, _quiet():
            kwargs = {
                "accelerator": "cpu" if on_cpu else "gpu", "devices": 1, "max_epochs": 1, "logger": False,
                "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False,
                "num_sanity_val_steps": 0, "limit_val_batches": 0, "default_root_dir": root,
                **self.trainer_kwargs,
                "accumulate_grad_batches": steps if self.automatic else 1,
            }
            try:
                trainer = self.pl.Trainer(**kwargs)
            except Exception as exc:  # noqa: BLE001 - the user's trainer arguments
                raise VerifyError(f"Trainer(...) raised {type(exc).__name__}: {exc}") from None
            trainer.fit(model, train_dataloaders=loader)
        rows.check_order("the Trainer")


def _step_through_call(model: Any) -> None:
    """Reach this copy's training_step through ``model(...)``, as Lightning itself does under DDP and
    FSDP (strategies' forward redirection), so verify_loop's forward pre-hook sees one call per
    micro-batch even when training_step calls ``self.net(x)`` rather than ``self(x)`` (a
    ``self(x)`` inside runs nested and is not counted again)."""
    step = model.training_step

    def training_step(*args: Any, **kwargs: Any) -> Any:
        own = "forward" in model.__dict__

        def forward(*a: Any, **k: Any) -> Any:
            _restore_forward(model, own, saved)  # training_step may call self(x): the real forward
            return step(*a, **k)

        saved = model.__dict__.get("forward")
        model.forward = forward
        try:
            return model(*args, **kwargs)
        finally:
            _restore_forward(model, own, saved)

    model.training_step = training_step


def _restore_forward(model: Any, own: bool, saved: Any) -> None:
    if own:
        model.forward = saved
    else:
        model.__dict__.pop("forward", None)


def _single_optimizer(config: Any) -> torch.optim.Optimizer:
    """The one optimizer in a configure_optimizers result (an optimizer, a dict, or lists)."""
    found = []

    def visit(item):
        if isinstance(item, torch.optim.Optimizer):
            found.append(item)
        elif isinstance(item, dict):
            visit(item.get("optimizer"))
        elif isinstance(item, (list, tuple)):
            for x in item:
                visit(x)

    visit(config)
    if len(found) != 1:
        raise VerifyError(f"configure_optimizers returned {len(found)} optimizers; the check follows exactly one")
    return found[0]


def _quiet():
    """Lightning reports its set-up (devices, accelerators, tips) and warns about dataloader workers."""
    return quiet("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning", "lightning_fabric")
