"""Wall time of `verify_loop` with world_size=2 (two gloo processes on CPU) on the demo loop of
fixtures/verify_loop_demo.py, against the same check in one process, and the seeded loop bugs
with the diagnosis each produces.

    .venv/bin/python bench/verify_loop_ddp.py
    .venv/bin/python bench/verify_loop_ddp.py --repeat 10 --spawn

The first DDP call in a process pays for importing torch._dynamo (DistributedDataParallel does);
later calls show the cost of starting the ranks and checking.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

from gradcheck_accum import verify_loop  # noqa: E402

DEMO = Path(__file__).resolve().parents[1] / "fixtures" / "verify_loop_demo.py"
BUGS = ("zero_grad_every_micro_batch", "never_cleared", "step_every_micro_batch", "loss_not_divided",
        "remainder_dropped", "scheduler_every_micro_batch", "ddp_sync_every_micro_batch")


def load_demo():
    spec = importlib.util.spec_from_file_location("verify_loop_demo", DEMO)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as `accumcheck verify path.py:target` does
    spec.loader.exec_module(module)
    return module


def timed(spec: dict) -> tuple[float, object]:
    started = time.perf_counter()
    report = verify_loop(**spec)
    return time.perf_counter() - started, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--spawn", action="store_true", help="also time start_method='spawn'")
    args = parser.parse_args()
    demo = load_demo()

    first, report = timed(demo.ddp())
    assert report.ok, report.render()
    warm = [timed(demo.ddp())[0] for _ in range(args.repeat)]
    single = [timed(demo.correct())[0] for _ in range(args.repeat)]
    print(f"verify_loop world_size=2 (gloo, fork), first call in the process: {first:.2f} s")
    print(f"verify_loop world_size=2 (gloo, fork), later calls: median {statistics.median(warm):.3f} s "
          f"(min {min(warm):.3f}, max {max(warm):.3f}, n={len(warm)})")
    print(f"verify_loop in one process, same loop:            median {statistics.median(single):.3f} s")
    if args.spawn:
        spawned = demo.ddp()
        spawned["start_method"] = "spawn"
        seconds, report = timed(spawned)
        print(f"verify_loop world_size=2 (gloo, spawn): {seconds:.2f} s ({report.verdict})")
    print("\nseeded loop bugs:")
    for name in BUGS:
        seconds, report = timed(getattr(demo, name)())
        print(f"  {name:30s} {report.verdict:8s} {report.settings['findings'][0]:32s} {report.diagnosis}")


if __name__ == "__main__":
    main()
