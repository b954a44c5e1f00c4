"""Run deeply recursive work on a deep stack.

libcst's parser, its visitors and code generation, and the analysis recurse once or more per level
of nesting. A few hundred terms of one expression go past Python's default recursion limit (1,000
frames), and the native parser needs more than the 8 MB of a process's main stack. Work that may
meet such code runs here, in a thread with STACK_BYTES of stack and a recursion limit to match;
nesting.py refuses what is deeper still.
"""

from __future__ import annotations

import sys
import threading
from typing import Callable, TypeVar

T = TypeVar("T")

STACK_BYTES = 512 << 20  # address space: pages are committed only as deep as a recursion goes
RECURSION_LIMIT = 50_000

_local = threading.local()
_lock = threading.Lock()
_running = 0  # deep calls under way: the recursion limit is raised while there is one
_saved_limit = sys.getrecursionlimit()


def call(function: Callable[..., T], *args) -> T:
    """function(*args) on a deep stack; its exception, if any, is raised here."""
    if getattr(_local, "deep", False):
        return function(*args)
    outcome: dict[str, object] = {}

    def run() -> None:
        _local.deep = True
        try:
            outcome["value"] = function(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
            outcome["error"] = exc

    _enter()
    try:
        with _lock:  # the stack size is a process-wide setting for threads started after it
            previous = threading.stack_size(STACK_BYTES)
            try:
                thread = threading.Thread(target=run, name="accumcheck-deep", daemon=True)
                thread.start()
            finally:
                threading.stack_size(previous)
        thread.join()
    finally:
        _leave()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


def _enter() -> None:
    global _running, _saved_limit
    with _lock:
        if _running == 0:
            _saved_limit = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_saved_limit, RECURSION_LIMIT))
        _running += 1


def _leave() -> None:
    global _running
    with _lock:
        _running -= 1
        if _running == 0:
            sys.setrecursionlimit(_saved_limit)
