"""The kit and the results as tar.xz, within what the device tool carries: the archive and
the repository travel together in 64 MiB; at most 8 files of 16 MiB each come back. Python's
tarfile unpacks them there (no xz binary needed)."""

from __future__ import annotations

import lzma
import os
import tarfile
from pathlib import Path

from gpu.layout import MANIFEST, ROOT
from gpu.shell import log

MIB = 1 << 20
#: The archive's limit: the repository (~10 MiB) and the archive travel together in 64 MiB.
ARCHIVE_LIMIT = 48 * MIB
#: What `run-bundle --pack` may write: the device tool brings back files of at most 16 MiB.
RESULTS_LIMIT = 15 * MIB


def _members(root: Path) -> list[Path]:
    """The files to archive in a fixed order that puts the two libcaffe.so side by side, so
    xz's window finds the second in the first (they differ in a few objects)."""
    files = sorted(p for p in root.rglob("*") if p.is_file())
    return sorted(files, key=lambda p: (p.name != "libcaffe.so.1.0.0", str(p)))


def pack(root: Path, archive: Path, limit: int = ARCHIVE_LIMIT) -> int:
    """tar + xz (x86 filter for the machine code, LZMA2 with a window larger than one
    libcaffe) of `root` into `archive`, written atomically; refuses an archive over `limit`,
    naming the largest members. Returns its size in bytes."""
    filters = [{"id": lzma.FILTER_X86}, {"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": 256 * MIB}]
    tmp = archive.with_name(archive.name + f".tmp.{os.getpid()}")
    archive.parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(tmp, "wb", format=lzma.FORMAT_XZ, filters=filters) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
        for f in _members(root):
            tar.add(f, arcname=str(f.relative_to(root.parent)), recursive=False)
    size = tmp.stat().st_size
    try:
        check_size(size, root, limit)
    except RuntimeError:
        tmp.unlink()
        raise
    tmp.replace(archive)
    return size


def check_size(size: int, root: Path, limit: int = ARCHIVE_LIMIT) -> None:
    if size <= limit:
        return
    largest = sorted((p for p in root.rglob("*") if p.is_file()), key=lambda p: -p.stat().st_size)[:8]
    listing = ", ".join(f"{p.relative_to(root)} {p.stat().st_size / MIB:.1f} MiB" for p in largest)
    raise RuntimeError(f"the GPU bundle is {size / MIB:.1f} MiB compressed, over its limit of {limit / MIB:.0f} MiB "
                       f"(the repository and the archive travel in 64 MiB); the largest files, uncompressed: {listing}")


def unpack(archive: Path, dest: Path) -> Path:
    """Unpacks the archive into `dest`; returns the kit's root. Refuses members that would
    land outside `dest` (tarfile's "data" filter where this Python has it)."""
    with tarfile.open(archive, "r:xz") as tar:
        names = tar.getnames()
        if any(name.startswith("/") or ".." in Path(name).parts for name in names):
            raise RuntimeError(f"{archive}: a member's path leaves the folder; not a caffemem GPU bundle")
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest)
    root = dest / ROOT
    if not (root / MANIFEST).is_file():
        raise RuntimeError(f"{archive}: no {ROOT}/{MANIFEST}; not a caffemem GPU bundle")
    return root


def pack_results(out: Path, dest: Path, limit: int = RESULTS_LIMIT) -> None:
    """`out` as one .tar.xz (the device tool brings back at most 8 files, each at most
    16 MiB); over `limit`, packed again without the probes' glog logs, the bulk of it."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    for skip_logs in (False, True):
        with tarfile.open(tmp, "w:xz") as tar:
            tar.add(out, arcname=out.name, filter=lambda info: None if skip_logs and info.name.endswith(".probe.log") else info)
        if tmp.stat().st_size <= limit:
            break
        log(f"results packed: {tmp.stat().st_size / MIB:.1f} MiB, over {limit / MIB:.0f} MiB" + ("" if skip_logs else "; again without the probe logs"))
    tmp.replace(dest)
    log(f"results packed: {dest} ({dest.stat().st_size / 1024:.0f} KiB)")
