"""The plan as Caffe reads it: the `mem_param` block with each phase's slot table.

Entry point: :func:`mem_param`; :mod:`caffemem.prototxt.write` puts the block into the
user's file, every other byte kept.
"""

from __future__ import annotations

from caffemem.schema import caffe_pb2

TARGETS = ("caffemem", "fork")


def mem_param(phases, exclude: tuple[str, ...], target: str, previous: caffe_pb2.MemoryOptimizationParameter | None = None) -> caffe_pb2.MemoryOptimizationParameter:
    """The block for the phases planned; the slot table only for caffemem's own target.
    ``previous``: the file's block, whose tables of the phases not planned now are kept
    (replanning TRAIN with --force leaves the TEST table as it was)."""
    planned = {phase.phase for phase in phases}
    kept = [slot for slot in (previous.slot if previous is not None else ()) if caffe_pb2.Phase.Name(slot.phase) not in planned]
    kept_phases = {caffe_pb2.Phase.Name(slot.phase) for slot in kept}
    block = caffe_pb2.MemoryOptimizationParameter(optimize_train="TRAIN" in planned | kept_phases, optimize_test="TEST" in planned | kept_phases)
    block.exclude_blob.extend(exclude)
    if target == "caffemem":
        block.slot.extend(kept)
        for phase in phases:
            by_slot: dict[int, list[tuple[str, str, int]]] = {}
            for blob, kind, slot, offset in phase.plan_data.assign:
                by_slot.setdefault(slot, []).append((blob, kind, offset))
            for slot_id, size in sorted(phase.plan_data.slot_bytes.items()):
                slot = block.slot.add(id=slot_id, bytes=size, phase=caffe_pb2.TRAIN if phase.phase == "TRAIN" else caffe_pb2.TEST)
                for blob, kind, offset in by_slot.get(slot_id, []):
                    slot.member.add(blob=blob, kind=kind, offset=offset)
    return block
