"""Host-side reads of files that sandboxed code could have written.

A grading run, or an agent's shell, can put anything at a path the host reads later: a FIFO (a
plain ``open`` blocks until somebody writes), a symbolic link (to another file of the host, a
device whose ``open`` has side effects, a file under a path nobody meant to read), a folder,
or a file of many gigabytes. Every host-side read of such a path goes through
:func:`open_beneath`, which:

- walks from a trusted folder (``base``, which the host created and the sandbox cannot move)
  one component at a time, following no symbolic link anywhere below it;
- opens the last component as ``O_PATH`` first, so nothing but a regular file is ever really
  opened (no device or FIFO ``open`` runs), and refuses anything else;
- opens it non-blocking (a regular file read never waits);

and :func:`read_beneath` reads at most ``limit`` bytes. Both are bounded in time by the size
cap: reading a regular file does not wait on anybody.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath
from typing import IO

__all__ = ["NotARegularFile", "TooLarge", "kind_of", "open_beneath", "read_beneath"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class NotARegularFile(OSError):
    """The path is a FIFO, socket, device, folder or symbolic link (or goes through one)."""


class TooLarge(OSError):
    """The file holds more than the reader's limit."""


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, in words (``a FIFO``, ``a symbolic link``...)."""
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def open_beneath(base: Path, relative: str | os.PathLike[str]) -> IO[bytes]:
    """``base / relative`` opened for reading, if it is a regular file reached without any
    symbolic link below ``base``.

    Raises:
        FileNotFoundError: it is not there.
        NotARegularFile: it (or a folder on the way) is something else, or a symbolic link.
        ValueError: ``relative`` is absolute or climbs out of ``base``.
    """
    parts = PurePosixPath(os.fspath(relative)).parts
    if not parts or parts[0] == "/" or ".." in parts:
        raise ValueError(f"not a path below {base}: {relative}")
    folder = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, _DIR_FLAGS, dir_fd=folder)
            except OSError as exc:
                if isinstance(exc, FileNotFoundError):
                    raise
                raise NotARegularFile(
                    exc.errno, f"{relative}: {part} is not a folder reached without a link"
                ) from exc
            os.close(folder)
            folder = inner
        handle = os.open(parts[-1], _PATH_FLAGS, dir_fd=folder)
    finally:
        os.close(folder)
    try:
        mode = os.fstat(handle).st_mode
        if not stat.S_ISREG(mode):
            raise NotARegularFile(f"{relative} is {kind_of(mode)}, not a regular file")
        # Through the O_PATH handle: the very inode just checked, whatever the path says now.
        fd = os.open(f"/proc/self/fd/{handle}", _READ_FLAGS)
    finally:
        os.close(handle)
    return os.fdopen(fd, "rb")


def read_beneath(base: Path, relative: str | os.PathLike[str], limit: int) -> bytes:
    """The content of ``base / relative`` (see :func:`open_beneath`), at most ``limit`` bytes.

    Raises:
        FileNotFoundError, NotARegularFile, ValueError: as :func:`open_beneath`.
        TooLarge: the file holds more than ``limit`` bytes.
    """
    with open_beneath(base, relative) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(f"{relative} holds more than {limit} bytes")
    return data
