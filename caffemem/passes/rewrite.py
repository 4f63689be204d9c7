"""Render, prototxt side: the user's file with a `mem_param` block, written atomically.

Entry point: :func:`rewrite_text`.  The original text is kept byte for byte (layer order,
values, comments); an existing top-level `mem_param` is blanked out and the new one is
appended, which protobuf's text format reads the same wherever it stands.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from google.protobuf import text_format

from ..errors import CaffememError, Location
from ..schema import caffe_pb2
from ..textmap import blank_out, top_level_blocks

TARGETS = ("caffemem", "fork")


def mem_param(phases, exclude: tuple[str, ...], target: str) -> caffe_pb2.MemoryOptimizationParameter:
    """The block for the phases planned; the slot table only for caffemem's own target."""
    planned = {phase.phase for phase in phases}
    block = caffe_pb2.MemoryOptimizationParameter(optimize_train="TRAIN" in planned, optimize_test="TEST" in planned)
    block.exclude_blob.extend(exclude)
    if target == "caffemem":
        for phase in phases:
            by_slot: dict[int, list[tuple[str, str, int]]] = {}
            for blob, kind, slot, offset in phase.plan_data.assign:
                by_slot.setdefault(slot, []).append((blob, kind, offset))
            for slot_id, size in sorted(phase.plan_data.slot_bytes.items()):
                slot = block.slot.add(id=slot_id, bytes=size, phase=caffe_pb2.TRAIN if phase.phase == "TRAIN" else caffe_pb2.TEST)
                for blob, kind, offset in by_slot.get(slot_id, []):
                    slot.member.add(blob=blob, kind=kind, offset=offset)
    return block


def rewrite_text(original: str, block: caffe_pb2.MemoryOptimizationParameter) -> str:
    """The original text without its old mem_param, plus the new one at the end."""
    text = original
    for existing in reversed([b for b in top_level_blocks(original) if b.field == "mem_param"]):
        text = blank_out(text, existing.start, existing.end)
    body = text_format.MessageToString(block, indent=2)
    if not text.endswith("\n"):
        text += "\n"
    return text + "mem_param {\n" + body + "}\n"


def write_atomically(path: str, text: str) -> None:
    """Write to a temporary file beside the target, then rename: never half a file."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    try:
        handle = tempfile.NamedTemporaryFile("w", dir=directory, prefix=f".{target.name}.", suffix=".tmp", delete=False, encoding="utf-8")
        with handle:
            handle.write(text)
        os.replace(handle.name, target)
    except OSError as error:
        try:
            os.unlink(handle.name)  # type: ignore[possibly-undefined]
        except (OSError, NameError):
            pass
        raise CaffememError(f"cannot write: {error.strerror or error}", Location(file=str(path))) from None
