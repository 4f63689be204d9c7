"""The memory-multiloading fork's planner (yjxiong/caffe action_recog, Net::MemoryOptimize_v2),
reproduced exactly — defects included — as the baseline every caffemem plan is compared with.

Entry point: :func:`fork_assignment`.  See docs/fork-memopt.md: a one-hop name → root map
links storage that Split/Flatten/Reshape share; a dry run visits every layer forward then
backward (in every phase, ignoring need_backward for diffs), taking a first-fit slot for
each output and dropping a reference for each input — except, in TRAIN, the inputs of a
layer that needs backward, which are never released; a slot is as large as its largest
member, data and diff alike.  :func:`fork_run` is the run the fork makes: its Net::AppendParam
shares a named parameter's data but not its diff.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import replace

from caffemem.graph import ShapedGraph, count
from caffemem.layers.access import BlobId, Bucket, Share
from caffemem.layers.registry import SpecTable
from caffemem.passes.liveness import net_outputs_of
from caffemem.passes.memory import LayerFlags, Run, SlotAssignment, backward_flags
from caffemem.plan.verify import PlanData


def fork_run(run: Run) -> Run:
    """The run as the fork makes it (the same run when no parameter is shared by name).

    BVLC master's Net::ShareWeights points a sharer's data and diff at the owner's
    (net.cpp, ShareData and ShareDiff); the fork's Net::AppendParam only calls ShareData
    (yjxiong/caffe action_recog 9831a2b, src/caffe/net.cpp), and its Net::Update adds each
    sharer's diff into the owner's.  So in the fork every sharer keeps a diff of its own,
    allocated when its Backward writes the parameter gradient: the siamese net
    (fixtures/siamese) allocates both towers' gradients, 1,724,408 bytes more than BVLC."""
    groups = list(run.groups)
    for k, (bucket, actions) in enumerate(groups):
        if bucket == Bucket("share"):
            data_only = tuple(action for action in actions if not (isinstance(action, Share) and action.part == "diff"))
            if len(data_only) == len(actions):
                return run
            groups[k] = (bucket, data_only)
            return replace(run, groups=tuple(groups))
    return run


class _Slots:
    """The fork's slot list: (key, references); an empty key is a free slot.  The fork
    scans the list for the first free slot and for a key; here a heap of free indices and
    an index of keys give the same answers without the scans."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.refs: list[int] = []
        self.index: dict[str, int] = {}  # a held key -> its slot (keys are never held twice)
        self.free: list[int] = []  # heap of indices whose key was empty when pushed

    def acquire(self, key: str) -> int:
        while self.free:
            i = heapq.heappop(self.free)
            if self.keys[i] == "":
                break
        else:
            i = len(self.keys)
            self.keys.append("")
            self.refs.append(0)
        self.keys[i], self.refs[i] = key, 1
        self.index[key] = i
        return i

    def find(self, key: str) -> int:
        return self.index.get(key, -1)

    def add_ref(self, index: int) -> None:
        while index >= len(self.keys):  # C++ operator[] on an empty vector: keep it defined
            heapq.heappush(self.free, len(self.keys))
            self.keys.append("")
            self.refs.append(0)
        self.refs[index] += 1

    def release(self, index: int) -> None:
        if index < 0 or self.refs[index] <= 0:
            return  # undefined in the fork; never reached on real nets
        self.refs[index] -= 1
        if self.refs[index] == 0:
            self.index.pop(self.keys[index], None)
            self.keys[index] = ""
            heapq.heappush(self.free, index)


def fork_assignment(
    shaped: ShapedGraph,
    specs: SpecTable,
    exclude: Iterable[str] = (),
    dtype_bytes: int = 4,
    flags: tuple[LayerFlags, ...] | None = None,
) -> SlotAssignment:
    """The slots the fork would give this net's blobs (names are `<blob>_data`/`_diff`)."""
    layers = shaped.graph.layers
    flags = flags or backward_flags(shaped, specs)
    link: dict[str, str] = {}

    def root(name: str) -> str:
        return link.setdefault(name, name)  # one hop only, as the fork does

    for layer in layers:
        spec = specs.get(layer.type)
        shares = spec.fork_shares if spec is not None else ()
        for it, top in enumerate(layer.tops):
            top_data, top_diff = root(top + "_data"), root(top + "_diff")
            for ib, bottom in enumerate(layer.bottoms):
                bottom_data, bottom_diff = root(bottom + "_data"), root(bottom + "_diff")
                paired = ib == 0 if spec is not None and spec.fork_shares_first_bottom else it == ib
                if paired and "data" in shares:
                    link[top_data] = bottom_data
                if paired and "diff" in shares:
                    link[bottom_diff] = top_diff

    excluded: set[str] = set()
    named = set(exclude) | net_outputs_of(shaped.graph)
    named |= {top for layer in layers if not layer.bottoms for top in layer.tops}
    named |= {top for layer, flag in zip(layers, flags) for top, w in zip(layer.tops, flag.loss_weights) if w}
    for name in named:
        excluded |= {root(name + "_data"), root(name + "_diff")}

    slots = _Slots()
    slot_of: dict[str, int] = {}
    train = shaped.graph.phase == "TRAIN"
    steps = [(i, True) for i in range(len(layers))] + [(i, False) for i in reversed(range(len(layers)))]
    for i, forward in steps:
        layer = layers[i]
        outs, ins, suffix = (layer.tops, layer.bottoms, "_data") if forward else (layer.bottoms, layer.tops, "_diff")
        for blob in outs:
            name = blob + suffix
            head = root(name)
            if head in excluded:
                continue
            held = slots.find(name)
            if held != -1:
                slots.add_ref(held)
            elif head == name:
                slot_of[name] = slots.acquire(name)
            else:
                slot_of[name] = slot_of.setdefault(head, 0)
                slots.add_ref(slot_of[name])
        for blob in ins:
            head = root(blob + suffix)
            if head in excluded or (train and forward and flags[i].need_backward):
                continue
            slots.release(slots.find(head))

    sizes: dict[int, int] = {}
    assignment: dict[tuple[BlobId, str], int] = {}
    for name, slot in slot_of.items():
        blob, part = name.rsplit("_", 1)
        if blob not in shaped.blob_shapes:
            continue
        assignment[(BlobId("blob", blob), part)] = slot
        sizes[slot] = max(sizes.get(slot, 0), count(shaped.blob_shapes[blob]) * dtype_bytes)
    return SlotAssignment(assignment, sizes)


def fork_plan_data(assignment: SlotAssignment) -> PlanData:
    """The fork's slots as a table the verifier reads (every member at offset 0: a fork
    slot is as large as its largest member)."""
    return PlanData(dict(assignment.slot_bytes), tuple((blob.name, part, slot, 0) for (blob, part), slot in assignment.slot_of.items()))
