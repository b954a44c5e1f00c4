"""Running backward over a window of micro-batches, eagerly or compiled, and capturing what each
micro-batch contributed.

A contribution is what one micro-batch's backward writes into `.grad`: the running sum is set
aside for it and added back as autograd would have (in place, in the parameter's precision), so
the window's gradient is the one a training loop gets, and nothing is copied. If loss_fn clears
gradients (a `zero_grad()` inside the user's loss code), the running sum it left is the one kept,
so the final gradient holds only the later contributions and the diagnosis can say so.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import torch
from torch import nn

from gradcheck_accum.verifier.batches import map_batch
from gradcheck_accum.verifier.draws import DrawMode, Draws, Supply
from gradcheck_accum.verifier.errors import VerifyError

Grads = dict[str, Optional[torch.Tensor]]
LossFn = Callable[[nn.Module, Any], torch.Tensor]


@dataclass
class WindowRun:
    grads: Grads
    contributions: list[Grads] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    cleared_before: list[int] = field(default_factory=list)  # micro-batches whose loss_fn changed .grad
    seconds: float = 0.0
    draws: list[Draws] = field(default_factory=list)  # random draws per micro-batch, when watched
    draw_failure: Optional[str] = None  # why the given draws could not be replayed
    terms: tuple[str, ...] = ()  # names of loss_fn's terms, when it returns a dict of them


@dataclass
class CompileStats:
    compilations: int = 0
    recompilations: int = 0
    graph_breaks: int = 0
    fallback_wrapper: bool = False


def trainable_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    return [(n, p) for n, p in _unwrap(model).named_parameters() if p.requires_grad]


def _unwrap(model: nn.Module) -> nn.Module:
    return getattr(model, "_orig_mod", model)


def to_device(batch: Any, device: torch.device, dtype: torch.dtype) -> Any:
    """Floating tensors take the run's dtype; integer and bool tensors (token ids, labels, masks)
    keep theirs."""
    return map_batch(batch, lambda t: t.to(device=device, dtype=dtype) if t.is_floating_point() else t.to(device))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def call_loss(loss_fn: LossFn, model: nn.Module, micro_batch: Any, where: str) -> tuple[torch.Tensor, tuple[str, ...]]:
    """loss_fn's value as one scalar, and the names of its terms: a dict of named terms (main loss,
    auxiliary losses) is summed."""
    try:
        loss = loss_fn(model, micro_batch)
    except VerifyError:
        raise
    except Exception as exc:  # the user's code: one clear line, never a traceback
        hint = ("; floating batch tensors take the checked dtype, integer ones keep theirs"
                if "dtype" in str(exc) or "Long" in str(exc) else "")
        raise VerifyError(f"loss_fn raised {_first_line(exc)} ({where}){hint}") from None
    if isinstance(loss, Mapping):
        if not loss:
            raise VerifyError(f"loss_fn returned an empty dict of loss terms ({where})")
        terms = [_scalar(value, f"{where}, term {name!r}") for name, value in loss.items()]
        return functools.reduce(lambda a, b: a + b, terms), tuple(str(name) for name in loss)
    return _scalar(loss, where), ()


def _scalar(loss: Any, where: str) -> torch.Tensor:
    if not isinstance(loss, torch.Tensor):
        raise VerifyError(f"loss_fn must return a scalar tensor (or a dict of them), got {type(loss).__name__} "
                          f"({where})")
    if loss.numel() != 1:
        raise VerifyError(f"loss_fn must return a scalar tensor, got shape {tuple(loss.shape)} ({where})")
    if not loss.requires_grad:
        raise VerifyError(f"loss_fn returned a tensor that does not require grad ({where}): "
                          "is it computed under torch.no_grad() or from detached values?")
    return loss.reshape(())


def _divisor_value(value: Any, where: str) -> float:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise VerifyError(f"scaling must return a number, got a tensor of shape {tuple(value.shape)} ({where})")
        number = float(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        raise VerifyError(f"scaling must return a number, got {type(value).__name__} ({where})")
    if not math.isfinite(number) or number == 0:
        raise VerifyError(f"scaling returned {number} ({where}): the loss cannot be divided by it")
    return number  # a plain number: the float64 reference may live on another device


def divisors(scaling: Any, micro_batches: Sequence[Any]) -> list[Any]:
    """What the training loop divides each micro-batch's loss by."""
    if scaling == "steps":
        return [len(micro_batches)] * len(micro_batches)
    if scaling == "none" or scaling is None:
        return [1] * len(micro_batches)
    if callable(scaling):
        out = []
        for i, mb in enumerate(micro_batches):
            try:
                value = scaling(mb, list(micro_batches))
            except Exception as exc:
                raise VerifyError(f"scaling raised {_first_line(exc)} (micro-batch {i})") from None
            out.append(_divisor_value(value, f"micro-batch {i}"))
        return out
    raise VerifyError(f"scaling must be 'steps', 'none' or a callable(micro_batch, window), got {scaling!r}")


