"""The rank runner on its own: results in rank order, the root cause of a failure, dead ranks."""

from __future__ import annotations

import multiprocessing

import pytest
import torch.distributed as dist

import verify_loop_cases as cases
from gradcheck_accum.verifier.processes import RankFailure, free_loopback_port, run_ranks

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is needed")


def test_dead_rank_reported_with_exit_code():
    with pytest.raises(RankFailure, match="rank 1 .*exit code 3"):
        run_ranks(cases.rank1_exits, (), 2, backend="gloo", timeout=20, start_method="fork")
    assert multiprocessing.active_children() == []


def test_root_cause_preferred_over_the_others_connection_errors():
    with pytest.raises(RankFailure, match="rank 1 failed: KeyError: 'the real cause'"):
        run_ranks(cases.rank1_raises_others_wait, (), 2, backend="gloo", timeout=20, start_method="fork")
    assert multiprocessing.active_children() == []


def test_spawn_rejects_unpicklable_functions_in_one_line():
    with pytest.raises(RankFailure, match="picklable") as info:
        run_ranks(lambda rank, world: rank, (), 2, backend="gloo", timeout=20, start_method="spawn")
    assert "\n" not in str(info.value)


def test_free_loopback_port_is_bindable():
    import socket

    port = free_loopback_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
