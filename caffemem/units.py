"""Sizes and element widths: the one parser and the formatters of byte counts.

Every flag that takes a size (``--budget``, ``--gpu-memory``, ``--reserve``) goes through
:func:`parse_size`; every byte count a person reads goes through :func:`mib` (tables,
where a column compares in one unit) or :func:`format_size` (a single figure, in the
largest unit that keeps a whole part).  Binary units are what ``nvidia-smi`` prints
(MiB); decimal ones are what vendors print on the box.  A bare ``G`` is refused rather
than guessed.
"""

from __future__ import annotations

import re
from decimal import Decimal

from caffemem.errors import CaffememError, excerpt

# Caffe's Dtype (float by default) and the int of its shape buffers and masks.
DTYPE_BYTES = {"float32": 4, "float16": 2, "float64": 8}
INT_BYTES = 4

KIB, MIB, GIB, TIB, EIB = 2**10, 2**20, 2**30, 2**40, 2**60
MAX_SIZE = 8 * EIB  # a 64-bit address space: no size flag means more
SIZE_UNITS = {
    "": 1, "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KIB": KIB, "MIB": MIB, "GIB": GIB, "TIB": TIB,
}  # fmt: skip
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*", re.ASCII)  # ASCII: "١GiB" is no size (issue 31)


def parse_size(text: str, flag: str) -> int:
    """`11GiB`, `1.5 GB`, `.5GiB`, `4096` → whole bytes (rounded down); `flag` names the
    option in the message."""
    match = _SIZE.fullmatch(text)
    unit = match[2].upper() if match else ""
    if match is None or unit not in SIZE_UNITS:
        what = f"unknown unit '{match[2]}'; " if match else ""
        raise CaffememError(f"{flag} '{excerpt(text)}': {what}expected a size such as 11GiB, 800MB or 4096 (KiB, MiB, GiB, TiB: powers of 1024; KB, MB, GB, TB: powers of 1000)")
    whole_digits = len(match[1].partition(".")[0].lstrip("0"))
    size = int(Decimal(match[1]) * SIZE_UNITS[unit]) if whole_digits <= 30 else MAX_SIZE + 1  # a million nines: no arithmetic on them
    if size > MAX_SIZE:
        raise CaffememError(f"{flag} '{excerpt(text)}' is larger than any memory ({MAX_SIZE // EIB} EiB at most)")
    return size


def mib(n: int) -> str:
    """Bytes as MiB with two decimals (below 100 KiB: plain bytes), for tables."""
    return f"{n / MIB:,.2f} MiB" if abs(n) >= KIB * 100 else f"{n:,} B"


def mib_column(n: int) -> str:
    """Bytes as MiB with two decimals whatever the size, for a column that compares in
    one unit; a few bytes read "<0.01 MiB", not "0.00 MiB" (the exact count: --json)."""
    return f"{n / MIB:,.2f} MiB" if abs(n) >= MIB // 200 or n == 0 else "<0.01 MiB"


def mib_gib(n: int) -> str:
    """A headline's figure: MiB as nvidia-smi prints it, and GiB as a card is sold."""
    return f"{n / MIB:,.2f} MiB ({n / GIB:,.2f} GiB)"


def signed_percent(part: int, whole: int) -> str:
    """`part` as a signed percentage of `whole`, one decimal; what rounds to zero is
    "0.0%" (never "-0.0%")."""
    text = f"{100.0 * part / whole:+.1f}%" if whole else "0.0%"
    return "0.0%" if text in ("+0.0%", "-0.0%") else text


def plural(n: int, thing: str, many: str | None = None) -> str:
    """`1 shared slot`, `3 shared slots` (``many``: an irregular plural): a count with its
    noun, as every report writes it."""
    return f"{n:,} {thing if n == 1 else many or thing + 's'}"


def format_size(n: int) -> str:
    """Bytes in the largest binary unit that keeps a whole part, two decimals."""
    for unit, size in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(n) >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n:,} B"


def format_flops(n: int) -> str:
    """Floating-point operations in the largest decimal unit that keeps a whole part."""
    for unit, size in (("TFLOPs", 10**12), ("GFLOPs", 10**9), ("MFLOPs", 10**6), ("kFLOPs", 10**3)):
        if abs(n) >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n:,} FLOPs"


def percent_of(part: int, whole: int) -> float:
    """`part` as a percentage of `whole`, two decimals (0 when there is no whole)."""
    return round(100.0 * part / whole, 2) if whole else 0.0
