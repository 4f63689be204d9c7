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

Applying is all or nothing, under any interruption (issue 26): every file is read and
every anchor checked before the first byte is written.  Then a journal
(``.caffemem-patch.journal`` in the tree: each file's original bytes and the hash of what
replaces them) is written atomically, the files are replaced one by one (temporary file,
fsync, rename) with SIGINT, SIGTERM and SIGHUP held, and the journal is removed: that
removal is the commit.  A signal or an exception before it puts every file back and the
signal is delivered afterwards (exit 130 on Ctrl-C); a run killed outright (SIGKILL, power
loss) leaves the journal, and the next `caffemem patch` or `caffemem patch --revert` first
undoes what it names, then does its own work (`--check` reports it).  A tree that an older
caffemem left half-patched (no journal; each file either original or patched) is finished
by `patch` and undone by `patch --revert`, edit by edit.

Applying twice is applying once; reverting gives back the original bytes (the edits are
inverted exactly and the new files removed).  A tree changed where the patch goes, or one
that cannot be written, is refused with a :class:`~caffemem.errors.CaffememError` naming the
file, and nothing is written.
"""

from __future__ import annotations

import base64
import contextlib
import enum
import hashlib
import json
import os
import signal
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from caffemem.errors import CaffememError
from caffemem.prototxt.write import sync_folder

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
# v3: the cuDNN (de)convolutions' workspaces as planned buffers (util/planned_workspace.hpp);
# v4 (BVLC): Forwards run again in Net::Backward, mem_param's recompute entries
# (util/mem_recompute.hpp, issue 23).
PATCH_VERSION = 4
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
    interrupted: bool = False  # a run was killed mid-way: its journal is in the tree

    def describe(self) -> str:
        if self.interrupted:
            return f"an interrupted caffemem patch run left {_JOURNAL} ({self.flavour.description}): `caffemem patch` finishes the patch, `caffemem patch --revert` gives back the original files"
        if self.applied:
            return f"caffemem runtime patch v{self.version} applied ({self.flavour.description})"
        if self.version is not None:
            return f"caffemem runtime patch v{self.version} found, but this caffemem has v{PATCH_VERSION}: revert it with the caffemem that applied it"
        if self.changed:
            return (
                f"caffemem runtime patch partly applied ({self.flavour.description}): {', '.join(self.changed)} patched, {', '.join(self.pending)} not; "
                "`caffemem patch` finishes it, `caffemem patch --revert` undoes it"
            )
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
    digits = "".join(c for c in text[i + len(_MARKER) : i + len(_MARKER) + 6] if c in "0123456789")
    return int(digits) if digits else None


def patch_status(caffe_dir: str | os.PathLike) -> PatchStatus:
    """Which version of the patch the tree carries, if any.  Reads only: an interrupted
    run's journal is reported, not acted on."""
    root = _tree(caffe_dir)
    flavour = detect_flavour(root)
    if (root / _JOURNAL).exists():
        return PatchStatus(flavour, False, None, interrupted=True)
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


# ----------------------------------------------------------------------------- all or nothing

_JOURNAL = ".caffemem-patch.journal"
_HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class _Entry:
    """One file of a run, as its journal records it: the bytes to put back (None: the
    file did not exist), its mode, and the SHA-256 of what the run writes there (None:
    the run removes it)."""

    path: str
    before: bytes | None
    after: str | None
    mode: int


class _Interrupted(Exception):
    """A held signal arrived while the tree was being changed (raised and caught inside
    :func:`_transact`, which puts the tree back and lets the signal through)."""


def _temporary(path: Path) -> Path:
    """The temporary file that becomes ``path``: a fixed name, so that the recovery of a
    killed run finds and removes it."""
    return path.with_name(f".{path.name}.caffemem-tmp")