def mark_batch_dynamic(batch: Any) -> Any:
    """Tell dynamo dim 0 varies, so micro-batches reuse the big batch's graph."""
    import torch._dynamo

    def mark(t: torch.Tensor) -> torch.Tensor:
        torch._dynamo.maybe_mark_dynamic(t, 0)
        return t

    return map_batch(batch, mark)


def run_window(
    model: nn.Module,
    micro_batches: Sequence[Any],
    loss_fn: LossFn,
    divs: Sequence[Any],
    *,
    label: str,
    capture: bool = True,
    seed: int = 0,
    dynamic: bool = False,
    draws: Optional[Sequence[Optional[Supply]]] = None,
) -> WindowRun:
    """Backward over each micro-batch in turn, as an accumulating training loop does (no step),
    starting from cleared gradients. Random ops are seeded identically for every run. draws: per
    micro-batch, None to record its random draws or a supply to replay them (draws.py); absent,
    random ops run as they are, unwatched."""
    params = trainable_parameters(model)
    for _, p in params:
        p.grad = None
    run = WindowRun(grads={})
    owned: dict[str, torch.Tensor] = {}  # running sums this function allocated (safe to add into)
    start = time.perf_counter()
    with seeded(seed):
        for i, mb in enumerate(micro_batches):
            where = f"{label}, micro-batch {i + 1} of {len(micro_batches)}" if len(micro_batches) > 1 else label
            if dynamic:
                mb = mark_batch_dynamic(mb)
            watch = DrawMode(draws[i]) if draws is not None else contextlib.nullcontext()
            with watch:
                held = [(p.grad, None if p.grad is None else p.grad._version) for _, p in params]
                loss, run.terms = call_loss(loss_fn, model, mb, where)
                if capture:
                    # loss_fn cleared or changed .grad (a zero_grad() in the user's loss code): the
                    # window then holds only what comes after, as the training loop's would.
                    if any(p.grad is not g or (g is not None and g._version != v) for (_, p), (g, v) in zip(params, held)):
                        run.cleared_before.append(i)
                    held = [(p.grad, p.grad is not None and owned.get(name) is p.grad) for name, p in params]
                    for _, p in params:
                        p.grad = None  # backward writes this micro-batch's contribution alone
                scaled = loss / divs[i]
                run.losses.append(float(scaled.detach()))
                try:
                    scaled.backward()
                except Exception as exc:
                    raise VerifyError(f"backward failed: {_first_line(exc)} ({where})") from None
                if capture:
                    run.contributions.append(_accumulate(params, held, owned))
            if draws is not None:
                run.draws.append(watch.drawn)
                if watch.failure and run.draw_failure is None:
                    run.draw_failure = f"{watch.failure} ({where})"
    run.seconds = time.perf_counter() - start
    run.grads = {name: _dense(p.grad) for name, p in params}
    return run


