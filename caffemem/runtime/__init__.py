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
  convolution and deconvolution, whose workspace a plan may hold, and every cuDNN layer,
  whose handles, streams and workspace come from one pool per device
  (``util/cudnn_pool.hpp``, v6).

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

The tree may come from anyone (a CI job's checkout of a pull request), so (issue 31) nothing
is written through a symbolic link or in place of one: a tree where a file the patch edits
or adds, or a folder on its way, is a link is refused before anything is written (the root
itself may be a link: the user named it), and each write reaches its folder again one
component at a time with O_NOFOLLOW.  Files are replaced by rename, never written in place
(a hard link to a file outside keeps that file's bytes), and a temporary file is created
afresh (O_EXCL), whatever was planted under its name.  A journal is untrusted input too:
it is followed only if the run could have written it (a regular file, not a link; each
file one the patch edits or adds, named once, reached through no link, with permission bits
only as its mode, and bytes that agree with the patch's own files and edits); any other is
refused, by ``--check`` as well, and nothing is written.
"""

from __future__ import annotations

import base64
import contextlib
import enum
import hashlib
import json
import os
import re
import signal
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from caffemem.errors import CaffememError, excerpt
from caffemem.prototxt.read import open_input
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
# (util/mem_recompute.hpp, issue 23);
# v5 (BVLC): a recompute entry naming a name two layers share stops Net::Init (issue 31);
# v6 (BVLC): the cuDNN layers share one pool of handles, streams and workspace per device,
# CAFFEMEM_CUDA_STACK_BYTES (util/cudnn_pool.hpp, issue 32).
PATCH_VERSION = 6
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


@dataclass(frozen=True)
class _Changes:
    """What one kind of run may write in a tree: exact-text edits of existing files, and
    whole new files (tree-relative path -> bytes).  A journal may name these files only,
    with the bytes they can hold (:func:`_journal_problem`)."""

    who: str  # "caffemem patch", or the edits file of apply_edits_file
    edits: tuple[_Edit, ...]
    new: dict[str, bytes]

    @property
    def paths(self) -> list[str]:
        return sorted({edit.path for edit in self.edits} | set(self.new))

    def edits_of(self, path: str) -> list[_Edit]:
        return [edit for edit in self.edits if edit.path == path]


def _changes(flavour: Flavour) -> _Changes:
    """What `caffemem patch` writes in a tree of ``flavour``."""
    return _Changes("caffemem patch", tuple(_read_edits(flavour)), _new_files(flavour))


def _tree(caffe_dir: str | os.PathLike) -> Path:
    root = Path(caffe_dir)
    if not root.is_dir():
        raise CaffememError(f"{root}: not a directory (expected a Caffe source tree)")
    return root


_MAX_FILE_BYTES = 64 * 1024 * 1024  # BVLC's largest file the patch reads, caffe.proto, is ~70 KB; a journal of them ~1 MB


def _read(path: Path, what: str = "Caffe source file") -> bytes:
    """A file of the tree, read-only and bounded; what is not a regular file (a FIFO would
    block) is refused from the opened descriptor (prototxt/read.py's open_input)."""
    try:
        with open_input(path, what) as handle:
            data = handle.read(_MAX_FILE_BYTES + 1)
    except OSError as e:
        raise CaffememError(f"{path}: cannot read it ({e.strerror})") from e
    if len(data) > _MAX_FILE_BYTES:
        raise CaffememError(f"{path}: larger than {_MAX_FILE_BYTES} bytes, more than any {what} caffemem patch reads")
    return data


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


def _applied(text: str, edit: _Edit) -> bool:
    """Whether ``edit`` is in ``text`` (its REPLACE once, and FIND only inside it)."""
    return text.count(edit.replace) == 1 and edit.replace.count(edit.find) == text.count(edit.find)


@dataclass(frozen=True)
class _Edited:
    """One file's text with the edits not yet in it applied (:func:`_edit_text`)."""

    text: str
    done: bool  # some edit was there already
    todo: bool  # some edit was applied now
    conflicts: tuple[str, ...]  # edits whose FIND was changed or is not unique: nothing may be written


def _edit_text(text: str, edits: list[_Edit], who: str) -> _Edited:
    """Apply each edit that ``text`` does not hold yet, in order (FIND must occur exactly
    once, REPLACE not at all); the one rule of the patch, of apply_edits_file and of the
    journal's check."""
    done = todo = False
    conflicts: list[str] = []
    for edit in edits:
        n_find = text.count(edit.find)
        if _applied(text, edit):
            done = True
        elif n_find == 1 and text.count(edit.replace) == 0:
            todo = True
            text = text.replace(edit.find, edit.replace, 1)
        else:
            first = edit.find.strip().splitlines()[0].strip() if edit.find.strip() else ""
            conflicts.append(f"{edit.path}: the text {who} there ({first!r} ...) was changed or occurs {n_find} times")
    return _Edited(text, done, todo, tuple(conflicts))


def _reverted(text: str, edits: list[_Edit]) -> str:
    """``text`` with each edit it holds inverted exactly, the last first."""
    for edit in reversed(edits):
        if _applied(text, edit):
            text = text.replace(edit.replace, edit.find, 1)
    return text


def _plan(root: Path, flavour: Flavour) -> tuple[dict[str, bytes], dict[str, bytes], list[str], list[str], list[str]]:
    """Read the tree: (current bytes per touched file, patched bytes per file, patched
    parts, original parts, conflicts).  Nothing is written."""
    if not (_CPP / flavour.value / "edits.txt").is_file():
        raise CaffememError(f"{root}: {flavour.description} is recognised but this caffemem has no patch for it yet")
    changes = _changes(flavour)
    current: dict[str, bytes] = {}
    new_out: dict[str, bytes] = {}
    done: list[str] = []
    todo: list[str] = []
    conflicts: list[str] = []
    for rel in dict.fromkeys(edit.path for edit in changes.edits):
        p = root / rel
        if not p.is_file():
            conflicts.append(f"{rel}: missing")
            continue
        current[rel] = _read(p)
        try:
            edited = _edit_text(current[rel].decode("utf-8"), changes.edits_of(rel), "caffemem patches")
        except UnicodeDecodeError:
            conflicts.append(f"{rel}: not UTF-8 text")
            continue
        done += [rel] if edited.done else []
        todo += [rel] if edited.todo else []
        conflicts += edited.conflicts
        new_out[rel] = edited.text.encode("utf-8")
    for rel, data in changes.new.items():
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
    text = _read(p).decode("utf-8", "replace")
    i = text.find(_MARKER)
    if i < 0:
        return None
    digits = "".join(c for c in text[i + len(_MARKER) : i + len(_MARKER) + 6] if c in "0123456789")
    return int(digits) if digits else None


def patch_status(caffe_dir: str | os.PathLike) -> PatchStatus:
    """Which version of the patch the tree carries, if any.  Reads only: an interrupted
    run's journal is reported, not acted on (and refused, as by `patch`, when it is not
    one caffemem could have written)."""
    root = _tree(caffe_dir)
    flavour = detect_flavour(root)
    if _read_journal(root, _changes(flavour)) is not None:
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


# ----------------------------------------------------------------------------- links (issue 31)
# Nothing is written through a symbolic link or in place of one: the tree may come from
# anyone (a CI job's checkout of a pull request), and a link in it may lead anywhere.  The
# root itself may be a link (the user named it); below it, every folder and file a run
# writes is checked with lstat before anything is written, and reached again while writing
# one component at a time with O_NOFOLLOW (a link swapped in between fails there).  Files
# are replaced by rename, never written in place, so a hard link to a file outside keeps
# that file's bytes.


def _link_on(root: Path, rel: str) -> str | None:
    """The first part of ``rel`` below ``root`` that is a symbolic link (tree-relative;
    None: none; the walk ends at a part that does not exist, or under a file: _plan names
    what is missing)."""
    part = root
    for name in Path(rel).parts:
        part = part / name
        try:
            if stat.S_ISLNK(os.lstat(part).st_mode):
                return part.relative_to(root).as_posix()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise CaffememError(f"{part}: cannot stat it ({e.strerror}); nothing was changed") from e
    return None


def _refuse_links(root: Path, paths: list[str]) -> None:
    """Refuse, before anything is written, a tree where a file of ``paths`` or a folder on
    its way is a symbolic link (replacing the link by a copy is the user's call)."""
    for rel in paths:
        link = _link_on(root, rel)
        if link is not None:
            kind = "file" if link == rel else "folder"
            raise CaffememError(
                f"{root / link}: a symbolic link; caffemem patch never writes through a link or in place of one: "
                f"replace it by a copy of the {kind} it points to, then run it again (nothing was written)"
            )


@contextlib.contextmanager
def _folder_of(root: Path, rel: str) -> Iterator[int]:
    """A descriptor of the folder holding ``rel``, reached from ``root`` one component at a
    time without following a link (openat with O_NOFOLLOW)."""
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        parts = Path(rel).parts[:-1]
        for i, name in enumerate(parts):
            try:
                inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
            except OSError as error:  # a link swapped in after _refuse_links: ENOTDIR (or ELOOP)
                where = root.joinpath(*parts[: i + 1])
                reason = "a symbolic link (caffemem patch never writes through one)" if os.path.islink(where) else error.strerror
                raise OSError(error.errno, reason, str(where)) from None
            os.close(folder)
            folder = inner
        yield folder
    finally:
        os.close(folder)


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


def _temporary(name: str) -> str:
    """The temporary file that becomes ``name`` (beside it): a fixed name, so that the
    recovery of a killed run finds and removes it."""
    return f".{name}.caffemem-tmp"


def _put(root: Path, rel: str, data: bytes | None, mode: int) -> None:
    """Replace ``rel`` by ``data`` (None: remove it) atomically: a temporary file beside
    it, created afresh (a stale one, or a link planted under its name, is removed, never
    written into), on disk (fsync) before it is renamed over the old one; the folder is
    reached without following links (:func:`_folder_of`) and synced after the rename."""
    name = Path(rel).name
    with _folder_of(root, rel) as folder:
        if data is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=folder)
        else:
            tmp = _temporary(name)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=folder)
            try:
                descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
                with os.fdopen(descriptor, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fchmod(handle.fileno(), mode)
                    os.fsync(handle.fileno())
                os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=folder)
                raise
        with contextlib.suppress(OSError):  # a file system without folder fsync only loses durability
            os.fsync(folder)


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


def _parse_journal(data: bytes) -> list[_Entry]:
    """The entries of a journal's bytes, their types checked (ValueError, TypeError: not a journal)."""
    document = json.loads(data)
    if not isinstance(document, dict) or document.get("caffemem patch journal") != 1 or not isinstance(document.get("files"), list):
        raise ValueError("not a caffemem patch journal")
    entries = []
    for f in document["files"]:
        if not isinstance(f, dict) or set(f) != {"path", "before", "after", "mode"}:
            raise TypeError("an entry is not path, before, after and mode")
        if not isinstance(f["path"], str) or not isinstance(f["before"], (str, type(None))):
            raise TypeError("an entry's path or before is not text")
        if f["after"] is not None and not (isinstance(f["after"], str) and re.fullmatch(r"[0-9a-f]{64}", f["after"])):
            raise TypeError("an entry's after is not a SHA-256")
        if type(f["mode"]) is not int:
            raise TypeError("an entry's mode is not an integer")
        entries.append(_Entry(f["path"], None if f["before"] is None else base64.b64decode(f["before"], validate=True), f["after"], f["mode"]))
    return entries


def _edits_agree(entry: _Entry, edits: list[_Edit], who: str) -> bool:
    """Whether the journal entry of an edited file is one a run wrote: the edits applied to
    (a patch) or inverted from (a revert) the bytes it puts back give the bytes it says
    were written there, and those differ (a file is never removed or created by an edit)."""
    if entry.before is None or entry.after is None or entry.after == _sha256(entry.before):
        return False
    try:
        text = entry.before.decode("utf-8")
    except UnicodeDecodeError:
        return False
    edited = _edit_text(text, edits, who)
    written = [_reverted(text, edits)] + ([] if edited.conflicts else [edited.text])
    return entry.after in {_sha256(t.encode("utf-8")) for t in written}


def _journal_problem(root: Path, entries: list[_Entry], changes: _Changes) -> str | None:
    """What makes ``entries`` a journal no run of ``changes`` wrote (None: nothing): each
    file one the run writes, once, reached through no link, with a plain mode, and bytes
    that agree with the run (a new file: caffemem's own bytes, before or after; an edited
    file: its edits applied to, or inverted from, the bytes put back give the bytes said
    to be written)."""
    seen: set[str] = set()
    for entry in entries:
        if entry.path not in changes.paths:
            return f"names {excerpt(entry.path)!r}, a file {changes.who} never writes"
        if entry.path in seen:
            return f"names {entry.path} twice"
        seen.add(entry.path)
        if not 0 <= entry.mode <= 0o777:
            return f"gives {entry.path} mode {entry.mode:#o}, not a plain file mode ({changes.who} writes permission bits only)"
        link = _link_on(root, entry.path)
        if link is not None:
            return f"names {entry.path}, but {link} is a symbolic link ({changes.who} never writes through one)"
        if entry.path in changes.new:
            ours = changes.new[entry.path]
            if (entry.before, entry.after) not in ((None, _sha256(ours)), (ours, None)):
                return f"gives {entry.path} bytes that are not caffemem's own file"
            continue
        if not _edits_agree(entry, changes.edits_of(entry.path), changes.who):
            return f"gives {entry.path} bytes that the patch's edits do not turn into what it says was written there"
    return None


def _read_journal(root: Path, changes: _Changes) -> list[_Entry] | None:
    """An interrupted run's journal (None: there is none), refused unless a run of
    ``changes`` could have written it: it is untrusted input, the tree may come from anyone
    (:func:`_journal_problem`).  A journal that is a link, or not a regular file, is refused
    unread."""
    path = root / _JOURNAL
    advice = "nothing was written: restore the tree from its source, then delete the journal"
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CaffememError(f"{path}: cannot stat it ({e.strerror}); nothing was changed") from e
    if stat.S_ISLNK(status.st_mode):
        raise CaffememError(f"{path}: a symbolic link, not a journal caffemem wrote; {advice}")
    data = _read(path, "journal of caffemem patch")
    try:
        entries = _parse_journal(data)
    except (ValueError, TypeError, RecursionError) as error:
        raise CaffememError(f"{path}: the journal of an interrupted caffemem patch run, but unreadable ({error}); {advice}") from None
    problem = _journal_problem(root, entries, changes)
    if problem is not None:
        raise CaffememError(f"{path}: {problem}; {advice}")
    return entries


def _sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _undo(root: Path, entries: list[_Entry]) -> None:
    """Put back every file of a journal, then remove the journal: all or nothing too (a
    file changed since by someone else refuses it whole, and a failure keeps the journal
    for the next try)."""
    current = {e.path: _read(root / e.path) if os.path.lexists(root / e.path) else None for e in entries}
    changed = [e.path for e in entries if current[e.path] != e.before and _sha256(current[e.path]) != e.after]
    if changed:
        raise CaffememError(
            f"{root}: an interrupted caffemem patch run left {_JOURNAL}, but {', '.join(changed)} changed since; nothing was written: restore those files from the Caffe sources and delete the journal"
        )
    try:
        for entry in entries:
            if current[entry.path] != entry.before:
                _put(root, entry.path, entry.before, entry.mode)
            with contextlib.suppress(OSError), _folder_of(root, entry.path) as folder:  # none there, or none of ours
                os.unlink(_temporary(Path(entry.path).name), dir_fd=folder)
        (root / _JOURNAL).unlink()
    except OSError as error:
        raise CaffememError(
            f"{error.filename or root}: cannot write it ({error.strerror}) while undoing an interrupted caffemem patch run; "
            f"{_JOURNAL} is kept: run `caffemem patch --revert` again once the tree can be written"
        ) from error
    sync_folder(root)


def _start(root: Path, changes: _Changes) -> None:
    """Before a run plans its writes: an interrupted run's journal is checked, then every
    file the run may write (and each folder on its way) is checked for links, then the
    journal is undone (and a journal that was never finished removed): nothing is written
    before all of that has passed."""
    entries = _read_journal(root, changes)
    _refuse_links(root, changes.paths)
    with contextlib.suppress(OSError):  # none there (or not a file: _put's own removal then names it)
        (root / _temporary(_JOURNAL)).unlink()
    if entries is not None:
        with _signals_held():
            _undo(root, entries)


def _transact(root: Path, writes: dict[str, bytes | None], originals: dict[str, bytes | None]) -> None:
    """Write (bytes) or remove (None) each file, all or nothing (see the module docstring):
    on any failure or held signal the files already handled get ``originals`` back."""
    if not writes:
        return
    _check_writable(root, [*writes, _JOURNAL])
    # permission bits only: a setuid bit is never carried over, and a journal with one is refused
    modes = {rel: os.lstat(root / rel).st_mode & 0o777 if os.path.lexists(root / rel) else 0o644 for rel in writes}
    entries = [_Entry(rel, originals[rel], _sha256(data), modes[rel]) for rel, data in writes.items()]
    with _signals_held() as held:
        try:
            _put(root, _JOURNAL, _journal_bytes(entries), 0o644)
            for rel, data in writes.items():
                if held:
                    raise _Interrupted
                _put(root, rel, data, modes[rel])
            if held:
                raise _Interrupted
        except BaseException as error:
            if os.path.lexists(root / _JOURNAL):  # else the journal itself was not written: nothing was
                _undo(root, entries)
            if isinstance(error, _Interrupted):
                return  # the held signal is delivered on leaving
            if isinstance(error, OSError):
                raise CaffememError(f"{error.filename or root}: {error.strerror}; the tree was restored, nothing changed") from error
            raise
        (root / _JOURNAL).unlink()  # the commit
        sync_folder(root)


def apply_patch(caffe_dir: str | os.PathLike) -> PatchStatus:
    """Patch the tree (all or nothing; a no-op when already applied).  An interrupted
    run is undone first; a tree an older caffemem left half-patched is finished."""
    root = _tree(caffe_dir)
    flavour = detect_flavour(root)
    _start(root, _changes(flavour))
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
    changes = _changes(flavour)
    _start(root, changes)
    current, _, done, _, conflicts = _plan(root, flavour)
    if conflicts:
        raise CaffememError(f"{root}: not a tree with the caffemem runtime patch v{PATCH_VERSION}, nothing was reverted:\n  " + "\n  ".join(conflicts))
    if not done:
        return patch_status(root)
    writes: dict[str, bytes | None] = {}
    for rel, data in current.items():
        reverted = _reverted(data.decode("utf-8"), changes.edits_of(rel)).encode("utf-8")
        if reverted != data:
            writes[rel] = reverted
    originals: dict[str, bytes | None] = {rel: current[rel] for rel in writes}
    for rel in changes.new:
        if (root / rel).exists():  # caffemem's own file (_plan refuses any other)
            writes[rel], originals[rel] = None, _read(root / rel)
    _transact(root, writes, originals)
    return patch_status(root)


def apply_edits_file(caffe_dir: str | os.PathLike, edits: str | os.PathLike) -> list[str]:
    """Apply another edits file in the format of ``cpp/<flavour>/edits.txt`` to a tree (the
    build fixes of benchmarks/gpu/, e.g. for CUDA 13 and cuDNN 9): all or nothing, an edit
    already applied is skipped. Returns the files written.  (An interrupted run's journal
    is undone first when it is one of these edits'; one of `caffemem patch` is refused.)"""
    root = _tree(caffe_dir)
    changes = _Changes(Path(edits).name, tuple(_read_edits_file(Path(edits))), {})
    _start(root, changes)
    originals: dict[str, bytes | None] = {}
    writes: dict[str, bytes | None] = {}
    conflicts: list[str] = []
    for rel in dict.fromkeys(edit.path for edit in changes.edits):
        p = root / rel
        if not p.is_file():
            conflicts.append(f"{rel}: missing")
            continue
        data = _read(p)
        try:
            edited = _edit_text(data.decode("utf-8"), changes.edits_of(rel), f"{changes.who} edits")
        except UnicodeDecodeError:
            conflicts.append(f"{rel}: not UTF-8 text")
            continue
        conflicts += edited.conflicts
        if edited.todo:
            originals[rel], writes[rel] = data, edited.text.encode("utf-8")
    if conflicts:
        raise CaffememError(f"{root}: cannot apply {edits}, nothing was written:\n  " + "\n  ".join(conflicts))
    _transact(root, writes, originals)
    return sorted(writes)
