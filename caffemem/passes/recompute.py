"""Pass 7b, recompute: the schedule with some Forwards run again inside Backward.

Entry points: :func:`with_recomputation` (the extended schedule) and :func:`placed` (where
each recomputed Forward runs).  A recomputed layer's Forward runs a second time just before
the first Backward that reads what it wrote (its tops, the buffers its Backward reads), so
that those need not be kept from the Forward pass to the Backward pass: liveness
(passes/liveness.py) then sees two short lives where there was one long one.  This is the
trade the field makes for memory — MXNet's mirror (``MXNET_BACKWARD_DO_MIRROR``), Chen et
al.'s sublinear checkpoints (2016), Checkmate (Jain et al., MLSys 2020) — done here on
Caffe's own schedule and run by the patched Caffe (mem_param's ``recompute`` entries:
Net::BackwardFromTo runs those Forwards at their place, runtime/cpp/bvlc/edits.txt).

A recomputed step makes the same reads and writes as the layer's Forward step, but for a
layer whose parameters the runtime saves and restores around it (``restore_params``,
BatchNorm in TRAIN, layers/recompute facts): as the net sees it, that Forward neither reads
nor changes them.  Whether a set of recomputations gives every later step the value it read
in the plain run is not assumed here: the verifier checks it (plan/verify.py,
``recompute_violations``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from caffemem.passes.schedule import Schedule, Step


@dataclass(frozen=True, slots=True)
class Recomputation:
    """One Forward run again: layer ``layer``'s, just before layer ``before``'s Backward
    (indices into the graph's layers)."""

    layer: int
    before: int
    restore_params: bool = False  # the runtime saves its parameter blobs and restores them after


def with_recomputation(schedule: Schedule, recomputed: Sequence[Recomputation]) -> Schedule:
    """``schedule`` with a "recompute" step per entry, inserted before its ``before``
    layer's Backward step, entries at one place in the order given; steps renumbered."""
    if not recomputed:
        return schedule
    forward = {step.layer: step for step in schedule.steps if step.kind == "forward"}
    backward = {step.layer for step in schedule.steps if step.kind == "backward"}
    at: dict[int, list[Recomputation]] = {}
    for again in recomputed:
        if again.layer not in forward or again.before not in backward:
            raise ValueError(f"recompute layer {again.layer} before layer {again.before}: no such Forward or Backward step")
        at.setdefault(again.before, []).append(again)
    params = _param_classes(schedule)
    steps: list[Step] = []
    for step in schedule.steps:
        if step.kind == "backward":
            for again in at.get(step.layer, ()):
                accesses = forward[again.layer].accesses
                if again.restore_params:
                    own = params.get(again.layer, frozenset())
                    accesses = tuple(access for access in accesses if access.storage not in own)
                steps.append(Step(len(steps), "recompute", again.layer, accesses))
        steps.append(replace(step, index=len(steps)))
    return replace(schedule, steps=tuple(steps), recomputed=tuple(recomputed))


def _param_classes(schedule: Schedule) -> dict[int, frozenset[int]]:
    """layer index -> the storage classes of its parameter blobs ("<index>:<name>#<j>")."""
    found: dict[int, set[int]] = {}
    for storage in schedule.classes:
        if storage.kind != "param":
            continue
        for blob, _ in storage.members:
            index = blob.name.partition(":")[0]
            if index.isdigit():
                found.setdefault(int(index), set()).add(storage.id)
    return {layer: frozenset(ids) for layer, ids in found.items()}


def placed(schedule: Schedule, layers: Iterable[int], restores: Iterable[int] = ()) -> tuple[Recomputation, ...]:
    """Where each of ``layers`` runs again: before the first Backward that reads a storage
    its Forward writes, or before another recomputed layer that needs it, whichever comes
    first; at one place, in Forward order.  A layer no Backward needs is not recomputed
    (returned entries only).  ``restores``: the layers whose parameters the runtime keeps."""
    chosen = set(layers)
    restore = set(restores)
    writes: dict[int, set[int]] = {}
    reads: dict[int, set[int]] = {}
    for step in schedule.steps:
        if step.kind == "forward" and step.layer in chosen:
            writes[step.layer] = {access.storage for access in step.accesses if access.write}
            reads[step.layer] = {access.storage for access in step.accesses if not access.write}
    backward_order = [step for step in schedule.steps if step.kind == "backward"]
    position = {step.layer: i for i, step in enumerate(backward_order)}
    need: dict[int, int] = {}  # layer -> the index in backward_order of the first step needing it
    for i, step in enumerate(backward_order):
        read = {access.storage for access in step.accesses if not access.write}
        for layer in chosen:
            if layer not in need and writes.get(layer, set()) & read:
                need[layer] = i
    # A recomputed layer that reads what another writes needs that one before it: sweep in
    # reverse Forward order so a consumer's place is known before its producers'.
    for layer in sorted(chosen, reverse=True):
        if layer not in need:
            continue
        for producer in chosen:
            if producer < layer and writes.get(producer, set()) & reads.get(layer, set()):
                need[producer] = min(need.get(producer, need[layer]), need[layer])
    ordered = sorted(need, key=lambda layer: (need[layer], layer))
    return tuple(Recomputation(layer, backward_order[need[layer]].layer, layer in restore) for layer in ordered if backward_order[need[layer]].layer in position)
