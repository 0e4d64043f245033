"""Work done by a forked child on the machine's other core, its result sent back through a pipe.

Used where an offline command has work that splits (``validate`` checks half of its files in a child). A fork
shares everything the parent has imported, so the child starts at once, with no interpreter start-up or imports of
its own.

The child never returns into the caller's code: it leaves by ``os._exit`` whatever happens. Its answer is a
pickle through our own pipe; a child that dies without answering (killed, out of memory) answers nothing, and
the caller then does the work itself, so every outcome, error messages included, is what the work gives when
done in process. Nothing here forks where it is unsafe: without ``os.fork``, or while other threads run (a
fork could copy a lock held by one of them, which nobody would ever release in the child).
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
from collections.abc import Callable
from typing import Any


def can_fork() -> bool:
    """Whether a child may be forked here (see the module docstring)."""
    return hasattr(os, "fork") and threading.active_count() == 1


def cores() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class Child:
    """``work(*args)`` computed by a forked child. ``result()`` gives its value, or ``None`` when the child
    gave none (it failed, died, or could not be forked: ``started`` is False then): the caller does the work
    itself. Use as a context manager, or call ``close`` (the child is reaped in every case)."""

    def __init__(self, work: Callable[..., Any], *args: Any) -> None:
        self._pid: int | None = None
        self._answer = -1
        if not can_fork():
            return
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # the child must not write the parent's buffered output a second time
        reading, writing = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the caller's code
            code = 1
            try:
                os.close(reading)
                value = work(*args)
                write_all(writing, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
                code = 0
            finally:
                os._exit(code)
        os.close(writing)
        self._pid, self._answer = pid, reading

    @property
    def started(self) -> bool:
        return self._pid is not None

    def result(self) -> tuple[Any] | None:
        """``(value,)`` from the child, or ``None`` when it gave no answer (the caller then does the work)."""
        if self._pid is None:
            return None
        try:
            data = read_all(self._answer)
        except OSError:
            data = b""
        self.close()
        if not data:
            return None
        return (pickle.loads(data),)  # our own child's answer, through our own pipe

    def close(self) -> None:
        if self._answer >= 0:
            os.close(self._answer)
            self._answer = -1
        if self._pid is not None:
            os.waitpid(self._pid, 0)
            self._pid = None

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)
