"""Start one process per rank, collect what each returns, and never leave a process behind.

A rank that raises is reported with its error; a rank that does not finish within the timeout is
reported as hung. Either way the remaining ranks are terminated (they would otherwise wait forever
in a collective for the dead one), and every process is joined before returning.
"""

from __future__ import annotations

import ctypes
import faulthandler
import importlib.machinery
import importlib.util
import io
import multiprocessing.connection
import os
import pickle
import pickletools
import re
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gradcheck_accum.verifier.errors import VerifyError
from gradcheck_accum.verifier.user_errors import one_line, user_frame


class RankFailure(VerifyError):
    """A rank raised, died or hung; the message names the rank and its error in one line."""


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def default_start_method(device_type: str) -> str:
    # fork skips re-importing torch in every rank (seconds each); CUDA cannot survive a fork.
    if device_type == "cpu" and "fork" in mp.get_all_start_methods():
        return "fork"
    return "spawn"


def run_ranks(
    worker: Callable[..., Any],
    args: tuple,
    world_size: int,
    *,
    backend: str,
    timeout: float,
    start_method: str,
) -> list[Any]:
    """Run ``worker(rank, world_size, *args)`` in ``world_size`` processes inside a process group.

    Returns each rank's return value, in rank order. Raises RankFailure when a rank raises, dies or
    does not finish within ``timeout`` seconds.
    """
    # fork hands the objects over as they are; spawn needs them pickled (see PickledJob).
    job: Any = PickledJob.of(worker, args) if start_method == "spawn" else (worker, args)
    ctx = mp.get_context(start_method)
    port = free_loopback_port()
    conns, procs = [], []
    with tempfile.TemporaryDirectory(prefix="accumcheck-ranks-") as stacks_dir:
        stacks = [os.path.join(stacks_dir, f"rank{rank}.txt") for rank in range(world_size)]
        try:
            for rank in range(world_size):
                parent_end, child_end = ctx.Pipe(duplex=False)
                proc = ctx.Process(
                    target=_rank_main,
                    args=(rank, world_size, port, backend, timeout, job, child_end, stacks[rank]),
                    daemon=True,
                    name=f"accumcheck-rank{rank}",
                )
                proc.start()
                child_end.close()
                conns.append(parent_end)
                procs.append(proc)
            return _collect(procs, conns, timeout, stacks, start_method)
        finally:
            _stop_all(procs)
            for conn in conns:
                conn.close()


# Once one rank fails, the others usually fail soon after with a secondary communication error;
# wait this long for them so the root cause can be reported rather than the first symptom.
_FAILURE_GRACE_S = 2.0
_SECONDARY = ("connection reset", "connection closed", "broken pipe", "gloo", "nccl", "timed out")


def _collect(procs: list, conns: list, timeout: float, stacks: list[str], start_method: str) -> list[Any]:
    results: dict[int, Any] = {}
    failures: dict[int, str] = {}
    deadline = time.monotonic() + timeout
    pending = set(range(len(procs)))
    while pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            if failures:
                break
            raise RankFailure(_hang_message(sorted(pending), procs, stacks, timeout))
        waitables = [conns[r] for r in pending] + [procs[r].sentinel for r in pending]
        ready = multiprocessing.connection.wait(waitables, timeout=remaining)
        for rank in sorted(pending):
            conn, proc = conns[rank], procs[rank]
            if conn in ready or conn.poll():
                try:
                    status, payload = conn.recv()
                except EOFError:
                    status, payload = "died", None
                pending.discard(rank)
                if status == "ok":
                    results[rank] = torch.load(io.BytesIO(payload), weights_only=False)
                elif status == "error":
                    failures[rank] = f"rank {rank} failed: {payload}"
                else:
                    proc.join(0.5)
                    failures[rank] = f"rank {rank} exited without a result (exit code {proc.exitcode})"
            elif proc.sentinel in ready:
                pending.discard(rank)
                proc.join(0.5)
                failures[rank] = f"rank {rank} died (exit code {proc.exitcode}) before reporting a result"
        if failures:
            deadline = min(deadline, time.monotonic() + _FAILURE_GRACE_S)
    if failures:
        primary = [m for m in failures.values() if not any(k in m.lower() for k in _SECONDARY)]
        message = (primary or list(failures.values()))[0]
        if "before reporting" in message and start_method == "spawn":
            message += (" (under start_method='spawn' each rank re-imports the main module: guard the "
                        "script's entry point with `if __name__ == \"__main__\":`)")
        raise RankFailure(message)
    return [results[r] for r in range(len(procs))]


