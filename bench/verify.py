"""Benchmark of `gradcheck_accum.verify` on transformer-like models (fixtures/verify_demo.py's
TinyGPT, token loss summed and divided by the window's valid-token count).

Prints, as ratios and counts:
  - a table of verify's time / one plain eager big-batch forward+backward, eager-only, at about 1M
    and 20M parameters, on a match and on a mismatch (the demo's mean-of-means bug, diagnosis
    included), each timed in the same run as its own plain step, with the spread over the rounds
    and the machine's load (the figure a closing note quotes);
  - for the demo-size model: the full eager+compiled verify (compilation included), compilations,
    recompilations and graph breaks; false alarms over correct configurations (random seeds and
    splits); the smallest relative scale error (loss multiplied by 1+eps in the accumulated run)
    that verify reports as a mismatch.

    .venv/bin/python bench/verify.py                 # full (compiles with inductor: ~1 min on 2 CPU cores)
    .venv/bin/python bench/verify.py --backend aot_eager --seeds 10 --sizes 1M
    .venv/bin/python bench/verify.py --only-cost --threads 1 --clock cpu   # the cost table alone

On a shared machine, compare two checkouts back to back under the same load (PYTHONPATH picks
whose gradcheck_accum runs): `PYTHONPATH=/work/main .venv/bin/python bench/verify.py --only-cost`.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import random
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

warnings.filterwarnings("ignore")

import torch  # noqa: E402

from gradcheck_accum import verify  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# What the timings read: wall time, or (--clock cpu) this process's CPU time, which load from other
# processes on a shared machine disturbs far less (run it with --threads 1: idle OpenMP threads
# spin, and that spinning counts as CPU time).
_clock = time.perf_counter


def _demo():
    spec = importlib.util.spec_from_file_location("verify_demo", ROOT / "fixtures" / "verify_demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plain_step_seconds(demo, batch, repeats: int, dtype: str, steps: int = 1, device: str = "cpu") -> float:
    """Median seconds of one forward+backward of `batch` (split into `steps` micro-batches, each
    backpropagated, when steps > 1), as a plain training loop would run it."""
    model = demo.model_factory().to(device=device, dtype=getattr(torch, dtype))
    batch = {k: t.to(device) for k, t in batch.items()}
    total = demo.window_tokens(batch, [batch])
    rows = len(batch["ids"])  # the demo's batches are dicts of integer tensors
    edges = [rows * i // steps for i in range(steps + 1)]
    parts = [{k: t[a:b] for k, t in batch.items()} for a, b in zip(edges, edges[1:])]
    times = []
    for _ in range(repeats + 2):
        model.zero_grad(set_to_none=True)
        _sync(device)
        start = _clock()
        for part in parts:
            (demo.token_loss_sum(model, part) / total).backward()
        _sync(device)
        times.append(_clock() - start)
    return statistics.median(times[2:])


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, repeats: int = 1) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = _clock()
        result = fn()
        times.append(_clock() - start)
    return statistics.median(times), result


def random_splits(rng: random.Random, total: int, steps: int) -> list[int]:
    cuts = sorted(rng.sample(range(1, total), steps - 1))
    edges = [0, *cuts, total]
    return [b - a for a, b in zip(edges, edges[1:])]


def smallest_caught(demo, batch, dtype: str) -> float:
    """Bisect (in log space) the smallest eps for which a (1+eps)-scaled accumulated loss fails."""

    def caught(eps: float) -> bool:
        report = verify(demo.model_factory, batch, lambda m, b: demo.token_loss_sum(m, b) * (1 + eps),
                        reference_loss_fn=demo.token_loss_sum, scaling=demo.window_tokens, modes=("eager",),
                        dtype=dtype)
        return not report.ok

    low, high = 1e-10, 1e-1
    assert caught(high) and not caught(low)
    for _ in range(24):
        mid = math.sqrt(low * high)
        low, high = (low, mid) if caught(mid) else (mid, high)
    return high


# Model sizes for the cost ratios: (width, layers) of TinyGPT, about 1M and 20M parameters.
SIZES = {"1M": (128, 5), "20M": (528, 6)}


@dataclass
class Cost:
    """verify / plain step for one model size: a ratio per round, interleaved with its plain step."""

    label: str
    params: int
    step_s: list[float]
    match: list[float]
    mismatch: list[float]
    float64_on_match: bool
    # The plain work each check cannot avoid, per round, in plain steps: building the model from the
    # factory, the big batch and the window of N micro-batches (match), and the float64 big batch too
    # (mismatch; the match's own float64 run is not counted, it happens only on some hosts).
    match_floor: list[float] = field(default_factory=list)
    mismatch_floor: list[float] = field(default_factory=list)


def cost_ratios(demo, label: str, width: int, layers: int, rows: int, steps: int, dtype: str, repeats: int,
                device: str) -> Cost:
    """verify / plain step on a match and on a mismatch, for one model size, in one run."""
    def factory():
        torch.manual_seed(0)
        return demo.TinyGPT(width=width, layers=layers)

    sized = type(demo)("sized_demo")
    sized.__dict__.update(demo.__dict__)
    sized.model_factory = factory
    batch = demo.token_batch(rows=rows)
    params = sum(p.numel() for p in factory().parameters())
    right = dict(model=factory, batch=batch, loss_fn=demo.token_loss_sum, scaling=demo.window_tokens,
                 accumulation_steps=steps, dtype=dtype, modes=("eager",), device=device)
    wrong = dict(right, loss_fn=demo.token_loss_mean, scaling="steps")
    # Interleaved (plain step, match, mismatch, in turn), so that load from other processes on a
    # shared machine falls on all three alike; each ratio is a median over the rounds.
    cost = Cost(label, params, [], [], [], False)
    for _ in range(repeats):
        step = plain_step_seconds(sized, batch, repeats=1, dtype=dtype, device=device)
        match_s, match = timed(lambda: verify(**right))
        assert match.ok, match.render()
        mismatch_s, mismatch = timed(lambda: verify(**wrong))
        assert mismatch.verdict == "mismatch" and "mean-of-means" in mismatch.diagnosis, mismatch.render()
        build_s, _ = timed(factory)
        window_s = plain_step_seconds(sized, batch, repeats=1, dtype=dtype, steps=steps, device=device)
        float64_s = plain_step_seconds(sized, batch, repeats=1, dtype="float64", device=device)
        step = min(step, plain_step_seconds(sized, batch, repeats=1, dtype=dtype, device=device))
        cost.step_s.append(step)
        cost.match.append(match_s / step)
        cost.mismatch.append(mismatch_s / step)
        cost.match_floor.append((build_s + step + window_s) / step)
        cost.mismatch_floor.append((build_s + step + window_s + float64_s) / step)
        cost.float64_on_match |= any(not math.isnan(r.reference_error) for r in match.rows)
    return cost


def cost_table(costs: list[Cost], tokens: str, steps: int, device: str, loads: tuple[float, float]) -> str:
    """The cost figures as one table (the one a closing note quotes)."""
    lines = [(f"verify(modes=('eager',)) / one plain forward+backward on {device}, TinyGPT, {tokens} "
              f"tokens, N={steps}; median of {len(costs[0].match) if costs else 0} interleaved rounds (min-max); "
              f"load {loads[0]:.1f} -> {loads[1]:.1f} (1-minute average at start -> end)"),
             (f"{'size':<5} {'parameters':>10} {'plain step':>10}  {'match':<18} {'floor':<6} {'mismatch':<18} "
              f"{'floor':<6} float64 run on the match")]
    for c in costs:
        lines.append(f"{c.label:<5} {c.params / 1e6:>9.1f}M {statistics.median(c.step_s) * 1e3:>7.0f} ms  "
                     f"{_ratio(c.match):<18} {_times(c.match_floor):<6} {_ratio(c.mismatch):<18} "
                     f"{_times(c.mismatch_floor):<6} {'yes' if c.float64_on_match else 'no'}")
    lines.append("floor: the plain work the check cannot skip, timed alone in the same rounds: building the model "
                 "from the factory, the big batch and the window of N micro-batches, and on a mismatch the float64 "
                 "big batch too")
    lines.append("targets at 20M (issue 14): match <= 3x, mismatch <= 6x")
    return "\n".join(lines)


def _times(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.2f}x"


def _ratio(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="inductor", help="torch.compile backend for compiled mode")
    parser.add_argument("--seeds", type=int, default=20, help="correct configurations checked for false alarms")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--sizes", default="1M,20M", help="model sizes for the cost ratios (of " + ", ".join(SIZES)
                        + "), or 'none'")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the cost ratios (the median counts)")
    parser.add_argument("--device", default="cpu", help="device of the cost ratios (the targets are CPU figures)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="time by the wall clock or by this process's CPU time (steadier on a shared machine)")
    parser.add_argument("--only-cost", action="store_true", help="print the cost ratios and stop")
    args = parser.parse_args()
    torch.set_num_threads(args.threads or max(1, torch.get_num_threads()))
    global _clock
    _clock = time.process_time if args.clock == "cpu" else time.perf_counter
    demo = _demo()
    print(f"torch {torch.__version__}; {torch.get_num_threads()} threads; dtype {args.dtype}; {args.clock} clock; "
          f"{os.cpu_count()} CPUs")
    sizes = [s for s in args.sizes.split(",") if s and s != "none"]
    if sizes:
        start = os.getloadavg()[0]
        costs = [cost_ratios(demo, label, *SIZES[label], args.rows, args.steps, args.dtype, args.repeats, args.device)
                 for label in sizes]
        print(cost_table(costs, f"{args.rows}x{demo.CONTEXT}", args.steps, args.device, (start, os.getloadavg()[0])))
    if args.only_cost:
        return

    batch = demo.token_batch(rows=args.rows)
    params = sum(p.numel() for p in demo.model_factory().parameters())
    print(f"demo model: TinyGPT, {params} parameters; batch {args.rows}x{demo.CONTEXT} tokens; N={args.steps}")
    step = plain_step_seconds(demo, batch, repeats=20, dtype=args.dtype)
    kwargs = dict(model=demo.model_factory, batch=batch, loss_fn=demo.token_loss_sum, scaling=demo.window_tokens,
                  accumulation_steps=args.steps, dtype=args.dtype)
    eager_s, eager_report = timed(lambda: verify(**kwargs, modes=("eager",)), repeats=5)
    assert eager_report.ok, eager_report.render()
    full_s, full_report = timed(lambda: verify(**kwargs, compile_backend=args.backend))
    assert full_report.ok, full_report.render()
    compiled = full_report.mode("compiled")
    # What a matching verify cannot avoid: the accumulated window itself and the big batch in the same
    # precision. The float64 big batch (the truth) runs only when the accumulated gradient is beyond
    # the floor of the budget around it, which it was here when the line below says so.
    window = plain_step_seconds(demo, batch, repeats=20, dtype=args.dtype, steps=args.steps)
    floor = window + step
    truth = "needed" if any(not math.isnan(r.reference_error) for r in eager_report.rows) else "not needed"
    print(f"plain eager big-batch forward+backward ({args.dtype}): {step * 1e3:.2f} ms")
    print(f"verify(modes=('eager',)) / plain step: {eager_s / step:.1f}x ({eager_s * 1e3:.0f} ms; float64 run "
          f"{truth})")
    print(f"  its floor: window of {args.steps} micro-batches {window / step:.1f}x + big batch 1.0x = "
          f"{floor / step:.1f}x; verify / floor: {eager_s / floor:.2f}x")
    print(f"verify(eager + compiled, backend={args.backend}) / plain step: {full_s / step:.0f}x "
          f"({full_s:.1f} s, mostly compilation)")
    print(f"compiled mode: {compiled.compilations} compilation(s), {compiled.recompilations} recompilation(s), "
          f"{compiled.graph_breaks} graph break(s)")

    rng = random.Random(0)
    alarms = 0
    for seed in range(args.seeds):
        rows = rng.randint(args.steps, 24)
        b = demo.token_batch(rows=rows, seed=seed)
        report = verify(demo.model_factory, b, demo.token_loss_sum, scaling=demo.window_tokens, modes=("eager",),
                        splits=random_splits(rng, rows, rng.randint(1, min(6, rows))), dtype=args.dtype)
        alarms += not report.ok
    print(f"false alarms on correct configurations: {alarms} of {args.seeds} (random seeds, rows and splits)")
    eps = smallest_caught(demo, batch, args.dtype)
    print(f"smallest relative scale error caught: {eps:.2e} (loss x (1 + eps) in the accumulated run)")
    sys.exit(1 if alarms else 0)


if __name__ == "__main__":
    main()
