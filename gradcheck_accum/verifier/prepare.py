"""Getting a model ready for the check without touching the caller's: copy it, switch dropout
off, find (and optionally freeze) layers whose output depends on the whole batch, and pin the
numerics (TF32 off) for the duration of the check."""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Union

import torch
from torch import nn

from gradcheck_accum.verifier.errors import VerifyError

ModelLike = Union[nn.Module, Callable[[], nn.Module]]


@dataclass
class PreparedModel:
    """A private copy of the model, in the caller's train/eval state, ready to be copied per run."""

    module: nn.Module
    batch_stat_layers: list[str] = field(default_factory=list)
    frozen_batch_stat_layers: list[str] = field(default_factory=list)
    dropout_layers: list[str] = field(default_factory=list)
    frozen_parameters: list[str] = field(default_factory=list)
    unwrapped: list[str] = field(default_factory=list)  # wrappers removed: OptimizedModule, DDP
    _working: nn.Module | None = field(default=None, repr=False)
    # In place (prepare(in_place=True)): `module` is itself the working copy; each run gets the
    # tensors of `_source` (the model given, which the check never writes to) written back and the
    # train/eval flags `module` was prepared with.
    _source: nn.Module | None = field(default=None, repr=False)
    _freeze_batchnorm: bool = field(default=False, repr=False)
    _modes: list[bool] = field(default_factory=list, repr=False)
    _handed_out: bool = field(default=False, repr=False)

    def copy(self, device: torch.device, dtype: torch.dtype, *, fresh: bool = False) -> nn.Module:
        """A module in the prepared state, on `device` in `dtype`, for one run.

        Runs take turns on one working copy: each gets it with the prepared parameters and buffers
        written back (undoing the last run's updates, running statistics included) and converted,
        which costs a fraction of a deep copy of a many-module model. `fresh`: an independent copy
        (compiled mode compiles it in place).
        """
        if self._source is not None:
            working = self._in_place(device, dtype)
            return (copy.deepcopy(working) if fresh else working).to(device=device, dtype=dtype)
        if fresh:
            return copy.deepcopy(self.module).to(device=device, dtype=dtype)
        if self._working is None or not _restore(self._working, _state(self.module), device, dtype):
            self._working = copy.deepcopy(self.module)
        _same_modes(self._working, self.module)
        return self._working.to(device=device, dtype=dtype)

    def _in_place(self, device: torch.device, dtype: torch.dtype) -> nn.Module:
        """`module` as prepared: the given model's tensors written back once a run has had it (a
        new copy of the model when its tensors no longer line up), its prepared train/eval flags."""
        if self._handed_out and not _restore(self.module, _state(self._source), device, dtype):
            self.module = _private_copy(self._source)
            _switch_off(self.module, self._freeze_batchnorm)
        for module, training in zip(self.module.modules(), self._modes):
            module.training = training
        for p in self.module.parameters():
            p.grad = None
        self._handed_out = True
        return self.module

    def trainable(self) -> list[str]:
        return [n for n, p in self.module.named_parameters() if p.requires_grad]

    def batch_stats_freezable(self) -> bool:
        """Every batch-statistic layer keeps running statistics, so eval mode can stand in for it
        (a second pass with them frozen checks the rest)."""
        return all(getattr(m, "track_running_stats", False) for m in self.module.modules()
                   if isinstance(m, nn.modules.batchnorm._BatchNorm))


