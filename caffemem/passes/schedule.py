"""Pass 7, schedule: the run as steps, each reading and writing storage classes.

Entry point: :func:`build_schedule`.  Step 0 is Net::Init plus the filling of the
inputs; then one step per layer Forward, in order; then (TRAIN) one step per layer
Backward, in reverse, for the layers that need it.  The accesses come from the same
event stream the memory pass replays (each layer's memory rule), and storage that Caffe
shares — in-place tops, ShareData/ShareDiff of Split, Flatten, Reshape, shared
parameters — is merged into one class with a union-find, as the memory-multiloading
fork does.
"""

from __future__ import annotations

from dataclasses import dataclass

from caffemem.graph import ShapedGraph, count
from caffemem.layers.access import Alloc, BlobId, Bucket, Reshape, Share, Touch
from caffemem.layers.bound_buffers import runtime_binds
from caffemem.layers.registry import SpecTable
from caffemem.passes.memory import Run, prepare
from caffemem.units import DTYPE_BYTES, INT_BYTES

Part = str
Member = tuple[BlobId, Part]


@dataclass(frozen=True, slots=True)
class Access:
    storage: int  # a StorageClass id
    write: bool


@dataclass(frozen=True, slots=True)
class Step:
    index: int
    kind: str  # "init", "forward", "backward" or "recompute" (a Forward run again in Backward)
    layer: int | None  # index into the graph's layers (None for init)
    accesses: tuple[Access, ...]  # in the order the layer makes them


@dataclass(frozen=True, slots=True)
class StorageClass:
    """Memory Caffe keeps as one SyncedMemory (after its own sharing)."""

    id: int
    members: tuple[Member, ...]
    bytes: int
    kind: str  # "blob" (a net blob's data or diff), "param" or "buffer"
    part: Part  # "data" or "diff"
    owner: str  # the blob that owns the storage: the root of its alias chain

    @property
    def label(self) -> str:
        return f"{self.owner}:{self.part}"


@dataclass(frozen=True)
class Schedule:
    shaped: ShapedGraph
    steps: tuple[Step, ...]
    classes: tuple[StorageClass, ...]
    class_of: dict[Member, int]
    need_backward: tuple[bool, ...]
    loss_tops: frozenset[str]
    data_tops: frozenset[str]
    dtype: str
    # Classes Net::Init itself touches: they hold their own storage until Init ends, when a
    # plan's slots take over (as the fork's MemoryOptimize does) and discard what Init wrote.
    init_touched: frozenset[int] = frozenset()

    def step_name(self, step: Step) -> str:
        if step.layer is None:
            return "init"
        return f"{step.kind} {self.shaped.graph.layers[step.layer].name}"

    def class_named(self, name: str, part: str) -> int | None:
        """The storage class a slot table's entry (name, data|diff) stands for: a net blob's,
        else a layer buffer's of that name (None: the run never touches one)."""
        return self.class_of.get((BlobId("blob", name), part), self.class_of.get((BlobId("buffer", name), part)))


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[Member, Member] = {}

    def find(self, item: Member) -> Member:
        parent = self.parent.setdefault(item, item)
        while parent != item:
            grand = self.parent.setdefault(parent, parent)
            self.parent[item] = grand
            item, parent = parent, grand
        return item

    def union(self, child: Member, root: Member) -> None:
        """Merge child's class into root's (root stays the representative)."""
        a, b = self.find(child), self.find(root)
        if a != b:
            self.parent[a] = b