def _put(path: Path, data: bytes | None, mode: int) -> None:
    """Replace ``path`` by ``data`` (None: remove it) atomically: a temporary file beside
    it, on disk (fsync) before it is renamed over the old one."""
    if data is None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    tmp = _temporary(path)
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode), "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def _signals_held() -> Iterator[list[int]]:
    """Hold SIGINT, SIGTERM and SIGHUP (those not ignored: under nohup SIGHUP stays
    ignored) while the tree changes: a signal is only recorded; the writer looks between
    two files, puts the tree back, and on leaving the signal goes to the handler that was
    there before (Ctrl-C: KeyboardInterrupt; SIGTERM by default: the process ends).
    Outside the main thread no handler can be installed, and none is needed: signals are
    delivered to the main thread."""
    held: list[int] = []
    previous: dict[int, object] = {}
    with contextlib.suppress(ValueError):  # not the main thread
        for number in _HELD_SIGNALS:
            if signal.getsignal(number) is not signal.SIG_IGN:
                previous[number] = signal.signal(number, lambda signum, _frame: held.append(signum))
    try:
        yield held
    finally:
        for number, handler in previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)  # type: ignore[arg-type]
        if held:
            signal.raise_signal(held[0])
            raise KeyboardInterrupt  # that handler returned: the run was interrupted all the same


def _journal_bytes(entries: list[_Entry]) -> bytes:
    files = [{"path": e.path, "before": None if e.before is None else base64.b64encode(e.before).decode("ascii"), "after": e.after, "mode": e.mode} for e in entries]
    return json.dumps({"caffemem patch journal": 1, "files": files}, indent=0).encode("ascii")


def _read_journal(root: Path) -> list[_Entry]:
    path = root / _JOURNAL
    try:
        document = json.loads(_read(path))
        entries = [_Entry(f["path"], None if f["before"] is None else base64.b64decode(f["before"], validate=True), f["after"], int(f["mode"])) for f in document["files"]]
    except (ValueError, KeyError, TypeError) as error:
        raise CaffememError(f"{path}: the journal of an interrupted caffemem patch run, but unreadable ({error}); restore the tree from its source") from None
    for entry in entries:
        if not isinstance(entry.path, str) or Path(entry.path).is_absolute() or ".." in Path(entry.path).parts:
            raise CaffememError(f"{path}: names {entry.path!r}, outside the tree; restore the tree from its source")
    return entries


def _sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _undo(root: Path, entries: list[_Entry]) -> None:
    """Put back every file of a journal, then remove the journal: all or nothing too (a
    file changed since by someone else refuses it whole, and a failure keeps the journal
    for the next try)."""
    current = {e.path: _read(root / e.path) if (root / e.path).exists() else None for e in entries}
    changed = [e.path for e in entries if current[e.path] != e.before and _sha256(current[e.path]) != e.after]
    if changed:
        raise CaffememError(
            f"{root}: an interrupted caffemem patch run left {_JOURNAL}, but {', '.join(changed)} changed since; nothing was written: restore those files from the Caffe sources and delete the journal"
        )
    try:
        for entry in entries:
            if current[entry.path] != entry.before:
                _put(root / entry.path, entry.before, entry.mode)
            with contextlib.suppress(FileNotFoundError):
                _temporary(root / entry.path).unlink()
        (root / _JOURNAL).unlink()
    except OSError as error:
        raise CaffememError(
            f"{error.filename or root}: cannot write it ({error.strerror}) while undoing an interrupted caffemem patch run; "
            f"{_JOURNAL} is kept: run `caffemem patch --revert` again once the tree can be written"
        ) from error
    sync_folder(root)


def _recover(root: Path) -> None:
    """Undo what an interrupted run's journal names (nothing without one), and remove a
    journal that was never finished (the run stopped before its first file)."""
    with contextlib.suppress(FileNotFoundError):
        _temporary(root / _JOURNAL).unlink()
    if (root / _JOURNAL).exists():
        with _signals_held():
            _undo(root, _read_journal(root))


