"""Random numbers drawn in a run: recorded once, then replayed, so that every run being compared
sees the same draws.

Micro-batches draw different random numbers than the big batch (a different amount from the
stream, in a different order), and a float32 run draws different numbers than a float64 one with
the same seed (vectorised sampling). Left alone, either difference looks like a gradient error, or
worse, widens the rounding budget until any gradient passes. So the float64 big batch records
every draw it makes (ops tagged `nondeterministic_seeded` that really draw: dropout with p > 0,
attention with dropout_p > 0, rand*/randn*/normal/bernoulli/...), and every other run replays
them: a draw whose dim 0 is the batch gets the micro-batch's rows of the big batch's draw, a draw
that does not depend on the batch gets the same value, and a model that draws per row (m draws
of a fixed shape for each of its rows) gets the draws of its own rows. What cannot be lined up
that way (attention dropout, whose mask never leaves the kernel; a permutation; a different
number of draws) makes the check impossible, and the verdict says so and why.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode


Supply = Callable[[int, str, torch.Size], torch.Tensor]


class CannotReplay(Exception):
    """The run's draws cannot be lined up with the recorded ones; the message says why."""


@dataclass
class Draw:
    op: str                 # e.g. "randn", "native_dropout"
    value: torch.Tensor     # what was drawn (dropout: the keep mask)


@dataclass
class Draws:
    """The draws of one run, in the order they were made."""

    draws: list[Draw] = field(default_factory=list)

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(sorted({d.op for d in self.draws}))

    def __bool__(self) -> bool:
        return bool(self.draws)


# Ops that draw but whose draws cannot be handed over: the randomness stays inside a fused kernel,
# or slicing rows of the draw would not give what a smaller run draws.
_OPAQUE = {
    "_scaled_dot_product_flash_attention": "dropout inside scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention_for_cpu": "dropout inside scaled_dot_product_attention",
    "_scaled_dot_product_efficient_attention": "dropout inside scaled_dot_product_attention",
    "_scaled_dot_product_cudnn_attention": "dropout inside scaled_dot_product_attention",
    "_flash_attention_forward": "dropout inside flash attention",
    "_efficient_attention_forward": "dropout inside memory-efficient attention",
    "rrelu_with_noise": "RReLU's noise",
}
_NOT_ROW_SLICEABLE = {"randperm"}