def _state(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [*module.named_parameters(), *module.named_buffers()]


def _restore(module: nn.Module, pristine: list[tuple[str, torch.Tensor]], device: torch.device,
             dtype: torch.dtype) -> bool:
    """Write the pristine tensors' values into `module`, on `device` and floating ones in `dtype` (as
    the run's conversion would make them, without first writing them in their own dtype); False
    when its tensors no longer line up with them (a forward pass that registers new ones)."""
    current = _state(module)
    if [n for n, _ in current] != [n for n, _ in pristine] or any(
            t.shape != s.shape for (_, t), (_, s) in zip(current, pristine)):
        return False
    with torch.no_grad():
        for (_, t), (_, s) in zip(current, pristine):
            want = dtype if s.is_floating_point() else s.dtype
            if t.dtype == want and t.device == device:
                t.copy_(s)
            else:
                t.data = s.to(device=device, dtype=want, copy=True)
    for p in module.parameters():
        p.grad = None
    return True


def _same_modes(module: nn.Module, pristine: nn.Module) -> None:
    """train()/eval() as the prepared module is now (verify_loop sets it to the mode the loop left)."""
    for copied, original in zip(module.modules(), pristine.modules()):
        copied.training = original.training


def _is_batch_stat_layer(module: nn.Module) -> bool:
    """BatchNorm in training mode (or without running statistics) normalises with the statistics
    of whatever batch it sees, so a micro-batch is normalised differently from the big batch."""
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return module.training or not module.track_running_stats
    return False


def prepare(model: ModelLike, *, freeze_batchnorm: bool = False, in_place: bool = False) -> PreparedModel:
    """The model copied and made ready for the check. in_place: the copy is also the working copy
    every run takes in turn, its tensors written back from the model given (one deep copy instead of
    two; for checks that change nothing of the prepared module between runs, as `verify`)."""
    if not isinstance(model, nn.Module):
        if not callable(model):
            raise VerifyError(f"model must be a torch.nn.Module or a zero-argument factory, got {type(model).__name__}")
        try:
            built = model()
        except Exception as exc:  # the user's factory: report, never a traceback
            raise VerifyError(f"the model factory raised {type(exc).__name__}: {exc}") from None
        if not isinstance(built, nn.Module):
            raise VerifyError(f"the model factory returned {type(built).__name__}, not a torch.nn.Module")
        model = built
    unwrapped = []
    while True:
        # Check the plain module: a torch.compile wrapper would prefix every name with
        # `_orig_mod.` (compiled mode compiles its own copy), a DDP wrapper needs a process group.
        if isinstance(getattr(model, "_orig_mod", None), nn.Module):
            unwrapped.append(type(model).__name__)
            model = model._orig_mod
        elif type(model).__name__ in ("DistributedDataParallel", "DataParallel") and isinstance(
                getattr(model, "module", None), nn.Module):
            unwrapped.append(type(model).__name__)
            model = model.module
        else:
            break
    module = _private_copy(model)  # a factory may hand out a shared instance: never modify it
    prepared = PreparedModel(module, unwrapped=unwrapped)
    prepared.dropout_layers, prepared.batch_stat_layers, prepared.frozen_batch_stat_layers = \
        _switch_off(module, freeze_batchnorm)
    params = list(module.named_parameters())
    lazy = [n for n, p in params if isinstance(p, nn.parameter.UninitializedParameter)]
    if lazy:
        raise VerifyError(f"the model has uninitialised lazy parameters ({', '.join(lazy[:3])}): run one forward "
                          "pass before verify, so every copy starts from the same weights")
    prepared.frozen_parameters = [n for n, p in params if not p.requires_grad]
    if not params:
        raise VerifyError("the model has no parameters: there is no gradient to check")
    if not prepared.trainable():
        raise VerifyError("every parameter of the model has requires_grad=False: there is no gradient to check")
    if in_place:
        prepared._source, prepared._freeze_batchnorm = model, freeze_batchnorm
        prepared._modes = [m.training for m in module.modules()]
    return prepared


def _private_copy(model: nn.Module) -> nn.Module:
    try:
        return copy.deepcopy(model)
    except Exception as exc:
        raise VerifyError(
            f"the model cannot be deep-copied ({type(exc).__name__}: {exc}); pass a zero-argument factory instead"
        ) from None


def _switch_off(module: nn.Module, freeze_batchnorm: bool) -> tuple[list[str], list[str], list[str]]:
    """Dropout off, and BatchNorm in training mode frozen when asked: the layers changed, as
    (dropout layers, batch-statistic layers left as they are, batch-statistic layers frozen)."""
    dropout, batch_stats, frozen = [], [], []
    for name, sub in module.named_modules():
        label = f"{name} ({type(sub).__name__})" if name else type(sub).__name__
        if isinstance(sub, nn.modules.dropout._DropoutNd) and sub.p > 0:
            sub.p = 0.0
            dropout.append(label)
        elif isinstance(sub, nn.MultiheadAttention) and sub.dropout > 0:
            sub.dropout = 0.0
            dropout.append(label)
        if _is_batch_stat_layer(sub):
            if freeze_batchnorm and sub.track_running_stats:
                sub.eval()
                frozen.append(label)
            else:
                batch_stats.append(label)
    return dropout, batch_stats, frozen


@contextlib.contextmanager
def exact_numerics() -> Iterator[None]:
    """TF32 matmuls and convolutions round inputs to 10 mantissa bits: the float32 baseline would
    then be far from float64 and hide real bugs. Restore the caller's settings afterwards."""
    saved = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32,
             torch.backends.cudnn.allow_tf32)
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved[0])
        torch.backends.cuda.matmul.allow_tf32 = saved[1]
        torch.backends.cudnn.allow_tf32 = saved[2]


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Model code that makes float tensors without a dtype (`torch.full(..., finfo(x.dtype).min)`,
    `torch.arange(...).float()`) gets them in the default dtype: in a float64 reference that
    default must be float64 too, or such code overflows or rounds the reference to float32."""
    saved = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(saved)


def resolve_device(device: Any) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise VerifyError(f"unknown device {device!r}: {exc}") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise VerifyError(f"device {device!r} requested but CUDA is not available")
    return resolved


_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16, "half": torch.float16}


def resolve_dtype(dtype: Any) -> torch.dtype:
    if dtype is None:
        return torch.float32
    if isinstance(dtype, str):
        key = dtype.removeprefix("torch.")
        if key not in _DTYPES:
            raise VerifyError(f"unsupported dtype {dtype!r}: use float32, bfloat16 or float16")
        return _DTYPES[key]
    if dtype in (torch.float32, torch.bfloat16, torch.float16):
        return dtype
    raise VerifyError(f"unsupported dtype {dtype!r}: use float32, bfloat16 or float16")
