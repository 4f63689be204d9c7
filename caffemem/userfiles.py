"""The user's files, as caffemem opens them: regular files only, read-only, never
blocking, and every one noted (issue 31).

- What is not a regular file is refused from the opened descriptor: a FIFO would block,
  /dev/zero would never end, a tape drive would rewind, and a path swapped for a FIFO
  between a check and the open is caught too.
- A kernel file of /proc or /sys (a size of 0: unknown) is refused unread: /proc/kmsg
  blocks, and each read takes messages from the kernel's log.
- Every file a run reads is noted (:func:`note_read`, by device and inode, so links and
  hard links are the same file): no output of the run may land on one (a report over the
  config it read, an HTML page over an ImageData list; prototxt/write.py asks
  :func:`read_by_this_run`).

Below every layer of the package (schema's fork trees, prototxt's nets, passes' data
sources all open files through it).
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

from caffemem.errors import CaffememError, Location


def refuse_special(mode: int, what: str, where: Location) -> None:
    """What is not a regular file, refused with what it is and what to do."""
    if stat.S_ISDIR(mode):
        raise CaffememError(f"is a directory, not a {what}", where)
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise CaffememError(f"is a device, not a {what}", where)
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        raise CaffememError(f"is a {'FIFO (named pipe)' if stat.S_ISFIFO(mode) else 'socket'}, not a {what}: save it to a regular file first", where)
    if not stat.S_ISREG(mode):
        raise CaffememError("is not a regular file", where)


def is_kernel_file(status: os.stat_result) -> bool:
    """A file of /proc or /sys that gives no size: its content is made when it is read,
    and reading may wait or take something away (/proc/kmsg)."""
    if status.st_size != 0:
        return False
    for mount in ("/proc", "/sys"):
        try:
            if os.stat(mount).st_dev == status.st_dev:
                return True
        except OSError:
            continue
    return False


# (st_dev, st_ino) of every file the running command has read; emptied as a command starts.
_READ: set[tuple[int, int]] = set()


def note_read(status: os.stat_result) -> None:
    """Remember that this run read the file ``status`` describes (an output may not land
    on it)."""
    _READ.add((status.st_dev, status.st_ino))


def note_read_path(path: str | os.PathLike) -> None:
    """:func:`note_read` for a path (links followed); a path that cannot be stat'ed was not
    read."""
    try:
        note_read(os.stat(path))
    except (OSError, ValueError):
        pass


def read_by_this_run(path: str | os.PathLike) -> bool:
    """Whether ``path`` (links followed) is a file this run has read."""
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return False
    return (status.st_dev, status.st_ino) in _READ


def reads() -> frozenset[tuple[int, int]]:
    """What this process has noted, to hand to another (a `check --jobs` worker's to its
    parent)."""
    return frozenset(_READ)


def note_reads(files: frozenset[tuple[int, int]]) -> None:
    """Take another process's :func:`reads` as this run's."""
    _READ.update(files)


def forget_reads() -> None:
    """A command starts: nothing read yet."""
    _READ.clear()


def open_input(file: str | os.PathLike, what: str, where: Location | None = None) -> BinaryIO:
    """``file`` opened read-only for reading part of it, after refusing what is not a
    regular file (from the opened descriptor: a path swapped for a FIFO between a check
    and the open cannot block); noted as read.  Raises CaffememError naming ``where``
    (default: the file); FileNotFoundError and other OSErrors are the caller's."""
    where = where or Location(file=os.fsdecode(file))
    descriptor = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        status = os.fstat(descriptor)
        refuse_special(status.st_mode, what, where)
        if is_kernel_file(status):
            raise CaffememError(f"is a kernel file (/proc, /sys), not a {what}: save it to a regular file first", where)
    except BaseException:
        os.close(descriptor)
        raise
    note_read(status)
    return os.fdopen(descriptor, "rb")
