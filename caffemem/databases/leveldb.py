"""A LevelDB's first record, read as Caffe's cursor sees it after SeekToFirst, without
opening the database with LevelDB (whose every open writes: see the package docstring).

What Caffe's ``leveldb::DB::Open`` then ``NewIterator()->SeekToFirst()`` read, and so what
is read here (google/leveldb; the format files cited are doc/log_format.md,
doc/table_format.md, db/version_edit.cc, db/dbformat.h, db/db_impl.cc, table/format.cc,
table/block.cc, db/write_batch.cc, db/filename.cc):

1. ``CURRENT`` names the MANIFEST (``MANIFEST-<number>`` and a newline).
2. The MANIFEST is a log (doc/log_format.md: 32 KiB blocks of records, each a masked
   CRC-32C, a length, a type FULL/FIRST/MIDDLE/LAST and the bytes) of VersionEdits
   (version_edit.cc: varint tags; comparator, log number, previous log number, next file
   number, last sequence, compaction pointers, deleted files and new files per level).
   Applied in order they give the live tables of each of the 7 levels and the number
   below which write-ahead logs are obsolete.  VersionSet::Recover refuses a MANIFEST
   without a next-file number, a log number or a last sequence, and one made with another
   comparator than the bytewise one Caffe uses.
3. The write-ahead logs (``<number>.log``, number >= the log number or = the previous log
   number; DBImpl::Recover), oldest first, hold WriteBatches (write_batch.cc: a sequence
   number, a count, then Put (tag 1, key, value) and Delete (tag 0, key) records; the
   n-th record has the batch's sequence + n).  A record the writer did not finish (the
   end of the file inside it) is dropped, as LevelDB drops it.
4. The tables (``<number>.ldb``, or ``.sst`` from before LevelDB 1.14; table_format.md):
   a 48-byte footer (two block handles, padding, magic 0xdb4775248b80fb57), an index block
   whose values are the data blocks' handles, data blocks; each block is followed by its
   type (0 none, 1 Snappy) and a masked CRC-32C (format.cc ReadBlock), and holds
   prefix-compressed entries then its restart points (block.cc).  Keys are internal keys
   (dbformat.h): the user key, then 8 bytes of (sequence << 8 | type), type 0 a deletion,
   1 a value.
5. The iterator merges all of them in internal-key order (user key ascending, newest
   sequence first) and shows each user key's newest entry unless it is a deletion
   (db_iter.cc); entries newer than the last sequence are not visible.

Bounded work and memory: the logs are streamed a 32 KiB block at a time and only keys are
kept (the smallest ones, :data:`WINDOW_KEYS` at most; should all of those be deleted, the
logs are read again from there, :data:`MAX_LOG_PASSES` times and :data:`MAX_LOG_ENTRIES`
entries at most, else a clear refusal), the chosen value read again at the end; a table's
blocks are read one at a time, and only one table of each level above 0 is open at once.  The
CRCs of what is used (the MANIFEST, every table block read, the log fragments of the
chosen record) are checked; a mismatch, as every other inconsistency, is an error saying
the database is corrupt, where LevelDB with Caffe's options would quietly drop a log
record and read on.
"""

from __future__ import annotations

import heapq
import itertools
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from caffemem.databases import MAX_READ_BYTES, U16, U32, U64, DatabaseError, Opener, RegularFile, crc32c, snappy, varint

NUM_LEVELS = 7  # config::kNumLevels
COMPARATOR = b"leveldb.BytewiseComparator"  # what Caffe's db_leveldb.cpp opens with (the default)
TYPE_DELETION, TYPE_VALUE = 0, 1  # dbformat.h ValueType
MAX_SEQUENCE = (1 << 56) - 1  # dbformat.h kMaxSequenceNumber

LOG_BLOCK, LOG_HEADER = 32768, 7  # log_format.h kBlockSize, kHeaderSize
ZERO, FULL, FIRST, MIDDLE, LAST = 0, 1, 2, 3, 4  # log_format.h RecordType
BATCH_HEADER = 12  # write_batch.cc kHeader: sequence (8), count (4)

FOOTER = 48  # format.h Footer::kEncodedLength
TABLE_MAGIC = 0xDB4775248B80FB57  # format.h kTableMagicNumber
BLOCK_TRAILER = 5  # format.h kBlockTrailerSize: type, CRC
NO_COMPRESSION, SNAPPY, ZSTD = 0, 1, 2  # format.h CompressionType

