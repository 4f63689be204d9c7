"""An LMDB's first record, read as Caffe's cursor sees it after MDB_FIRST, from the file
with bounded reads (the lmdb binding maps the file: a size field past its end kills the
process with SIGBUS, issue 31).

What mdb_env_open, mdb_txn_begin(MDB_RDONLY) and mdb_cursor_get(MDB_FIRST) read, and so
what is read here (LMDB/lmdb: libraries/liblmdb/mdb.c, 64-bit little-endian builds, the
ones Caffe's databases come from):

- ``data.mdb`` in the folder Caffe names (db_lmdb.cpp opens a folder, not MDB_NOSUBDIR).
- Pages 0 and 1 are meta pages (mdb_env_read_header): a page header (MDB_page: page
  number, pad, flags with P_META, lower/upper), then MDB_meta: magic 0xBEEFC0DE, version
  1, address, map size, the free and main databases (MDB_db: pad, which in the free DB's
  record is the page size; flags; depth; page counts; entries; root page), the last page
  used and the transaction id.  The newer valid transaction is the database's state
  (mdb_env_pick_meta).
- The main database's root (P_INVALID: it holds no record), then the leftmost child of
  each branch page down to a leaf (mdb_page_search with MDB_PS_FIRST): a node (MDB_node:
  lo, hi, flags, key size; key; data) at the offset the page's first pointer gives.  A
  branch node's child page is lo | hi << 16 | flags << 32 (NODEPGNO); a leaf node's data
  size is lo | hi << 16 (NODEDSZ).
- The first leaf node's data: inline, or with F_BIGDATA on overflow pages whose number it
  holds (mdb_node_read).  Sorted duplicates (F_DUPDATA) are refused: Caffe's databases
  never have them.

Every page number is checked against the last page the meta page says is used and the
file's size, every offset and size against its page, before anything is read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from caffemem.databases import U16, U32, U64, DatabaseError, Opener, RegularFile

MAGIC = 0xBEEFC0DE  # MDB_MAGIC
DATA_VERSION = 1  # MDB_DATA_VERSION
PAGE_HEADER = 16  # PAGEHDRSZ: pgno (8), pad (2), flags (2), lower (2), upper (2)
NODE_HEADER = 8  # NODESIZE: lo, hi, flags, ksize
P_INVALID = (1 << 64) - 1
P_BRANCH, P_LEAF, P_OVERFLOW, P_META, P_LEAF2 = 0x01, 0x02, 0x04, 0x08, 0x20
F_BIGDATA, F_DUPDATA = 0x01, 0x04
CURSOR_STACK = 32  # the deepest tree mdb.c walks
META_BYTES = PAGE_HEADER + 136  # a meta page's header and MDB_meta


@dataclass(frozen=True)
class _Meta:
    """What a meta page says: the page size, the main database's root page (its MDB_db
    record's md_root), the last page in use and the transaction that wrote it."""

    page_size: int
    root: int
    last_page: int
    txnid: int


def first_value(folder: str, opener: Opener) -> bytes | None:
    """The first value of the LMDB at ``folder``, None when it holds no record.  Raises
    DatabaseError naming ``folder``."""
    if not os.path.isdir(folder):
        raise DatabaseError(f"{folder} is not an LMDB (Caffe opens a folder holding data.mdb)")
    path = os.path.join(folder, "data.mdb")
    try:
        file = RegularFile.open(opener, path, "database file")
    except FileNotFoundError:
        raise DatabaseError(f"{folder} is not an LMDB (it has no data.mdb)") from None
    with file:
        return _Reader(file, folder).first_value()


