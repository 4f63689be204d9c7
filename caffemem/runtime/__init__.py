"""The C++ runtime of `caffemem patch` (issue 14): patch a user's Caffe source tree so
that a net whose prototxt carries `optimize`'s slot table (``mem_param { slot ... }``)
runs in exactly that memory.

The patch is package data under ``caffemem/runtime/cpp/``:

- ``common/``: whole new files, copied into the tree at the same relative path
  (``include/caffe/util/mem_slots.hpp``, ``src/caffe/util/mem_slots.cpp``,
  ``include/caffe/util/layer_buffers.hpp``, ``include/caffe/util/planned_workspace.hpp``);
- ``<flavour>/edits.txt``: exact-text edits of existing files (FIND occurs exactly once,
  becomes REPLACE), for ``caffe.proto``, ``net.hpp``/``net.cpp``, ``layer.hpp``, the
  headers of the layers whose scratch buffers can be bound and (BVLC) the cuDNN
  convolution and deconvolution, whose workspace a plan may hold.

Applying is all or nothing: every file is read and every anchor checked before the first
byte is written; files are written atomically (temporary file + rename) and a failure while
writing restores the files already written. Applying twice is applying once; reverting
gives back the original bytes (the edits are inverted exactly and the new files removed).
A tree already changed where the patch goes, or one that cannot be written, is refused with
a :class:`~caffemem.errors.CaffememError` naming the file, and nothing is written.
"""

from __future__ import annotations

import enum
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from caffemem.errors import CaffememError

__all__ = [
    "PATCH_VERSION",
    "Flavour",
    "PatchStatus",
    "apply_edits_file",
    "apply_patch",
    "detect_flavour",
    "patch_files",
    "patch_status",
    "revert_patch",
]

#: Bumped whenever the C++ or the edits change in a way a built tree must notice.
# v2: device slots with actionable CHECKs, host values copied straight into slots;
# v3: the cuDNN (de)convolutions' workspaces as planned buffers (util/planned_workspace.hpp).
PATCH_VERSION = 3
_MARKER = "caffemem runtime patch v"
_CPP = Path(__file__).resolve().parent / "cpp"


class Flavour(enum.Enum):
    """The Caffe trees `caffemem patch` knows."""

    BVLC = "bvlc"  # BVLC/caffe master, 9b89154
    FORK = "fork"  # yjxiong/caffe action_recog (memory multiloading), 9831a2b

    @property
    def description(self) -> str:
        return {
            Flavour.BVLC: "BVLC Caffe master (9b89154)",
            Flavour.FORK: "yjxiong/caffe action_recog (9831a2b)",
        }[self]


@dataclass(frozen=True)
class PatchStatus:
    """What :func:`patch_status` found: ``applied`` is True when this version's patch is
    fully applied; ``version`` names the version found (None: none); ``pending`` lists the
    files still in their original state when the patch is only partly there."""

    flavour: Flavour
    applied: bool
    version: int | None
    changed: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.applied:
            return f"caffemem runtime patch v{self.version} applied ({self.flavour.description})"
        if self.version is not None:
            return f"caffemem runtime patch v{self.version} found, but this caffemem has v{PATCH_VERSION}: revert it with the caffemem that applied it"
        if self.changed:
            return f"caffemem runtime patch partly applied ({self.flavour.description}): {', '.join(self.changed)} patched, {', '.join(self.pending)} not"
        return f"caffemem runtime patch not applied ({self.flavour.description})"


@dataclass(frozen=True)
class _Edit:
    path: str
    find: str
    replace: str


def _read_edits(flavour: Flavour) -> list[_Edit]:
    """Parse ``cpp/<flavour>/edits.txt``."""
    return _read_edits_file(_CPP / flavour.value / "edits.txt")