MAX_MANIFEST_BYTES = 1 << 26  # a MANIFEST is KBs to a few MB (a record per compaction); its CRCs read at ~5 MB/s
MAX_TABLES = 1 << 20  # live tables (2 MB each by default: 2 TB of data)
WINDOW_KEYS = 1 << 17  # log keys kept in one pass over the logs
WINDOW_BYTES = 1 << 24  # and their bytes
MAX_LOG_PASSES = 8  # passes over the logs, each past WINDOW_KEYS more deleted keys
MAX_LOG_ENTRIES = 1 << 25  # entries parsed in all passes together (a second a few million)

_NUMBERED = re.compile(r"(?:MANIFEST-([0-9]+))|(?:([0-9]+)\.(?:log|sst|ldb|dbtmp))")


class _Corrupt(Exception):
    """An inconsistency found deep in the database; :func:`first_value` says which database."""


def first_value(folder: str, opener: Opener) -> bytes | None:
    """The value of the LevelDB at ``folder`` that Caffe's cursor shows first, None when it
    holds no record.  Raises DatabaseError naming ``folder``."""
    try:
        return _first_value(folder, opener)
    except _Corrupt as error:
        raise DatabaseError(f"the LevelDB {folder} is corrupt: {error}") from None


def _first_value(folder: str, opener: Opener) -> bytes | None:
    if not os.path.isdir(folder):
        raise DatabaseError(f"{folder} is not a LevelDB (a LevelDB is a folder)")
    version = _recover(folder, opener)
    names = _listing(folder)
    missing = sorted(version.expected - names.numbers)
    if missing:  # DBImpl::Recover: "N missing files; e.g."
        raise _Corrupt(f"{len(missing)} table file(s) of its MANIFEST are missing, e.g. {missing[0]:06d}.ldb")
    logs = [path for number, path in sorted(names.logs.items()) if number >= version.log_number or number == version.prev_log_number]
    return _Merge(folder, opener, version, logs).first_value()


# ---- 1, 2: CURRENT and the MANIFEST -----------------------------------------------------


@dataclass(frozen=True)
class _Table:
    level: int
    number: int
    size: int
    smallest: bytes  # its smallest internal key: a level above 0 is read in this order


@dataclass(frozen=True)
class _Version:
    tables: tuple[_Table, ...]
    log_number: int
    prev_log_number: int
    last_sequence: int

    @property
    def expected(self) -> set[int]:
        return {table.number for table in self.tables}


def _recover(folder: str, opener: Opener) -> _Version:
    """VersionSet::Recover: the MANIFEST that CURRENT names, its edits applied in order."""
    current_path = os.path.join(folder, "CURRENT")
    try:
        handle = opener(current_path, "LevelDB CURRENT file")
    except FileNotFoundError:
        raise DatabaseError(f"{folder} is not a LevelDB (it has no CURRENT file)") from None
    except OSError as error:
        raise DatabaseError(f"{current_path} cannot be opened: {error.strerror or error}") from None
    with RegularFile(handle, current_path) as current:
        if current.size > 4096:
            raise DatabaseError(f"{folder} is not a LevelDB: its CURRENT file is {current.size} bytes, not the name of a MANIFEST")
        text = current.read(0, current.size, "the CURRENT file")
    if not text.endswith(b"\n"):  # VersionSet::Recover: "CURRENT file does not end with newline"
        raise DatabaseError(f"{folder} is not a LevelDB: its CURRENT file does not end with a newline")
    name = text[:-1].decode("ascii", "replace")
    if not re.fullmatch(r"MANIFEST-[0-9]+", name):
        raise DatabaseError(f"{folder} is not a LevelDB: its CURRENT file names {name[:80]!r}, not a MANIFEST-<number> file")
    try:
        manifest = RegularFile.open(opener, os.path.join(folder, name), "LevelDB MANIFEST")
    except FileNotFoundError:
        raise _Corrupt(f"{name}, the MANIFEST its CURRENT file names, is missing") from None
    with manifest:
        if manifest.size > MAX_MANIFEST_BYTES:
            raise _Corrupt(f"{name} is {manifest.size} bytes, more than caffemem reads ({MAX_MANIFEST_BYTES})")
        return _apply_edits(name, _LogReader(manifest, name).records())


