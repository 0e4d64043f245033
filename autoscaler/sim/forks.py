"""Independent simulations side by side, in forked processes: the one place the simulator runs in parallel.

A task is a callable of no argument whose value pickles (a ``RunResult``, a row of the table). ``Forks`` runs a
list of them in ``workers`` child processes forked from the caller, which therefore see every object the caller
built (the trace, the cluster, compiled policies, closures) without pickling them; each child takes the next task
from a pipe, writes its value to a file and says which task it finished on another pipe, so a child never waits
for the caller to read. ``result(i)`` returns task ``i``'s value once it is done, in whatever order the caller
asks. Every simulation is a deterministic function of its inputs (``autoscaler.sim.simulation``), so a value
computed in a child is the value the caller would have computed: the output is the same with any ``workers``
(``tests/sim/test_forks.py`` compares whole runs byte for byte).

With ``workers`` ≤ 1, or where ``os.fork`` does not exist, the tasks run in the caller, each when its result is
first asked for.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import signal
import struct
import tempfile
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Generic, TypeVar

T = TypeVar("T")

_INDEX = struct.Struct("<i")


def available_cpus() -> int:
    """The CPUs this process may run on (the default number of workers)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class TaskFailed(RuntimeError):
    """A task raised in a child process; the message carries the child's traceback."""


class Forks(Generic[T]):
    """``tasks`` in up to ``workers`` forked children (see the module docstring). Use as a context manager: leaving
    it stops the children still running (an error or an interrupt in the caller) and removes their files."""

    def __init__(self, tasks: Sequence[Callable[[], T]], workers: int) -> None:
        self._tasks = list(tasks)
        self._forked = workers > 1 and len(self._tasks) > 1 and hasattr(os, "fork")
        self._workers = min(workers, len(self._tasks))
        self._values: dict[int, T] = {}
        self._done: set[int] = set()
        self._children: list[int] = []
        self._dir: Path | None = None
        self._done_r = -1

    def __enter__(self) -> Forks[T]:
        if self._forked:
            self._start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close(kill=kind is not None)

    # ----- the caller ----------------------------------------------------------------------------------
    def result(self, i: int) -> T:
        """Task ``i``'s value: computed here on first demand, or read from its child once it has finished."""
        if i not in self._values:
            if not self._forked:
                self._values[i] = self._tasks[i]()
            else:
                while i not in self._done:
                    self._read_done()
                assert self._dir is not None
                path = self._dir / f"{i}.pickle"
                ok, value = pickle.loads(path.read_bytes())
                path.unlink()
                if not ok:
                    raise TaskFailed(f"task {i} failed in a child process:\n{value}")
                self._values[i] = value
        return self._values[i]

    def close(self, *, kill: bool = False) -> None:
        """Wait for the children (or stop them, with ``kill``) and remove their files."""
        for pid in self._children:
            if kill:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
        self._children = []
        if self._done_r >= 0:
            os.close(self._done_r)
            self._done_r = -1
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _read_done(self) -> None:
        data = os.read(self._done_r, _INDEX.size)
        if len(data) < _INDEX.size:
            raise TaskFailed("a child process ended without finishing its tasks")
        self._done.add(_INDEX.unpack(data)[0])

    # ----- the children --------------------------------------------------------------------------------
    def _start(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="autoscaler-sim-"))
        task_r, task_w = os.pipe()
        self._done_r, done_w = os.pipe()
        for _ in range(self._workers):
            pid = os.fork()
            if pid == 0:  # the child: never returns to the caller's code
                code = 0
                try:
                    os.close(self._done_r)
                    os.close(task_w)
                    self._serve(task_r, done_w)
                except BaseException:  # whatever happens, the child must not return to the caller's code
                    code = 1
                finally:
                    os._exit(code)
            self._children.append(pid)
        os.close(task_r)
        os.close(done_w)
        # The task indices, in order (4 bytes each); the children take them as they go.
        os.write(task_w, b"".join(_INDEX.pack(i) for i in range(len(self._tasks))))
        os.close(task_w)

    def _serve(self, task_r: int, done_w: int) -> None:
        assert self._dir is not None
        while True:
            data = os.read(task_r, _INDEX.size)  # reads of 4 bytes from a pipe are atomic: one task per read
            if len(data) < _INDEX.size:
                return
            i = _INDEX.unpack(data)[0]
            try:
                payload = pickle.dumps((True, self._tasks[i]()), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # reported to the caller, which raises it
                payload = pickle.dumps((False, traceback.format_exc()))
            tmp = self._dir / f"{i}.part"
            tmp.write_bytes(payload)
            tmp.rename(self._dir / f"{i}.pickle")
            os.write(done_w, _INDEX.pack(i))


def run_all(tasks: Sequence[Callable[[], T]], workers: int) -> list[T]:
    """Every task's value, in task order (see ``Forks``)."""
    with Forks(tasks, workers) as running:
        return [running.result(i) for i in range(len(tasks))]
