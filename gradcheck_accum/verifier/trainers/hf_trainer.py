"""`verify_hf_trainer`: run a transformers `Trainer`'s own training loop on a copy and check every step.

What the Trainer divides by (read from transformers/trainer.py, `training_step`, `compute_loss`
and `_get_num_items_in_batch`/`get_batch_samples`):

- up to 4.45 (the 2024 accumulation bug): each micro-batch's loss is the model's mean over its
  own tokens, divided by `gradient_accumulation_steps` N: a mean of per-micro-batch means, which
  differs from the window's token mean whenever micro-batches hold different numbers of tokens
  (padding, packing, masked prompts).
- from 4.46 (October 2024): the Trainer counts the window's label entries != -100 before the window
  (`num_items_in_batch`) and, when the model's forward takes `**kwargs` (`model_accepts_loss_kwargs`)
  or a `compute_loss_func` is given, passes the count to the loss, which sums the micro-batch's
  token losses and divides by it; the division by N is then skipped. Models without loss kwargs
  still get the per-micro-batch mean divided by N (mean-of-means remains for them).
- the count itself is version-dependent (a causal LM predicts labels[..., 1:], so counting every
  label entry over-counts by one token per row; 5.x counts the shifted labels): the adapter
  measures the scale each release gives instead of assuming it (bench/trainers/hf_releases.py).
- a last, partial window: the release's epoch loop decides whether it steps at all (see the
  report's step count) and what it divides by.

What the adapter does, so the user does not have to: it takes the first micro-batches from the
Trainer's own train dataloader (its collator and column handling; `micro_batches=` overrides),
pads them to a common length, and runs a rebuilt Trainer of the same class (same arguments, the
user's own callbacks, reporting and saving off, a temporary output dir) whose dataset is those
micro-batches in order (batch size 1 over micro-batch rows, a sequential sampler), with accelerate's
process-wide state fresh for the run and restored afterwards. The optimizer is the Trainer's own
recipe (class, arguments, weight-decay groups) built for verify_loop's recording. Each optimizer step is
compared with the model's own loss on the window's micro-batches concatenated (the token mean
over the window for a causal LM).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import tempfile
from typing import Any, Callable, Optional, Sequence

import torch

from gradcheck_accum.verifier.errors import VerifyError
from gradcheck_accum.verifier.report import Report
from gradcheck_accum.verifier.trainers.common import (
    MicroBatchRows,
    as_plain_batch,
    check_micro_batches,
    framework_report,
    fresh_accelerate_state,
    pad_to_common_length,
    quiet,
)


def verify_hf_trainer(
    trainer: Any,
    micro_batches: Optional[Sequence[Any]] = None,
    *,
    windows: int = 2,
    loss_fn: Optional[Callable] = None,
    make_trainer: Optional[Callable] = None,
    item_counts_fn: Optional[Callable[[Any], int]] = None,
    device: Optional[str] = None,
    dtype: Any = None,
) -> Report:
    """Run the Trainer's real loop (``trainer.train()`` on a rebuilt copy) and check each step.

    trainer: a ``transformers.Trainer`` (or subclass) instance; it is not trained or modified.
    micro_batches: the batches to feed (dicts of tensors as the collator makes them); default:
    ``windows * N + 1`` batches from ``trainer.get_train_dataloader()`` (the extra one makes a
    last, partial window). loss_fn(model, batch) -> scalar: the objective of a whole window;
    default: the model's own loss (required when the Trainer computes its own: a ``compute_loss``
    override, ``compute_loss_func`` or label smoothing). make_trainer(model, args) -> Trainer:
    how to build the run's Trainer when the class cannot be rebuilt from the standard keywords.
    item_counts_fn(batch) -> int: the items the loss averages over; default the label entries
    != -100 (shifted by one for the causal LMs transformers knows), or the rows for row labels.
    """
    transformers = _import_transformers()
    if not isinstance(trainer, transformers.Trainer):
        raise VerifyError(f"trainer must be a transformers.Trainer, got {type(trainer).__name__}")
    if isinstance(windows, bool) or not isinstance(windows, int) or windows < 1:
        raise VerifyError(f"windows must be a positive integer, got {windows!r}")
    steps = int(trainer.args.gradient_accumulation_steps)
    if micro_batches is None:
        micro_batches = _first_batches(trainer, windows * steps + (1 if steps > 1 else 0))
    micro_batches = [as_plain_batch(mb) for mb in check_micro_batches(micro_batches, "the Trainer")]
    micro_batches, pad_note = pad_to_common_length(micro_batches, _pad_values(trainer))
    if loss_fn is None:
        loss_fn = _model_loss(trainer, transformers)

    from gradcheck_accum.verifier.loop import verify_loop

    run = _TrainerRun(trainer, make_trainer, device)
    report = verify_loop(run, trainer.model, micro_batches, loss_fn, steps,
                         optimizer=functools.partial(_trainer_optimizer, trainer), device=device, dtype=dtype,
                         item_counts_fn=item_counts_fn or functools.partial(
                             label_items, shifted=_shifts_labels(trainer.model, transformers)))
    ran = (f"ran {type(trainer).__name__}.train() of transformers {transformers.__version__} "
           f"({_division(trainer, transformers)})")
    return framework_report(report, f"transformers {transformers.__version__}", [n for n in (pad_note, ran) if n])


def _import_transformers():
    try:
        import transformers
    except ImportError:
        raise VerifyError("verify_hf_trainer needs transformers (pip install transformers)") from None
    return transformers


def _first_batches(trainer: Any, count: int) -> list[Any]:
    """The Trainer's own loader (sampler, column removal, collator), first `count` batches."""
    batches = []
    with torch.random.fork_rng(devices=[]), _quiet():
        try:
            for batch in trainer.get_train_dataloader():
                batches.append({k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in batch.items()})
                if len(batches) == count:
                    break
        except Exception as exc:  # noqa: BLE001 - the user's dataset or collator
            raise VerifyError(f"the Trainer's train dataloader raised {type(exc).__name__}: {exc}") from None
    if len(batches) < 2:
        raise VerifyError(f"the Trainer's train dataset gave {len(batches)} batch(es); the check needs at least "
                          f"{count} (pass micro_batches=)")
    return batches