def _apply_edits(name: str, records: Iterator[bytes]) -> _Version:
    """VersionEdit::DecodeFrom on each record, applied as VersionSet::Builder applies them."""
    live: dict[tuple[int, int], _Table] = {}
    numbers: dict[str, int] = {}
    for index, record in enumerate(records):
        try:
            _decode_edit(record, live, numbers)
        except (ValueError, IndexError) as error:
            raise _Corrupt(f"{name}: edit {index}: {error}") from None
        if len(live) > MAX_TABLES:
            raise _Corrupt(f"{name} lists over {MAX_TABLES} live tables, more than caffemem reads")
    for field_name in ("next file number", "log number", "last sequence"):  # VersionSet::Recover
        if field_name not in numbers:
            raise _Corrupt(f"{name} has no {field_name}")
    return _Version(tuple(live.values()), numbers["log number"], numbers.get("previous log number", 0), numbers["last sequence"])


def _decode_edit(record: bytes, live: dict[tuple[int, int], _Table], numbers: dict[str, int]) -> None:
    position = 0
    while position < len(record):
        tag, position = varint(record, position, 32)
        if tag == 1:  # kComparator
            comparator, position = _length_prefixed(record, position)
            if comparator != COMPARATOR:
                raise ValueError(f"it was written with the comparator {comparator[:80]!r}, not {COMPARATOR.decode()} (Caffe's)")
        elif tag in (2, 3, 4, 9):  # kLogNumber, kNextFileNumber, kLastSequence, kPrevLogNumber
            numbers[{2: "log number", 3: "next file number", 4: "last sequence", 9: "previous log number"}[tag]], position = varint(record, position)
        elif tag == 5:  # kCompactPointer: level, internal key
            position = _level(record, position)[1]
            position = _length_prefixed(record, position)[1]
        elif tag == 6:  # kDeletedFile: level, number
            level, position = _level(record, position)
            number, position = varint(record, position)
            live.pop((level, number), None)
        elif tag == 7:  # kNewFile: level, number, size, smallest, largest
            level, position = _level(record, position)
            number, position = varint(record, position)
            size, position = varint(record, position)
            smallest, position = _length_prefixed(record, position)
            position = _length_prefixed(record, position)[1]
            live[(level, number)] = _Table(level, number, size, smallest)
        else:
            raise ValueError(f"unknown tag {tag}")


def _level(data: bytes, position: int) -> tuple[int, int]:
    level, position = varint(data, position, 32)
    if level >= NUM_LEVELS:
        raise ValueError(f"level {level}, not one of LevelDB's {NUM_LEVELS}")
    return level, position


def _length_prefixed(data: bytes | memoryview, position: int) -> tuple[bytes, int]:
    length, position = varint(data, position, 32)
    if position + length > len(data):
        raise ValueError(f"a string of {length} bytes runs past the end")
    return bytes(data[position : position + length]), position + length


@dataclass(frozen=True)
class _Listing:
    numbers: set[int]  # every numbered file, whatever its kind (DBImpl::Recover's check)
    logs: dict[int, str]  # write-ahead logs by number


def _listing(folder: str) -> _Listing:
    """db/filename.cc ParseFileName over the folder's names."""
    try:
        names = os.listdir(folder)
    except OSError as error:
        raise DatabaseError(f"{folder} cannot be listed: {error.strerror or error}") from None
    numbers: set[int] = set()
    logs: dict[int, str] = {}
    for name in names:
        match = _NUMBERED.fullmatch(name)
        if match is None:
            continue
        number = int(match.group(1) or match.group(2))
        if number >= 1 << 64:  # ConsumeDecimalNumber: overflow, not a LevelDB name
            continue
        numbers.add(number)
        if name.endswith(".log"):
            logs[number] = os.path.join(folder, name)
    return _Listing(numbers, logs)


# ---- the log format: the MANIFEST and the write-ahead logs --------------------------------


class _Truncated(Exception):
    """The file ends inside a record: the writer died while writing it (log_reader.cc:
    not a corruption, the record is dropped)."""


