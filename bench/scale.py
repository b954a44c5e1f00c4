"""Scale: accumcheck on one very large file against libcst's bare parse of it, in one run.

    .venv/bin/python bench/scale.py [--loops 1500] [--lines 200000] [--runs 1] [--fix] [--json out.json]

Two generated files: one with `--loops` training loops (about 13 lines each: the loops of real
scripts, half of them with an accumulation bug, a quarter inside functions), and one of `--lines`
lines made of the same loops. Each measurement is a separate process, measured as in bench/lint.py
(bytecode caches written, as for any installed tool): wall time and peak resident memory (from
wait4) of `accumcheck lint` (and with --fix, of `--diff` and of `--fix --unsafe-fixes`
on a copy) next to those of a process that imports libcst and parses the file, nothing else, and
their CPU time (user and system), which a shared machine's load disturbs least. The target
(issue 16): lint within 3x the time and 1.5x the memory of the parse.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lint import measure as lint_measure  # noqa: E402 - bench/ is not a package

ACCUMCHECK = [str(Path(sys.executable).with_name("accumcheck")), "lint", "--no-cache", "--exit-zero", "-q"]
PARSE = [sys.executable, "-c", "import sys, libcst; libcst.parse_module(open(sys.argv[1], encoding='utf-8').read())"]

# Loop bodies seen in real training scripts; {k} makes every loop's names its own.
LOOPS = [
    # guarded window, zero_grad every micro-batch (ACC101)
    """for i_{k}, batch in enumerate(loader_{k}):
    optimizer_{k}.zero_grad()
    loss = criterion(model_{k}(batch.x), batch.y) / accum_{k}
    loss.backward()
    if (i_{k} + 1) % accum_{k} == 0 or i_{k} + 1 == len(loader_{k}):
        optimizer_{k}.step()
""",
    # guarded window, correct
    """for step_{k}, batch in enumerate(loader_{k}):
    loss = model_{k}(**batch).loss / accum_{k}
    loss.backward()
    if (step_{k} + 1) % accum_{k} == 0 or step_{k} + 1 == len(loader_{k}):
        torch.nn.utils.clip_grad_norm_(model_{k}.parameters(), 1.0)
        optimizer_{k}.step()
        scheduler_{k}.step()
        optimizer_{k}.zero_grad()
""",
    # nested window, loss never divided (ACC201), scheduler per micro-batch (ACC401)
    """for it in range(max_iters):
    for micro_step in range(gradient_accumulation_steps):
        logits, loss = model_{k}(X, Y)
        scaler.scale(loss).backward()
        scheduler_{k}.step()
    scaler.step(optimizer_{k})
    scaler.update()
    optimizer_{k}.zero_grad(set_to_none=True)
""",
    # guarded window, clip every micro-batch (ACC403)
    """for i_{k}, (x, y) in enumerate(train_loader_{k}):
    out = model_{k}(x)
    loss = loss_fn(out, y) / accum_{k}
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model_{k}.parameters(), max_norm_{k})
    if (i_{k} + 1) % accum_{k} == 0 or i_{k} + 1 == len(train_loader_{k}):
        optimizer_{k}.step()
        optimizer_{k}.zero_grad()
""",
]
COMPILED = """model_{k} = torch.compile(model_{k})
torch.save(model_{k}.state_dict(), "checkpoint_{k}.pt")
"""


def training_file(loops: int) -> str:
    parts = ["import torch\n\n"]
    for k in range(loops):
        loop = LOOPS[k % len(LOOPS)].format(k=k)
        if k % 4 == 3:  # a quarter inside functions
            loop = f"def train_{k}(model_{k}, loader_{k}, optimizer_{k}):\n" + \
                "".join("    " + line + "\n" for line in loop.splitlines())
        parts.append(f"optimizer_{k} = torch.optim.AdamW(model_{k}.parameters(), lr=1e-4)\n" + loop)
        if k % 10 == 0:
            parts.append(COMPILED.format(k=k))
        parts.append(f'metrics_{k} = {{"loop": {k}, "lr": scheduler_{k}.get_last_lr()}}\nprint(metrics_{k})\n\n')
    return "".join(parts)


def file_of_lines(lines: int) -> str:
    per_loop = training_file(40).count("\n") / 40
    return training_file(int(lines / per_loop))


def measure(command: list[str]) -> tuple[float, float, float]:
    """Wall seconds, peak resident MiB and CPU seconds of one process (bench/lint.py's measurement)."""
    elapsed, memory, code, cpu = lint_measure(command)
    if code not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed with exit code {code} (run it alone to see why)")
    return elapsed, memory, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=1500)
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--fix", action="store_true", help="also time --diff and --fix --unsafe-fixes")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        files = {f"{args.loops} loops": training_file(args.loops), f"{args.lines} lines": file_of_lines(args.lines)}
        for name, text in files.items():
            # Each file alone in its directory: a project of one file, as the parse sees it (a copy
            # beside it would be read as its neighbour by the project model).
            path, copy = Path(scratch, "lint", "generated.py"), Path(scratch, "fix", "generated.py")
            path.parent.mkdir(exist_ok=True)
            copy.parent.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
            commands = {"libcst parse": PARSE + [str(path)], "lint": ACCUMCHECK + [str(path)]}
            if args.fix:
                commands["lint --diff"] = ACCUMCHECK + ["--diff", str(path)]
                commands["lint --fix --unsafe-fixes"] = ACCUMCHECK + ["--fix", "--unsafe-fixes", str(copy)]
            samples: dict[str, list[tuple[float, float, float]]] = {label: [] for label in commands}
            for _ in range(args.runs):
                for label, command in commands.items():  # interleaved, so noise hits all alike
                    shutil.copy(path, copy)
                    samples[label].append(measure(command))
            parse_time, parse_memory, parse_cpu = (statistics.median(v[i] for v in samples["libcst parse"])
                                                   for i in range(3))
            for label, values in samples.items():
                seconds, memory, cpu = (statistics.median(v[i] for v in values) for i in range(3))
                rows.append({"file": name, "lines": text.count("\n"), "command": label, "seconds": round(seconds, 2),
                             "cpu_seconds": round(cpu, 2), "peak_mib": round(memory),
                             "time_vs_parse": round(seconds / parse_time, 2), "cpu_vs_parse": round(cpu / parse_cpu, 2),
                             "memory_vs_parse": round(memory / parse_memory, 2)})
    print(f"{'file':<14} {'lines':>7}  {'command':<26} {'seconds':>8} {'x parse':>8} {'cpu s':>8} {'x parse':>8} "
          f"{'peak MiB':>9} {'x parse':>8}")
    for row in rows:
        print(f"{row['file']:<14} {row['lines']:>7}  {row['command']:<26} {row['seconds']:>8.2f} "
              f"{row['time_vs_parse']:>8.2f} {row['cpu_seconds']:>8.2f} {row['cpu_vs_parse']:>8.2f} "
              f"{row['peak_mib']:>9} {row['memory_vs_parse']:>8.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
