"""Accumulation under DistributedDataParallel: 2 CPU processes on gloo, started by the checker."""

from __future__ import annotations

import importlib.util
import multiprocessing
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import verify_loop_cases as cases
from gradcheck_accum import verify, verify_loop
from gradcheck_accum.verifier.errors import VerifyError

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is needed")

N = 4


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def micro_batches(count=9, size=4):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(size, 4, generator=g), torch.randn(size, 2, generator=g)) for _ in range(count)]


def run(train_fn, **kwargs):
    return verify_loop(train_fn, make_model(), micro_batches(), cases.micro_loss, N, world_size=2,
                       device="cpu", **kwargs)


def assert_no_children():
    # Every rank is joined before verify_loop returns, on success, failure and timeout alike.
    assert multiprocessing.active_children() == []


def test_no_sync_loop_matches_with_one_allreduce_per_window():
    report = run(cases.ddp_no_sync)
    assert report.ok, report.render()
    assert report.settings["findings"] == []
    assert report.settings["allreduces_per_window"] == [1, 1, 1]
    assert report.settings["allreduce_calls_per_window"] == [1, 1, 1]  # one bucket: tiny model
    assert_no_children()


def test_loop_without_no_sync_matches_but_reports_sync_every_micro_batch():
    report = run(cases.guarded_with_flush)
    assert report.ok  # the gradients are right; the communication is N times what it needs
    assert report.settings["findings"] == ["ddp-sync-every-micro-batch"]
    assert report.settings["allreduces_per_window"] == [4, 4, 1]
    assert report.settings["allreduce_calls_per_window"] == [4, 4, 1]
    assert "all-reduced on every micro-batch" in report.diagnosis and "no_sync" in report.diagnosis


def test_no_sync_around_backward_only_still_syncs():
    # ACC502's dynamic twin: DDP arms its reducer in forward, so no_sync must wrap the forward too.
    report = run(cases.ddp_no_sync_backward_only)
    assert report.settings["findings"] == ["ddp-sync-every-micro-batch"]
    assert report.settings["allreduces_per_window"] == [4, 4, 1]


def test_loop_bug_named_under_ddp():
    report = run(cases.loss_not_divided)
    assert report.settings["findings"][0] == "loss-not-divided", report.render()


def test_window_without_allreduce_makes_ranks_diverge():
    report = run(cases.ddp_never_syncs)
    assert not report.ok
    assert report.settings["findings"][0] == "ranks-diverged", report.render()
    assert report.settings["allreduces_per_window"] == [0, 0, 0]


def test_failing_rank_reported_with_its_error():
    with pytest.raises(VerifyError, match="rank 1 failed: .*rank one is broken"):
        run(cases.ddp_rank1_raises, timeout=30)
    assert_no_children()


def test_hanging_rank_reported_within_timeout():
    started = time.monotonic()
    with pytest.raises(VerifyError, match=r"did not finish within 3 s: .*rank 1 at verify_loop_cases.py:\d+ in ddp_rank1_hangs"):
        run(cases.ddp_rank1_hangs, timeout=3)
    assert time.monotonic() - started < 15
    assert_no_children()


def test_uneven_shards_rejected():
    with pytest.raises(VerifyError, match="world_size=2 cannot split evenly"):
        verify_loop(cases.ddp_no_sync, make_model(), micro_batches(size=3), cases.micro_loss, N, world_size=2)


def test_verify_world_size_2_matches_single_process_big_batch():
    batch = (torch.randn(16, 4), torch.randn(16, 2))
    good = verify(make_model(), batch, cases.micro_loss, N, world_size=2, device="cpu", modes=("eager",))
    assert good.ok, good.render()
    assert "matches the single-process big batch" in good.diagnosis
    bad = verify(make_model(), batch, cases.micro_loss, N, scaling="none", world_size=2, device="cpu",
                 modes=("eager",))
    assert bad.settings["findings"][0] == "loss-not-divided"
    assert bad.mode("ddp").scale == pytest.approx(4.0, rel=1e-4)


def test_verify_world_size_2_keeps_every_argument():
    # compiled mode compiles the DDP module on every rank with the given backend.
    batch = (torch.randn(16, 4), torch.randn(16, 2))
    report = verify(make_model(), batch, cases.micro_loss, N, world_size=2, device="cpu",
                    modes=("eager", "compiled"), compile_backend="aot_eager", seed=3)
    assert report.ok, report.render()
    assert [m.mode for m in report.modes] == ["ddp", "ddp compiled"]
    assert report.settings["compile_backend"] == "aot_eager" and report.settings["seed"] == 3
    bad = verify(make_model(), batch, cases.micro_loss, N, scaling="none", world_size=2, device="cpu",
                 modes=("compiled",), compile_backend="aot_eager")
    assert bad.verdict == "mismatch" and "loss not divided" in bad.diagnosis, bad.render()
    assert bad.mode("ddp compiled").scale == pytest.approx(4.0, rel=1e-4)
    with pytest.raises(VerifyError, match="item_counts_fn raised ZeroDivisionError"):
        verify(make_model(), batch, cases.micro_loss, N, scaling="none", world_size=2, device="cpu",
               modes=("eager",), item_counts_fn=lambda mb: 1 // 0)


@pytest.mark.parametrize("modes", [("eager", "jit"), ()])
def test_verify_world_size_2_validates_modes(modes):
    with pytest.raises(VerifyError, match="modes must be a non-empty subset"):
        verify(make_model(), (torch.randn(16, 4), torch.randn(16, 2)), cases.micro_loss, N, world_size=2,
               modes=modes)


def test_spawn_with_functions_from_a_file_imported_by_path():
    # GPUs need spawn (CUDA does not survive fork). A target file imported by path, as
    # `accumcheck verify path/to/file.py:target` does, is loaded again in each spawned rank.
    path = Path(__file__).resolve().parents[2] / "fixtures" / "verify_loop_demo.py"
    spec = importlib.util.spec_from_file_location("_accumcheck_test_spawn_target", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        report = verify_loop(**{**module.ddp(), "start_method": "spawn", "timeout": 60})
    finally:
        del sys.modules[spec.name]
    assert report.ok, report.render()
    assert report.settings["allreduces_per_window"] == [1, 1, 1]


class _WithUnusedLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.used = torch.nn.Linear(4, 2)
        self.unused = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.used(x)


def test_unused_parameters_need_find_unused_and_are_said_so():
    with pytest.raises(VerifyError, match=r"find_unused_parameters=True to verify_loop") as info:
        verify_loop(cases.ddp_no_sync, _WithUnusedLayer(), micro_batches(), cases.micro_loss, N, world_size=2,
                    device="cpu", timeout=30)
    assert "\n" not in str(info.value)
    report = verify_loop(cases.ddp_no_sync, _WithUnusedLayer(), micro_batches(), cases.micro_loss, N, world_size=2,
                         device="cpu", find_unused_parameters=True)
    assert report.ok, report.render()
    assert_no_children()