class _LogReader:
    """The physical records of a log file (log_reader.cc ReadPhysicalRecord), a 32 KiB
    block in memory at a time."""

    def __init__(self, file: RegularFile, name: str, start: int = 0):
        self.file, self.name = file, name
        self.block_start = start - start % LOG_BLOCK
        self.position = start % LOG_BLOCK
        self.block = self._load()

    def _load(self) -> bytes:
        size = max(0, min(LOG_BLOCK, self.file.size - self.block_start))
        return self.file.read(self.block_start, size, "a log block")

    def fragment(self) -> tuple[int, int, int, memoryview] | None:
        """(type, offset of its header in the file, stored CRC, bytes) of the next physical
        record; None at the end of the file, a header or record cut short by it included."""
        while True:
            left = len(self.block) - self.position
            if left < LOG_HEADER:
                if len(self.block) < LOG_BLOCK:  # the last block: the end (or a header the writer did not finish)
                    return None
                self.block_start += LOG_BLOCK  # the rest of a block is a zero trailer
                self.position = 0
                self.block = self._load()
                continue
            offset = self.block_start + self.position
            header = self.block[self.position : self.position + LOG_HEADER]
            length, kind = U16.unpack_from(header, 4)[0], header[6]
            if LOG_HEADER + length > left:
                if len(self.block) < LOG_BLOCK:
                    return None  # the writer died in the middle of the record
                raise _Corrupt(f"{self.name}: the record at byte {offset} claims {length} bytes, past the end of its 32 KiB block")
            payload = memoryview(self.block)[self.position + LOG_HEADER : self.position + LOG_HEADER + length]
            if kind == ZERO and length == 0:  # space an mmap writer preallocated: skip the block's rest
                self.position = len(self.block)
            else:
                self.position += LOG_HEADER + length
            return kind, offset, U32.unpack_from(header)[0], payload

    def check(self, kind: int, offset: int, stored: int, payload: memoryview) -> None:
        """The record's CRC (of its type and bytes) against the stored one."""
        if crc32c.value(bytes([kind]) + bytes(payload)) != crc32c.unmask(stored):
            raise _Corrupt(f"{self.name}: the record at byte {offset} fails its checksum")

    def records(self) -> Iterator[bytes]:
        """Each logical record, every fragment's CRC checked (log::Reader::ReadRecord with
        checksums, as VersionSet::Recover reads the MANIFEST)."""
        while True:
            record = self.start_record(verify=True)
            if record is None:
                return
            try:
                data = record.read_to_end()
            except _Truncated:
                return
            yield data

    def start_record(self, verify: bool) -> _Record | None:
        """The next logical record, to be read as a stream; None at the end of the file."""
        while True:
            got = self.fragment()
            if got is None:
                return None
            kind, offset, stored, payload = got
            if kind in (FULL, FIRST):
                return _Record(self, kind, offset, payload, verify, stored)
            if kind == ZERO and not payload:
                continue
            raise _Corrupt(f"{self.name}: the record at byte {offset} is of type {kind}, where a record must start (FULL or FIRST)")


@dataclass
class _Record:
    """One logical record, read as a stream across its fragments (FIRST, MIDDLE..., LAST):
    a WriteBatch may be hundreds of MB."""

    reader: _LogReader
    kind: int  # of the fragment being read
    start: int  # the file offset of the record's first fragment
    fragment: memoryview
    verify: bool  # check the CRC of every fragment read from (else of those :meth:`read` touches with check=True)
    stored: int  # the fragment's CRC, masked
    checked: bool = False
    used: int = 0  # bytes of the fragment consumed
    position: int = 0  # bytes of the record consumed
    fragment_offset: int = 0

    def __post_init__(self) -> None:
        self.fragment_offset = self.start

    def _next(self) -> None:
        if self.kind in (FULL, LAST):
            raise _Corrupt(f"{self.reader.name}: the record at byte {self.start} ends inside a WriteBatch entry or edit")
        got = self.reader.fragment()
        if got is None:
            raise _Truncated
        kind, offset, stored, payload = got
        if kind in (FULL, FIRST) and self.position == 0:  # log_reader.cc: an empty FIRST an older writer left at a block's end
            self.start = offset
        elif kind not in (MIDDLE, LAST):
            raise _Corrupt(f"{self.reader.name}: the record at byte {self.start} is cut by a record of type {kind} at byte {offset}")
        self.kind, self.fragment, self.used, self.fragment_offset = kind, payload, 0, offset
        self.stored, self.checked = stored, False

    def _take(self, count: int, keep: bool, check: bool) -> bytes:
        parts = []
        while count:
            if self.used == len(self.fragment):
                self._next()
                continue
            if (check or self.verify) and not self.checked:
                self.reader.check(self.kind, self.fragment_offset, self.stored, self.fragment)
                self.checked = True
            step = min(count, len(self.fragment) - self.used)
            if keep:
                parts.append(bytes(self.fragment[self.used : self.used + step]))
            self.used += step
            self.position += step
            count -= step
        return b"".join(parts)

    def read(self, count: int, check: bool = False) -> bytes:
        return self._take(count, True, check)

    def skip(self, count: int) -> None:
        self._take(count, False, False)

    def at_end(self) -> bool:
        """Whether every byte of the record has been read."""
        while self.used == len(self.fragment):
            if self.kind in (FULL, LAST):
                return True
            self._next()
        return False

    def read_to_end(self) -> bytes:
        parts = []
        while not self.at_end():
            parts.append(self.read(len(self.fragment) - self.used))
        return b"".join(parts)

    def varint(self, bits: int) -> int:
        result, shift = 0, 0
        while shift < bits:
            byte = self.read(1)[0]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                if result >= 1 << bits:
                    break
                return result
            shift += 7
        raise _Corrupt(f"{self.reader.name}: the record at byte {self.start} holds a varint longer than {bits} bits")


