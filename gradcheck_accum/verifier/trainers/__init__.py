"""Adapters that run a training framework's own loop under `verify_loop` and check every step.

- `verify_hf_trainer(trainer)`: a transformers `Trainer` (hf_trainer.py);
- `verify_accelerate(train_fn, model, micro_batches, loss_fn, N)`: a loop using accelerate's
  `Accelerator.accumulate()` (accelerate_loop.py);
- `verify_lightning(module, micro_batches, N)`: Lightning's `Trainer.fit`, automatic or manual
  optimisation (lightning_trainer.py);
- `verify_trainer(trainer_or_module, ...)`: whichever of the first and last fits the object.

Each module's docstring says what its framework divides by and when, as read from its source.
The frameworks are imported only by the adapter that runs them.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from gradcheck_accum.verifier.errors import VerifyError


def _defined_in(obj: Any, class_name: str, packages: tuple[str, ...]) -> bool:
    """Whether obj's class derives from `class_name` of one of `packages`, without importing them."""
    return any(cls.__name__ == class_name and cls.__module__.split(".")[0] in packages for cls in type(obj).__mro__)


def verify_trainer(trainer: Any, micro_batches: Optional[Sequence[Any]] = None, **kwargs: Any):
    """Check a framework-driven training run: a ``transformers.Trainer`` instance goes to
    `verify_hf_trainer`, a LightningModule to `verify_lightning` (micro_batches required, N as
    ``accumulation_steps``). Loops written with accelerate take `verify_accelerate`."""
    if _defined_in(trainer, "Trainer", ("transformers",)):
        from gradcheck_accum.verifier.trainers.hf_trainer import verify_hf_trainer

        return verify_hf_trainer(trainer, micro_batches, **kwargs)
    if _defined_in(trainer, "LightningModule", ("lightning", "pytorch_lightning")):
        from gradcheck_accum.verifier.trainers.lightning_trainer import verify_lightning

        if micro_batches is None:
            raise VerifyError("a LightningModule needs micro_batches: the batches its training_step takes")
        return verify_lightning(trainer, micro_batches, **kwargs)
    raise VerifyError(f"verify_trainer takes a transformers.Trainer or a LightningModule, got "
                      f"{type(trainer).__name__} (a loop written with accelerate: verify_accelerate)")


def __getattr__(name: str):
    modules = {"verify_hf_trainer": "hf_trainer", "verify_accelerate": "accelerate_loop",
               "verify_lightning": "lightning_trainer"}
    if name not in modules:
        raise AttributeError(f"module 'gradcheck_accum.verifier.trainers' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"gradcheck_accum.verifier.trainers.{modules[name]}"), name)
