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

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from caffemem.graph import Graph
from caffemem.layers.access import param_id
from caffemem.passes.schedule import Schedule, Step


@dataclass(frozen=True, slots=True)
class Recomputation:
    """One Forward run again: layer ``layer``'s, just before layer ``before``'s Backward
    (indices into the graph's layers)."""

    layer: int
    before: int
    restore_params: bool = False  # the runtime saves its parameter blobs and restores them after


def names_given_twice(graph: Graph) -> dict[str, int]:
    """Layer names the net gives more than one layer, with how many.  Caffe allows them
    (Net::Init keys layers by position), but a recompute entry names its ``layer`` and
    ``before`` by name, and the patched Caffe's lookup (mem_recompute.cpp) would take one
    of them: such a name is never written into an entry, and an entry naming one is refused."""
    counted = Counter(layer.name for layer in graph.layers)
    return {name: n for name, n in counted.items() if n > 1}


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
    steps: list[Step] = []
    for step in schedule.steps:
        if step.kind == "backward":
            for again in at.get(step.layer, ()):
                accesses = forward[again.layer].accesses
                if again.restore_params:
                    own = _param_classes(schedule, again.layer)
                    accesses = tuple(access for access in accesses if access.storage not in own)
                steps.append(Step(len(steps), "recompute", again.layer, accesses))
        steps.append(replace(step, index=len(steps)))
    return replace(schedule, steps=tuple(steps))


def _param_classes(schedule: Schedule, layer: int) -> frozenset[int]:
    """The storage classes of a layer's parameter blobs (their data and diff)."""
    shaped = schedule.shaped
    blobs = [param_id(shaped.graph.layers[layer], j) for j in range(len(shaped.layer_shapes[layer].params))]
    return frozenset(schedule.class_of[(blob, part)] for blob in blobs for part in ("data", "diff") if (blob, part) in schedule.class_of)


def placed(schedule: Schedule, units: Iterable[Sequence[int]], restores: Iterable[int] = ()) -> tuple[Recomputation, ...]:
    """Where each unit's Forwards run again: before the first Backward that reads a storage
    they write, or before a recomputed unit that needs it, whichever comes first; a unit's
    layers together, in Forward order (an in-place chain is one unit: its layers write one
    storage, which only the whole chain, run again from its head, gives back its last
    value).  Units no Backward needs are not recomputed.  ``restores``: the layers whose
    parameters the runtime saves and restores (Recomputation.restore_params).  A place is
    the Backward of a layer whose name is the net's alone (:func:`names_given_twice`): a
    unit due before another runs before the nearest such Backward on the way back (earlier,
    so what it writes is only alive longer), or, where there is none, is not recomputed."""
    groups = [tuple(sorted(unit)) for unit in units]
    restore = set(restores)
    forward = {step.layer: step for step in schedule.steps if step.kind == "forward"}
    writer: dict[int, int] = {}  # storage -> the unit whose Forwards write it
    for unit, group in enumerate(groups):
        for layer in group:
            writer.update((access.storage, unit) for access in forward[layer].accesses if access.write)
    backward_order = [step for step in schedule.steps if step.kind == "backward"]
    need: dict[int, int] = {}  # unit -> index in backward_order of the first step needing it
    for i, step in enumerate(backward_order):
        for access in step.accesses:
            unit = writer.get(access.storage)
            if unit is not None and not access.write and unit not in need:
                need[unit] = i
    # A unit that reads what another writes needs that one first: consumers (later in
    # Forward order) settle their place before their producers take the earliest of them.
    for unit in sorted(range(len(groups)), key=lambda unit: groups[unit][0], reverse=True):
        if unit not in need:
            continue
        for layer in groups[unit]:
            for access in forward[layer].accesses:
                producer = writer.get(access.storage)
                if not access.write and producer is not None and groups[producer][0] < groups[unit][0]:
                    need[producer] = min(need.get(producer, need[unit]), need[unit])
    shared = names_given_twice(schedule.shaped.graph)
    layers = schedule.shaped.graph.layers
    place, last = [], None  # place[i]: the nearest nameable Backward at or before backward_order[i]
    for step in backward_order:
        last = step.layer if layers[step.layer].name not in shared else last
        place.append(last)
    ordered = sorted((unit for unit in need if place[need[unit]] is not None), key=lambda unit: (need[unit], groups[unit][0]))
    return tuple(Recomputation(layer, place[need[unit]], layer in restore) for unit in ordered for layer in groups[unit])
