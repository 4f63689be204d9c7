"""caffemem/databases: the first record of an LMDB or a LevelDB, read without the libraries
(read-only, in place, bounded), equal to what the libraries' cursors give on databases the
libraries wrote, and every corruption a DatabaseError (issue 31 items 3, 7, 8, 16, 18)."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from caffemem.databases import DatabaseError, crc32c, leveldb, lmdb, snappy
from caffemem.errors import CaffememError
from caffemem.prototxt.read import open_input

lmdb_binding = pytest.importorskip("lmdb")
try:
    import plyvel
except ImportError:  # no wheel past Python 3.12
    plyvel = None
needs_plyvel = pytest.mark.skipif(plyvel is None, reason="plyvel (which writes the LevelDBs) is not installed")


def opener(path: str, what: str):
    """What the sources pass gives the readers: open_input, its refusals as DatabaseError."""
    try:
        return open_input(path, what)
    except CaffememError as error:
        raise DatabaseError(str(error)) from None


def folder_state(path: Path) -> dict:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(path.iterdir())}


# ---- CRC-32C and Snappy ---------------------------------------------------------------


def test_crc32c_of_the_standard_check_string():
    assert crc32c.value(b"123456789") == 0xE3069283  # the CRC-32C check value (RFC 3720 B.4)


def test_crc32c_of_a_long_input_joins_its_lanes_exactly():
    data = random.Random(1).randbytes(crc32c._SHORT * 3 + 12345)  # the numpy lanes, then a tail
    assert crc32c.value(data) == crc32c._bytewise(0xFFFFFFFF, data) ^ 0xFFFFFFFF


def test_a_masked_crc_unmasks_to_itself():
    assert crc32c.unmask(crc32c.mask(0x12345678)) == 0x12345678
    assert crc32c.mask(0) != 0  # util/crc32c_test.cc: Mask changes the value


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (b"\x05\x10hello", b"hello"),  # a literal of 5
        (b"\x0a\x00a\x15\x01", b"a" * 10),  # a literal, then a copy (kind 01) overlapping itself: offset 1, length 9
        (b"\x08\x0cabcd\x0e\x04\x00", b"abcdabcd"),  # a copy with a 2-byte offset (kind 10): length 4, offset 4
        (b"\x08\x0cabcd\x0f\x04\x00\x00\x00", b"abcdabcd"),  # a 4-byte offset (kind 11)
        (b"\x41\xf0\x40" + b"x" * 65, b"x" * 65),  # a literal of 65: its length-1 in one more byte (tag 60)
        (b"\x00", b""),
    ],
    ids=["literal", "overlapping-copy", "copy-2", "copy-4", "long-literal", "empty"],
)
def test_snappy_blocks_decompress(block, expected):
    assert snappy.decompress(block, 1 << 20) == expected


@pytest.mark.parametrize(
    ("block", "reason"),
    [
        (b"\x05\x01\x00", "before the output's start"),  # a copy with nothing written yet
        (b"\x04\x0cab", "runs past the block's end"),  # a literal of 4 with 2 bytes
        (b"\x03\x10hello", "more bytes than it declares"),
        (b"\x09\x10hello", "not the 9 it declares"),
        (b"\xff\xff\xff\xff\x0f", "more than caffemem reads"),  # 4 GiB declared, 5 bytes given
        (b"\x80\x80", "cut short"),
    ],
    ids=["offset-before-start", "literal-past-end", "too-long", "too-short", "declared-too-big", "length-cut"],
)
def test_a_corrupt_snappy_block_is_an_error(block, reason):
    with pytest.raises(snappy.SnappyError, match=reason):
        snappy.decompress(block, 1 << 20)


# ---- LevelDB (written by plyvel) ------------------------------------------------------------


def plyvel_first(path: Path) -> bytes | None:
    """The first value plyvel's iterator gives, read from a copy (LevelDB writes on open)."""
    copy = path.parent / (path.name + ".copy")
    shutil.copytree(path, copy)
    db = plyvel.DB(str(copy))
    try:
        return next(db.iterator(include_key=False), None)
    finally:
        db.close()
        shutil.rmtree(copy)


