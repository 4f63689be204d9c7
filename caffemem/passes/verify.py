"""Pass 10, verify: an independent check that a memory plan is safe.

Entry point: :func:`verify_plan`.  It shares no code with the planners: it takes the plan
as data (slot sizes, and which blob's data or diff lives in which slot), replays the
schedule over shadow memory that tags every slot with the storage that last wrote it,
and reports — naming step, layer and blob — every read of a slot another blob has
overwritten since, and every slot smaller than one of its members.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CaffememError
from ..layers.access import BlobId
from .schedule import Schedule


@dataclass(frozen=True)
class PlanData:
    """A plan as it travels in files: slots and assignments by blob name."""

    slot_bytes: dict[int, int]
    assign: tuple[tuple[str, str, int], ...]  # (blob, "data"|"diff", slot)


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
    plan = document.get("plan", document)
    try:
        slots = {int(s["id"]): int(s["bytes"]) for s in plan["slots"]}
        assign = tuple((str(a["blob"]), str(a["kind"]), int(a["slot"])) for a in plan["assign"])
    except (KeyError, TypeError, ValueError) as error:
        raise CaffememError(f"not a caffemem plan: {error!r} (expected plan.slots[{{id, bytes}}] and plan.assign[{{blob, kind, slot}}])") from None
    return PlanData(slots, assign)


def verify_plan(schedule: Schedule, plan: PlanData) -> list[Violation]:
    """Every way the plan would corrupt a run (empty: the plan is safe)."""
    violations: list[Violation] = []
    slot_of_storage: dict[int, int] = {}
    label = {c.id: c.owner for c in schedule.classes}
    for blob, kind, slot in plan.assign:
        storage = schedule.class_of.get((BlobId("blob", blob), kind), schedule.class_of.get((BlobId("buffer", blob), kind)))
        if storage is None:
            violations.append(Violation(0, "plan", blob, f"no {kind} storage of this name in the net"))
            continue
        if slot not in plan.slot_bytes:
            violations.append(Violation(0, "plan", blob, f"assigned to slot {slot}, which the plan does not define"))
            continue
        previous = slot_of_storage.setdefault(storage, slot)
        if previous != slot:
            violations.append(Violation(0, "plan", blob, f"its {kind} storage is in slots {previous} and {slot} at once"))
        size = schedule.classes[storage].bytes
        if size > plan.slot_bytes[slot]:
            violations.append(Violation(0, "plan", blob, f"{kind} needs {size} bytes, slot {slot} has {plan.slot_bytes[slot]}"))

    holder: dict[int, int] = {}  # slot -> storage that last wrote it
    for step in schedule.steps:
        name = schedule.step_name(step)
        first_write: dict[int, bool] = {}  # storage -> its first access in the step is a write
        users: dict[int, set[int]] = {}  # slot -> storages the step touches in it
        writers: dict[int, int] = {}  # slot -> the storage that writes it last in the step
        for access in step.accesses:
            slot = slot_of_storage.get(access.storage)
            if slot is None:
                continue
            first_write.setdefault(access.storage, access.write)
            users.setdefault(slot, set()).add(access.storage)
            if access.write:
                writers[slot] = access.storage
        for storage, writes_first in first_write.items():
            slot = slot_of_storage[storage]
            current = holder.get(slot)
            if not writes_first and current is not None and current != storage:
                violations.append(Violation(step.index, name, label[storage], f"reads slot {slot}, which '{label[current]}' overwrote"))
        for slot, storages in users.items():
            if len(storages) > 1 and slot in writers:
                other = sorted(label[s] for s in storages if s != writers[slot])
                violations.append(
                    Violation(step.index, name, label[writers[slot]], f"writes slot {slot} while the same step uses it for '{other[0]}'")
                )
        holder.update(writers)
    return violations
