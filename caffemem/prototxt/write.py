"""Writing the user's file: the text with our block replaced, and an atomic write.

:func:`rewrite_text` keeps the original byte for byte (layer order, values, comments); an
existing top-level `mem_param` is blanked out and the new one is appended, which
protobuf's text format reads the same wherever it stands.  :func:`write_atomically`
writes a temporary file beside the target, then renames it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from google.protobuf import text_format

from caffemem.errors import CaffememError, Location
from caffemem.prototxt.textmap import blank_out, top_level_blocks
from caffemem.schema import caffe_pb2


def rewrite_text(original: str, block: caffe_pb2.MemoryOptimizationParameter) -> str:
    """The original text without its old mem_param, plus the new one at the end."""
    text = original
    for existing in reversed([b for b in top_level_blocks(original) if b.field == "mem_param"]):
        text = blank_out(text, existing.start, existing.end)
    body = text_format.MessageToString(block, indent=2)
    if not text.endswith("\n"):
        text += "\n"
    return text + "mem_param {\n" + body + "}\n"


def write_atomically(path: str, text: str, *, errors: str = "strict") -> None:
    """Write to a temporary file beside the target, then rename: never half a file, and no
    temporary file left behind whatever stops the write.  ``errors="surrogateescape"``
    writes back the undecodable bytes of a file read that way, as they were."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    temporary: str | None = None
    try:
        with tempfile.NamedTemporaryFile("w", dir=directory, prefix=f".{target.name}.", suffix=".tmp", delete=False, encoding="utf-8", errors=errors) as handle:
            temporary = handle.name
            handle.write(text)
        os.chmod(temporary, _mode_for(target))
        os.replace(temporary, target)
    except BaseException as error:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        if isinstance(error, OSError):
            raise CaffememError(f"cannot write: {error.strerror or error}", Location(file=str(path))) from None
        raise


def _mode_for(target: Path) -> int:
    """The file's own permissions, or a new file's (0666 less the umask): a temporary
    file is private (0600), which the renamed result must not inherit."""
    try:
        return target.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
