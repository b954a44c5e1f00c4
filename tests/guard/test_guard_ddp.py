"""The guard under DistributedDataParallel: 2 CPU processes on gloo, each running verify_loop's DDP
loops on its own shard under a guard that collects what it finds."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import gradcheck_accum
from gradcheck_accum.verifier.processes import default_start_method, run_ranks
from verifier_loop import verify_loop_cases as cases

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is needed")

N = 4
LOOPS = ["ddp_no_sync", "guarded_with_flush", "ddp_no_sync_backward_only", "ddp_never_syncs"]


def guarded_ranks(rank, world_size):
    """Each loop under a guard on this rank; returns {loop: [(kind, code, window, error), ...]}."""
    found = {}
    g = torch.Generator().manual_seed(100 + rank)
    batches = [(torch.randn(4, 4, generator=g), torch.randn(4, 2, generator=g)) for _ in range(9)]
    for name in LOOPS:
        torch.manual_seed(0)
        model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(),
                                                            torch.nn.Linear(8, 2)))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        seen = []
        with gradcheck_accum.guard(optimizer, N, model=model, on_error=seen.append) as guard:
            getattr(cases, name)(model, optimizer, batches, N)
        found[name] = [(v.kind, v.code, v.window, v.error) for v in seen]
        found[name + ":steps"] = guard.steps
    return found


@pytest.fixture(scope="module")
def found():
    return run_ranks(guarded_ranks, (), 2, backend="gloo", timeout=120, start_method=default_start_method("cpu"))


def test_no_sync_on_non_boundary_micro_batches_runs_clean(found):
    for rank in found:
        assert rank["ddp_no_sync"] == [] and rank["ddp_no_sync:steps"] == 3


def test_syncing_every_micro_batch_is_a_warning_per_window(found):
    for rank in found:
        assert rank["guarded_with_flush"][0] == ("ddp-sync-every-micro-batch", "ACC501", 1, False)
        assert {kind for kind, *_ in rank["guarded_with_flush"]} == {"ddp-sync-every-micro-batch"}


def test_no_sync_around_the_backward_only(found):
    for rank in found:
        assert rank["ddp_no_sync_backward_only"][0] == ("no-sync-misses-forward", "ACC502", 1, False)


def test_a_window_that_never_syncs_is_an_error(found):
    for rank in found:
        assert rank["ddp_never_syncs"][0] == ("ranks-diverged", None, 1, True)
        assert [w for _, _, w, _ in rank["ddp_never_syncs"]] == [1, 2, 3]
