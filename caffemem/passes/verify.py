"""Pass 10, verify: an independent check that a memory plan is safe.

Entry point: :func:`verify_plan`.  It shares no code with the planners: it takes the plan
as data (slot sizes, and which blob's data or diff lives in which slot), replays the
schedule over shadow memory that tags every slot with the storage that last wrote it,
and reports — naming step, layer and blob — every read of a slot another blob has
overwritten since, every slot smaller than one of its members, and every planned storage
that Net::Init fills (slots take over only when Init ends).  Storage of a net blob that
the run never touches may be assigned anywhere: Caffe never allocates it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import CaffememError, Location, excerpt
from ..layers.access import BlobId
from .schedule import Schedule


@dataclass(frozen=True)
class PlanData:
    """A plan as it travels in files: slots and assignments by blob name."""

    slot_bytes: dict[int, int]
    assign: tuple[tuple[str, str, int, int], ...]  # (blob, "data"|"diff", slot, byte offset)


@dataclass(frozen=True)
class Violation:
    step: int
    step_name: str
    blob: str
    message: str

    def __str__(self) -> str:
        return f"step {self.step} ({self.step_name}), blob '{self.blob}': {self.message}"


def plan_from_json(document: dict, file: str | None = None) -> PlanData:
    """Read the `plan` object of `caffemem optimize --json` (or a --plan-json file)."""
    try:
        plan = document.get("plan", document)
        slots = {int(s["id"]): int(s["bytes"]) for s in plan["slots"]}
        assign = tuple((str(a["blob"]), str(a["kind"]), int(a["slot"]), int(a.get("offset", 0))) for a in plan["assign"])
        for blob, kind, _, _ in assign:
            if kind not in ("data", "diff"):
                raise ValueError(f"blob '{excerpt(blob)}' has kind '{excerpt(kind)}', not 'data' or 'diff'")
    except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as error:  # OverflowError: int(1e400)
        detail = f"no key {error}" if isinstance(error, KeyError) else str(error)
        raise CaffememError(
            f"not a caffemem plan: {excerpt(detail, 200)} (expected plan.slots[{{id, bytes}}] and plan.assign[{{blob, kind, slot, offset}}])",
            Location(file=file),
        ) from None
    return PlanData(slots, assign)


def read_plan(file: str, phase: str | None = None) -> list[tuple[str | None, PlanData]]:
    """(phase, plan) for each plan in a plan file: the phases of `optimize --json` or
    `--plan-json` output (only ``phase`` when given), or one bare plan (phase None)."""
    where = Location(file=file)
    try:
        with open(file, encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        raise CaffememError("plan file not found", where) from None
    except (OSError, ValueError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise CaffememError(f"cannot read the plan as JSON: {excerpt(getattr(error, 'strerror', None) or str(error), 200)}", where) from None
    except RecursionError:
        raise CaffememError("cannot read the plan as JSON: it nests too deeply", where) from None
    if not isinstance(document, dict):
        raise CaffememError(f"not a caffemem plan: the JSON is {type(document).__name__}, not an object", where)
    if "phases" not in document:
        return [(phase.upper() if phase else None, plan_from_json(document, file))]
    phases = document["phases"]
    if not isinstance(phases, list) or not all(isinstance(entry, dict) and entry.get("phase") in ("TRAIN", "TEST") for entry in phases):
        raise CaffememError("not a caffemem plan: 'phases' must be a list of objects with 'phase' TRAIN or TEST", where)
    chosen = [entry for entry in phases if not phase or entry["phase"] == phase.upper()]
    if not chosen:
        raise CaffememError(f"the plan has no phase {phase}" if phase else "the plan's 'phases' list is empty", where)
    return [(entry["phase"], plan_from_json(entry, file)) for entry in chosen]


@dataclass(frozen=True)
class _Place:
    slot: int
    start: int
    end: int

    def collides(self, other: "_Place") -> bool:
        return self.slot == other.slot and self.start < other.end and other.start < self.end


def verify_plan(schedule: Schedule, plan: PlanData) -> list[Violation]:
    """Every way the plan would corrupt a run (empty: the plan is safe)."""
    violations: list[Violation] = []
    place: dict[int, _Place] = {}
    label = {c.id: c.owner for c in schedule.classes}
    for blob, kind, slot, offset in plan.assign:
        storage = schedule.class_of.get((BlobId("blob", blob), kind), schedule.class_of.get((BlobId("buffer", blob), kind)))
        if slot not in plan.slot_bytes:
            violations.append(Violation(0, "plan", blob, f"assigned to slot {slot}, which the plan does not define"))
            continue
        if storage is None:
            if blob not in schedule.shaped.blob_shapes or kind not in ("data", "diff"):
                violations.append(Violation(0, "plan", blob, f"no {kind} storage of this name in the net"))
            continue  # a net blob's data or diff the run never touches: never allocated
        if storage in schedule.init_touched:
            violations.append(Violation(0, "init", blob, f"its {kind} is filled during Net::Init, before the plan's slots take over, which discards it"))
        size = schedule.classes[storage].bytes
        where = _Place(slot, offset, offset + size)
        previous = place.setdefault(storage, where)
        if previous != where:
            violations.append(Violation(0, "plan", blob, f"its {kind} storage is placed twice (slot {previous.slot} at {previous.start} and slot {slot} at {offset})"))
        if offset < 0 or offset + size > plan.slot_bytes[slot]:
            violations.append(Violation(0, "plan", blob, f"{kind} needs bytes {offset}..{offset + size}, slot {slot} has {plan.slot_bytes[slot]}"))

    neighbours: dict[int, list[int]] = {storage: [] for storage in place}
    ordered = sorted(place, key=lambda s: (place[s].slot, place[s].start))
    for i, storage in enumerate(ordered):  # sweep by offset: only true byte overlaps are paired
        here = place[storage]
        for other in ordered[i + 1 :]:
            there = place[other]
            if there.slot != here.slot or there.start >= here.end:
                break
            if here.collides(there):
                neighbours[storage].append(other)
                neighbours[other].append(storage)
    clobbered_by: dict[int, int] = {}  # storage -> the storage that overwrote its bytes since it wrote them
    for step in schedule.steps:
        name = schedule.step_name(step)
        first_write: dict[int, bool] = {}
        written: list[int] = []
        for access in step.accesses:
            if access.storage not in place:
                continue
            first_write.setdefault(access.storage, access.write)
            if access.write and access.storage not in written:
                written.append(access.storage)
        for storage, writes_first in first_write.items():
            culprit = clobbered_by.get(storage)
            if not writes_first and culprit is not None:
                violations.append(Violation(step.index, name, label[storage], f"reads bytes that '{label[culprit]}' overwrote (slot {place[storage].slot})"))
        for storage in written:
            for other in neighbours[storage]:
                if other in first_write:
                    violations.append(
                        Violation(step.index, name, label[storage], f"writes slot {place[storage].slot} over '{label[other]}', which the same step uses")
                    )
        for storage in written:
            clobbered_by.pop(storage, None)
            for other in neighbours[storage]:
                clobbered_by.setdefault(other, storage)
    return violations
