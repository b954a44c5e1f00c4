"""Overhead of `gradcheck_accum.guard` on a training loop: guard on vs off, per optimizer step.

A small transformer encoder (about 12 parameter tensors per layer, so the per-parameter hooks are
exercised as in real models) trained with AdamW, gradient clipping and 4 micro-batches per step,
at about 1M and 20M parameters. Blocks of steps with and without the guard alternate (ABAB...) so
that the machine's drift hits both; the overhead is the ratio of the medians, from one run.

With --sync-check on CUDA it also counts host-device synchronisations inside guarded and plain
steps (torch.cuda.set_sync_debug_mode("warn") turns each one into a warning): the guard must add
none.

    .venv/bin/python bench/guard.py                            # CPU, both sizes
    .venv/bin/python bench/guard.py --device cuda --sync-check
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch

from gradcheck_accum import guard

SIZES = {"1M": dict(width=128, layers=5), "20M": dict(width=512, layers=6)}
SEQ = 128
VOCAB = 256
N = 4


class Encoder(torch.nn.Module):
    def __init__(self, width: int, layers: int):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, width)
        layer = torch.nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=4 * width, dropout=0.0, batch_first=True)
        self.body = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(width, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.embed(ids)))


def build(size: str, device: str, batch: int):
    config = SIZES[size]
    torch.manual_seed(0)
    model = Encoder(config["width"], config["layers"]).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, VOCAB, (batch, SEQ + 1), generator=g).to(device) for _ in range(N)]
    return model, optimizer, data


# "off" twice per round: how far two identical runs drift apart is the floor under every ratio.
MODES = ("off", "off again", "guard", "guard+loss")  # guard+loss: the loss handed to watch_loss too


def train_steps(model, optimizer, data, steps: int, watch=None) -> None:
    """The loop under test: N micro-batches per step, loss divided by N, clip, step, clear."""
    for _ in range(steps):
        for ids in data:
            logits = model(ids[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
            if watch is not None:
                loss = watch(loss)
            (loss / N).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def block_seconds(model, optimizer, data, steps: int, mode: str, device: str) -> float:
    """Seconds per step over `steps` timed steps. A guard is attached before one untimed step:
    its first window (hooks on every parameter, to choose the sentinels) is paid once per run."""
    g = guard(optimizer, N, model=model) if mode.startswith("guard") else None
    watch = g.watch_loss if mode == "guard+loss" else None
    train_steps(model, optimizer, data, 1, watch)
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    train_steps(model, optimizer, data, steps, watch)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / steps
    if g is not None:
        g.close()
        assert not g.violations, g.violations
    return seconds


def count_syncs(model, optimizer, data, mode: str, steps: int = 3) -> int:
    """Host-device synchronisations inside `steps` steps (the guard's close() is outside: it waits
    for the last watched losses on purpose)."""
    g = guard(optimizer, N, model=model) if mode.startswith("guard") else None
    train_steps(model, optimizer, data, 1, g.watch_loss if mode == "guard+loss" else None)
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            train_steps(model, optimizer, data, steps, g.watch_loss if mode == "guard+loss" else None)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    if g is not None:
        g.close()
        assert not g.violations, g.violations
    return sum(1 for w in caught if "synchroniz" in str(w.message).lower())


def measure(size: str, device: str, steps: int, repeats: int, batch: int) -> dict:
    model, optimizer, data = build(size, device, batch)
    params = sum(p.numel() for p in model.parameters())
    tensors = sum(1 for _ in model.parameters())
    for mode in MODES:  # warm-up: allocator, kernels, optimizer state
        block_seconds(model, optimizer, data, 2, mode, device)
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for r in range(repeats):
        for mode in MODES if r % 2 == 0 else MODES[::-1]:
            times[mode].append(block_seconds(model, optimizer, data, steps, mode, device))
    row = dict(size=size, params=params, tensors=tensors, **{m: statistics.median(t) for m, t in times.items()})
    return row


def host_cost(tensors: int, repeats: int, device: str = "cpu", steps: int = 200) -> dict[str, float]:
    """Microseconds per step of a loop whose compute is negligible (`tensors` parameters of 2
    elements, N backward passes and a step), per mode: what is left is the loop's and the guard's
    host work, which the wall-clock ratios above cannot resolve below their noise floor."""
    params = [torch.nn.Parameter(torch.zeros(2, device=device)) for _ in range(tensors)]
    optimizer = torch.optim.SGD(params, lr=0.0)

    def loop(count: int, watch) -> None:
        for _ in range(count):
            for _ in range(N):
                loss = sum(p.sum() for p in params)
                (watch(loss) / N if watch else loss / N).backward()
            optimizer.step()
            optimizer.zero_grad()

    def block(mode: str) -> float:
        g = guard(optimizer, N) if mode.startswith("guard") else None
        watch = g.watch_loss if mode == "guard+loss" else None
        loop(1, watch)
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        loop(steps, watch)
        if device == "cuda":
            torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / steps
        if g is not None:
            g.close()
        return seconds * 1e6

    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for r in range(repeats):
        for mode in MODES if r % 2 == 0 else MODES[::-1]:
            times[mode].append(block(mode))
    return {mode: statistics.median(t) for mode, t in times.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--sizes", default="1M,20M")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps per timed block")
    parser.add_argument("--repeats", type=int, default=6, help="blocks per mode (alternating)")
    parser.add_argument("--batch", type=int, default=None, help=f"micro-batch rows of {SEQ} tokens (default: 32 on CUDA, 2 on CPU)")
    parser.add_argument("--sync-check", action="store_true", help="CUDA: count host-device syncs with and without the guard")
    parser.add_argument("--host-cost", action="store_true", help="only the guard's host work per step (no model)")
    args = parser.parse_args(argv)
    if args.host_cost:
        print(f"host work per step ({args.device}), {N} backward passes of a negligible loss, median us over "
              f"{args.repeats} blocks of 200 steps per mode; the guard's cost is the difference to 'off'")
        for tensors in (63, 75):  # the 1M and 20M models' parameter tensors
            us = host_cost(tensors, args.repeats, args.device)
            print(f"{tensors} tensors: off {us['off']:.1f}, " + ", ".join(
                f"{m} {us[m]:.1f} ({us[m] - us['off']:+.1f})" for m in MODES[1:]))
        return
    steps = args.steps or (20 if args.device == "cuda" else 3)
    batch = args.batch or (32 if args.device == "cuda" else 2)
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    print(f"guard overhead, {device_name}, {N} micro-batches of {batch}x{SEQ} tokens per step, AdamW + "
          f"clip_grad_norm_; median ms/step of {args.repeats} blocks of {steps} steps per mode (alternating)")
    print(f"{'size':>5} {'params':>11} {'tensors':>7} {'off':>9} " + " ".join(f"{m:>20}" for m in MODES[1:]))
    for size in args.sizes.split(","):
        row = measure(size, args.device, steps, args.repeats, batch)
        cells = [f"{row[m] * 1e3:.3f} ({row[m] / row['off'] - 1:+.2%})" for m in MODES[1:]]
        print(f"{row['size']:>5} {row['params']:>11,} {row['tensors']:>7} {row['off'] * 1e3:>9.3f} "
              + " ".join(f"{c:>20}" for c in cells))
        if args.sync_check and args.device == "cuda":
            model, optimizer, data = build(size, args.device, batch)
            counts = ", ".join(f"{m} {count_syncs(model, optimizer, data, m)}" for m in MODES)
            print(f"{'':>5} host-device syncs in 3 steps: {counts}")


if __name__ == "__main__":
    main()