def _read_edits_file(path: Path) -> list[_Edit]:
    """Parse an edits file (``@@@ FILE``, ``@@@ FIND``, ``@@@ REPLACE``, ``@@@ END``
    blocks; the text between the markers is taken verbatim)."""
    text = path.read_text(encoding="utf-8")
    edits: list[_Edit] = []
    path, part, buf = None, None, {"find": [], "replace": []}
    for line in text.splitlines(keepends=True):
        if line.startswith("@@@ FILE "):
            path, part, buf = line[len("@@@ FILE ") :].strip(), None, {"find": [], "replace": []}
        elif line == "@@@ FIND\n":
            part = "find"
        elif line == "@@@ REPLACE\n":
            part = "replace"
        elif line == "@@@ END\n":
            assert path is not None
            edits.append(_Edit(path, "".join(buf["find"]), "".join(buf["replace"])))
            path, part = None, None
        elif part is not None:
            buf[part].append(line)
    return edits


def _new_files(flavour: Flavour) -> dict[str, bytes]:
    """The whole files the patch adds: tree-relative path -> bytes."""
    files: dict[str, bytes] = {}
    for root in (_CPP / "common", _CPP / flavour.value / "files"):
        if root.is_dir():
            for p in sorted(root.rglob("*")):
                if p.is_file() and p.suffix in (".hpp", ".cpp", ".h", ".cu"):
                    files[p.relative_to(root).as_posix()] = p.read_bytes()
    return files


def patch_files(flavour: Flavour) -> list[Path]:
    """The package files that make up the patch of ``flavour`` (for cache keys)."""
    paths = [_CPP / flavour.value / "edits.txt"]
    for root in (_CPP / "common", _CPP / flavour.value / "files"):
        if root.is_dir():
            paths += sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".hpp", ".cpp", ".h", ".cu"))
    return paths


def _tree(caffe_dir: str | os.PathLike) -> Path:
    root = Path(caffe_dir)
    if not root.is_dir():
        raise CaffememError(f"{root}: not a directory (expected a Caffe source tree)")
    return root


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise CaffememError(f"{path}: cannot read it ({e.strerror})") from e


def detect_flavour(caffe_dir: str | os.PathLike) -> Flavour:
    """BVLC master or the yjxiong/caffe action_recog fork; anything else is refused."""
    root = _tree(caffe_dir)
    needed = ("src/caffe/net.cpp", "include/caffe/net.hpp", "src/caffe/proto/caffe.proto", "include/caffe/blob.hpp")
    missing = [n for n in needed if not (root / n).is_file()]
    if missing:
        raise CaffememError(f"{root}: not a Caffe source tree ({', '.join(missing)} missing); give the top directory of a BVLC Caffe master or yjxiong/caffe action_recog checkout")
    net_cpp = _read(root / "src/caffe/net.cpp").decode("utf-8", "replace")
    if "MemoryOptimize_v2" in net_cpp or "MemoryOptimize(" in net_cpp:
        flavour = Flavour.FORK
    elif (root / "include/caffe/layers/clip_layer.hpp").is_file() and (root / "include/caffe/layers/swish_layer.hpp").is_file():
        flavour = Flavour.BVLC
    else:
        raise CaffememError(
            f"{root}: a Caffe tree, but neither BVLC Caffe master (9b89154) nor the yjxiong/caffe action_recog fork; "
            "caffemem patch supports only those two (other forks and older BVLC releases differ where the patch goes)"
        )
    return flavour


