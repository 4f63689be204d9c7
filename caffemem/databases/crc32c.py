"""CRC-32C (Castagnoli), as LevelDB checks its log records and table blocks, and its
masked form (google/leveldb: util/crc32c.h Mask/Unmask: "it is problematic to compute
the CRC of a string that contains embedded CRCs", so stored CRCs are rotated and offset).

Python has no CRC-32C (zlib's crc32 is another polynomial).  Short inputs (a log
fragment, a table block) go through the byte table; long ones (a MANIFEST, a value of
megabytes) are cut into lanes that numpy advances together, a byte per step, and the
lanes' registers are then joined: the register update is linear over GF(2), so the
register after ``A + B`` is the register after ``A`` carried through ``len(B)`` zero
bytes (a 32x32 bit matrix, squared up as zlib's crc32_combine does) xor that of ``B``
from zero.
"""

from __future__ import annotations

_POLY = 0x82F63B78  # reflected Castagnoli polynomial
_MASK_DELTA = 0xA282EAD8  # util/crc32c.h kMaskDelta


def _table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _table()
_LANES = 4096  # numpy's lanes for a long input; below _LANES * 16 bytes the byte loop is as fast
_SHORT = _LANES * 16


def value(data: bytes | bytearray | memoryview) -> int:
    """The CRC-32C of ``data`` (crc32c::Value)."""
    return _advance(0xFFFFFFFF, data) ^ 0xFFFFFFFF


def unmask(masked: int) -> int:
    """The CRC a stored (masked) one stands for (crc32c::Unmask)."""
    rotated = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rotated >> 17) | (rotated << 15)) & 0xFFFFFFFF


def mask(crc: int) -> int:
    """The stored form of a CRC (crc32c::Mask); tests write records with it."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def _advance(register: int, data: bytes | bytearray | memoryview) -> int:
    """The raw register after ``data``, from ``register`` (no final inversion)."""
    if len(data) < _SHORT:
        return _bytewise(register, data)
    import numpy as np  # here, not at import: a run under a tight address-space cap never needs it

    table = np.array(_TABLE, dtype=np.uint32)
    lane = len(data) // _LANES
    body = np.frombuffer(data, dtype=np.uint8, count=lane * _LANES).reshape(_LANES, lane)
    registers = np.zeros(_LANES, dtype=np.uint32)
    registers[0] = register
    for column in np.ascontiguousarray(body.T):  # one byte of every lane per step
        registers = table[(registers ^ column) & 0xFF] ^ (registers >> 8)
    joined = 0
    shift = _zeros_operator(lane)
    for lane_register in registers.tolist():  # each lane carried past the next one's bytes
        joined = _apply(shift, joined) ^ lane_register
    return _bytewise(joined, memoryview(data)[lane * _LANES :])


def _bytewise(register: int, data: bytes | bytearray | memoryview) -> int:
    table = _TABLE
    for byte in bytes(data):
        register = table[(register ^ byte) & 0xFF] ^ (register >> 8)
    return register


def _apply(matrix: list[int], vector: int) -> int:
    """A 32x32 GF(2) matrix (its columns) times a 32-bit vector."""
    result, column = 0, 0
    while vector:
        if vector & 1:
            result ^= matrix[column]
        vector >>= 1
        column += 1
    return result


def _square(matrix: list[int]) -> list[int]:
    return [_apply(matrix, column) for column in matrix]


def _zeros_operator(count: int) -> list[int]:
    """The matrix that carries a register through ``count`` zero bytes."""
    one_bit = [_POLY] + [1 << (bit - 1) for bit in range(1, 32)]  # a zero bit: shift right, xor the polynomial on a carry
    power = one_bit
    for _ in range(3):  # a byte is 8 bits
        power = _square(power)
    result = [1 << bit for bit in range(32)]  # identity
    while count:
        if count & 1:
            result = [_apply(power, column) for column in result]
        count >>= 1
        if count:
            power = _square(power)
    return result