def _pad_values(trainer: Any) -> dict[str, int]:
    config = getattr(trainer.model, "config", None)
    pad = getattr(config, "pad_token_id", None)
    if pad is None:
        pad = getattr(getattr(trainer, "processing_class", None), "pad_token_id", None)
    return {"labels": -100, "attention_mask": 0, "input_ids": 0 if pad is None else int(pad)}


def _model_loss(trainer: Any, transformers: Any) -> Callable:
    own = []
    if type(trainer).compute_loss is not transformers.Trainer.compute_loss:
        own.append(f"{type(trainer).__name__} overrides compute_loss")
    if getattr(trainer, "compute_loss_func", None) is not None:
        own.append("it has a compute_loss_func")
    if getattr(trainer, "label_smoother", None) is not None:
        own.append("label smoothing is on")
    if own:
        raise VerifyError(f"the Trainer computes its own loss ({'; '.join(own)}): pass loss_fn(model, batch) -> "
                          "the loss of a whole window (the mean over its items), the objective accumulation "
                          "must reproduce")
    return model_loss


def model_loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
    """The loss a transformers model computes itself from a batch holding its labels."""
    outputs = model(**batch)
    loss = outputs["loss"] if isinstance(outputs, dict) else outputs[0]
    if loss is None:
        raise VerifyError("the model returned no loss: the batch needs labels (or pass loss_fn)")
    return loss