def _plan(root: Path, flavour: Flavour) -> tuple[dict[str, bytes], dict[str, bytes], list[str], list[str], list[str]]:
    """Read the tree: (current bytes per touched file, patched bytes per file, patched
    parts, original parts, conflicts).  Nothing is written."""
    if not (_CPP / flavour.value / "edits.txt").is_file():
        raise CaffememError(f"{root}: {flavour.description} is recognised but this caffemem has no patch for it yet")
    current: dict[str, bytes] = {}
    patched: dict[str, str] = {}
    done: list[str] = []
    todo: list[str] = []
    conflicts: list[str] = []
    for edit in _read_edits(flavour):
        if edit.path not in current:
            p = root / edit.path
            if not p.is_file():
                conflicts.append(f"{edit.path}: missing")
                continue
            current[edit.path] = _read(p)
            try:
                patched[edit.path] = current[edit.path].decode("utf-8")
            except UnicodeDecodeError:
                conflicts.append(f"{edit.path}: not UTF-8 text")
                continue
        if edit.path not in patched:
            continue
        text = patched[edit.path]
        n_replace = text.count(edit.replace)
        n_find = text.count(edit.find)
        if n_replace == 1 and (edit.replace.count(edit.find) == n_find):
            done.append(edit.path)
        elif n_find == 1 and n_replace == 0:
            todo.append(edit.path)
            patched[edit.path] = text.replace(edit.find, edit.replace, 1)
        else:
            first = edit.find.strip().splitlines()[0].strip() if edit.find.strip() else ""
            conflicts.append(f"{edit.path}: the text caffemem patches there ({first!r} ...) was changed or occurs {n_find} times")
    new_out: dict[str, bytes] = {k: v.encode("utf-8") for k, v in patched.items()}
    for rel, data in _new_files(flavour).items():
        p = root / rel
        if p.exists():
            got = _read(p)
            if got == data:
                done.append(rel)
            else:
                conflicts.append(f"{rel}: exists and is not caffemem's (v{PATCH_VERSION}) file")
        else:
            if not p.parent.is_dir():
                conflicts.append(f"{rel}: directory {p.parent.relative_to(root)} missing")
            todo.append(rel)
            new_out[rel] = data
    return current, new_out, sorted(set(done)), sorted(set(todo)), conflicts


def _found_version(root: Path) -> int | None:
    p = root / "include/caffe/util/mem_slots.hpp"
    if not p.is_file():
        return None
    text = p.read_text(encoding="utf-8", errors="replace")
    i = text.find(_MARKER)
    if i < 0:
        return None
    digits = "".join(c for c in text[i + len(_MARKER) : i + len(_MARKER) + 6] if c.isdigit())
    return int(digits) if digits else None


def patch_status(caffe_dir: str | os.PathLike) -> PatchStatus:
    """Which version of the patch the tree carries, if any."""
    root = _tree(caffe_dir)
    flavour = detect_flavour(root)
    _, _, done, todo, conflicts = _plan(root, flavour)
    found = _found_version(root)
    if not todo and not conflicts:
        return PatchStatus(flavour, True, PATCH_VERSION, tuple(done))
    if found is not None and found != PATCH_VERSION:
        return PatchStatus(flavour, False, found, tuple(done), tuple(todo))
    return PatchStatus(flavour, False, None, tuple(done), tuple(todo))


def _check_writable(root: Path, paths: list[str]) -> None:
    """Refuse a tree we may not write (a read-only mount, or files/dirs without write
    permission: checked on the mode bits too, since root may write anything)."""
    for rel in paths:
        p = root / rel
        for q in (p, p.parent) if p.exists() else (p.parent,):
            try:
                mode = q.stat().st_mode
            except OSError as e:
                raise CaffememError(f"{q}: cannot stat it ({e.strerror}); nothing was changed") from e
            if not os.access(q, os.W_OK) or not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
                raise CaffememError(f"{q}: read-only; caffemem patch needs to write there (nothing was changed)")


def _write_all(root: Path, writes: dict[str, bytes | None], originals: dict[str, bytes | None]) -> None:
    """Write (bytes) or delete (None) each file atomically; on any failure restore the
    files already handled to ``originals`` and raise CaffememError."""
    handled: list[str] = []
    try:
        for rel, data in writes.items():
            p = root / rel
            if data is None:
                p.unlink()
            else:
                mode = stat.S_IMODE(p.stat().st_mode) if p.exists() else 0o644
                fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".caffemem", dir=p.parent)
                try:
                    with os.fdopen(fd, "wb") as f:
                        f.write(data)
                    os.chmod(tmp, mode)
                    os.replace(tmp, p)
                except BaseException:
                    if os.path.exists(tmp):
                        os.unlink(tmp)
                    raise
            handled.append(rel)
    except OSError as e:
        for rel in reversed(handled):
            p = root / rel
            old = originals[rel]
            try:
                if old is None:
                    p.unlink(missing_ok=True)
                else:
                    p.write_bytes(old)
            except OSError:
                pass
        raise CaffememError(f"{root / (e.filename or '')}: {e.strerror}; the tree was restored, nothing changed") from e