# ---- 3: the write-ahead logs' WriteBatches ----------------------------------------------


# Where a Put's value lies, to read it again: the log, its record's offset, the entry's
# offset in the record (its tag), the value's offset and length (a plain tuple: one is made
# for each entry of the logs).
_LogEntry = tuple[str, int, int, int, int]
# A log entry as the window takes it: key, sequence, type, where.
_Pending = tuple[bytes, int, int, _LogEntry]
PENDING_ENTRIES = 1 << 14  # a record's entries handed to the window this many at a time


def _batch(record: _Record, log: str, window: _Window, out: list[_Pending], flush: Callable[[], None]) -> tuple[int, int]:
    """Each entry of a WriteBatch record (write_batch.cc WriteBatch::Iterate) that the
    window may take appended to ``out`` (``flush`` called whenever it is long), the count
    checked at the end; returns the batch's last sequence number and its count.  The
    entries inside the fragment being read are parsed there, in one loop (a log may hold
    millions); one across fragments, and every value, goes through the record."""
    name = record.reader.name
    head = record.read(BATCH_HEADER)
    if len(head) < BATCH_HEADER:  # DBImpl::RecoverLogFile: "log record too small"
        raise _Corrupt(f"{name}: the record at byte {record.start} is too small for a WriteBatch")
    sequence, count = U64.unpack_from(head)[0], U32.unpack_from(head, 8)[0]
    if sequence + count > MAX_SEQUENCE:
        raise _Corrupt(f"{name}: the WriteBatch at byte {record.start} has sequence numbers past LevelDB's largest")
    start, found = record.start, 0
    while not record.at_end():
        data, base = bytes(record.fragment[record.used :]), record.position
        size, position, crossing = len(data), 0, False
        floor, horizon = window.floor, window.horizon
        while position < size:  # the entries that lie whole in this fragment
            tag = data[position]
            if tag > TYPE_VALUE:
                raise _Corrupt(f"{name}: the WriteBatch at byte {start} has an unknown tag {tag}")
            at = position + 1
            if at < size and data[at] < 0x80:  # a length of one byte, the usual
                key_size, at = data[at], at + 1
            else:
                key_size, at = _varint32(data, at, name, start)
            if at < 0 or at + key_size > size:
                break  # the key runs into the next fragment
            key = data[at : at + key_size]
            at += key_size
            length = 0
            if tag == TYPE_VALUE:
                if at < size and data[at] < 0x80:
                    length, at = data[at], at + 1
                else:
                    length, at = _varint32(data, at, name, start)
                    if at < 0:
                        break
            if (floor is None or key >= floor) and (horizon is None or key < horizon):  # what the window takes
                out.append((key, sequence + found, tag, (log, start, base + position, base + at, length)))
                if len(out) >= PENDING_ENTRIES:
                    flush()
                    horizon = window.horizon
            found += 1
            position = at + length
            if position > size:  # the value runs on into the next fragments
                record.skip(position)  # the record still stands at data's start
                crossing = True
                break
        if crossing:
            continue
        record.skip(position)
        if not record.at_end() and record.used < len(record.fragment):  # an entry across fragments
            entry = record.position
            tag = record.read(1)[0]
            if tag not in (TYPE_VALUE, TYPE_DELETION):
                raise _Corrupt(f"{name}: the WriteBatch at byte {start} has an unknown tag {tag}")
            key = record.read(record.varint(32))
            length = record.varint(32) if tag == TYPE_VALUE else 0
            if window.takes(key):
                out.append((key, sequence + found, tag, (log, start, entry, record.position, length)))
            found += 1
            record.skip(length)
    if found != count:
        raise _Corrupt(f"{name}: the WriteBatch at byte {start} holds {found} entries, its header says {count}")
    return sequence + count - 1, count


def _varint32(data: bytes, position: int, name: str, start: int) -> tuple[int, int]:
    """A varint32 at ``position`` and the position after it; -1 for the position when
    ``data`` ends first (GetVarint32: at most 5 bytes)."""
    result, shift, size = 0, 0, len(data)
    while position < size:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result >= 1 << 32:
                break
            return result, position
        shift += 7
        if shift > 28:
            break
    else:
        return 0, -1
    raise _Corrupt(f"{name}: the WriteBatch at byte {start} holds a length longer than 32 bits")