def _shifts_labels(model: torch.nn.Module, transformers: Any) -> bool:
    """A decoder-only causal LM predicts labels[..., 1:]: the first label of each row is never an item."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    config = getattr(model, "config", None)
    return (type(model).__name__ in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()
            and not getattr(config, "is_encoder_decoder", False))


def label_items(batch: Any, shifted: bool = False) -> int:
    """The items a transformers loss averages over: label entries != -100 (of labels[..., 1:] for a
    causal LM), or the rows when the labels are one per row."""
    labels = batch.get("labels") if isinstance(batch, dict) else None
    if not isinstance(labels, torch.Tensor):
        raise VerifyError("the micro-batches hold no 'labels' tensor to count items from (pass loss_fn and item counts)")
    if labels.dim() < 2 or labels.is_floating_point():
        return int(labels.shape[0])
    return int((labels[..., 1:] if shifted else labels).ne(-100).sum())


def _trainer_optimizer(trainer: Any, params: Sequence[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """The optimizer the Trainer would make (its own, or its default recipe), over `params`."""
    names = [n for n, _ in trainer.model.named_parameters()]
    by_name = dict(zip(names, params))
    try:
        if trainer.optimizer is not None:
            return _rebuilt(trainer.optimizer, dict(trainer.model.named_parameters()), by_name)
        cls, kwargs = type(trainer).get_optimizer_cls_and_kwargs(trainer.args, trainer.model)
        decay = set(trainer.get_decay_parameter_names(trainer.model))
        groups = [
            {"params": [p for n, p in by_name.items() if n in decay and p.requires_grad],
             "weight_decay": trainer.args.weight_decay},
            {"params": [p for n, p in by_name.items() if n not in decay and p.requires_grad], "weight_decay": 0.0},
        ]
        return cls([g for g in groups if g["params"]], **kwargs)
    except VerifyError:
        raise
    except Exception as exc:  # noqa: BLE001 - exotic optimizers
        raise VerifyError(f"the Trainer's optimizer could not be rebuilt for the check ({type(exc).__name__}: "
                          f"{exc})") from None


def _rebuilt(optimizer: torch.optim.Optimizer, old: dict[str, torch.nn.Parameter],
             new: dict[str, torch.nn.Parameter]) -> torch.optim.Optimizer:
    name_of = {id(p): n for n, p in old.items()}
    groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [new[name_of[id(p)]] for p in g["params"]]}
              for g in optimizer.param_groups]
    return type(optimizer)(groups, **optimizer.defaults)


class _TrainerRun:
    """verify_loop's train_fn: one `train()` of a Trainer rebuilt around the run's model."""

    def __init__(self, trainer: Any, make_trainer: Optional[Callable], device: Optional[str]):
        self.trainer = trainer
        self.make_trainer = make_trainer
        self.device = device

    def __call__(self, model, optimizer, micro_batches, steps) -> None:
        transformers = _import_transformers()
        rows = MicroBatchRows(micro_batches)
        on_cpu = next(model.parameters()).device.type == "cpu"
        with tempfile.TemporaryDirectory(prefix="accumcheck-hf-") as out, fresh_accelerate_state(), _quiet():
            args = _run_args(self.trainer.args, out, steps, on_cpu)
            run = self._build(model, args)
            run.train_dataset = rows
            run.data_collator = rows.unwrap_rows
            run.optimizer = optimizer
            for printer in (transformers.trainer_callback.PrinterCallback, transformers.trainer_callback.ProgressCallback):
                run.remove_callback(printer)  # the run's logs would go to stdout
            if not _has_field(args, "train_sampling_strategy"):
                # Releases without a sequential strategy always shuffle: give this run a sequential sampler.
                run._get_train_sampler = lambda *_a, **_k: torch.utils.data.SequentialSampler(rows)
            run.train()
        rows.check_order("the Trainer")

    def _build(self, model, args):
        if self.make_trainer is not None:
            try:
                return self.make_trainer(model, args)
            except Exception as exc:  # noqa: BLE001 - user code
                raise VerifyError(f"make_trainer raised {type(exc).__name__}: {exc}") from None
        cls = type(self.trainer)
        accepted = inspect.signature(cls.__init__).parameters
        kwargs: dict[str, Any] = {"model": model, "args": args}
        for name in ("processing_class", "tokenizer"):
            if name in accepted and name not in kwargs and "processing_class" not in kwargs:
                value = self.trainer.__dict__.get(name)
                if value is not None:
                    kwargs[name] = value
        if "compute_loss_func" in accepted and getattr(self.trainer, "compute_loss_func", None) is not None:
            kwargs["compute_loss_func"] = self.trainer.compute_loss_func
        own = [cb for cb in self.trainer.callback_handler.callbacks
               if not type(cb).__module__.startswith("transformers.")]
        if own and "callbacks" in accepted:
            kwargs["callbacks"] = own
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise VerifyError(f"{cls.__name__} could not be rebuilt from model and args ({exc}): pass "
                              f"make_trainer=lambda model, args: {cls.__name__}(model=model, args=args, ...)") from None


_RUN_ARGS = {
    "report_to": "none", "save_strategy": "no", "eval_strategy": "no", "evaluation_strategy": "no",
    "logging_strategy": "no", "load_best_model_at_end": False, "push_to_hub": False, "disable_tqdm": True,
    "dataloader_num_workers": 0, "per_device_train_batch_size": 1, "max_steps": -1, "num_train_epochs": 1,
    "remove_unused_columns": False, "train_sampling_strategy": "sequential", "dataloader_drop_last": False,
}


def _has_field(args: Any, name: str) -> bool:
    return any(f.name == name for f in dataclasses.fields(args))


def _run_args(args: Any, output_dir: str, steps: int, on_cpu: bool) -> Any:
    """The user's TrainingArguments for one short in-order epoch over the micro-batch rows."""
    names = {f.name for f in dataclasses.fields(args) if f.init}
    changes = {k: v for k, v in _RUN_ARGS.items() if k in names}
    changes.update(output_dir=output_dir, gradient_accumulation_steps=steps)
    if on_cpu:
        changes.update({k: True for k in ("use_cpu", "no_cuda") if k in names})
    if "evaluation_strategy" in changes and getattr(args, "evaluation_strategy", None) is None:
        del changes["evaluation_strategy"]  # deprecated alias: setting it only warns
    try:
        return dataclasses.replace(args, **changes)
    except Exception as exc:  # noqa: BLE001 - validation of the user's arguments
        raise VerifyError(f"the Trainer's arguments could not be adapted for the check: {exc}") from None


def _division(trainer: Any, transformers: Any) -> str:
    accepts = getattr(trainer, "model_accepts_loss_kwargs", None)
    if accepts is None:
        return "each micro-batch's mean loss divided by gradient_accumulation_steps"
    if accepts or getattr(trainer, "compute_loss_func", None) is not None:
        return "each micro-batch's summed loss divided by the window's label count (num_items_in_batch)"
    return ("the model takes no loss kwargs, so each micro-batch's mean loss is divided by "
            "gradient_accumulation_steps")


def _quiet():
    """The Trainer logs its set-up at INFO/WARNING and warns about defaults."""
    return quiet("transformers", "accelerate")
