"""The one way every command reads a file the user names: bounded, regular files only, one-line errors.

``read_bytes`` / ``read_text`` / ``open_text`` refuse, before reading a byte:

- anything that is not a regular file: a FIFO (``mkfifo``; reading it blocks until a writer comes, which
  hung ``validate`` and ``simulate``), a character device (``/dev/zero`` never ends, ``/dev/tty`` waits for
  the keyboard), a socket, a directory. The file is opened with ``O_NONBLOCK`` and checked with ``fstat`` on
  the descriptor, so there is no window between the check and the open, and opening a FIFO does not block;
- a file larger than the caller's limit (``stat`` first; then at most ``limit + 1`` bytes are read, since
  ``/proc`` files report size 0).

Errors are ``InputError``: one line, ``PATH: what is wrong; what to do``. The callers add no traceback.
"""

from __future__ import annotations

import io
import os
import stat
import zlib
from pathlib import Path

#: Policy files, controller config, the simulator's cluster and profile files (YAML).
MAX_YAML_BYTES = 256 * 1024
#: Request and metric traces (CSV, JSON): a week of 15 s samples of a few signals is a few MiB; the bundled
#: Azure traces are 0.3 and 0.7 MiB. At the limit (3.8 million request rows) `simulate` peaked at 953 MiB RSS
#: and took 150 s here (1 h window, 720,000 requests), so a larger file is refused rather than risk the machine.
MAX_TRACE_BYTES = 64 * 1024 * 1024


class InputError(Exception):
    """A file that cannot be used as input; ``str()`` is one line, ``PATH: reason`` (``reason`` alone for callers
    that print the path their own way, e.g. FILE:LINE:COL problems)."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = str(path), reason


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def _open_checked(path: str | Path, *, limit: int, what: str) -> int:
    """A descriptor of ``path`` once it is known to be a regular file within ``limit`` bytes."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except OSError as exc:
        raise InputError(path, f"cannot open: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(path, f"is {_kind(info.st_mode)}, not a regular file; pass a {what} file")
        if info.st_size > limit:
            raise InputError(path, f"{info.st_size:,} bytes is larger than the {_size(limit)} limit for a {what} file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _size(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n >= 1024 * 1024 else f"{n // 1024} KiB"


def read_bytes(path: str | Path, *, limit: int, what: str) -> bytes:
    """At most ``limit`` bytes of the regular file ``path``; ``InputError`` otherwise."""
    fd = _open_checked(path, limit=limit, what=what)
    chunks: list[bytes] = []
    wanted = limit + 1  # one byte past the limit: /proc files report size 0
    try:
        # Plain reads on the descriptor, not a buffered file object around it: loading 5,000 policy files,
        # building that object was a fifth of the reading.
        while wanted > 0:
            chunk = os.read(fd, wanted)
            if not chunk:
                break
            chunks.append(chunk)
            wanted -= len(chunk)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if len(data) > limit:
        raise InputError(path, f"larger than the {_size(limit)} limit for a {what} file")
    return data


#: The first two bytes of a gzip stream (RFC 1952).
GZIP_MAGIC = b"\x1f\x8b"


def read_text(path: str | Path, *, limit: int, what: str, encoding: str = "utf-8-sig") -> str:
    """The text of ``path`` (UTF-8; a BOM is dropped); ``InputError`` also for bytes that are not UTF-8. A gzip
    file (traces are often published compressed) is read decompressed, within the same ``limit`` once
    decompressed (a small file can expand a thousandfold)."""
    data = read_bytes(path, limit=limit, what=what)
    if data[:2] == GZIP_MAGIC:
        data = _gunzip(data, path, limit=limit, what=what)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(
            f"{path}:{line}", f"not UTF-8 text (byte 0x{data[exc.start]:02x}); expected a {what} file"
        ) from None


def _gunzip(data: bytes, path: str | Path, *, limit: int, what: str) -> bytes:
    """``data`` decompressed (every gzip member), at most ``limit`` bytes; ``InputError`` otherwise."""
    out: list[bytes] = []
    size = 0
    rest = data
    try:
        while rest:
            member = zlib.decompressobj(wbits=31)
            out.append(member.decompress(rest, limit + 1 - size))
            size += len(out[-1])
            if size > limit or member.unconsumed_tail:
                raise InputError(path, f"larger than the {_size(limit)} limit for a {what} file once decompressed")
            if not member.eof:
                raise InputError(path, "a gzip file cut short; expected a whole gzip file or plain text")
            rest = member.unused_data
    except zlib.error as exc:
        raise InputError(path, f"not a valid gzip file ({exc}); expected a {what} file") from None
    return b"".join(out)


def open_text(path: str | Path, *, limit: int, what: str) -> io.TextIOWrapper:
    """A text stream (UTF-8, BOM dropped, ``newline=""`` as ``csv`` wants) over the regular file ``path``. A gzip
    file is refused with what to do: a stream is read as it comes, so its decompressed size could not be
    bounded before reading (``read_text`` decompresses within its limit)."""
    fd = _open_checked(path, limit=limit, what=what)
    try:
        head = os.pread(fd, 2, 0)
    except OSError:
        head = b""
    if head == GZIP_MAGIC:
        os.close(fd)
        raise InputError(path, f"gzip-compressed; decompress it first (gunzip -k {path}) and pass the {what} file")
    return io.TextIOWrapper(os.fdopen(fd, "rb"), encoding="utf-8-sig", newline="")


def check_regular(path: str | Path, *, what: str) -> None:
    """Refuse ``path`` unless it is a regular file (for files a library reads itself, e.g. a kubeconfig)."""
    os.close(_open_checked(path, limit=2**62, what=what))