def _arguments(func: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Every schema argument by name, defaults included (an absent dropout_p is 0, not random)."""
    values = {}
    for i, arg in enumerate(func._schema.arguments):
        if arg.name in kwargs:
            values[arg.name] = kwargs[arg.name]
        elif i < len(args):
            values[arg.name] = args[i]
        elif arg.has_default_value():
            values[arg.name] = arg.default_value
    return values


@functools.lru_cache(maxsize=None)
def _seeded(func: Any) -> bool:
    """The op may draw (read once per op: every op of a watched run asks)."""
    return torch.Tag.nondeterministic_seeded in func.tags


def draws_random(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether this call really draws: seeded ops do, except dropout with p == 0 or in eval and
    attention kernels with dropout_p == 0."""
    if not _seeded(func):
        return False
    values = _arguments(func, args, kwargs)
    if "dropout_p" in values:
        return bool(values["dropout_p"])
    if func._schema.name == "aten::native_dropout":
        return bool(values.get("p")) and values.get("train") is not False
    return True


def _op_name(func: Any) -> str:
    return func._schema.name.removeprefix("aten::")


def _drawn_value(func: Any, args: tuple, out: Any) -> torch.Tensor:
    name = _op_name(func)
    if name == "native_dropout":
        return out[1].detach().clone()
    if func._schema.is_mutable:
        return args[0].detach().clone()
    if isinstance(out, (tuple, list)):  # fused kernels (attention): kept only to count the draw
        out = out[0]
    return out.detach().clone()


class DrawMode(TorchDispatchMode):
    """Records the draws of a run (supply=None), or replays them: supply(k, op, shape) returns the
    value of the k-th draw or raises CannotReplay. `self.drawn` holds what the run drew either way;
    a failure is kept in `self.failure` (the run itself goes on with fresh draws)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Otherwise defining this class wraps __torch_dispatch__ for dynamo, importing torch._dynamo
        # (seconds); nothing runs compiled under this mode (compiled mode is not run with draws).
        return False

    def __init__(self, supply: Optional[Supply] = None) -> None:
        super().__init__()
        self.supply = supply
        self.drawn = Draws()
        self.failure: Optional[str] = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        if not _seeded(func) or not draws_random(func, args, kwargs):
            return func(*args, **kwargs)
        name = _op_name(func)
        if self.supply is None or self.failure is not None or name in _OPAQUE:
            if name in _OPAQUE and self.failure is None and self.supply is not None:
                self.failure = f"{_OPAQUE[name]} draws its own random numbers"
            out = func(*args, **kwargs)
            self.drawn.draws.append(Draw(name, _drawn_value(func, args, out)))
            return out
        try:
            value = self.supply(len(self.drawn.draws), name, _result_shape(func, args, kwargs))
        except CannotReplay as exc:
            self.failure = str(exc)
            out = func(*args, **kwargs)
            self.drawn.draws.append(Draw(name, _drawn_value(func, args, out)))
            return out
        self.drawn.draws.append(Draw(name, value))
        return _replayed(func, args, kwargs, value)


def _result_shape(func: Any, args: tuple, kwargs: dict) -> torch.Size:
    """The shape the draw will have, from the arguments, without drawing (the meta device would do it
    but imports seconds of shape machinery)."""
    name = _op_name(func)
    values = _arguments(func, args, kwargs)
    if "size" in values and values["size"] is not None:
        return torch.Size(int(n) for n in values["size"])
    if name == "randperm":
        return torch.Size([int(values["n"])])
    tensors = [v for v in values.values() if isinstance(v, torch.Tensor)]
    if name == "multinomial":
        return torch.Size([*tensors[0].shape[:-1], int(values["num_samples"])])
    if name.startswith("normal") and not func._schema.is_mutable:
        return torch.broadcast_shapes(*(t.shape for t in tensors))
    if tensors:  # in-place fills, *_like, dropout, bernoulli, poisson, gamma, ...: the input's shape
        return tensors[0].shape
    raise CannotReplay(f"{name}'s draw has no shape the check can tell in advance")


def _replayed(func: Any, args: tuple, kwargs: dict, value: torch.Tensor) -> Any:
    name = _op_name(func)
    if name == "native_dropout":
        x, p = args[0], _arguments(func, args, kwargs)["p"]
        mask = value.to(device=x.device)
        scale = 1.0 / (1.0 - p) if p < 1 else 0.0
        return x * mask.to(x.dtype) * scale, mask
    if func._schema.is_mutable:
        target = args[0]
        target.copy_(value.to(device=target.device, dtype=target.dtype))
        return target
    dtype = kwargs.get("dtype")
    if dtype is None and name.endswith("_like"):
        dtype = args[0].dtype
    if dtype is None:  # a factory without dtype makes the run's default (float64 in the float64 run)
        dtype = torch.get_default_dtype() if value.is_floating_point() else value.dtype
    device = kwargs.get("device") or (args[0].device if args and isinstance(args[0], torch.Tensor) else None)
    return value.to(device=device, dtype=dtype).clone()


def _per_row(recorded: Draws, total: int, rows: int) -> int:
    """m when the big batch drew m same-shaped draws per row and none along dim 0 (a model drawing
    row by row, e.g. from per-row generators), else 0."""
    values = recorded.draws
    if rows == total or total < 2 or len(values) % total or any(d.value.dim() and d.value.shape[0] == total
                                                                  for d in values):
        return 0
    return len(values) // total if len({tuple(d.value.shape) for d in values}) == 1 else 0


def expected_draws(recorded: Draws, start: int, stop: int, total: int) -> int:
    """How many draws rows start..stop make when the batch of `total` rows drew `recorded`."""
    per_row = _per_row(recorded, total, stop - start)
    return (stop - start) * per_row if per_row else len(recorded.draws)


def rows_supply(recorded: Draws, start: int, stop: int, total: int) -> Supply:
    """What rows start..stop of a batch of `total` rows draw, given what the whole batch drew."""
    values = recorded.draws
    rows = stop - start
    per_row = _per_row(recorded, total, rows)
    count = expected_draws(recorded, start, stop, total)

    def supply(k: int, op: str, shape: torch.Size) -> torch.Tensor:
        if k >= count:
            raise CannotReplay(f"the micro-batch makes more random draws ({op}) than its share of the big batch's "
                               f"{len(values)}")
        draw = values[start * per_row + k if per_row else k]
        if draw.op != op:
            raise CannotReplay(f"random draw {k + 1} is {op} in the micro-batch but {draw.op} in the big batch")
        if tuple(draw.value.shape) == tuple(shape):
            return draw.value
        if (draw.value.dim() and shape and draw.value.shape[0] == total and shape[0] == rows
                and tuple(draw.value.shape[1:]) == tuple(shape[1:]) and op not in _NOT_ROW_SLICEABLE):
            return draw.value[start:stop]
        raise CannotReplay(f"{op} draws shape {tuple(shape)} in a micro-batch of {rows} rows but "
                           f"{tuple(draw.value.shape)} in the big batch of {total}: its dim 0 is not the batch")

    return supply


def same_supply(recorded: Draws) -> Supply:
    """The same draws again, in the same order (the same batch in another precision)."""
    values = recorded.draws

    def supply(k: int, op: str, shape: torch.Size) -> torch.Tensor:
        if k >= len(values) or values[k].op != op or tuple(values[k].value.shape) != tuple(shape):
            raise CannotReplay(f"the big batch's random draws differ between runs ({op} at draw {k + 1})")
        return values[k].value

    return supply


def window_supply(parts: list[Draws], rows: list[int]) -> Supply:
    """What a window's micro-batches concatenated draw, given what each micro-batch drew: the k-th
    draws of the micro-batches joined along dim 0, or their common value when the draw does not
    depend on the batch and every micro-batch drew the same."""
    total = sum(rows)

    def supply(k: int, op: str, shape: torch.Size) -> torch.Tensor:
        if any(k >= len(p.draws) for p in parts):
            raise CannotReplay(f"the window's big batch makes more random draws ({op}) than its micro-batches")
        draws = [p.draws[k] for p in parts]
        if any(d.op != op for d in draws):
            raise CannotReplay(f"random draw {k + 1} is {op} in the big batch but differs in the micro-batches")
        values = [d.value for d in draws]
        if (shape and shape[0] == total and all(v.dim() and v.shape[0] == n for v, n in zip(values, rows))
                and op not in _NOT_ROW_SLICEABLE):
            joined = torch.cat([v.to(values[0].device) for v in values])
            if tuple(joined.shape) == tuple(shape):
                return joined
        if all(tuple(v.shape) == tuple(shape) for v in values) and all(torch.equal(v, values[0]) for v in values):
            return values[0]
        raise CannotReplay(f"{op} draws shape {tuple(shape)} for the window but "
                           f"{[tuple(v.shape) for v in values]} in its micro-batches, which drew different numbers")

    return supply