class _Window:
    """The newest log entry of each key from ``floor`` (inclusive) up, for the smallest keys
    only: keys at or above ``horizon`` were dropped to bound memory (all of them: a key
    below it has its whole history here)."""

    def __init__(self, floor: bytes | None):
        self.floor = floor
        self.horizon: bytes | None = None
        self.entries: dict[bytes, tuple[int, int, _LogEntry]] = {}
        self.bytes = 0

    def takes(self, key: bytes) -> bool:
        """Whether ``key`` lies between the floor and the horizon (which only comes down)."""
        return (self.floor is None or key >= self.floor) and (self.horizon is None or key < self.horizon)

    def add(self, pending: list[_Pending]) -> None:
        """Take entries (in the order they were written: a later one is newer)."""
        floor, horizon, entries = self.floor, self.horizon, self.entries
        for key, sequence, kind, where in pending:
            if (floor is not None and key < floor) or (horizon is not None and key >= horizon):
                continue
            old = entries.get(key)
            if old is None:
                entries[key] = (sequence, kind, where)
                self.bytes += len(key)
                if len(entries) > 2 * WINDOW_KEYS or self.bytes > 2 * WINDOW_BYTES:
                    self._shrink()
                    horizon = self.horizon
            elif sequence > old[0]:
                entries[key] = (sequence, kind, where)

    def _shrink(self) -> None:
        """Keep the smallest keys (WINDOW_KEYS and WINDOW_BYTES at most, one at least); the
        first one dropped is the new horizon."""
        keys = sorted(self.entries)
        keep, total = 0, 0
        while keep < len(keys) and keep < WINDOW_KEYS and (keep == 0 or total + len(keys[keep]) <= WINDOW_BYTES):
            total += len(keys[keep])
            keep += 1
        self.horizon = keys[keep]
        for key in keys[keep:]:
            del self.entries[key]
        self.bytes = total


# ---- 4: the tables -----------------------------------------------------------------------


def _block(file: RegularFile, name: str, handle: bytes | memoryview, table_size: int) -> bytes:
    """A block's contents (format.cc ReadBlock), its CRC checked and Snappy undone."""
    try:
        offset, position = varint(handle, 0)
        size = varint(handle, position)[0]
    except ValueError:
        raise _Corrupt(f"{name}: a bad block handle") from None
    if offset + size + BLOCK_TRAILER > table_size:
        raise _Corrupt(f"{name}: a block of {size} bytes at byte {offset} runs past the table's {table_size} bytes")
    data = file.read(offset, size + BLOCK_TRAILER, "a table block")
    if crc32c.value(data[: size + 1]) != crc32c.unmask(U32.unpack_from(data, size + 1)[0]):
        raise _Corrupt(f"{name}: the block at byte {offset} fails its checksum")
    kind = data[size]
    if kind == NO_COMPRESSION:
        return data[:size]
    if kind == SNAPPY:
        try:
            return snappy.decompress(memoryview(data)[:size], MAX_READ_BYTES)
        except snappy.SnappyError as error:
            raise _Corrupt(f"{name}: the Snappy block at byte {offset} is corrupt: {error}") from None
    if kind == ZSTD:
        raise _Corrupt(f"{name}: the block at byte {offset} is compressed with zstd (LevelDB 1.24+), which caffemem does not read; pass --input")
    raise _Corrupt(f"{name}: the block at byte {offset} has an unknown compression type {kind}")


def _block_entries(block: bytes, name: str) -> Iterator[tuple[bytes, memoryview]]:
    """(key, value) of each entry of a block from restart point 0 on (block.cc
    Block::Iter::SeekToFirst, ParseNextKey)."""
    if len(block) < 4:
        raise _Corrupt(f"{name}: a block of {len(block)} bytes, too short for its restart count")
    restarts = U32.unpack_from(block, len(block) - 4)[0]
    if restarts > (len(block) - 4) // 4:
        raise _Corrupt(f"{name}: a block claims {restarts} restart points, more than its {len(block)} bytes hold")
    if restarts == 0:
        return
    limit = len(block) - (1 + restarts) * 4
    position = U32.unpack_from(block, limit)[0]
    view, key = memoryview(block), b""
    while position < limit:
        try:
            shared, position = varint(view[:limit], position, 32)
            own, position = varint(view[:limit], position, 32)
            length, position = varint(view[:limit], position, 32)
        except ValueError:
            raise _Corrupt(f"{name}: a bad entry in a block") from None
        if shared > len(key) or position + own + length > limit:
            raise _Corrupt(f"{name}: a bad entry in a block")
        key = key[:shared] + bytes(view[position : position + own])
        yield key, view[position + own : position + own + length]
        position += own + length