class _Reader:
    def __init__(self, file: RegularFile, folder: str):
        self.file, self.folder = file, folder

    def fail(self, reason: str) -> DatabaseError:
        return DatabaseError(f"the LMDB {self.folder} is corrupt: {reason}")

    def first_value(self) -> bytes | None:
        meta = self._meta()
        if meta.root == P_INVALID:
            return None
        page, number = self._leftmost_leaf(meta)
        return self._leaf_value(meta, page, number)

    # -- meta pages (mdb_env_read_header, mdb_env_pick_meta)

    def _meta(self) -> _Meta:
        first = self._meta_page(0, None)
        second = self._meta_page(1, first.page_size)
        return second if second.txnid > first.txnid else first

    def _meta_page(self, index: int, page_size: int | None) -> _Meta:
        offset = 0 if page_size is None else page_size
        if offset + META_BYTES > self.file.size:
            raise DatabaseError(f"{self.folder} is not an LMDB (data.mdb is {self.file.size} bytes, too short for its meta page {index})")
        data = self.file.read(offset, META_BYTES, f"meta page {index}")
        flags = U16.unpack_from(data, 10)[0]
        if not flags & P_META or U32.unpack_from(data, 16)[0] != MAGIC:
            raise DatabaseError(f"{self.folder} is not an LMDB (data.mdb's page {index} is not a meta page)")
        version = U32.unpack_from(data, 20)[0]
        if version != DATA_VERSION:
            raise DatabaseError(f"{self.folder} is an LMDB of data version {version}, not {DATA_VERSION}, which Caffe's LMDB reads")
        size = U32.unpack_from(data, 40)[0]  # mm_psize: the free DB record's md_pad
        if size < 256 or size > 1 << 16 or size & (size - 1):
            raise self.fail(f"meta page {index} gives a page size of {size}")
        if page_size is not None and size != page_size:
            raise self.fail(f"its meta pages give page sizes {page_size} and {size}")
        # mm_dbs[MAIN_DBI] at 88 (its md_root at +40), mm_last_pg at 136, mm_txnid at 144
        return _Meta(size, U64.unpack_from(data, 128)[0], U64.unpack_from(data, 136)[0], U64.unpack_from(data, 144)[0])

    # -- pages

    def _page(self, meta: _Meta, number: int, what: str) -> bytes:
        """A whole page, after checking its number (mdb_page_get: below the next unused
        page; pages 0 and 1 are the meta pages) and the page's own number field."""
        if number < 2 or number > meta.last_page:
            raise self.fail(f"{what} is page {number}, outside the pages in use (2..{meta.last_page})")
        if (number + 1) * meta.page_size > self.file.size:
            raise self.fail(f"page {number} lies past the end of data.mdb ({self.file.size} bytes: cut short?)")
        page = self.file.read(number * meta.page_size, meta.page_size, f"page {number}")
        if U64.unpack_from(page)[0] != number:
            raise self.fail(f"page {number} says it is page {U64.unpack_from(page)[0]}")
        return page

    def _node(self, page: bytes, number: int) -> tuple[int, int, bytes, int]:
        """The first node of a branch or leaf page (NODEPTR(mp, 0)): its lo | hi << 16,
        flags, key, and where its data starts; every bound checked."""
        lower = U16.unpack_from(page, 12)[0]
        if lower < PAGE_HEADER + 2 or lower > len(page):  # NUMKEYS(mp) = (lower - PAGEHDRSZ) >> 1
            raise self.fail(f"page {number} holds no node (its lower bound is {lower})")
        node = U16.unpack_from(page, PAGE_HEADER)[0]
        if node < PAGE_HEADER or node + NODE_HEADER > len(page):
            raise self.fail(f"page {number}'s first node is at {node}, outside the page")
        lo, hi, node_flags, key_size = (U16.unpack_from(page, node + 2 * i)[0] for i in range(4))
        data = node + NODE_HEADER + key_size
        if data > len(page):
            raise self.fail(f"page {number}'s first key ({key_size} bytes) runs past the page")
        return lo | hi << 16, node_flags, page[node + NODE_HEADER : data], data

    def _leftmost_leaf(self, meta: _Meta) -> tuple[bytes, int]:
        """The leaf page MDB_FIRST lands on: from the root, each branch's first child."""
        number, seen = meta.root, 0
        while True:
            page = self._page(meta, number, "a tree page")
            flags = U16.unpack_from(page, 10)[0]
            if flags & P_LEAF and not flags & P_BRANCH:
                return page, number
            if not flags & P_BRANCH:
                raise self.fail(f"page {number} is neither a branch nor a leaf page (flags {flags:#x})")
            seen += 1
            if seen >= CURSOR_STACK:
                raise self.fail(f"its tree is deeper than {CURSOR_STACK} pages (a loop?)")
            low, high, _, _ = self._node(page, number)
            number = low | high << 32  # NODEPGNO: on 64-bit builds the node's flags are the top 16 bits

    def _leaf_value(self, meta: _Meta, page: bytes, number: int) -> bytes:
        flags = U16.unpack_from(page, 10)[0]
        if flags & P_LEAF2:
            raise self.fail(f"page {number} is a LEAF2 page, which only sorted duplicates use")
        size, node_flags, _, data = self._node(page, number)
        if node_flags & F_DUPDATA:  # MDB_DUPSORT, which the lmdb binding cannot even set on the main database
            raise DatabaseError(f"the LMDB {self.folder} stores sorted duplicates (MDB_DUPSORT), which Caffe's convert tools never write; pass --input")
        if node_flags & F_BIGDATA:
            return self._overflow(meta, page, number, data, size)
        if data + size > len(page):
            raise self.fail(f"page {number}'s first value ({size} bytes) runs past the page")
        return page[data : data + size]

    def _overflow(self, meta: _Meta, page: bytes, number: int, data: int, size: int) -> bytes:
        """A value on overflow pages (F_BIGDATA): the node holds their first page's number;
        the value follows that page's header, over mp_pages contiguous pages."""
        if data + 8 > len(page):
            raise self.fail(f"page {number}'s first node's overflow page number runs past the page")
        first = U64.unpack_from(page, data)[0]
        head = self._page(meta, first, "the first value's overflow page")
        if not U16.unpack_from(head, 10)[0] & P_OVERFLOW:
            raise self.fail(f"page {first}, which should hold the first value, is not an overflow page")
        pages = U32.unpack_from(head, 12)[0]
        if pages < 1 or first + pages - 1 > meta.last_page or PAGE_HEADER + size > pages * meta.page_size:
            raise self.fail(f"the first value ({size} bytes) does not fit its {pages} overflow page(s) from page {first}")
        if first * meta.page_size + PAGE_HEADER + size > self.file.size:
            raise self.fail(f"the first value ({size} bytes from page {first}) runs past the end of data.mdb ({self.file.size} bytes: cut short?)")
        return self.file.read(first * meta.page_size + PAGE_HEADER, size, "the first value")