def random_leveldb(path: Path, rng: random.Random) -> None:
    """Puts and deletes of random keys, in the log or flushed to tables (a small write
    buffer), Snappy or not, sometimes compacted down the levels."""
    db = plyvel.DB(str(path), create_if_missing=True, write_buffer_size=rng.choice([1 << 16, 4 << 20]), compression=rng.choice([None, "snappy"]), block_size=rng.choice([256, 4096]))
    keys = [b"%08d" % rng.randint(0, 5000) for _ in range(rng.randint(0, 3000))]
    for key in keys:
        if rng.random() < 0.2:
            db.delete(key)
        else:
            db.put(key, rng.randbytes(rng.randint(0, 300)) if rng.random() < 0.5 else b"x" * rng.randint(0, 2000))
    if rng.random() < 0.3:
        db.compact_range()
    if rng.random() < 0.3:
        for key in sorted(keys)[:50]:
            db.delete(key)
    db.close()


@needs_plyvel
@pytest.mark.parametrize("seed", range(12))
def test_a_leveldb_first_value_is_plyvels(tmp_path, seed):
    path = tmp_path / "db"
    random_leveldb(path, random.Random(seed))
    before = folder_state(path)
    assert leveldb.first_value(str(path), opener) == plyvel_first(path)
    assert folder_state(path) == before


@needs_plyvel
def test_an_empty_leveldb_has_no_first_value(tmp_path):
    plyvel.DB(str(tmp_path / "db"), create_if_missing=True).close()
    assert leveldb.first_value(str(tmp_path / "db"), opener) is None


@needs_plyvel
def test_a_deleted_key_hides_its_older_value_in_a_table(tmp_path):
    db = plyvel.DB(str(tmp_path / "db"), create_if_missing=True)
    db.put(b"a", b"old")
    db.put(b"b", b"kept")
    db.compact_range()  # both values in a table...
    db.delete(b"a")  # ...the deletion in the log
    db.close()
    assert leveldb.first_value(str(tmp_path / "db"), opener) == b"kept"


def deleted_leveldb(path: Path, puts: int, deletes: int) -> None:
    """Keys 0000.. put, then the first ``deletes`` of them deleted."""
    db = plyvel.DB(str(path), create_if_missing=True)
    for i in range(puts):
        db.put(b"%04d" % i, b"v%d" % i)
    for i in range(deletes):
        db.delete(b"%04d" % i)
    db.close()


@needs_plyvel
def test_deletions_past_the_logs_key_window_are_read_in_further_passes(tmp_path, monkeypatch):
    monkeypatch.setattr(leveldb, "WINDOW_KEYS", 3)  # the logs read again after each 3 settled keys
    deleted_leveldb(tmp_path / "db", 40, 12)
    assert leveldb.first_value(str(tmp_path / "db"), opener) == b"v12"


@needs_plyvel
@pytest.mark.parametrize(("limit", "value", "passes"), [("MAX_LOG_PASSES", 2, 2), ("MAX_LOG_ENTRIES", 100, 1)], ids=["passes", "entries"])
def test_deletions_past_the_work_allowed_are_refused_not_read_for_ever(tmp_path, monkeypatch, limit, value, passes):
    monkeypatch.setattr(leveldb, "WINDOW_KEYS", 3)
    monkeypatch.setattr(leveldb, limit, value)
    deleted_leveldb(tmp_path / "db", 40, 25)  # 65 entries
    with pytest.raises(DatabaseError, match=rf"the logs of the LevelDB .*db delete more keys before its first record than caffemem reads \({passes} pass\(es\) over 65 entries\); pass --input"):
        leveldb.first_value(str(tmp_path / "db"), opener)


@needs_plyvel
def test_a_long_record_cut_short_after_its_entries_were_taken_is_dropped_all_the_same(tmp_path, monkeypatch):
    monkeypatch.setattr(leveldb, "PENDING_ENTRIES", 4)  # the window takes a record's entries 4 at a time
    db = plyvel.DB(str(tmp_path / "db"), create_if_missing=True)
    db.put(b"m", b"kept")
    with db.write_batch() as batch:  # one record: a, b, ..., then a value over several blocks
        for key in b"abcdefgh":
            batch.put(bytes([key]), b"dropped")
        batch.put(b"z", b"x" * 100000)
    db.close()
    writer_died(tmp_path / "db")
    assert leveldb.first_value(str(tmp_path / "db"), opener) == plyvel_first(tmp_path / "db") == b"kept"


def writer_died(path: Path) -> None:
    """The log's last 1000 bytes never written: its last record is cut short."""
    log = next(path.glob("*.log"))
    log.write_bytes(log.read_bytes()[:-1000])


