"""Reading a user's file: the one way every input (net, solver, --layers, plan, baseline)
is read, in bounded work and memory whatever the file is (issue 26).

- What is not a regular file is refused from its ``stat``, before it is opened: a FIFO
  would block, /dev/zero would never end, a tape drive would rewind.
- A kernel file of /proc or /sys (a size of 0: unknown) is refused unread: /proc/kmsg
  blocks, and each read takes messages from the kernel's log.
- The file is opened non-blocking and read to at most its limit: a read that would wait
  (a special file of another kind) is refused, and a file that grows while it is read
  stops at the limit.
- Text larger than any net definition (64 MiB by default) is refused after its first 64 KiB
  at most, which tell text from a binary proto; a binary proto may be up to protobuf's own
  2 GiB limit.

Every file read is noted, and :func:`open_input` opens part of a file (a list's first
line, an image's header): both live in caffemem/userfiles.py, below every layer.
"""

from __future__ import annotations

import errno
import os

from caffemem.errors import CaffememError, Location
from caffemem.userfiles import forget_reads, is_kernel_file, note_read, note_read_path, open_input, read_by_this_run, refuse_special

__all__ = ["forget_reads", "note_read", "note_read_path", "open_input", "read_by_this_run", "read_input"]

MAX_TEXT_BYTES = 64 * 1024 * 1024  # the default limit; --max-input-size raises it
MAX_BINARY_BYTES = 2 * 1024 * 1024 * 1024 - 1  # protobuf's own message limit
HEAD_BYTES = 65536  # what tells text from a binary proto
_CHUNK = 1024 * 1024


def text_with_nul(head: bytes) -> bool:
    """Text with a stray NUL in it, rather than a binary proto: protobuf's wire format puts
    field keys and lengths (control bytes) everywhere, text has none but line ends and tabs."""
    sample = head.replace(b"\x00", b"").decode("utf-8", "replace")
    usual = sum(ch.isprintable() or ch in "\n\r\t" for ch in sample)
    return usual >= 0.99 * len(sample)


def looks_binary(head: bytes) -> bool:
    """Whether a file starting with ``head`` is read as a binary proto (a NUL, and not
    mostly printable)."""
    return b"\x00" in head and not text_with_nul(head)


def read_input(file: str, max_text_bytes: int = MAX_TEXT_BYTES, what: str = "net or solver file") -> bytes:
    """The file's bytes, after refusing (unread, or after its first 64 KiB for a text that
    is too big) what is not a regular file and what is too big to be a net."""
    where = Location(file=file)
    try:
        refuse_special(os.stat(file).st_mode, what, where)
        descriptor = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(descriptor, "rb", buffering=0) as handle:
            status = os.fstat(handle.fileno())  # the file opened, should the path have changed
            refuse_special(status.st_mode, what, where)
            if is_kernel_file(status):
                raise CaffememError(f"is a kernel file (/proc, /sys), not a {what}: save it to a regular file first", where)
            note_read(status)
            if status.st_size > MAX_BINARY_BYTES:
                raise CaffememError(f"file is {status.st_size} bytes, larger than any Caffe net can be", where)
            head = _read_up_to(handle, HEAD_BYTES, where)
            limit = MAX_BINARY_BYTES if looks_binary(head) else max_text_bytes
            if max(status.st_size, len(head)) > limit:
                raise _too_big(status.st_size, limit, max_text_bytes, where)
            data = head + (_read_up_to(handle, limit + 1 - len(head), where) if len(head) == HEAD_BYTES else b"")
            if len(data) > limit:  # it grew while being read
                raise _too_big(len(data), limit, max_text_bytes, where)
            return data
    except FileNotFoundError:
        raise CaffememError("file not found", where) from None
    except PermissionError:
        raise CaffememError("permission denied", where) from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise CaffememError("is a symbolic link loop (the link leads back to itself): point it at the real file", where) from None
        raise CaffememError(f"cannot read: {error.strerror or error}", where) from None


def _too_big(size: int, limit: int, max_text_bytes: int, where: Location) -> CaffememError:
    if limit == MAX_BINARY_BYTES:
        return CaffememError(f"file is {size} bytes, larger than any Caffe net can be", where)
    return CaffememError(f"text file of {size} bytes is larger than any net definition ({max_text_bytes} bytes at most; --max-input-size raises it)", where)


def _read_up_to(handle, count: int, where: Location) -> bytes:
    """At most ``count`` bytes, fewer at the end of the file.  A read that would wait
    (O_NONBLOCK: a special file that stat called regular) is refused."""
    chunks: list[bytes] = []
    left = count
    while left > 0:
        try:
            chunk = handle.read(min(left, _CHUNK))
        except BlockingIOError:
            raise CaffememError("reading it would wait for data (a special file?): save it to a regular file first", where) from None
        if chunk is None:  # raw non-blocking read: nothing available now
            raise CaffememError("reading it would wait for data (a special file?): save it to a regular file first", where)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