def build_schedule(shaped: ShapedGraph, specs: SpecTable, dtype: str = "float32", engine: str = "caffe", run: Run | None = None) -> Schedule:
    """The steps of one run and the storage classes they touch (``run``: already prepared)."""
    run = run or prepare(shaped, specs, dtype, engine)
    flags = run.flags
    float_bytes = DTYPE_BYTES[dtype]

    union = _UnionFind()
    elements: dict[BlobId, int] = {}
    elem_bytes: dict[BlobId, int] = {}
    init_members: set[Member] = set()
    known = union.parent.setdefault  # a touched member joins the classes as its own root
    for bucket, actions in run.groups:
        in_init = bucket.in_net_init
        for action in actions:
            if isinstance(action, Touch):
                member = (action.blob, action.part)
                known(member, member)
                if in_init:
                    init_members.add(member)
            elif isinstance(action, Reshape):
                elements[action.blob] = max(elements.get(action.blob, 0), count(action.shape))
                elem_bytes[action.blob] = INT_BYTES if action.elem == "int" else float_bytes
            elif isinstance(action, Alloc):
                # Sized at once, touched by the steps that use it (a cuDNN workspace): an
                # allocation without values, so not a touch of Net::Init.
                elements[action.blob] = max(elements.get(action.blob, 0), action.count)
                elem_bytes[action.blob] = INT_BYTES if action.elem == "int" else float_bytes
            elif isinstance(action, Share):
                union.union((action.dst, action.part), (action.src, action.part))

    members: dict[Member, list[Member]] = {}
    for member in list(union.parent):
        members.setdefault(union.find(member), []).append(member)
    blob_order = {name: i for i, name in enumerate(shaped.blob_shapes)}
    classes: list[StorageClass] = []
    class_of: dict[Member, int] = {}
    for root, group in members.items():
        if len(group) == 1:  # most classes: one blob's data or diff
            owner = group[0][0]
            size = elements.get(owner, 0) * elem_bytes.get(owner, float_bytes)
        else:
            size = max(elements.get(blob, 0) * elem_bytes.get(blob, float_bytes) for blob, _ in group)
            # The owner is the member Caffe created first: the bottom of a Split/Flatten/Reshape chain.
            owner = min(group, key=lambda m: (blob_order.get(m[0].name, len(blob_order)), m[0].name))[0]
        classes.append(StorageClass(len(classes), tuple(group), size, root[0].kind, root[1], owner.name))
        for member in group:
            class_of[member] = classes[-1].id

    steps: list[Step] = []
    current_bucket: Bucket | None = None
    accesses: list[Access] = []

    def close() -> None:
        if current_bucket is None:
            return
        steps.append(Step(len(steps), current_bucket.stage, current_bucket.layer, tuple(accesses)))

    shared_access: dict[tuple[int, bool], Access] = {}  # steps share one Access per (class, write)
    for bucket, actions in run.groups:
        step_key = _step_key(bucket)
        if step_key != current_bucket:
            close()
            current_bucket, accesses = step_key, []
        for action in actions:
            if isinstance(action, Touch):
                key = (class_of[(action.blob, action.part)], action.write)
                access = shared_access.get(key)
                if access is None:
                    access = shared_access[key] = Access(*key)
                accesses.append(access)
    close()

    layers = shaped.graph.layers
    return Schedule(
        shaped=shaped,
        steps=tuple(steps),
        classes=tuple(classes),
        class_of=class_of,
        need_backward=tuple(f.need_backward for f in flags),
        loss_tops=frozenset(top for layer, f in zip(layers, flags) for top, w in zip(layer.tops, f.loss_weights) if w),
        data_tops=frozenset(top for layer in layers if (s := specs.get(layer.type)) is not None and s.is_data for top in layer.tops),
        dtype=dtype,
        init_touched=frozenset(class_of[member] for member in init_members),
    )


def names_two_storages(shaped: ShapedGraph, name: str) -> bool:
    """Is ``name`` a net blob's and also the name the patched Caffe gives a layer's buffer
    or parameter ("<i>:<layer>/<buffer>" where NamedBuffers lists it, "<i>:<layer>#<j>",
    mem_slots.cpp)?  Caffe lets a blob take any name, and a slot-table member is found by
    name in one map of all three: such a name could bind the other storage, so it is
    never planned (passes/liveness.py) and a table naming it is refused (plan/verify.py)."""
    if name not in shaped.blob_shapes:
        return False
    if runtime_binds(shaped.graph, BlobId("buffer", name)):
        return True
    index, _, rest = name.partition(":")
    if not (index.isascii() and index.isdigit()) or int(index) >= len(shaped.graph.layers):
        return False
    prefix = f"{shaped.graph.layers[int(index)].name}#"
    j = rest[len(prefix) :]
    return rest.startswith(prefix) and j.isascii() and j.isdigit() and str(int(j)) == j and int(j) < len(shaped.layer_shapes[int(index)].params)


def _step_key(bucket: Bucket) -> Bucket:
    """Init, the ShareWeights and the input fill are one step: everything before Forward."""
    return Bucket("init") if bucket.before_forward else bucket