@needs_plyvel
def test_a_log_record_the_writer_did_not_finish_is_dropped_as_leveldb_drops_it(tmp_path):
    db = plyvel.DB(str(tmp_path / "db"), create_if_missing=True)
    db.put(b"b", b"first batch")
    db.put(b"a", b"x" * 100000)  # a record over several 32 KiB blocks
    db.close()
    writer_died(tmp_path / "db")
    assert leveldb.first_value(str(tmp_path / "db"), opener) == plyvel_first(tmp_path / "db") == b"first batch"


def one_table(path: Path, value: bytes) -> None:
    """A LevelDB whose one record, key a, sits in a table."""
    db = plyvel.DB(str(path), create_if_missing=True)
    db.put(b"a", value)
    db.compact_range()
    db.close()


@needs_plyvel
def test_tables_named_as_before_leveldb_1_14_are_read(tmp_path):
    one_table(tmp_path / "db", b"in a table")
    for table in (tmp_path / "db").glob("*.ldb"):
        table.rename(table.with_suffix(".sst"))
    assert leveldb.first_value(str(tmp_path / "db"), opener) == b"in a table"


@needs_plyvel
def test_a_leveldb_made_with_another_comparator_is_refused(tmp_path):
    db = plyvel.DB(str(tmp_path / "db"), create_if_missing=True, comparator=lambda a, b: (a > b) - (a < b), comparator_name=b"another")
    db.put(b"a", b"1")
    db.close()
    with pytest.raises(DatabaseError, match=r"the LevelDB .*db is corrupt: MANIFEST-\d+: edit 0: it was written with the comparator b'another', not leveldb.BytewiseComparator"):
        leveldb.first_value(str(tmp_path / "db"), opener)


@needs_plyvel
def test_a_missing_table_is_named(tmp_path):
    one_table(tmp_path / "db", b"1")
    table = next((tmp_path / "db").glob("*.ldb"))
    table.unlink()
    with pytest.raises(DatabaseError, match=rf"1 table file\(s\) of its MANIFEST are missing, e.g. {table.name}"):
        leveldb.first_value(str(tmp_path / "db"), opener)


@needs_plyvel
@pytest.mark.parametrize(
    ("current", "reason"),
    [(None, "is not a LevelDB \\(it has no CURRENT file\\)"), (b"MANIFEST-000002", "does not end with a newline"), (b"../../etc/passwd\n", "names '../../etc/passwd', not a MANIFEST-<number> file")],
    ids=["missing", "no-newline", "outside"],
)
def test_a_current_file_that_names_no_manifest_is_refused(tmp_path, current, reason):
    plyvel.DB(str(tmp_path / "db"), create_if_missing=True).close()
    if current is None:
        (tmp_path / "db/CURRENT").unlink()
    else:
        (tmp_path / "db/CURRENT").write_bytes(current)
    with pytest.raises(DatabaseError, match=reason):
        leveldb.first_value(str(tmp_path / "db"), opener)


def mutations(path: Path, rng: random.Random, count: int):
    """The database at ``path`` with one file flipped, zeroed or cut short, ``count`` times."""
    original = {p.name: p.read_bytes() for p in path.iterdir()}
    for _ in range(count):
        name = rng.choice(sorted(n for n, data in original.items() if data and n not in ("LOCK", "LOG", "LOG.old", "lock.mdb")))
        data = bytearray(original[name])
        kind = rng.choice(["flip", "cut", "zero"])
        at = rng.randrange(len(data))
        if kind == "flip":
            data[at] ^= 1 << rng.randrange(8)
        elif kind == "cut":
            del data[at:]
        else:
            data[at : at + 8] = bytes(len(data[at : at + 8]))
        (path / name).write_bytes(bytes(data))
        yield f"{kind} {name} at {at}"
        (path / name).write_bytes(original[name])


@needs_plyvel
@pytest.mark.parametrize("seed", range(3))
def test_every_mutation_of_a_leveldb_is_read_or_refused_with_one_clear_error(tmp_path, seed):
    rng = random.Random(seed)
    path = tmp_path / "db"
    random_leveldb(path, rng)
    for mutation in mutations(path, rng, 60):
        try:
            leveldb.first_value(str(path), opener)
        except DatabaseError as error:
            assert str(path) in str(error), (mutation, error)


# ---- LMDB -----------------------------------------------------------------------------------


def binding_first(path: Path) -> bytes | None:
    with lmdb_binding.open(str(path), readonly=True, lock=False) as env, env.begin() as txn:
        cursor = txn.cursor()
        return bytes(cursor.value()) if cursor.first() else None


