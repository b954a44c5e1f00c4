"""`verify`: one big batch against N accumulated micro-batches, eager and compiled, judged
against a float64 reference."""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

import torch

from gradcheck_accum.verifier.accumulate import (
    LossFn,
    WindowRun,
    compiled_runs,
    divisors,
    run_window,
    to_device,
)
from gradcheck_accum.verifier.batches import (
    batch_size,
    check_finite_data,
    check_splits,
    even_splits,
    item_counts,
    split_batch,
)
from gradcheck_accum.verifier.compare import Tolerance, scale_cosine
from gradcheck_accum.verifier.diagnose import Diagnosis, diagnose
from gradcheck_accum.verifier.draws import Draws, Supply, expected_draws, rows_supply
from gradcheck_accum.verifier.errors import VerifyError
from gradcheck_accum.verifier.prepare import (
    ModelLike,
    PreparedModel,
    exact_numerics,
    prepare,
    resolve_device,
    resolve_dtype,
)
from gradcheck_accum.verifier.judge import Magnitudes, compare_rows, judge
from gradcheck_accum.verifier.reference import BigBatch, Reference
from gradcheck_accum.verifier.report import ModeResult, Report, Row

MODES = ("eager", "compiled")


def _scaling_label(scaling: Any) -> str:
    if isinstance(scaling, str) or scaling is None:
        return str(scaling)
    return f"callable {getattr(scaling, '__qualname__', type(scaling).__name__)}"