def _hang_message(hung: list[int], procs: list, stacks: list[str], timeout: float) -> str:
    # Ask each hung rank where it is (faulthandler dumps its stack on SIGUSR1) before killing it.
    for rank in hung:
        if procs[rank].is_alive() and procs[rank].pid:
            try:
                os.kill(procs[rank].pid, signal.SIGUSR1)
            except OSError:
                pass
    time.sleep(0.3)
    where = [f"rank {rank} at {_innermost_user_frame(stacks[rank])}" for rank in hung]
    ranks = "ranks" if len(hung) > 1 else "rank"
    return (
        f"{ranks} {', '.join(map(str, hung))} did not finish within {timeout:g} s: "
        + "; ".join(where)
        + " (a rank that skips a backward or a step leaves the others waiting in an all-reduce)"
    )


def _innermost_user_frame(stack_file: str) -> str:
    """The most recent frame outside torch and the standard library in a faulthandler dump."""
    try:
        with open(stack_file, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return "an unknown place"
    # The dump lists the current thread first, innermost frame first.
    first_thread = text.split("\n\n")[0]
    frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', first_thread)
    library = (os.path.dirname(torch.__file__), os.path.dirname(os.__file__), os.path.dirname(__file__))
    for path, line, func in frames:
        if not path.startswith(library):
            return f"{os.path.basename(path)}:{line} in {func}"
    if frames:
        path, line, func = frames[0]
        return f"{os.path.basename(path)}:{line} in {func}"
    return "an unknown place"


def _stop_all(procs: list) -> None:
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join(5)


@dataclass(frozen=True)
class PickledJob:
    """The worker and its arguments pickled by the parent, plus the modules a spawned rank must
    load from a file first: functions defined in a file imported by path (an `accumcheck verify
    path/to/file.py:target`, a script's sibling module) pickle by module name, which a fresh
    interpreter cannot import. Plain pickling also gives every rank its own copy of the tensors
    (torch.multiprocessing would share their storage between ranks)."""

    data: bytes
    preload: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, worker: Callable, args: tuple) -> "PickledJob":
        try:
            data = pickle.dumps((worker, args))
        except Exception as exc:  # noqa: BLE001 - any pickling failure gets the same advice
            raise RankFailure(
                "start_method='spawn' needs the model, loss and training functions to be picklable "
                f"(defined at module top level, not lambdas or closures): {exc}"
            ) from None
        named = {arg for _, arg, _ in pickletools.genops(data) if isinstance(arg, str)}
        preload = []
        for name in sorted(named & set(sys.modules)):
            path = getattr(sys.modules[name], "__file__", None)
            top = name.partition(".")[0]
            if name != "__main__" and path and top not in sys.builtin_module_names \
                    and importlib.machinery.PathFinder.find_spec(top, sys.path) is None:
                preload.append((name, path))
        return cls(data, tuple(preload))

    def load(self) -> tuple[Callable, tuple]:
        for name, path in self.preload:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        return pickle.loads(self.data)


def _die_with_parent() -> None:
    # Linux only: the kernel kills this rank if the parent dies, so a killed check leaves no orphan.
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass


def _rank_main(rank, world_size, port, backend, timeout, job, conn, stack_file) -> None:
    _die_with_parent()
    stack_handle = open(stack_file, "w", encoding="utf-8")  # closed when the process exits
    faulthandler.register(signal.SIGUSR1, file=stack_handle, all_threads=True)
    torch.set_num_threads(1)  # ranks share the cores; also keeps OpenMP safe after fork
    try:
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout),
        )
        try:
            worker, args = job.load() if isinstance(job, PickledJob) else job
            result = worker(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
        buffer = io.BytesIO()
        torch.save(result, buffer)
        conn.send(("ok", buffer.getvalue()))
    except BaseException as exc:  # noqa: BLE001 - the parent reports every failure, whatever it is
        # A VerifyError is already a sentence about the user's code; others get their type and frame.
        if isinstance(exc, VerifyError):
            message = one_line(str(exc), limit=600)
        else:
            message = f"{type(exc).__name__}: {one_line(str(exc), limit=600)}{user_frame(exc)}"
        try:
            conn.send(("error", message))
        except OSError:
            pass
    finally:
        conn.close()
