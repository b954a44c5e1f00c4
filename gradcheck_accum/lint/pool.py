"""Worker processes for a run: a crash costs the file that caused it, and they end with the run.

A worker dies when native code crashes under it (a segmentation fault in a parser, the memory
killer); a plain process pool then fails every file it still held. Here the files it held run again
in a fresh pool; when a pool breaks again, the files that were under way in it run one per process,
so the file that kills its process gets an error of its own and every other file its result.

Workers also end when the run does: they ignore Ctrl-C (the main process stops them), and a thread
in each watches that the process that started it is alive, since after kill -9 of the main process
nothing else would stop them.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Iterator, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class Pool:
    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._executor = _start(workers)

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if error is None:
            self._executor.shutdown(wait=True)
        else:  # interrupted: stop now, not after every file already handed out
            stop(self._executor)

    def map(self, function: Callable[[Item], Result], items: list[Item], crashed: Callable[[Item], Result],
            chunksize: int = 1) -> Iterator[Result]:
        """function(item) for each item, in order, computed by the workers; `crashed(item, how)`
        stands for the result of an item whose process died (`how`: the signal or exit status)."""
        results = self._executor.map(function, items, chunksize=chunksize)
        done = 0
        try:
            for result in results:
                done += 1
                yield result
        except BrokenProcessPool:
            yield from self._recover(function, items[done:], crashed)

    def _recover(self, function, items, crashed) -> Iterator:
        """After a crash: every item again, at most `workers` at a time; the items under way when a
        pool breaks run alone, each in a process of its own."""
        stop(self._executor)
        self._executor = _start(self.workers)
        results: dict[int, object] = {}
        under_way: dict[Future, int] = {}
        position = 0
        for index in range(len(items)):
            while len(under_way) < self.workers and position < len(items):
                under_way[self._executor.submit(function, items[position])] = position
                position += 1
            while index not in results:
                finished, _ = wait(under_way, return_when=FIRST_COMPLETED)
                broken = [future for future in finished if isinstance(future.exception(), BrokenProcessPool)]
                for future in finished:
                    if future not in broken:
                        results[under_way.pop(future)] = future.result()
                if broken:
                    suspects = sorted(under_way.values())
                    under_way.clear()
                    stop(self._executor)
                    for suspect in suspects:
                        results[suspect] = _alone(function, items[suspect], crashed)
                    self._executor = _start(self.workers)
                    while len(under_way) < self.workers and position < len(items):
                        under_way[self._executor.submit(function, items[position])] = position
                        position += 1
            yield results.pop(index)


def _alone(function, item, crashed):
    """function(item) in a process of its own, started and reaped here rather than by an executor:
    the executor's manager thread may reap a dead worker first, and its exit status is then lost."""
    receiving, sending = multiprocessing.Pipe(duplex=False)
    process = multiprocessing.Process(target=_send_result, args=(function, item, sending, os.getpid()), daemon=True)
    process.start()
    sending.close()
    try:
        try:
            succeeded, value = receiving.recv()
        except EOFError:  # it died before it could answer
            process.join()
            return crashed(item, _how(process.exitcode))
        if not succeeded:
            raise value
        return value
    finally:
        receiving.close()
        if process.is_alive():
            process.kill()
        process.join()


def _send_result(function, item, sending, parent: int) -> None:
    _watch_parent(parent)
    try:
        answer = (True, function(item))
    except BaseException as error:  # raised again in the main process, as an executor would
        answer = (False, error)
    sending.send(answer)
    sending.close()


def _how(exitcode: int) -> str:
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit status {exitcode}"


def _start(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=workers, initializer=_watch_parent, initargs=(os.getpid(),))


def stop(executor: ProcessPoolExecutor) -> None:
    """Stop at once: pending work is dropped and the workers are killed."""
    processes = list(getattr(executor, "_processes", {}).values())  # the executor has no public handle
    executor.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.kill()
    for process in processes:
        process.join(timeout=5)


def _watch_parent(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the main process acts
    gc.enable()  # forked from a lint that turned collection off for itself (cli.lint): a worker lints many files

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="accumcheck-parent-watch", daemon=True).start()
