"""The cache of what the kit builds (the toolkit, the CUDA trees, the archive): outside the
checkout, each folder named by the digest of its inputs, as .ci/build_caffe.sh does for the
CPU builds, and published whole (a folder without its mark is not done)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

#: The mark of a finished folder.
DONE = ".caffemem-ok"


def cache_root() -> Path:
    """$CAFFEMEM_CACHE, else /var/cache/caffemem where writable, else ~/.cache/caffemem."""
    root = Path(os.environ.get("CAFFEMEM_CACHE", "/var/cache/caffemem"))
    try:
        root.mkdir(parents=True, exist_ok=True)
        if os.access(root, os.W_OK):
            return root
    except OSError:
        pass
    root = Path.home() / ".cache" / "caffemem"
    root.mkdir(parents=True, exist_ok=True)
    return root


def digest(*parts: Path | str) -> str:
    """Key of a cached directory: the bytes of the files and the strings given."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.read_bytes() if isinstance(p, Path) else p.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def is_done(dest: Path) -> bool:
    return (dest / DONE).is_file()


def publish(work: Path, dest: Path) -> Path:
    """Marks `work` finished and moves it to `dest` (replacing what was there)."""
    (work / DONE).touch()
    shutil.rmtree(dest, ignore_errors=True)
    work.rename(dest)
    return dest