def verify(
    model: ModelLike,
    batch: Any,
    loss_fn: LossFn,
    accumulation_steps: int = 4,
    scaling: Any = "steps",
    reference_loss_fn: Optional[LossFn] = None,
    splits: Optional[Sequence[int]] = None,
    modes: Sequence[str] = MODES,
    device: Any = None,
    dtype: Any = None,
    *,
    freeze_batchnorm: bool = False,
    compile_backend: Any = "inductor",
    item_counts_fn: Optional[Callable[[Any], int]] = None,
    seed: int = 0,
    world_size: int = 1,
) -> Report:
    """Check that accumulating `accumulation_steps` micro-batches reproduces the big-batch gradient.

    model: nn.Module (copied, never modified) or zero-argument factory. batch: Tensor or nested
    tuple/list/dict of tensors sharing dim 0. loss_fn(model, micro_batch) -> scalar, as the loop
    computes it; scaling: what the loop divides that by ("steps": N, "none", or
    callable(micro_batch, window) -> divisor). reference_loss_fn: the intended big-batch
    objective (default loss_fn), scaled as a window of one micro-batch. splits: explicit
    micro-batch sizes (then N = len(splits)). freeze_batchnorm: put BatchNorm layers in eval mode
    (running statistics) so the rest of the model can be checked exactly. compile_backend: the
    torch.compile backend for mode "compiled". item_counts_fn(micro_batch) -> int: how many items
    a micro-batch holds, to recognise mean-of-means weighting (rows, valid labels and mask entries
    are tried by default). world_size > 1: accumulate under DistributedDataParallel in that many
    processes (gloo on CPU, NCCL on GPUs) and compare with the single-process big batch; "compiled"
    then wraps the DDP module in torch.compile(backend=compile_backend). seed: every run's random
    ops start from it.
    """
    modes = tuple(modes) if not isinstance(modes, str) else (modes,)
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise VerifyError(f"modes must be a non-empty subset of {MODES}, got {list(modes)!r}")
    if not callable(loss_fn):
        raise VerifyError(f"loss_fn must be callable(model, micro_batch), got {type(loss_fn).__name__}")
    reference_loss_fn = loss_fn if reference_loss_fn is None else reference_loss_fn
    if not callable(reference_loss_fn):
        raise VerifyError("reference_loss_fn must be callable(model, batch)")
    if scaling not in ("steps", "none", None) and not callable(scaling):
        raise VerifyError(f"scaling must be 'steps', 'none' or a callable(micro_batch, window), got {scaling!r}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise VerifyError(f"world_size must be a positive integer, got {world_size!r}")
    total = batch_size(batch)
    sizes = check_splits(splits, total) if splits is not None else even_splits(total, accumulation_steps)
    if world_size > 1:
        # DDP: the N micro-batches with no_sync, each split across world_size processes.
        from gradcheck_accum.verifier.ddp_window import verify_distributed

        return verify_distributed(model, batch, loss_fn, sizes, scaling, reference_loss_fn, modes, device, dtype,
                                  world_size=world_size, freeze_batchnorm=freeze_batchnorm, seed=seed,
                                  compile_backend=compile_backend, item_counts_fn=item_counts_fn,
                                  scaling_label=_scaling_label(scaling))
    check_finite_data(split_batch(batch, sizes))
    plan = _Plan(model, batch, loss_fn, reference_loss_fn, scaling, sizes, modes, resolve_device(device),
                 resolve_dtype(dtype), seed, compile_backend, item_counts_fn)
    started = time.perf_counter()
    first = _run_pass(plan, freeze_batchnorm=freeze_batchnorm)
    verdict, sentence, final, notes = _settle(plan, first, freeze_batchnorm)
    settings = {
        "accumulation_steps": len(sizes),
        "splits": sizes,
        "scaling": _scaling_label(scaling),
        "dtype": str(plan.dtype).removeprefix("torch."),
        "device": str(plan.device),
        "modes": list(modes),
        "compile_backend": compile_backend if isinstance(compile_backend, str) else repr(compile_backend),
        "seed": seed,
        "torch": torch.__version__,
        "tolerance": first.tol.to_dict(),
        "seconds": round(time.perf_counter() - started, 3),
    }
    if final is not first:
        settings["second_pass"] = final.label
    return Report(verdict, sentence, final.rows, final.results, notes, settings)


@dataclass(frozen=True)
class _Plan:
    """verify's arguments, validated."""

    model: ModelLike
    batch: Any
    loss_fn: LossFn
    reference_loss_fn: LossFn
    scaling: Any
    sizes: list[int]
    modes: tuple[str, ...]
    device: torch.device
    dtype: torch.dtype
    seed: int
    compile_backend: Any
    item_counts_fn: Optional[Callable[[Any], int]]

    def without_term(self, term: str) -> "_Plan":
        return dataclasses.replace(self, loss_fn=functools.partial(_drop_term, self.loss_fn, term),
                                   reference_loss_fn=functools.partial(_drop_term, self.reference_loss_fn, term))


def _drop_term(loss_fn: LossFn, term: str, model: Any, batch: Any) -> Any:
    value = loss_fn(model, batch)
    return {k: v for k, v in value.items() if k != term} if isinstance(value, Mapping) else value


@dataclass
class _Pass:
    """One run of the check: the reference, the accumulated runs and what was judged of them."""

    label: str
    prepared: PreparedModel
    reference: Reference
    tol: Tolerance
    rows: list[Row]
    results: list[ModeResult]
    diagnoses: dict[str, Diagnosis]
    notes: list[str]
    terms: tuple[str, ...]   # the loss's named terms, when loss_fn returns a dict of them
    cannot: Optional[str] = None  # why the check could not be made

    @property
    def ok(self) -> bool:
        return self.cannot is None and all(r.ok for r in self.results)

    @property
    def primary(self) -> Optional[Diagnosis]:
        eager = next((r for r in self.results if r.mode == "eager"), None)
        mode = "eager" if eager is not None and not eager.ok else "compiled"
        return self.diagnoses.get(mode)


# A diagnosis that names a loop or scaling bug whatever else the model does.
_CONFIDENT = ("not_divided", "scaled_twice", "only_last", "dropped", "non_finite")
# ... and those whose fitted micro-batch weights follow the item counts: a named pattern, not noise.
_NAMED = (*_CONFIDENT, "mean_of_means", "proportional_items")


def _named(rows: Sequence[Row], diagnoses: Mapping[str, Diagnosis]) -> bool:
    """Every failing row's difference is explained by a named bug of its mode."""
    failing = {r.mode for r in rows if not r.ok}
    return all(mode in diagnoses and diagnoses[mode].code in _NAMED for mode in failing)


def _run_pass(plan: _Plan, *, freeze_batchnorm: bool, label: str = "as given") -> _Pass:
    prepared = prepare(plan.model, freeze_batchnorm=freeze_batchnorm, in_place=True)
    tol = Tolerance.for_dtype(plan.dtype)
    steps = len(plan.sizes)
    with exact_numerics():
        big = to_device(plan.batch, plan.device, plan.dtype)
        micro = split_batch(big, plan.sizes)
        divs = divisors(plan.scaling, micro)
        reference_div = divisors(plan.scaling, [big])[0] if callable(plan.scaling) else 1
        reference = compute_reference(prepared, plan.batch, plan.reference_loss_fn, reference_div,
                                      device=plan.device, dtype=plan.dtype, seed=plan.seed)
        _check_reference(reference)
        shapes = {n: tuple(p.shape) for n, p in prepared.module.named_parameters()}
        drawn = reference.draws
        window = compiled = None
        notes: list[str] = []
        if "eager" in plan.modes:
            supplies = _row_supplies(drawn, plan.sizes) if drawn else None
            window = run_window(prepared.copy(plan.device, plan.dtype), micro, plan.loss_fn, divs, label="eager",
                                seed=plan.seed, draws=supplies)
        if "compiled" in plan.modes and not drawn:
            compiled = compiled_runs(prepared.copy(plan.device, plan.dtype, fresh=True), big, micro, plan.loss_fn,
                                     plan.reference_loss_fn, divs, reference_div, backend=plan.compile_backend,
                                     seed=plan.seed)
            if compiled[2].fallback_wrapper:
                notes.append("Module.compile traced no graph (forward defined in torch.nn); used "
                             "torch.compile(model) instead")
        elif "compiled" in plan.modes:
            notes.append(f"compiled mode not run: the forward pass draws random numbers ({', '.join(drawn.ops)}), "
                         "which compiled code draws by itself where they cannot be replayed; pass the noise in the "
                         "batch to check it compiled")

        summed = {mode: Magnitudes(run.contributions) for mode, run in _accumulated(window, compiled)}
        products: dict[str, dict[str, tuple[float, float, float]]] = {}

        def rows_now(partial: bool = False) -> list[Row]:
            rows = []
            for mode, run in _accumulated(window, compiled):
                rows += compare_rows(mode, run.grads, reference, tol, shapes, steps=steps, magnitude=summed[mode],
                                     products=products.setdefault(mode, {}), until_failure=partial)
                if partial and not all(r.ok for r in rows):
                    return rows
            if compiled is not None:
                rows += compare_rows("compiled big batch", compiled[0].grads, reference, tol, shapes,
                                     until_failure=partial)
            return rows

        rows = judge(rows_now, reference, evidence=("measure_exact",))
        _check_truth(reference)
        cannot = _cannot_replay(reference, window, plan.sizes) or _beyond_rounding(plan.dtype, reference)
        counts = _counts(plan.batch, plan.sizes, plan.item_counts_fn) if not all(r.ok for r in rows) else {}
        results, diagnoses = _mode_results(rows, window, compiled, reference, steps, counts, products)
        if not all(r.ok for r in rows) and not cannot and not _named(rows, diagnoses):
            # Unexplained: see whether the big batch itself differs between identical runs. A named
            # loop bug is not rerun: a big batch that varied by as much as the bug's effect would
            # widen the budget past it, which no budget may let nondeterminism do.
            rows = judge(rows_now, reference)
            results, diagnoses = _mode_results(rows, window, compiled, reference, steps, counts, products)
    terms = (window or (compiled[1] if compiled else None)).terms
    return _Pass(label, prepared, reference, tol, rows, results, diagnoses, notes + _notes(prepared, reference),
                 terms, cannot)


def _row_supplies(drawn: Draws, sizes: Sequence[int]) -> list[Supply]:
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return [rows_supply(drawn, a, a + n, sum(sizes)) for a, n in zip(starts, sizes)]


def _cannot_replay(reference: Reference, window: Optional[WindowRun], sizes: Sequence[int]) -> Optional[str]:
    """Why the micro-batches could not be given the big batch's random draws, if they could not."""
    drawn = reference.draws
    failure = reference.draw_failure or (window.draw_failure if window is not None else None)
    if failure is None and drawn and window is not None:
        total, start = sum(sizes), 0
        for i, (n, made) in enumerate(zip(sizes, window.draws)):
            wanted = expected_draws(drawn, start, start + n, total)
            if len(made.draws) != wanted:
                failure = (f"micro-batch {i + 1} makes {len(made.draws)} random draws where its rows of the big "
                           f"batch make {wanted}")
                break
            start += n
    if failure is None:
        return None
    return (f"the check cannot be made: the loss draws random numbers ({', '.join(drawn.ops) or 'in a fused kernel'}) "
            f"that cannot be given identically to the big batch and the micro-batches: {failure}; pass the noise in "
            "the batch (or draw it per row, dim 0 first), or switch the op off for the check")


# Beyond this relative error of the same-precision big batch against float64, the difference is not
# rounding (float32 gradients are typically within 1e-5, half precision within 1e-2): the two runs
# computed different things, and a budget that wide would let any gradient pass.
_ROUNDING_CEILING_FLOAT32, _ROUNDING_CEILING_HALF = 1e-2, 0.3


def _beyond_rounding(dtype: torch.dtype, reference: Reference) -> Optional[str]:
    error = reference.baseline_error()
    ceiling = _ROUNDING_CEILING_FLOAT32 if dtype == torch.float32 else _ROUNDING_CEILING_HALF
    if not error > ceiling:
        return None
    return (f"the check cannot be made: the big batch in {str(dtype).removeprefix('torch.')} and in float64 differ by {error:.3g} "
            "(relative), far beyond rounding: the loss is not the same computation in both (random draws from a "
            "generator the check does not see, or state that changes between runs)")


def _settle(plan: _Plan, first: _Pass, freeze_batchnorm: bool) -> tuple[str, str, _Pass, list[str]]:
    """The verdict, from the first pass and, when it does not match, the second passes that take a
    coupling out (BatchNorm frozen, one loss term left out) to check the rest."""
    if first.cannot:
        return "uncheckable", first.cannot, first, first.notes
    if first.ok:
        ran = ", ".join(r.mode for r in first.results if r.mode in MODES)
        return "match", f"accumulated gradients match the big-batch gradient within rounding ({ran})", first, first.notes
    d = first.primary
    if d.code in _CONFIDENT:
        return ("mismatch", _mismatch_sentence(first), first, first.notes)
    couplings = []
    if first.prepared.batch_stat_layers and not freeze_batchnorm and first.prepared.batch_stats_freezable():
        couplings.append(("BatchNorm frozen", lambda: _run_pass(plan, freeze_batchnorm=True, label="BatchNorm frozen"),
                          _batchnorm_cause(first)))
    for term in first.terms if len(first.terms) > 1 else ():
        couplings.append((f"without loss term {term!r}",
                          functools.partial(_run_pass, plan.without_term(term), freeze_batchnorm=freeze_batchnorm,
                                            label=f"without loss term {term!r}"),
                          f"the loss term {term!r} couples the items of a batch"))
    measured = f"measured: cosine {d.cosine:.4f}, relative error {d.error:.3g} of the whole gradient"
    named = None
    for label, run, cause in couplings:
        second = run()
        if second.cannot:
            continue
        if second.ok:
            return "inherent", (f"{cause}, so accumulation cannot reproduce the big batch ({measured}); "
                                f"with it taken out ({label}) the rest matches"), first, first.notes
        if named is None and second.primary is not None and second.primary.code != "coupled":
            named = (second, label, cause)
    if named is not None:
        second, label, cause = named
        return "mismatch", (f"{_mismatch_sentence(second)} (found with {label}: {cause}, cosine {d.cosine:.4f} "
                            "with it in)"), second, second.notes
    if first.prepared.batch_stat_layers:
        how = "" if first.prepared.batch_stats_freezable() else "; BatchNorm without running statistics cannot be frozen to check the rest"
        return "inherent", f"{_batchnorm_cause(first)}, so accumulation cannot reproduce the big batch ({measured}){how}", \
            first, first.notes
    if d.code == "coupled" and first.primary is first.diagnoses.get("eager"):
        return "inherent", d.cause, first, first.notes
    return "mismatch", _mismatch_sentence(first), first, first.notes


def _batchnorm_cause(first: _Pass) -> str:
    layers = first.prepared.batch_stat_layers
    shown = ", ".join(layers[:3]) + (" ..." if len(layers) > 3 else "")
    return f"batch-statistic layers ({shown}) normalise each micro-batch with its own statistics"


def _mismatch_sentence(done: _Pass) -> str:
    by_mode = {r.mode: r for r in done.results}
    eager = by_mode.get("eager")
    d = done.primary
    if eager is not None and eager.ok:
        big = by_mode.get("compiled big batch")
        if big is not None and not big.ok:
            return ("mismatch only when compiled: the compiled big batch already differs from the float64 reference "
                    "(compiler numerics, not accumulation)")
        return f"mismatch only when compiled: {d.cause}"
    return d.cause


def compute_reference(prepared: PreparedModel, batch: Any, reference_loss_fn: LossFn, reference_div: Any, *,
                      device: torch.device, dtype: torch.dtype, seed: int) -> Reference:
    return BigBatch(prepared, reference_loss_fn, device=device, dtype=dtype, divisor=reference_div,
                    seed=seed).reference(batch)


def _accumulated(window: Optional[WindowRun], compiled: Optional[tuple]) -> list[tuple[str, WindowRun]]:
    runs = [] if window is None else [("eager", window)]
    return runs + ([] if compiled is None else [("compiled", compiled[1])])


def _counts(batch: Any, sizes: Sequence[int], item_counts_fn: Optional[Callable[[Any], int]]) -> dict:
    """Candidate item counts per micro-batch, for naming mean-of-means weighting."""
    pieces = split_batch(batch, sizes)
    counts = item_counts(pieces)
    if item_counts_fn is not None:
        try:
            counts = {"items": [int(item_counts_fn(mb)) for mb in pieces], **counts}
        except Exception as exc:
            raise VerifyError(f"item_counts_fn raised {type(exc).__name__}: {exc}") from None
    return counts


def _mode_results(rows: list[Row], window: Optional[WindowRun], compiled: Optional[tuple], reference: Reference,
                  steps: int, counts: dict, products: Mapping[str, Mapping[str, tuple[float, float, float]]]
                  ) -> tuple[list[ModeResult], dict[str, Diagnosis]]:
    results: list[ModeResult] = []
    diagnoses: dict[str, Diagnosis] = {}
    for mode, run in _accumulated(window, compiled):
        mode_rows = [r for r in rows if r.mode == mode]
        result = _mode_result(mode, run, mode_rows, reference, steps, counts, diagnoses, products[mode])
        if mode == "compiled":
            stats = compiled[2]
            result = dataclasses.replace(result, compilations=stats.compilations,
                                         recompilations=stats.recompilations, graph_breaks=stats.graph_breaks)
        results.append(result)
    if compiled is not None:
        big_ok = all(r.ok for r in rows if r.mode == "compiled big batch")
        results.append(ModeResult("compiled big batch", big_ok, diagnosis="" if big_ok else
                                  "compiled big batch differs from the float64 reference", seconds=compiled[0].seconds))
    return results, diagnoses


def _check_reference(reference: Reference) -> None:
    if all(g is None for g in reference.baseline.grads.values()):
        raise VerifyError("no parameter received a gradient from the big batch: does loss_fn use the model?")


def _check_truth(reference: Reference) -> None:
    """After a judgement that needed float64: NaN there is the loss's, not accumulation's."""
    for name, g in (reference.exact or {}).items():
        known = reference.rounding.get(name)
        if known is not None and math.isfinite(known[1]):
            continue  # a finite norm: every entry is finite
        if g is not None and not bool(torch.isfinite(g).all()):
            raise VerifyError(f"the big-batch gradient of {name!r} is NaN/inf even in float64: "
                              "fix the loss (it cannot be compared)")


def _mode_result(mode: str, window: WindowRun, rows: list[Row], reference: Reference, steps: int,
                 counts: dict, diagnoses: dict[str, Diagnosis],
                 products: Mapping[str, tuple[float, float, float]]) -> ModeResult:
    if all(r.ok for r in rows):
        # A match needs no explanation (fitting micro-batch weights costs about a training step on a
        # large model): scale and cosine say how close it came, from the norms its rows were judged by.
        scale, cosine = scale_cosine(products.values())
        return ModeResult(mode, True, scale, cosine, None, "matches", window.seconds)
    d = diagnose(window.grads, window.contributions, reference.exact, steps=steps, item_counts=counts,
                 losses=window.losses)
    diagnoses[mode] = d
    return ModeResult(mode, False, d.scale, d.cosine, d.weights, d.cause, window.seconds)


def _notes(prepared: PreparedModel, reference: Reference) -> list[str]:
    notes = []
    if prepared.unwrapped:
        notes.append(f"checked the module inside {' > '.join(prepared.unwrapped)}; compiled mode compiles its own copy")
    if prepared.dropout_layers:
        shown = ", ".join(prepared.dropout_layers[:4]) + (" ..." if len(prepared.dropout_layers) > 4 else "")
        notes.append(f"dropout switched off for the check in {len(prepared.dropout_layers)} layer(s) ({shown})")
    if reference.random_ops:
        notes.append(f"random draws ({', '.join(reference.random_ops)}) recorded in the big batch and replayed in "
                     "every other run (micro-batches get their rows of each draw)")
    if prepared.frozen_batch_stat_layers:
        notes.append(f"{len(prepared.frozen_batch_stat_layers)} BatchNorm layer(s) frozen (eval mode, running "
                     "statistics)")
    if prepared.frozen_parameters:
        notes.append(f"{len(prepared.frozen_parameters)} parameter(s) with requires_grad=False skipped")
    unused = [n for n, g in reference.best.items() if g is None]
    if unused:
        notes.append(f"{len(unused)} trainable parameter(s) receive no gradient from loss_fn: "
                     + ", ".join(unused[:5]) + (" ..." if len(unused) > 5 else ""))
    if reference.nondeterministic:
        worst = max(reference.nondeterminism.values())
        notes.append(f"the big-batch gradient is nondeterministic (two identical runs differ, up to {worst:.3g} in "
                     "L2); that difference is added to the rounding budget")
    return notes