def _transact(root: Path, writes: dict[str, bytes | None], originals: dict[str, bytes | None]) -> None:
    """Write (bytes) or remove (None) each file, all or nothing (see the module docstring):
    on any failure or held signal the files already handled get ``originals`` back."""
    if not writes:
        return
    _check_writable(root, [*writes, _JOURNAL])
    modes = {rel: stat.S_IMODE((root / rel).stat().st_mode) if (root / rel).exists() else 0o644 for rel in writes}
    entries = [_Entry(rel, originals[rel], _sha256(data), modes[rel]) for rel, data in writes.items()]
    with _signals_held() as held:
        try:
            _put(root / _JOURNAL, _journal_bytes(entries), 0o644)
            for rel, data in writes.items():
                if held:
                    raise _Interrupted
                _put(root / rel, data, modes[rel])
            if held:
                raise _Interrupted
        except BaseException as error:
            if (root / _JOURNAL).exists():  # else the journal itself was not written: nothing was
                _undo(root, entries)
            if isinstance(error, _Interrupted):
                return  # the held signal is delivered on leaving
            if isinstance(error, OSError):
                raise CaffememError(f"{error.filename or root}: {error.strerror}; the tree was restored, nothing changed") from error
            raise
        (root / _JOURNAL).unlink()  # the commit
        sync_folder(root)


def _applied(text: str, edit: _Edit) -> bool:
    """Whether ``edit`` is in ``text`` (its REPLACE once, and FIND only inside it)."""
    return text.count(edit.replace) == 1 and edit.replace.count(edit.find) == text.count(edit.find)


def apply_patch(caffe_dir: str | os.PathLike) -> PatchStatus:
    """Patch the tree (all or nothing; a no-op when already applied).  An interrupted
    run is undone first; a tree an older caffemem left half-patched is finished."""
    root = _tree(caffe_dir)
    flavour = detect_flavour(root)
    _recover(root)
    current, new_out, _, todo, conflicts = _plan(root, flavour)
    if conflicts:
        raise CaffememError(f"{root}: cannot apply the caffemem runtime patch, nothing was written:\n  " + "\n  ".join(conflicts))
    if todo:
        _transact(root, {rel: new_out[rel] for rel in todo}, {rel: current.get(rel) for rel in todo})
    return patch_status(root)


def revert_patch(caffe_dir: str | os.PathLike) -> PatchStatus:
    """Give back the original bytes (a no-op on an unpatched tree).  An interrupted run is
    undone first; of a half-patched tree the patched part is reverted."""
    root = _tree(caffe_dir)
    flavour = detect_flavour(root)
    _recover(root)
    current, _, done, _, conflicts = _plan(root, flavour)
    if conflicts:
        raise CaffememError(f"{root}: not a tree with the caffemem runtime patch v{PATCH_VERSION}, nothing was reverted:\n  " + "\n  ".join(conflicts))
    if not done:
        return patch_status(root)
    texts = {rel: data.decode("utf-8") for rel, data in current.items()}
    for edit in reversed(_read_edits(flavour)):
        if _applied(texts[edit.path], edit):
            texts[edit.path] = texts[edit.path].replace(edit.replace, edit.find, 1)
    writes: dict[str, bytes | None] = {rel: text.encode("utf-8") for rel, text in texts.items() if text.encode("utf-8") != current[rel]}
    originals: dict[str, bytes | None] = {rel: current[rel] for rel in writes}
    for rel in _new_files(flavour):
        if (root / rel).exists():  # caffemem's own file (_plan refuses any other)
            writes[rel], originals[rel] = None, _read(root / rel)
    _transact(root, writes, originals)
    return patch_status(root)


def apply_edits_file(caffe_dir: str | os.PathLike, edits: str | os.PathLike) -> list[str]:
    """Apply another edits file in the format of ``cpp/<flavour>/edits.txt`` to a tree (the
    build fixes of benchmarks/gpu/, e.g. for CUDA 13 and cuDNN 9): all or nothing, an edit
    already applied is skipped. Returns the files written."""
    root = _tree(caffe_dir)
    _recover(root)
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
        if _applied(text, edit):
            continue
        if text.count(edit.find) != 1:
            conflicts.append(f"{edit.path}: the text {Path(edits).name} edits there was changed or occurs {text.count(edit.find)} times")
            continue
        texts[edit.path] = text.replace(edit.find, edit.replace, 1)
        changed.add(edit.path)
    if conflicts:
        raise CaffememError(f"{root}: cannot apply {edits}, nothing was written:\n  " + "\n  ".join(conflicts))
    _transact(root, {rel: texts[rel].encode("utf-8") for rel in sorted(changed)}, originals)
    return sorted(changed)
