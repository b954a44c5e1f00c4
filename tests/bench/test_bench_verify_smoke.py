"""bench/verify.py's helpers on the demo model (no timing claims): the plain step and the floor's parts run."""

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_verify", ROOT / "bench" / "verify.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_verify"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("dtype,steps", [("float32", 1), ("float32", 4), ("float64", 1)])
def test_plain_step_runs_each_part_of_the_floor(bench, dtype, steps):
    demo = bench._demo()
    seconds = bench.plain_step_seconds(demo, demo.token_batch(rows=8), repeats=1, dtype=dtype, steps=steps)
    assert 0 < seconds < 10


def test_random_splits_cover_the_batch(bench):
    import random

    splits = bench.random_splits(random.Random(0), 17, 5)
    assert sum(splits) == 17 and len(splits) == 5 and min(splits) > 0