def apply_patch(caffe_dir: str | os.PathLike) -> PatchStatus:
    """Patch the tree (all or nothing; a no-op when already applied)."""
    root = _tree(caffe_dir)
    flavour = detect_flavour(root)
    current, new_out, done, todo, conflicts = _plan(root, flavour)
    if conflicts:
        raise CaffememError(f"{root}: cannot apply the caffemem runtime patch, nothing was written:\n  " + "\n  ".join(conflicts))
    if not todo:
        return patch_status(root)
    if done:
        raise CaffememError(
            f"{root}: half-patched tree (already patched: {', '.join(done)}; not: {', '.join(todo)}); "
            "nothing was written. Restore the original files (or `caffemem patch --revert` if a whole patch was applied) and retry"
        )
    _check_writable(root, todo)
    writes: dict[str, bytes | None] = {rel: new_out[rel] for rel in todo}
    originals: dict[str, bytes | None] = {rel: current.get(rel) for rel in todo}
    _write_all(root, writes, originals)
    return patch_status(root)


def revert_patch(caffe_dir: str | os.PathLike) -> PatchStatus:
    """Give back the original bytes (a no-op on an unpatched tree)."""
    root = _tree(caffe_dir)
    flavour = detect_flavour(root)
    current, _, done, todo, conflicts = _plan(root, flavour)
    if not done and not conflicts:
        return patch_status(root)
    if conflicts or todo:
        problems = conflicts + [f"{t}: not patched" for t in todo]
        raise CaffememError(f"{root}: not a tree with the whole caffemem runtime patch v{PATCH_VERSION}, nothing was reverted:\n  " + "\n  ".join(problems))
    writes: dict[str, bytes | None] = {}
    texts = {rel: data.decode("utf-8") for rel, data in current.items()}
    for edit in reversed(_read_edits(flavour)):
        text = texts[edit.path]
        if text.count(edit.replace) != 1:
            raise CaffememError(f"{root / edit.path}: the patched text changed since; cannot revert exactly (nothing was reverted)")
        texts[edit.path] = text.replace(edit.replace, edit.find, 1)
    for rel, text in texts.items():
        writes[rel] = text.encode("utf-8")
    originals: dict[str, bytes | None] = dict(current)
    for rel in _new_files(flavour):
        writes[rel] = None
        originals[rel] = _read(root / rel)
    _check_writable(root, list(writes))
    _write_all(root, writes, originals)
    return patch_status(root)


def apply_edits_file(caffe_dir: str | os.PathLike, edits: str | os.PathLike) -> list[str]:
    """Apply another edits file in the format of ``cpp/<flavour>/edits.txt`` to a tree (the
    build fixes of benchmarks/gpu/, e.g. for CUDA 13 and cuDNN 9): all or nothing, an edit
    already applied is skipped. Returns the files written."""
    root = _tree(caffe_dir)
    texts: dict[str, str] = {}
    originals: dict[str, bytes | None] = {}
    conflicts: list[str] = []
    changed: set[str] = set()
    for edit in _read_edits_file(Path(edits)):
        if edit.path not in texts:
            p = root / edit.path
            if not p.is_file():
                conflicts.append(f"{edit.path}: missing")
                continue
            originals[edit.path] = _read(p)
            texts[edit.path] = originals[edit.path].decode("utf-8", "replace")
        text = texts[edit.path]
        if text.count(edit.replace) == 1 and edit.replace.count(edit.find) == text.count(edit.find):
            continue
        if text.count(edit.find) != 1:
            conflicts.append(f"{edit.path}: the text {Path(edits).name} edits there was changed or occurs {text.count(edit.find)} times")
            continue
        texts[edit.path] = text.replace(edit.find, edit.replace, 1)
        changed.add(edit.path)
    if conflicts:
        raise CaffememError(f"{root}: cannot apply {edits}, nothing was written:\n  " + "\n  ".join(conflicts))
    _check_writable(root, sorted(changed))
    _write_all(root, {rel: texts[rel].encode("utf-8") for rel in sorted(changed)}, originals)
    return sorted(changed)
