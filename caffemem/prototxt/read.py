"""Reading a user's file: the one way every input (net, solver, --layers, plan, baseline)
is read.  What is not a regular file is refused before any read (a FIFO would block,
/dev/zero would never end), and so is text larger than any net definition."""

from __future__ import annotations

import errno
import os
import stat

from caffemem.errors import CaffememError, Location

MAX_TEXT_BYTES = 64 * 1024 * 1024  # the default limit; --max-input-size raises it
MAX_BINARY_BYTES = 2 * 1024 * 1024 * 1024 - 1  # protobuf's own message limit


def read_input(file: str, max_text_bytes: int = MAX_TEXT_BYTES, what: str = "net or solver file") -> bytes:
    """The file's bytes, after refusing what is not a regular file and what is too big to
    be a net (no read happens then: a FIFO would block, /dev/zero would never end)."""
    where = Location(file=file)
    try:
        status = os.stat(file)
        mode = status.st_mode
        if stat.S_ISDIR(mode):
            raise CaffememError(f"is a directory, not a {what}", where)
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            raise CaffememError(f"is a device, not a {what}", where)
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            raise CaffememError(f"is a {'FIFO (named pipe)' if stat.S_ISFIFO(mode) else 'socket'}, not a {what}: save it to a regular file first", where)
        if not stat.S_ISREG(mode):
            raise CaffememError("is not a regular file", where)
        if status.st_size > MAX_BINARY_BYTES:
            raise CaffememError(f"file is {status.st_size} bytes, larger than any Caffe net can be", where)
        with open(file, "rb") as handle:
            if status.st_size > max_text_bytes and b"\x00" not in handle.read(65536):  # text, by its start
                raise CaffememError(
                    f"text file of {status.st_size} bytes is larger than any net definition ({max_text_bytes} bytes at most; --max-input-size raises it)", where
                )
            handle.seek(0)
            return handle.read()
    except FileNotFoundError:
        raise CaffememError("file not found", where) from None
    except PermissionError:
        raise CaffememError("permission denied", where) from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise CaffememError("is a symbolic link loop (the link leads back to itself): point it at the real file", where) from None
        raise CaffememError(f"cannot read: {error.strerror or error}", where) from None
