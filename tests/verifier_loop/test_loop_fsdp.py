"""Accumulation under FSDP2 (fully_shard): 2 CPU processes on gloo, started by the checker."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import verify_loop_cases as cases
from gradcheck_accum import verify_loop
from gradcheck_accum.verifier.errors import VerifyError

fsdp = pytest.importorskip("torch.distributed.fsdp")
pytestmark = [
    pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed with gloo is needed"),
    pytest.mark.skipif(not hasattr(fsdp, "fully_shard"), reason="FSDP2 (fully_shard) is needed"),
]

N = 4


def make_model():
    # Odd output sizes: FSDP2 shards dim 0 unevenly (3 rows -> 2 + 1), which the merge must undo.
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))


def micro_batches(count=9, size=4):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(size, 4, generator=g), torch.randn(size, 3, generator=g)) for _ in range(count)]


def sync_on_boundary(model, optimizer, micro_batches, n, divide=True, sync=lambda boundary: boundary):
    for i, batch in enumerate(micro_batches):
        boundary = (i + 1) % n == 0 or i + 1 == len(micro_batches)
        model.set_requires_gradient_sync(sync(boundary))
        loss = cases.micro_loss(model, batch)
        (loss / n if divide else loss).backward()
        if boundary:
            optimizer.step()
            optimizer.zero_grad()


def never_skips_sync(model, optimizer, micro_batches, n):
    sync_on_boundary(model, optimizer, micro_batches, n, sync=lambda boundary: True)


def never_syncs(model, optimizer, micro_batches, n):
    sync_on_boundary(model, optimizer, micro_batches, n, sync=lambda boundary: False)


def not_divided(model, optimizer, micro_batches, n):
    sync_on_boundary(model, optimizer, micro_batches, n, divide=False)


def run(train_fn):
    return verify_loop(train_fn, make_model(), micro_batches(), cases.micro_loss, N, world_size=2, parallel="fsdp",
                       device="cpu")


def test_gradient_sync_on_the_boundary_only_matches_with_one_reduce_scatter_per_window():
    report = run(sync_on_boundary)
    assert report.ok, report.render()
    assert report.diagnosis.startswith("on 2 FSDP ranks")
    assert report.settings["findings"] == []
    assert report.settings["reduce_scatters_per_window"] == [1, 1, 1]
    # One reduce-scatter per parameter group: each Linear is sharded on its own.
    assert report.settings["reduce_scatter_calls_per_window"] == [2, 2, 2]


def test_loop_that_never_skips_sync_matches_but_reduce_scatters_every_micro_batch():
    report = run(never_skips_sync)
    assert report.ok, report.render()  # the gradients are right; the communication is N times what it needs
    assert report.settings["findings"] == ["fsdp-sync-every-micro-batch"]
    assert report.settings["reduce_scatters_per_window"] == [4, 4, 1]
    assert "set_requires_gradient_sync(False)" in report.diagnosis


def test_loss_not_divided_is_named_under_fsdp():
    report = run(not_divided)
    assert report.settings["findings"][0] == "loss-not-divided", report.render()


def test_windows_that_never_sync_step_without_their_gradients():
    report = run(never_syncs)
    assert not report.ok
    assert report.settings["findings"][0] == "fsdp-never-synced", report.render()
    assert report.settings["reduce_scatters_per_window"] == [0, 0, 0]


def test_unknown_parallel_wrapper_is_one_clear_error():
    with pytest.raises(VerifyError, match="parallel must be one of 'ddp', 'fsdp'"):
        verify_loop(sync_on_boundary, make_model(), micro_batches(), cases.micro_loss, N, world_size=2,
                    parallel="zero3", device="cpu")
