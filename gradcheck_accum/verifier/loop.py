"""`verify_loop`: check the project's own training loop by running it.

The loop (`train_fn`) runs unmodified on a private copy of the model; loop_recording.py records
the gradients of every optimizer step and the weights each step leaves. Each step is then
compared with the big-batch gradient of its window: `loss_fn` on the window's micro-batches
concatenated, from the weights the window started with, in float32 and float64 (compare.py's
criterion). Around that sit the checks that only a loop can fail: the number of steps, where
the window boundaries fall, weights moving inside a window, gradients leaking between windows,
a scheduler stepped per micro-batch, and (under DDP) all-reduces per window.

What counts as correct for a last, partial window of k < N micro-batches: the common idiom
divides every micro-batch loss by N, which gives k/N of that window's mean gradient; dividing
by k gives the mean exactly. Both are accepted (the row says which); anything else fails.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Sequence, Union

import torch

from gradcheck_accum.verifier.batches import batch_size, check_finite_data, item_counts, map_batch, shard
from gradcheck_accum.verifier.compare import Tolerance, global_scale_cosine
from gradcheck_accum.verifier.draws import Draws, same_supply, window_supply
from gradcheck_accum.verifier.errors import VerifyError
from gradcheck_accum.verifier.judge import compare_rows, judge, magnitudes
from gradcheck_accum.verifier.loop_findings import (
    SYNCS,
    Finding,
    clip_findings,
    name_gradient_bug,
    rank_findings,
    schedule_findings,
    sync_findings,
    windows_of,
)
from gradcheck_accum.verifier.loop_recording import Grads, Recording, record_loop
from gradcheck_accum.verifier.prepare import PreparedModel, exact_numerics, prepare, resolve_device, resolve_dtype
from gradcheck_accum.verifier.reference import BigBatch, Reference
from gradcheck_accum.verifier.report import ModeResult, Report, Row


def verify_loop(
    train_fn: Callable,
    model: Any,
    micro_batches: Sequence[Any],
    loss_fn: Callable,
    accumulation_steps: int = 4,
    optimizer: Optional[Callable] = None,
    *,
    world_size: int = 1,
    device: Optional[str] = None,
    dtype: Any = None,
    timeout: float = 120.0,
    start_method: Optional[str] = None,
    find_unused_parameters: bool = False,
    freeze_batchnorm: bool = False,
    seed: int = 0,
    item_counts_fn: Optional[Callable[[Any], int]] = None,
    parallel: str = "ddp",
) -> Report:
    """Run ``train_fn(model, optimizer, micro_batches, accumulation_steps)`` and check every step.

    model: nn.Module (never modified) or zero-argument factory. loss_fn(model, batch) -> scalar:
    the reference loss of a whole window, i.e. the mean over the window's items. optimizer:
    factory(params) -> torch.optim.Optimizer, default SGD(lr=0.1). world_size > 1 runs the loop
    in that many processes under DistributedDataParallel, or FSDP2 ``fully_shard`` with
    parallel="fsdp" (each micro-batch split evenly across the ranks), and compares the averaged
    gradients with the single-process big batch.
    freeze_batchnorm: keep BatchNorm layers on running statistics (eval) even when train_fn
    calls model.train(), so the rest of the loop can be checked exactly (without it, a loop that
    BatchNorm makes 'inherent' runs again frozen, so a bug under BatchNorm is still named).
    seed: random ops in train_fn and in the references start from this seed. item_counts_fn(micro_batch) -> int: how
    many items loss_fn averages over in a micro-batch (e.g. label tokens != -100; default its
    rows); a failing step's micro-batch weights are judged against these counts (mean-of-means,
    a divisor that counts other items).
    """
    steps = _check_args(train_fn, micro_batches, loss_fn, accumulation_steps, world_size)
    if parallel not in SYNCS:
        raise VerifyError(f"parallel must be one of {', '.join(map(repr, SYNCS))}, got {parallel!r}")
    def checked(freeze: bool) -> tuple[LoopRun, LoopOutcome]:
        run = LoopRun.prepare(model, micro_batches, device=device, dtype=dtype, world_size=world_size,
                              freeze_batchnorm=freeze)
        return run, run.check(train_fn, loss_fn, steps, optimizer, world_size=world_size, timeout=timeout,
                              start_method=start_method, find_unused_parameters=find_unused_parameters, seed=seed,
                              item_counts_fn=item_counts_fn, parallel=parallel)

    run, outcome = checked(freeze_batchnorm)
    if outcome.verdict == "inherent" and run.prepared.batch_stat_layers and run.prepared.batch_stats_freezable():
        # BatchNorm hides whatever else is wrong: check the loop again with it frozen, as verify does.
        frozen_run, frozen = checked(True)
        run, outcome = (frozen_run, frozen) if frozen.verdict == "mismatch" else (run, outcome)
        outcome = _with_batchnorm_frozen(outcome, frozen, run.prepared)
    diagnosis = outcome.diagnosis
    if world_size > 1 and outcome.verdict == "match":
        diagnosis = f"on {world_size} {SYNCS[parallel].wrapper} ranks, " + diagnosis
    return Report(outcome.verdict, diagnosis, outcome.rows, outcome.modes, run.notes + outcome.notes,
                  {**outcome.settings, **run.settings(world_size)})


def _with_batchnorm_frozen(outcome: LoopOutcome, frozen: LoopOutcome, prepared: PreparedModel) -> LoopOutcome:
    """The verdict once the loop ran again with BatchNorm frozen: a bug that pass names is the
    verdict; a match there leaves BatchNorm as the only cause."""
    if frozen.verdict == "mismatch":
        layers = ", ".join(prepared.frozen_batch_stat_layers)
        return replace(frozen, diagnosis=f"{frozen.diagnosis} (found with BatchNorm frozen: batch-statistic layers "
                                         f"({layers}) normalise each micro-batch with its own statistics)")
    if frozen.verdict == "match":
        return replace(outcome, diagnosis=f"{outcome.diagnosis}; with BatchNorm frozen the rest of the loop matches")
    return outcome


@dataclass(frozen=True)
class LoopOutcome:
    """What checking one recorded loop found, before it becomes a Report."""

    verdict: str
    diagnosis: str
    rows: list[Row]
    modes: list[ModeResult]
    notes: list[str]
    settings: dict[str, Any]
    random_ops: tuple[str, ...] = ()  # what the windows' big batches drew (the loss's random ops)


@dataclass
class LoopRun:
    """The prepared model and micro-batches a loop check runs on (verify_loop, and verify with
    world_size > 1)."""

    prepared: PreparedModel
    micro_batches: list[Any]
    sizes: list[int]
    device: str
    notes: list[str]

    @classmethod
    def prepare(cls, model: Any, micro_batches: Sequence[Any], *, device: Any, dtype: Any, world_size: int,
                freeze_batchnorm: bool) -> "LoopRun":
        micro_batches = list(micro_batches)
        sizes = [batch_size(mb) for mb in micro_batches]
        check_finite_data(micro_batches)
        prepared = prepare(model, freeze_batchnorm=freeze_batchnorm)
        _keep_frozen_layers_in_eval(prepared)
        if device is None and world_size > 1 and torch.cuda.device_count() < world_size:
            device = "cpu"  # one process per GPU: too few GPUs, so the ranks share the CPU (gloo)
        device = str(resolve_device(device))
        if dtype is not None:
            low = resolve_dtype(dtype)
            prepared.module.to(low)
            micro_batches = [map_batch(mb, lambda t: t.to(low) if t.is_floating_point() else t)
                             for mb in micro_batches]
        return cls(prepared, micro_batches, sizes, device, _model_notes(prepared))

    @property
    def dtype(self) -> torch.dtype:
        return next(self.prepared.module.parameters()).dtype

    def settings(self, world_size: int) -> dict[str, Any]:
        return {"world_size": world_size, "device": self.device, "dtype": str(self.dtype).removeprefix("torch.")}

    def check(self, train_fn: Callable, loss_fn: Callable, steps: int, optimizer: Optional[Callable], *,
              world_size: int, timeout: float, start_method: Optional[str], find_unused_parameters: bool,
              seed: int, compile_backend: Any = None, where: Callable[[int], str] = lambda j: f"step {j}",
              mode: Optional[str] = None, item_counts_fn: Optional[Callable[[Any], int]] = None,
              check_remainder: bool = True, parallel: str = "ddp") -> LoopOutcome:
        """Run train_fn (under DDP when world_size > 1, compiled when compile_backend is given) and
        judge every step. where(j) names step j in sentences; mode, when given, labels every row;
        item_counts_fn(micro_batch) -> items it holds (default: rows); check_remainder: say when the
        micro-batches cannot show a dropped remainder."""
        module = self.prepared.module
        ranks: list[Recording] = []
        with exact_numerics():
            if world_size > 1:
                from gradcheck_accum.verifier.distributed import record_loop_distributed

                ranks = record_loop_distributed(
                    train_fn, module, self.micro_batches, steps, optimizer, world_size=world_size,
                    device=self.device, timeout=timeout, start_method=start_method,
                    find_unused_parameters=find_unused_parameters, seed=seed, compile_backend=compile_backend,
                    parallel=parallel,
                )
                recording = ranks[0]
            else:
                recording = self._record(train_fn, steps, optimizer, seed)
            module.train(recording.training)  # references run in the mode the loop left the model in
            batch_stats = bool(self.prepared.batch_stat_layers) and recording.training
            big = BigBatch(self.prepared, loss_fn, device=torch.device(self.device), dtype=self.dtype, seed=seed)
            judge_loop = functools.partial(analyse, big=big, micro_batches=self.micro_batches, steps_n=steps,
                                           ranks=ranks, world_size=world_size, batch_stats=batch_stats, where=where,
                                           mode=mode, check_remainder=check_remainder,
                                           item_counts_fn=item_counts_fn, parallel=parallel)
            outcome = judge_loop(recording)
            if outcome.random_ops and world_size == 1 and outcome.verdict != "match":
                # The loss draws random numbers: run the loop again recording its draws, so each
                # window's big batch is given the draws its micro-batches made.
                recording = self._record(train_fn, steps, optimizer, seed, record_draws=True)
                outcome = judge_loop(recording, loop_draws=draws_per_micro_batch(recording, len(self.micro_batches)))
            return outcome

    def _record(self, train_fn: Callable, steps: int, optimizer: Optional[Callable], seed: int,
                record_draws: bool = False) -> Recording:
        run_copy = copy.deepcopy(self.prepared.module).to(self.device)
        on_device = [map_batch(mb, lambda t: t.to(self.device)) for mb in self.micro_batches]
        return record_loop(train_fn, run_copy, on_device, steps, optimizer, seed=seed, record_draws=record_draws)


def draws_per_micro_batch(recording: Recording, total: int) -> Union[list[Draws], str]:
    """The loop's random draws, micro-batch by micro-batch: each made the same number of draws (as a
    loss drawing per call does), so they split evenly in the order made; else why not."""
    made = recording.draws.draws if recording.draws else []
    if recording.forwards != total or len(made) % total:
        return (f"the loop made {len(made)} random draw(s) over {recording.forwards} forward(s) of {total} "
                "micro-batches, not the same number for each, so they cannot be given to the windows' big batches")
    each = len(made) // total
    return [Draws(made[i * each:(i + 1) * each]) for i in range(total)]


def _counted(item_counts_fn: Callable[[Any], int], micro_batches: Sequence[Any]) -> list[int]:
    try:
        return [int(item_counts_fn(mb)) for mb in micro_batches]
    except Exception as exc:  # the user's function: one line
        raise VerifyError(f"item_counts_fn raised {type(exc).__name__}: {exc}") from None


def _check_args(train_fn, micro_batches, loss_fn, steps, world_size) -> int:
    if not callable(train_fn):
        raise VerifyError("train_fn must be callable as train_fn(model, optimizer, micro_batches, accumulation_steps)")
    if not callable(loss_fn):
        raise VerifyError("loss_fn must be callable as loss_fn(model, batch) -> scalar tensor")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise VerifyError(f"accumulation_steps must be a positive integer, got {steps!r}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise VerifyError(f"world_size must be a positive integer, got {world_size!r}")
    if isinstance(micro_batches, (torch.Tensor, dict)) or not isinstance(micro_batches, Sequence) or not micro_batches:
        raise VerifyError("micro_batches must be a non-empty list of micro-batches")
    return steps


def _stay_in_eval(layer: torch.nn.Module, _args: Any) -> None:
    layer.training = False


def _keep_frozen_layers_in_eval(prepared: PreparedModel) -> None:
    """train_fn usually calls model.train(), which would unfreeze them: a forward pre-hook (a
    module-level function, so it survives deepcopy and pickling) puts them back before each use."""
    for layer in prepared.module.modules():
        if isinstance(layer, torch.nn.modules.batchnorm._BatchNorm) and not layer.training:
            layer.register_forward_pre_hook(_stay_in_eval)


def _model_notes(prepared: PreparedModel) -> list[str]:
    notes = []
    if prepared.dropout_layers:
        notes.append(f"dropout switched off for the check: {', '.join(prepared.dropout_layers)}")
    if prepared.batch_stat_layers:
        notes.append(f"batch-statistic layers in training mode: {', '.join(prepared.batch_stat_layers)}")
    return notes


def concat_batches(batches: Sequence[Any]) -> Any:
    """Inverse of splitting: concatenate tensor leaves along dim 0; other leaves come from the first."""
    first = batches[0]
    if isinstance(first, dict):
        joined = {key: concat_batches([b[key] for b in batches]) for key in first}
        return joined if type(first) is dict else type(first)(joined)
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(concat_batches([b[i] for b in batches]) for i in range(len(first))))
    if isinstance(first, (tuple, list)):
        return type(first)(concat_batches([b[i] for b in batches]) for i in range(len(first)))
    if isinstance(first, torch.Tensor) and first.dim() > 0:
        return torch.cat(list(batches), dim=0)
    return first


def analyse(
    recording: Recording,
    big: BigBatch,
    micro_batches: list[Any],
    steps_n: int,
    *,
    ranks: Sequence[Recording] = (),
    world_size: int = 1,
    batch_stats: bool = False,
    where: Callable[[int], str] = lambda j: f"step {j}",
    mode: Optional[str] = None,
    check_remainder: bool = True,
    item_counts_fn: Optional[Callable[[Any], int]] = None,
    parallel: str = "ddp",
    loop_draws: Union[None, list[Draws], str] = None,
) -> LoopOutcome:
    """Judge every step of a recorded loop against its window's big batch. loop_draws: the random
    draws the loop made per micro-batch (draws_per_micro_batch), given to the big batches; or why
    they cannot be."""
    total = len(micro_batches)
    windows, findings, notes = windows_of(recording, total, steps_n, check_remainder=check_remainder)
    if recording.moved_before:
        findings.append(Finding("moved-inside-window", "parameters changed inside an accumulation window without "
                                f"an optimizer step (before micro-batch {recording.moved_before[0]})"))
    shapes = {n: tuple(p.shape) for n, p in big.prepared.module.named_parameters()}
    tol = Tolerance.for_dtype(big.dtype)
    rows: list[Row] = []
    modes: list[ModeResult] = []
    grad_findings: list[Finding] = []
    uncheckable: Optional[str] = None
    if isinstance(loop_draws, str):
        uncheckable, loop_draws = f"the check cannot be made: {loop_draws}; pass the noise in the batch", None
    random_ops: set[str] = set()
    for j, ((a, b), step) in enumerate(zip(windows, recording.steps)):
        if a == b:
            continue
        weights = recording.start if j == 0 else recording.after_step[j - 1]
        window = micro_batches[a:b]
        try:
            whole = concat_batches(window)
        except RuntimeError as exc:
            raise VerifyError(f"micro-batches {a}..{b - 1} cannot be concatenated into one window batch "
                              f"(the reference needs it): {str(exc).splitlines()[0]}") from None
        supply = None if loop_draws is None else window_supply(loop_draws[a:b], [batch_size(mb) for mb in window])
        reference = big.reference(whole, weights, supply)
        random_ops.update(reference.random_ops)
        if all(g is None for g in reference.baseline.grads.values()):
            raise VerifyError("no parameter received a gradient from loss_fn on the window: does loss_fn use the model?")
        # Under DDP each rank's shard of a micro-batch is weighed on its own (a per-rank mean is one).
        parts = [piece for i, mb in enumerate(window) for piece in (shard(mb, world_size, a + i) if world_size > 1 else [mb])]
        part_rows = [batch_size(piece) for piece in parts]
        supplies = [None] * len(parts) if loop_draws is None else [same_supply(d) for d in loop_draws[a:b]]
        per_part = _Lazy(lambda parts=parts, weights=weights, reference=reference, supplies=supplies:
                         [big.exact(piece, weights, supply) for piece, supply in zip(parts, supplies)]
                         if len(parts) > 1 else [reference.exact])
        label = mode or where(j + 1)
        # The accumulated gradient as the loop made it: before clipping when the loop clipped.
        candidate = step.clips[-1].grads if step.clips else step.grads

        def judged(grads: Grads, note: str = "", factor: float = 1.0, reference=reference, per_part=per_part,
                   part_rows=part_rows, label=label, count=len(window)) -> list[Row]:
            def rows_now(partial: bool = False) -> list[Row]:
                # The size of what was summed bounds the rounding of a small sum; it costs a float64
                # backward per micro-batch, so it joins the evidence with the measured budget.
                magnitude = None
                if reference.exact is not None:
                    shares = [n / sum(part_rows) for n in part_rows]
                    magnitude = magnitudes([_scaled(c, s) for c, s in zip(per_part(), shares)], list(shapes))
                scaled = grads if factor == 1.0 else _scaled(grads, 1 / factor)
                return compare_rows(label, scaled, reference, tol, shapes, magnitude=magnitude, steps=count, note=note,
                                    until_failure=partial)
            return judge(rows_now, reference)

        step_rows = judged(candidate)
        partial = b == total and len(window) < steps_n and len(window) == total % steps_n
        if partial and not all(r.ok for r in step_rows):
            factor = len(window) / steps_n
            row_note = f"last window of {len(window)}/{steps_n} micro-batches, divided by {steps_n}"
            scaled_rows = judged(candidate, row_note, factor)
            if all(r.ok for r in scaled_rows):
                step_rows = scaled_rows
                notes.append(f"{where(j + 1)}: {row_note}, gives {len(window)}/{steps_n} of its mean gradient "
                             "(accepted)")
        rows += step_rows
        ok = all(r.ok for r in step_rows)
        uncheckable = uncheckable or _cannot_compare(reference, big.dtype, ok, replayed=loop_draws is not None)
        scale, cosine = global_scale_cosine(candidate, reference.best)
        clipping, clipped = clip_findings(where(j + 1), step, reference.best, shapes, ok, tol.eps)
        diagnosis, fitted = "", None
        if not ok and not any(f.error for f in clipping):
            previous = recording.steps[j - 1].grads if j > 0 else None
            counts = _counts(parts, item_counts_fn)
            finding, fitted = name_gradient_bug(where(j + 1), candidate, per_part(), reference.exact, previous,
                                                shapes, counts, tol.eps, len(window))
            grad_findings.append(finding)
            diagnosis = finding.sentence
        grad_findings += [f for f in clipping if f.error]
        findings += [f for f in clipping if not f.error]
        diagnosis = diagnosis or next((f.sentence for f in clipping), "")
        lr = "lr " + ", ".join(f"{v:.4g}" for v in step.lrs) + (f"; {clipped}" if clipped else "")
        modes.append(ModeResult(mode=label, ok=ok and not any(f.error for f in clipping), scale=scale, cosine=cosine,
                                weights=fitted, diagnosis=diagnosis or lr))
    # One named gradient cause is enough; the per-step table keeps the rest.
    if grad_findings:
        findings.append(grad_findings[0])
    # Per-micro-batch observations (learning rate, all-reduces) are indexed by forward call, so
    # they map onto windows only when the loop ran the model once per micro-batch.
    aligned = recording.forwards == total
    findings += schedule_findings(recording, windows, per_micro_batch=aligned)
    per_window: list[int] = []
    if ranks:
        findings = rank_findings(list(ranks)) + findings
    sync = SYNCS[parallel]
    if recording.final_syncs is not None and aligned:
        found, per_window = sync_findings(recording, windows, steps_n, parallel)
        findings = [f for f in found if f.error] + findings + [f for f in found if not f.error]
        notes.append(f"{sync.wrapper} {sync.collective}s per window (micro-batches that synchronised): {per_window}")
    settings: dict[str, Any] = {
        "accumulation_steps": steps_n,
        "micro_batches": total,
        "optimizer_steps": len(recording.steps),
        "expected_steps": -(-total // steps_n),
        "findings": [f.kind for f in findings],
        "learning_rates": [list(s.lrs) for s in recording.steps],
        f"{sync.key}_per_window": per_window,
    }
    if recording.final_syncs is not None:
        calls = [s.syncs for s in recording.steps]
        settings[f"{sync.key[:-1]}_calls_per_window"] = [b - a for a, b in zip([0] + calls, calls)]
    if uncheckable and not any(f.error and f.kind != "grad-mismatch" for f in findings):
        return LoopOutcome("uncheckable", uncheckable, rows, modes, [f.sentence for f in findings] + notes, settings,
                           tuple(sorted(random_ops)))
    verdict, diagnosis = _verdict(findings, batch_stats, len(recording.steps), total, steps_n)
    extra = [f.sentence for f in findings if f.sentence != diagnosis and not diagnosis.endswith(f.sentence)]
    if loop_draws is not None and random_ops:
        extra.append(f"random draws ({', '.join(sorted(random_ops))}) the loop made recorded and given to each "
                     "window's big batch")
    return LoopOutcome(verdict, diagnosis, rows, modes, extra + notes, settings, tuple(sorted(random_ops)))


def _counts(parts: list[Any], item_counts_fn: Optional[Callable[[Any], int]]) -> dict[str, list[int]]:
    counts = item_counts(parts)
    if item_counts_fn is not None:
        counts = {"items": _counted(item_counts_fn, parts), **counts}
    return counts


def _cannot_compare(reference: Reference, dtype: torch.dtype, ok: bool, replayed: bool = False) -> Optional[str]:
    """Why a step cannot be judged: the window's big batch draws random numbers, which the loop drew
    differently (a mismatch then says nothing), or its float32 and float64 runs are not the same
    computation (a budget that wide would let anything pass)."""
    if reference.draw_failure:
        return f"the check cannot be made: {reference.draw_failure}"
    if reference.random_ops and not ok and not replayed:
        return (f"the check cannot be made: the loss draws random numbers ({', '.join(reference.random_ops)}), and "
                "the loop drew them per micro-batch, not as the window's big batch does; pass the noise in the batch "
                "(or switch the op off for the check)")
    error = reference.baseline_error()
    if error > (1e-2 if dtype == torch.float32 else 0.3):
        return (f"the check cannot be made: the window's big batch in {str(dtype).removeprefix('torch.')} and in "
                f"float64 differ by {error:.3g} (relative), far beyond rounding (random draws the check does not "
                "see, or state that changes between runs)")
    return None


class _Lazy:
    """A value computed on first use (per-micro-batch float64 gradients: a backward each)."""

    def __init__(self, compute: Callable[[], Any]) -> None:
        self.compute = compute
        self.value: Any = None
        self.done = False

    def __call__(self) -> Any:
        if not self.done:
            self.value, self.done = self.compute(), True
        return self.value


def _scaled(grads: Grads, factor: float) -> Grads:
    return {n: (None if g is None else g * factor) for n, g in grads.items()}


def _verdict(findings: list[Finding], batch_stats: bool, steps: int, total: int, steps_n: int) -> tuple[str, str]:
    errors = [f for f in findings if f.error]
    warnings = [f for f in findings if not f.error]
    if errors:
        if batch_stats and all(f.kind == "grad-mismatch" for f in errors):
            return "inherent", ("batch-statistic layers (BatchNorm) in training mode couple the items of a batch, "
                                "so accumulation cannot reproduce the big batch: " + errors[0].sentence)
        return "mismatch", errors[0].sentence
    diagnosis = (f"every optimizer step used its window's big-batch gradient ({steps} step(s) for {total} "
                 f"micro-batch(es), windows of {steps_n})")
    if warnings:
        diagnosis = "gradients match, but " + warnings[0].sentence
    return "match", diagnosis
