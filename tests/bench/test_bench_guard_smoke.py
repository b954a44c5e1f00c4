"""bench/guard.py's helpers run (no timing claims): the loop under test is clean under the guard."""

import importlib.util
from pathlib import Path

import torch

ROOT = Path(__file__).parents[2]
spec = importlib.util.spec_from_file_location("bench_guard", ROOT / "bench" / "guard.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_every_mode_of_the_benchmarked_loop_runs_clean(monkeypatch):
    monkeypatch.setitem(bench.SIZES, "tiny", dict(width=16, layers=1))
    monkeypatch.setattr(bench, "SEQ", 8)
    model, optimizer, data = bench.build("tiny", "cpu", 2)
    for mode in bench.MODES:
        assert bench.block_seconds(model, optimizer, data, 1, mode, "cpu") > 0  # asserts no violation


def test_host_cost_returns_every_mode():
    us = bench.host_cost(4, repeats=2, steps=2)
    assert set(us) == set(bench.MODES) and min(us.values()) > 0