def write_lmdb(path: Path, transactions: list[dict[bytes, bytes | None]]) -> None:
    """Each transaction's puts (and deletes: None)."""
    with lmdb_binding.open(str(path), map_size=1 << 30) as env:
        for writes in transactions:
            with env.begin(write=True) as txn:
                for key, value in writes.items():
                    if value is None:
                        txn.delete(key)
                    else:
                        txn.put(key, value)


@pytest.mark.parametrize(
    "transactions",
    [
        [{b"a": b"small"}],
        [{b"a": b"x" * 100000, b"b": b"y"}],  # the first value on overflow pages
        [{b"%0100d" % i: b"v%d" % i for i in range(60000)}],  # branch pages 3 deep
        [{b"b": b"1", b"c": b"2"}, {b"b": None, b"a0": b"3"}, {b"a0": None}],  # the newer meta page is the state
    ],
    ids=["one", "overflow", "deep", "three-transactions"],
)
def test_an_lmdb_first_value_is_the_bindings(tmp_path, transactions):
    write_lmdb(tmp_path / "db", transactions)
    before = folder_state(tmp_path / "db")
    assert lmdb.first_value(str(tmp_path / "db"), opener) == binding_first(tmp_path / "db")
    assert folder_state(tmp_path / "db") == before


def test_an_empty_lmdb_has_no_first_value(tmp_path):
    write_lmdb(tmp_path / "db", [{b"a": b"1"}, {b"a": None}])
    assert lmdb.first_value(str(tmp_path / "db"), opener) is None


def test_an_lmdb_tree_deeper_than_lmdb_walks_is_refused(tmp_path):
    write_lmdb(tmp_path / "db", [{b"%0100d" % i: b"v" for i in range(60000)}])
    data = bytearray((tmp_path / "db/data.mdb").read_bytes())
    meta = 4096 if int.from_bytes(data[4096 + 144 : 4096 + 152], "little") > int.from_bytes(data[144:152], "little") else 0
    root = int.from_bytes(data[meta + 128 : meta + 136], "little")
    node = root * 4096 + int.from_bytes(data[root * 4096 + 16 : root * 4096 + 18], "little")
    data[node : node + 4] = (root & 0xFFFF).to_bytes(2, "little") + (root >> 16 & 0xFFFF).to_bytes(2, "little")  # the root's first child: itself
    (tmp_path / "db/data.mdb").write_bytes(bytes(data))
    with pytest.raises(DatabaseError, match="its tree is deeper than 32 pages \\(a loop\\?\\)"):
        lmdb.first_value(str(tmp_path / "db"), opener)


@pytest.mark.parametrize("transactions", [[{b"%08d" % i: b"v" * (i % 5000) for i in range(300)}], [{b"%0100d" % i: b"v" for i in range(20000)}]], ids=["overflow", "deep"])
def test_every_mutation_of_an_lmdb_is_read_or_refused_with_one_clear_error(tmp_path, transactions):
    write_lmdb(tmp_path / "db", transactions)
    for mutation in mutations(tmp_path / "db", random.Random(0), 100):
        try:
            lmdb.first_value(str(tmp_path / "db"), opener)
        except DatabaseError as error:
            assert str(tmp_path / "db") in str(error), (mutation, error)


def test_a_file_where_a_folder_is_expected_is_not_a_database(tmp_path):
    (tmp_path / "db").write_bytes(b"x")
    with pytest.raises(DatabaseError, match="is not an LMDB \\(Caffe opens a folder holding data.mdb\\)"):
        lmdb.first_value(str(tmp_path / "db"), opener)
    with pytest.raises(DatabaseError, match="is not a LevelDB \\(a LevelDB is a folder\\)"):
        leveldb.first_value(str(tmp_path / "db"), opener)


@needs_plyvel
def test_reading_never_opens_a_file_for_writing(tmp_path, monkeypatch):
    # Every open goes through the opener (read-only): os.open with a write flag is a defect.
    write_lmdb(tmp_path / "lmdb", [{b"a": b"1"}])
    db = plyvel.DB(str(tmp_path / "leveldb"), create_if_missing=True)
    db.put(b"a", b"1")
    db.close()
    real_open = os.open

    def read_only_open(path, flags, *args, **kwargs):
        assert flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND) == 0, (path, flags)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only_open)
    assert lmdb.first_value(str(tmp_path / "lmdb"), opener) == b"1"
    assert leveldb.first_value(str(tmp_path / "leveldb"), opener) == b"1"
