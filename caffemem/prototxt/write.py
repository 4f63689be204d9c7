"""Writing: the user's file with our block (every other byte kept), and every output
caffemem writes, atomically and never over an input.

:func:`rewrite_text` keeps the original byte for byte (CR, CRLF, tabs, trailing spaces,
a BOM, undecodable bytes read through :func:`read_exact`); an existing top-level
`mem_param` is blanked out and the new one is appended in the file's own line ending,
which protobuf's text format reads the same wherever it stands.

:func:`write_output` is the one way an output reaches the disk: ``-`` is standard output;
a regular file is written to a temporary file beside it (random name, so a stale one
from a killed run never blocks), fsynced and renamed over the target; a file that is one
of the run's inputs (after symlinks and hard links) is refused unless the user allows it;
devices, FIFOs, sockets and folders are refused, except the harmless character devices
(/dev/null, /dev/full, /dev/zero), written in place.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from google.protobuf import text_format

from caffemem.errors import CaffememError, Location
from caffemem.prototxt.read import open_input, read_by_this_run
from caffemem.prototxt.textmap import blank_out, top_level_blocks
from caffemem.schema import caffe_pb2

STDOUT = "-"
HARMLESS_DEVICES = ("/dev/null", "/dev/full", "/dev/zero")


def read_exact(path: str) -> str:
    """A file's text with every byte recoverable: no newline translation (a lone CR stays
    a CR), undecodable bytes kept as surrogates (``encode_exact`` gives them back)."""
    with open_input(path, "net or solver file") as handle:
        return handle.read().decode("utf-8", "surrogateescape")


def encode_exact(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def line_ending(text: str) -> str:
    """The file's own line ending: CRLF when most of its lines end so, a lone CR (classic
    Mac OS) when more lines end so than in LF, else LF."""
    crlf = text.count("\r\n")
    lf, cr = text.count("\n") - crlf, text.count("\r") - crlf
    if cr > lf and cr > crlf:
        return "\r"
    return "\r\n" if crlf and crlf >= lf else "\n"


def rewrite_text(original: str, block: caffe_pb2.MemoryOptimizationParameter, comments: Iterable[str] = ()) -> str:
    """The original text without its old mem_param, plus the new one at the end (its
    first lines: ``comments``, e.g. what the plan was made for, plan/record.py)."""
    text = original
    for existing in reversed([b for b in top_level_blocks(original) if b.field == "mem_param"]):
        text = blank_out(text, existing.start, existing.end)
    eol = line_ending(original)
    # Protobuf's text format (Caffe's parser too) ends a comment at LF only: in a CR-only
    # file a comment line ending in CR would hide the rest of the block, so it ends CR LF.
    comment_eol = eol if "\n" in eol else eol + "\n"
    head = "".join(f"  {line}{comment_eol}" for line in comments)
    body = (text_format.MessageToString(block, indent=2) + "}\n").replace("\n", eol)
    return text + _separator(text, eol) + "mem_param {" + eol + head + body


def _separator(text: str, eol: str) -> str:
    """What ends the file's last line before our block: nothing after a line end, else
    the file's own.  Only an LF ends a comment in protobuf's text format, so a last line
    holding a ``#`` and ended by a lone CR, or by nothing in a CR-only file, gets an LF
    too: ``# end\\r`` would otherwise swallow ``mem_param {`` (issue 31)."""
    if not text or text.endswith("\n"):
        return ""
    last = text.rstrip("\r")
    last = last[max(last.rfind("\n"), last.rfind("\r")) + 1 :]
    if "#" not in last:
        return "" if text.endswith("\r") else eol
    return "\n" if text.endswith("\r") else eol if "\n" in eol else eol + "\n"


def write_output(path: str, data: bytes, *, inputs: Iterable[str] = (), may_replace: str | None = None, flag: str = "-o", now: bool = False) -> None:
    """Write ``data`` to ``path`` (``-``: standard output) as the module docstring says;
    every refusal and failure is a CaffememError naming the file.  No output lands on a
    file the run read (``inputs``, and every file prototxt.read noted), except
    ``may_replace`` (the net, with --in-place-file).  Inside :func:`staged_outputs` the
    file lands when the stage commits, unless ``now`` (a file updated under its lock must
    land before the lock is let go)."""
    if path == STDOUT:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    where = Location(file=path)
    target = os.path.realpath(path)  # a symlink stays a symlink; its target is written
    status = _stat(target)
    if status is not None:
        if stat.S_ISDIR(status.st_mode):
            raise CaffememError(f"{flag} names a folder; give a file name", where)
        if not stat.S_ISREG(status.st_mode):
            if stat.S_ISCHR(status.st_mode) and target in HARMLESS_DEVICES:
                return _write_in_place(target, data, where)
            kind = "a FIFO" if stat.S_ISFIFO(status.st_mode) else "a socket" if stat.S_ISSOCK(status.st_mode) else "a device"
            raise CaffememError(f"{flag} names {kind}; caffemem writes regular files (or - for standard output)", where)
        replaceable = may_replace is not None and _same(target, may_replace)
        for given in inputs:
            if not replaceable and _same(target, given):
                raise CaffememError(f"{flag} names an input of this run ({given}); choose another file" + (" or pass --in-place-file" if flag == "-o" else ""), where)
        if not replaceable and read_by_this_run(target):
            raise CaffememError(f"{flag} names a file this run read; choose another file", where)
    _write_atomically(target, data, where, stage=None if now else _stage)