def _internal(key: bytes, name: str) -> tuple[bytes, int]:
    """(user key, sequence << 8 | type) of an internal key (dbformat.h ParseInternalKey)."""
    if len(key) < 8 or key[-8] > TYPE_VALUE:
        raise _Corrupt(f"{name}: a corrupted internal key")
    return key[:-8], U64.unpack_from(key, len(key) - 8)[0]


def _table_entries(folder: str, opener: Opener, table: _Table) -> Iterator[tuple[bytes, int, memoryview]]:
    """(user key, packed sequence and type, value) of every entry of a table, in order."""
    name = f"{table.number:06d}.ldb"
    try:
        file = RegularFile.open(opener, os.path.join(folder, name), "LevelDB table")
    except FileNotFoundError:  # TableCache::FindTable: the pre-1.14 name
        name = f"{table.number:06d}.sst"
        try:
            file = RegularFile.open(opener, os.path.join(folder, name), "LevelDB table")
        except FileNotFoundError:
            raise _Corrupt(f"its table {table.number:06d}.ldb is missing") from None
    with file:
        if table.size < FOOTER or table.size > file.size:
            raise _Corrupt(f"{name} is {file.size} bytes; its MANIFEST says {table.size}, and a table has at least {FOOTER}")
        footer = file.read(table.size - FOOTER, FOOTER, "the table's footer")
        if U64.unpack_from(footer, FOOTER - 8)[0] != TABLE_MAGIC:
            raise _Corrupt(f"{name} is not a table (bad magic number)")
        try:
            position = varint(footer, varint(footer, 0)[1])[1]  # the metaindex handle, skipped
        except ValueError:
            raise _Corrupt(f"{name}: a bad block handle in its footer") from None
        index = _block(file, name, footer[position:], table.size)
        for _, block_handle in _block_entries(index, name):
            for key, value in _block_entries(_block(file, name, block_handle, table.size), name):
                user, packed = _internal(key, name)
                yield user, packed, value


def _level_entries(folder: str, opener: Opener, tables: list[_Table]) -> Iterator[tuple[bytes, int, memoryview]]:
    """A level above 0: its tables do not overlap, read one after another by smallest key."""
    ordered = sorted(tables, key=lambda table: _order(table.smallest))
    return itertools.chain.from_iterable(_table_entries(folder, opener, table) for table in ordered)


def _ordered(entries: Iterator[tuple[bytes, int, memoryview]], source: int) -> Iterator[tuple[tuple[bytes, int, int, int], memoryview]]:
    """A source's entries keyed for the merge, each after the one before in internal-key
    order (else the source is corrupt: a table's keys, or a level's tables, overlap)."""
    previous: tuple[bytes, int] | None = None
    for serial, (user, packed, value) in enumerate(entries):
        if previous is not None and (user, -packed) <= previous:
            raise _Corrupt("the keys of its tables are out of order")
        previous = (user, -packed)
        yield (user, -packed, source, serial), value


def _order(internal_key: bytes) -> tuple[bytes, int]:
    if len(internal_key) < 8:
        return internal_key, 0
    return internal_key[:-8], -U64.unpack_from(internal_key, len(internal_key) - 8)[0]


def _open_log(opener: Opener, path: str) -> RegularFile:
    try:
        return RegularFile.open(opener, path, "LevelDB log")
    except FileNotFoundError:
        raise _Corrupt(f"its log {os.path.basename(path)} is listed but does not exist (a dangling link?)") from None


# ---- 5: the merge ---------------------------------------------------------------------------