def _accumulate(params: Sequence[tuple[str, nn.Parameter]], held: Sequence[tuple[Any, bool]],
                owned: dict[str, torch.Tensor]) -> Grads:
    """Take the contribution backward just wrote into each .grad and put the running sum back, adding
    as autograd would have (in the parameter's precision), so the result is the same. owned: the
    running sums allocated here, the only tensors added into in place (others are contributions)."""
    contribution: Grads = {}
    for (name, p), (before, ours) in zip(params, held):
        c = p.grad
        contribution[name] = _dense(c)
        if before is None or c is None:
            p.grad = c if before is None else before
            owned.pop(name, None)
        elif ours:
            p.grad = before.add_(c)
        else:  # `before` is an earlier contribution (or the user's): sum into a tensor of our own
            p.grad = owned[name] = before + c
    return contribution


def _dense(g: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """Sparse embedding gradients densified, so every later step works on plain tensors."""
    if g is None:
        return None
    return g.detach().to_dense() if g.layout != torch.strided else g.detach()


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Random ops start from `seed` inside; the caller's random state is restored afterwards."""
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        _seed(seed)
        yield


def _seed(seed: int) -> None:
    if torch.cuda.is_initialized():
        torch.manual_seed(seed)
        return
    # Nothing has run on CUDA: torch.manual_seed would queue a CUDA seed for later, capturing a
    # stack trace each time (milliseconds per run); the CPU generator (and MPS's) is all a run uses.
    torch.random.default_generator.manual_seed(seed)
    if torch.backends.mps.is_available():
        torch.mps.manual_seed(seed)


class CountingBackend:
    """A torch.compile backend that counts the graphs dynamo hands to the real backend."""

    def __init__(self, backend: Any) -> None:
        from torch._dynamo.backends.registry import lookup_backend

        self.inner = lookup_backend(backend) if isinstance(backend, str) else backend
        self.graphs = 0

    def __call__(self, gm: Any, example_inputs: Any) -> Any:
        self.graphs += 1
        return self.inner(gm, example_inputs)


def compiled_runs(
    model: nn.Module,
    big_batch: Any,
    micro_batches: Sequence[Any],
    loss_fn: LossFn,
    reference_loss_fn: LossFn,
    divs: Sequence[Any],
    reference_div: Any,
    *,
    backend: Any = "inductor",
    seed: int = 0,
) -> tuple[WindowRun, WindowRun, CompileStats]:
    """Compile `model` in place (weights already set), run the big batch, then the window, on the
    same compiled module: the window's extra graphs are the recompilations."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    counting = CountingBackend(backend)
    stats = CompileStats()
    try:
        model.compile(backend=counting)
        big = run_window(model, [big_batch], reference_loss_fn, [reference_div], label="compiled big batch",
                         capture=False, seed=seed, dynamic=True)
        if counting.graphs == 0:
            # Module.compile traces nothing when forward lives in torch.nn itself (a bare
            # nn.Sequential): wrap instead so the compiled path is really exercised.
            stats.fallback_wrapper = True
            model = torch.compile(_unwrap(model), backend=counting)
            big = run_window(model, [big_batch], reference_loss_fn, [reference_div], label="compiled big batch",
                             capture=False, seed=seed, dynamic=True)
        after_big = counting.graphs
        window = run_window(model, micro_batches, loss_fn, divs, label="compiled", seed=seed, dynamic=True)
    except VerifyError:
        raise
    except Exception as exc:
        raise VerifyError(f"compiled mode failed: {_first_line(exc)} (pass modes=('eager',) to skip it)") from None
    finally:
        stats.compilations = counting.graphs
        stats.graph_breaks = int(sum(counters["graph_break"].values()))
        torch._dynamo.reset()
    stats.recompilations = stats.compilations - after_big
    return big, window, stats