# The temporary files (with their targets) written by the command running now, waiting
# for it to succeed, and what to do once they have landed; None outside a stage (the API
# writes at once).
_stage: list[tuple[str, str]] | None = None
_landed: list[Callable[[], None]] | None = None


def after_landing(action: Callable[[], None]) -> None:
    """Run ``action`` (say "wrote FILE") once the staged outputs have landed, or at once
    outside a stage: a run interrupted before it lands never claims a file it left out."""
    if _landed is None:
        action()
    else:
        _landed.append(action)


@contextlib.contextmanager
def staged_outputs() -> Iterator[Callable[[], None]]:
    """Within the block, each output waits complete and fsynced in its temporary file
    beside the target; the function the block receives renames them all into place (with
    Ctrl-C held off, so that they land together).  What has not landed when the block
    ends (an error, Ctrl-C) is deleted: a failed command leaves no file behind."""
    global _stage, _landed
    outer, pending = (_stage, _landed), []
    actions: list[Callable[[], None]] = []
    _stage, _landed = pending, actions

    def commit() -> None:
        held = _hold_interrupts()
        try:
            while pending:
                temporary, target = pending[0]
                try:
                    os.replace(temporary, target)
                except OSError as error:
                    raise _write_error(error, Location(file=target)) from None
                pending.pop(0)
                sync_folder(os.path.dirname(target) or ".")
        finally:
            if held:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)
        while actions:
            actions.pop(0)()

    try:
        yield commit
    finally:
        _stage, _landed = outer
        for temporary, _ in pending:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


_HELD = [getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)]


def _hold_interrupts() -> bool:
    """Block SIGINT, SIGTERM and SIGHUP in this thread (each is delivered when unblocked);
    False where the platform cannot."""
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
        return True
    except (AttributeError, OSError, ValueError):
        return False


def sync_folder(directory: str | os.PathLike) -> None:
    """Make a rename or removal in ``directory`` durable (a file system without folder
    fsync only loses that guarantee)."""
    with contextlib.suppress(OSError):
        folder = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` + ``.lock`` (created beside it): a
    read-modify-write of a shared file (the `check` baseline) by two runs at once lands
    both changes instead of losing one."""
    where = Location(file=path)
    try:
        handle = open(f"{path}.lock", "a")
    except OSError as error:
        raise CaffememError(f"cannot lock: {error.strerror or error}", where) from None
    with handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _same(path: str, other: str) -> bool:
    try:
        return os.path.samefile(path, other)
    except (OSError, ValueError):
        return False


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise CaffememError(f"cannot write: {error.strerror or error}", Location(file=path)) from None


def _write_in_place(target: str, data: bytes, where: Location) -> None:
    try:
        with open(target, "wb") as handle:
            handle.write(data)
    except OSError as error:
        raise _write_error(error, where) from None


def _write_atomically(target: str, data: bytes, where: Location, stage: list[tuple[str, str]] | None = None) -> None:
    directory = os.path.dirname(target) or "."
    temporary: str | None = None
    try:
        descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=f".{_short(os.path.basename(target))}.", suffix=".tmp")
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, _mode_for(Path(target)))
        if stage is not None:
            stage.append((temporary, target))
        else:
            os.replace(temporary, target)
            sync_folder(directory)
        temporary = None
    except OSError as error:
        raise _write_error(error, where) from None
    finally:
        if temporary is not None:  # an error or Ctrl-C: no half file, no temporary left behind
            with contextlib.suppress(OSError):
                os.unlink(temporary)


def _short(name: str, limit: int = 100) -> str:
    """A file name cut to ``limit`` bytes for the temporary file's: the target's own name
    may take all of a file system's 255 bytes, and ours adds a dot, 8 random characters
    and `.tmp`."""
    raw = os.fsencode(name)
    return name if len(raw) <= limit else os.fsdecode(raw[:limit])


def _write_error(error: OSError, where: Location) -> CaffememError:
    if error.errno == errno.ENOSPC:
        return CaffememError("cannot write: no space left on the device", where)
    return CaffememError(f"cannot write: {error.strerror or error}", where)


def _mode_for(target: Path) -> int:
    """The file's own permissions, or a new file's (0666 less the umask): a temporary
    file is private (0600), which the renamed result must not inherit."""
    try:
        return target.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
