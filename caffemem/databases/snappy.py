"""Snappy decompression, for LevelDB's compressed table blocks (google/leveldb:
table/format.cc ReadBlock, kSnappyCompression; port::Snappy_Uncompress).

The format (google/snappy: format_description.txt): the uncompressed length as a varint,
then elements, each a tag byte whose two low bits say its kind:

- 00 literal: length-1 in the tag's six high bits, or (60..63) in the next 1..4 bytes,
  little-endian; then the bytes themselves;
- 01 copy: length 4..11 (three bits of the tag), offset in 11 bits (three of the tag and
  the next byte);
- 10 copy: length 1..64 (six bits of the tag), offset in the next 2 bytes;
- 11 copy: length 1..64, offset in the next 4 bytes.

A copy repeats ``length`` bytes from ``offset`` back in the output, which may overlap
what it writes (offset 1, length 10: one byte ten times).  Every length and offset is
checked against the input and the declared size, so a corrupt block is an error, never
an endless or unbounded output.
"""

from __future__ import annotations


class SnappyError(ValueError):
    """The bytes are not a Snappy block (its message says where)."""


def uncompressed_length(data: bytes | memoryview) -> tuple[int, int]:
    """The declared length (a varint32) and where the elements start."""
    length, shift, position = 0, 0, 0
    while True:
        if position >= len(data) or position == 5:
            raise SnappyError("its declared length is cut short or longer than 32 bits")
        byte = data[position]
        position += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    if length >= 1 << 32:
        raise SnappyError("its declared length is longer than 32 bits")
    return length, position


def decompress(data: bytes | memoryview, limit: int) -> bytes:
    """The uncompressed bytes of a Snappy block; raises SnappyError when ``data`` is not
    one, or declares more than ``limit`` bytes."""
    data = bytes(data)
    size, position = uncompressed_length(data)
    if size > limit:
        raise SnappyError(f"it declares {size} uncompressed bytes, more than caffemem reads ({limit})")
    out = bytearray()
    end = len(data)
    while position < end:
        tag = data[position]
        position += 1
        kind = tag & 3
        if kind == 0:
            length = tag >> 2
            if length >= 60:
                extra = length - 59
                if position + extra > end:
                    raise SnappyError("a literal's length is cut short")
                length = int.from_bytes(data[position : position + extra], "little")
                position += extra
            length += 1
            if position + length > end:
                raise SnappyError(f"a literal of {length} bytes runs past the block's end")
            if len(out) + length > size:
                raise SnappyError("its elements make more bytes than it declares")
            out += data[position : position + length]
            position += length
            continue
        if kind == 1:
            if position + 1 > end:
                raise SnappyError("a copy's offset is cut short")
            length = 4 + ((tag >> 2) & 7)
            offset = ((tag >> 5) << 8) | data[position]
            position += 1
        else:
            width = 2 if kind == 2 else 4
            if position + width > end:
                raise SnappyError("a copy's offset is cut short")
            length = 1 + (tag >> 2)
            offset = int.from_bytes(data[position : position + width], "little")
            position += width
        if offset == 0 or offset > len(out):
            raise SnappyError(f"a copy reaches {offset} bytes back, before the output's start ({len(out)} bytes)")
        if len(out) + length > size:
            raise SnappyError("its elements make more bytes than it declares")
        start = len(out) - offset
        if offset >= length:
            out += out[start : start + length]
        else:  # overlapping: the last `offset` bytes repeated
            pattern = bytes(out[start:])
            out += (pattern * (length // offset + 1))[:length]
    if len(out) != size:
        raise SnappyError(f"its elements make {len(out)} bytes, not the {size} it declares")
    return bytes(out)