class _Merge:
    """The iterator's view: every source merged by internal key, each user key's newest
    entry, deletions hiding it."""

    def __init__(self, folder: str, opener: Opener, version: _Version, logs: list[str]):
        self.folder, self.opener, self.version, self.logs = folder, opener, version, logs
        self.last_sequence = version.last_sequence
        self.passes = 0
        self.entries = 0  # log entries parsed, all passes together
        self.log_ends: dict[str, int] = {}  # where a log's last whole record ends, when the next one is cut short

    def first_value(self) -> bytes | None:
        sources = [_table_entries(self.folder, self.opener, table) for table in self.version.tables if table.level == 0]
        for level in range(1, NUM_LEVELS):
            tables = [table for table in self.version.tables if table.level == level]
            if tables:
                sources.append(_level_entries(self.folder, self.opener, tables))
        table_entries = _Peek(heapq.merge(*[_ordered(source, index) for index, source in enumerate(sources)]))
        floor: bytes | None = None
        window = self._scan_logs(floor)
        while True:
            found = self._first_live(table_entries, window)
            if found is not None or window.horizon is None:
                return found
            if self.passes >= MAX_LOG_PASSES or self.entries * (self.passes + 1) > MAX_LOG_ENTRIES * self.passes:
                raise DatabaseError(
                    f"the logs of the LevelDB {self.folder} delete more keys before its first record than caffemem reads ({self.passes} pass(es) over {self.entries // self.passes} entries); pass --input"
                )
            floor = window.horizon  # every key below it is settled: read the logs again from there
            window = self._scan_logs(floor)

    def _first_live(self, tables: _Peek, window: _Window) -> bytes | None:
        """The first live value among the keys below the window's horizon; None when none is."""
        log_keys = sorted(window.entries)
        index = 0
        while True:
            table_key = tables.key()
            log_key = log_keys[index] if index < len(log_keys) else None
            candidates = [key for key in (table_key, log_key) if key is not None]
            if not candidates:
                return None
            key = min(candidates)
            if window.horizon is not None and key >= window.horizon:
                return None
            newest: tuple[int, object] | None = None
            while tables.key() == key:
                (_, negative, _, _), value = tables.next()
                if -negative >> 8 <= self.last_sequence and (newest is None or -negative > newest[0]):
                    newest = (-negative, value)
            if log_key == key:
                sequence, kind, where = window.entries[key]
                index += 1
                if newest is None or (sequence << 8 | kind) > newest[0]:
                    newest = (sequence << 8 | kind, where)
            if newest is not None and newest[0] & 0xFF == TYPE_VALUE:
                value = newest[1]
                return self._log_value(value) if isinstance(value, tuple) else bytes(value)  # type: ignore[arg-type]

    def _scan_logs(self, floor: bytes | None) -> _Window:
        """The write-ahead logs' keys from ``floor`` up, oldest log first (their records in
        order, so a later entry is newer); the last sequence raised to the logs' own.  A
        record the writer did not finish is dropped: its entries wait in a list until it
        ends, and should a long one have been handed over already, the pass is made again
        stopping before it."""
        self.passes += 1
        entries = self.entries
        window = _Window(floor)
        pending: list[_Pending] = []
        handed: list[bool] = [False]

        def flush() -> None:
            window.add(pending)
            pending.clear()
            handed[0] = True

        for path in self.logs:
            name = os.path.basename(path)
            with _open_log(self.opener, path) as file:
                reader = _LogReader(file, name)
                while True:
                    record = reader.start_record(verify=False)
                    if record is None or record.start >= self.log_ends.get(path, file.size + 1):
                        break
                    handed[0] = False
                    try:
                        last, count = _batch(record, path, window, pending, flush)
                    except _Truncated:  # the writer died inside this record: LevelDB drops it
                        pending.clear()
                        if handed[0]:
                            self.log_ends[path] = record.start
                            self.passes -= 1
                            self.entries = entries
                            return self._scan_logs(floor)
                        break
                    window.add(pending)
                    pending.clear()
                    self.last_sequence = max(self.last_sequence, last)
                    self.entries += count
        return window

    def _log_value(self, where: _LogEntry) -> bytes:
        """The value of a Put, read again from its log, the CRCs of the fragments holding
        the batch's header and the entry checked."""
        log, start, entry, value, length = where
        name = os.path.basename(log)
        with _open_log(self.opener, log) as file:
            record = _LogReader(file, name, start).start_record(verify=False)
            if record is None or record.start != start:
                raise _Corrupt(f"{name} changed while it was read")
            try:
                record.read(BATCH_HEADER, check=True)
                record.skip(entry - BATCH_HEADER)
                record.read(value - entry, check=True)
                return record.read(length, check=True)
            except _Truncated:
                raise _Corrupt(f"{name} changed while it was read") from None


class _Peek:
    """An iterator whose next item's user key can be looked at."""

    _END = object()

    def __init__(self, iterator: Iterator):
        self.iterator = iterator
        self.head = next(iterator, self._END)

    def key(self) -> bytes | None:
        return None if self.head is self._END else self.head[0][0]

    def next(self):
        head, self.head = self.head, next(self.iterator, self._END)
        return head
