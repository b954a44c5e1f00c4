"""What every trainer adapter needs to run a framework's own loop on verify_loop's micro-batches.

- `MicroBatchRows`: a dataset whose rows are the micro-batches themselves (a DataLoader with
  batch size 1 and `unwrap_rows` as collate function hands the framework exactly those
  micro-batches, in order, and records the order it asked for them in);
- `pad_to_common_length`: padded token batches of different lengths cannot be concatenated into
  the window's big batch, so they are right-padded with values that change no loss;
- `fresh_accelerate_state`: accelerate keeps its state in process-wide singletons, so a run
  inside a process that already made an `Accelerator` (or a second run) starts from a clean
  state, and the caller's state is put back afterwards;
- `bind_parameters`: a copy of a module whose parameters are given tensors, so a framework's own
  optimizer construction (Lightning's `configure_optimizers`) can build the optimizer that
  verify_loop records.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import sys
import warnings
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Sequence

import torch

from gradcheck_accum.verifier.batches import tensor_leaves
from gradcheck_accum.verifier.errors import VerifyError
from gradcheck_accum.verifier.report import Report


class MicroBatchRows(torch.utils.data.Dataset):
    """Row i is the index i; `unwrap_rows` turns a loader batch [i] into micro-batch i."""

    def __init__(self, micro_batches: Sequence[Any]):
        self.micro_batches = list(micro_batches)
        self.order: list[int] = []  # indices in the order the framework's loader asked for them

    def __len__(self) -> int:
        return len(self.micro_batches)

    def __getitem__(self, index: int) -> int:
        return index

    def unwrap_rows(self, rows: Sequence[int]) -> Any:
        if len(rows) != 1:
            raise VerifyError(f"the framework's data loader batched {len(rows)} micro-batches together; "
                              "the adapter needs a batch size of 1 over its micro-batch rows")
        self.order.append(int(rows[0]))
        return self.micro_batches[int(rows[0])]

    def check_order(self, framework: str) -> None:
        fed = self.order[: len(self.micro_batches)]
        if fed != list(range(len(fed))):
            raise VerifyError(f"{framework} fed the micro-batches out of order ({fed[:8]}...): the check needs "
                              "them in order (a sequential sampler)")


def pad_to_common_length(micro_batches: Sequence[Mapping[str, Any]], pad_values: Mapping[str, int],
                         default: int = 0) -> tuple[list[dict[str, Any]], str]:
    """Right-pad the dim-1 of every 2-d+ tensor entry to the longest micro-batch's length.

    pad_values: the value per key that changes no loss (labels -> -100, attention_mask -> 0,
    input_ids -> the pad token). Returns the micro-batches and a note ("" when nothing changed).
    """
    batches = [dict(mb) for mb in micro_batches]
    padded: dict[str, int] = {}
    for key in batches[0]:
        tensors = [mb.get(key) for mb in batches]
        if not all(isinstance(t, torch.Tensor) and t.dim() >= 2 for t in tensors):
            continue
        longest = max(t.shape[1] for t in tensors)
        if all(t.shape[1] == longest for t in tensors):
            continue
        value = pad_values.get(key, default)
        for mb, t in zip(batches, tensors):
            if t.shape[1] < longest:
                tail = t.new_full((t.shape[0], longest - t.shape[1], *t.shape[2:]), value)
                mb[key] = torch.cat([t, tail], dim=1)
        padded[key] = longest
    if not padded:
        return batches, ""
    keys = ", ".join(f"{k} ({pad_values.get(k, default)})" for k in padded)
    return batches, (f"micro-batches right-padded to a common length of {max(padded.values())} so a window "
                     f"concatenates into one batch: {keys}")


def as_plain_batch(batch: Any) -> Any:
    """A collator's output (BatchEncoding, a dict subclass holding tensors) as a plain dict."""
    if isinstance(batch, Mapping):
        return {k: v for k, v in batch.items()}
    return batch


def check_micro_batches(micro_batches: Any, framework: str) -> list[Any]:
    if isinstance(micro_batches, (torch.Tensor, dict)) or not isinstance(micro_batches, Sequence) or not micro_batches:
        raise VerifyError(f"micro_batches must be a non-empty list of the batches {framework} would feed the model")
    for i, mb in enumerate(micro_batches):
        if not tensor_leaves(mb):
            raise VerifyError(f"micro-batch {i} holds no tensor with a batch dimension")
    return list(micro_batches)


@contextmanager
def fresh_accelerate_state() -> Iterator[None]:
    """Run with accelerate's process-wide state empty, then restore what was there.

    `PartialState`, `AcceleratorState` and `GradientState` share one dict per class across all
    instances (accelerate/state.py); an `Accelerator` made earlier in the process, with another
    `gradient_accumulation_steps`, would otherwise configure the one made by the framework.
    """
    if "accelerate" not in sys.modules:
        try:
            import accelerate.state  # noqa: F401
        except ImportError:
            yield
            return
    from accelerate.state import AcceleratorState, GradientState, PartialState

    classes = (PartialState, AcceleratorState, GradientState)
    saved = [dict(cls._shared_state) for cls in classes]
    for cls in classes:
        cls._shared_state.clear()  # in place: the attribute is a descriptor under XLA
    try:
        yield
    finally:
        for cls, state in zip(classes, saved):
            cls._shared_state.clear()
            cls._shared_state.update(state)


def bind_parameters(template: torch.nn.Module, params: Sequence[torch.nn.Parameter]) -> torch.nn.Module:
    """A deep copy of `template` whose parameters are `params` (in `named_parameters()` order),
    tied parameters included; its other state (buffers, attributes) is the template's."""
    shell = copy.deepcopy(template)
    own = [p for _, p in shell.named_parameters()]
    if len(own) != len(params):
        raise VerifyError(f"the model has {len(own)} parameters but the optimizer was given {len(params)}")
    replacement = {id(p): q for p, q in zip(own, params)}
    for module in shell.modules():
        for name, p in list(module._parameters.items()):
            if p is not None and id(p) in replacement:
                module._parameters[name] = replacement[id(p)]
    return shell


def framework_report(report: Report, framework: str, notes: Sequence[str]) -> Report:
    """verify_loop's report, saying which framework ran the loop and how it scales."""
    return dataclasses.replace(report, notes=(*report.notes, *notes),
                               settings={**report.settings, "framework": framework})


@contextmanager
def quiet(*logger_names: str) -> Iterator[None]:
    """Frameworks log their set-up (devices, defaults, tips) and warn about settings that do not
    matter to the check; the report says what does. Their loggers go to ERROR, warnings are off."""
    loggers = [logging.getLogger(name) for name in logger_names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
