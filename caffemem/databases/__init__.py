"""Read-only readers of the databases Caffe's Data layers read: the first record of an
LMDB (:mod:`caffemem.databases.lmdb`) or a LevelDB (:mod:`caffemem.databases.leveldb`), as
Caffe's cursor sees it after SeekToFirst.

Why our own readers rather than the field's libraries: LevelDB has no read-only mode
(opening a folder writes its LOCK, LOG, and on recovery a new table and MANIFEST, through
any link the folder holds: issue 31), and the lmdb binding maps the file, so a size field
past its end kills the process with SIGBUS.  Here a database is only ever read: every
file is opened read-only and non-blocking, refused unless it is a regular file (from the
opened descriptor: a FIFO swapped in cannot block), read with bounded ``pread`` calls whose
every offset and size is checked against the file first, and nothing is ever written,
locked or linked.  Every inconsistency is a :class:`DatabaseError` naming the user's path.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import BinaryIO

# How a reader opens one of the database's files: (path, what it is) -> the file, opened
# read-only; raises OSError (as os.open does) or DatabaseError (not a regular file).
Opener = Callable[[str, str], BinaryIO]

# The most bytes one read may take (a block, a value): protobuf's own limit on a message,
# which is what the value becomes (a Datum).
MAX_READ_BYTES = (1 << 31) - 1


class DatabaseError(Exception):
    """The database cannot be read: its message names the user's path and says why."""


class RegularFile:
    """One file of a database, opened by an :data:`Opener`: reads at offsets, each checked
    against the file's size as it was opened (a read past it is a clear error, never a
    signal or a short read taken for data)."""

    def __init__(self, handle: BinaryIO, path: str):
        self.handle, self.path = handle, path
        self.size = os.fstat(handle.fileno()).st_size

    @classmethod
    def open(cls, opener: Opener, path: str, what: str) -> RegularFile:
        """The file at ``path`` (``what`` it is, for the opener's refusals); raises
        FileNotFoundError when it is missing (the caller says what that means), and
        DatabaseError when it cannot be opened."""
        try:
            return cls(opener(path, what), path)
        except FileNotFoundError:
            raise
        except OSError as error:
            raise DatabaseError(f"{path} cannot be opened: {error.strerror or error}") from None

    def close(self) -> None:
        self.handle.close()

    def __enter__(self) -> RegularFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, offset: int, size: int, what: str) -> bytes:
        """``size`` bytes at ``offset``; raises DatabaseError (naming ``what``) when they
        are not all inside the file."""
        if offset < 0 or size < 0 or offset + size > self.size:
            raise DatabaseError(f"{what} ({size} bytes at byte {offset}) lies beyond the end of {self.path} ({self.size} bytes)")
        if size > MAX_READ_BYTES:
            raise DatabaseError(f"{what} in {self.path} is {size} bytes, more than caffemem reads ({MAX_READ_BYTES})")
        chunks, done = [], 0
        while done < size:
            try:
                chunk = os.pread(self.handle.fileno(), min(size - done, 1 << 26), offset + done)
            except OSError as error:
                raise DatabaseError(f"{self.path} cannot be read: {error.strerror or error}") from None
            if not chunk:
                raise DatabaseError(f"{self.path} ended at byte {offset + done} while {what} was read (did it shrink?)")
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)


def varint(data: bytes | memoryview, position: int, bits: int = 64) -> tuple[int, int]:
    """A little-endian base-128 varint at ``position`` and the position after it
    (google/leveldb util/coding.cc GetVarint32/GetVarint64: at most 5 or 10 bytes).
    Raises ValueError when it is cut short or longer than ``bits``."""
    result, shift = 0, 0
    while shift < bits:
        if position >= len(data):
            raise ValueError("a varint is cut short")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if result >= 1 << bits:
                raise ValueError(f"a varint is longer than {bits} bits")
            return result, position
        shift += 7
    raise ValueError(f"a varint is longer than {bits} bits")


U16, U32, U64 = struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<Q")
