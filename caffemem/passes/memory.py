"""Pass 6, memory: the bytes real Caffe allocates, replayed event by event.

Entry point: :func:`simulate`.  It derives what Net::Init derives (loss weights,
need_backward, propagate_down, parameter sharing), then replays every layer's SetUp,
Forward (in order) and Backward (in reverse, for the layers that need it) over a model
of Caffe's SyncedMemory: a Blob's data and diff get their bytes on first touch, its
shape buffer on Reshape, ShareData/ShareDiff drop storage.  Each layer's events come
from its spec's memory rule (layers/access.py).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from caffemem.errors import CaffememError, Location
from caffemem.graph import Graph, Layer, Shape, ShapedGraph, count
from caffemem.layers.access import (
    Action,
    Alloc,
    BlobId,
    Bucket,
    InnerNet,
    LayerMemory,
    MemoryQuery,
    Reshape,
    Share,
    Touch,
    buffer_id,
    generic_memory,
    param_id,
    write,
)
from caffemem.layers.registry import SpecTable
from caffemem.passes.shapes import infer_shapes
from caffemem.passes.splits import insert_splits
from caffemem.schema import caffe_pb2
from caffemem.units import DTYPE_BYTES, INT_BYTES

CATEGORIES = ("parameters", "parameter_gradients", "activations", "activation_gradients", "layer_buffers")


# ----------------------------------------------------------------------------- Net::Init flags


@dataclass(frozen=True, slots=True)
class LayerFlags:
    """Net::Init's verdict for one layer."""

    need_backward: bool
    propagate_down: tuple[bool, ...]  # bottom_need_backward_
    param_propagate_down: tuple[bool, ...]
    loss_weights: tuple[float, ...]  # per top; 0 where the top is not a loss


def loss_weights(layer: Layer, is_loss: bool, file: str) -> tuple[float, ...]:
    """Layer::SetLossWeights, with LossLayer's default of 1 on top 0."""
    weights = list(layer.proto.loss_weight)
    if not weights and is_loss:
        weights = [1.0]
    if weights and len(weights) != len(layer.tops):
        raise CaffememError(
            f"loss_weight must be unspecified or given once per top ({len(layer.tops)} tops, {len(weights)} loss_weight)",
            Location.of_layer(layer, file),
        )
    return tuple(weights) if weights else (0.0,) * len(layer.tops)


def backward_flags(shaped: ShapedGraph, specs: SpecTable) -> tuple[LayerFlags, ...]:
    """need_backward / propagate_down exactly as Net::Init computes them."""
    graph = shaped.graph
    file = graph.source
    blob_needs: dict[str, bool] = {}
    need: list[bool] = []
    bottom_need: list[list[bool]] = []
    param_down: list[list[bool]] = []
    weights: list[tuple[float, ...]] = []
    for layer in graph.layers:
        spec = specs.get(layer.type)
        where = Location.of_layer(layer, file)
        proto = layer.proto
        if len(proto.propagate_down) and len(proto.propagate_down) != len(layer.bottoms):
            raise CaffememError("propagate_down must be given either 0 or once per bottom", where)
        layer_need = False
        flags = []
        for i, bottom in enumerate(layer.bottoms):
            flags.append(bool(proto.propagate_down[i]) if len(proto.propagate_down) else blob_needs.get(bottom, False))
            layer_need |= blob_needs.get(bottom, False)
        n_params = len(shaped.layer_shapes[layer.index].params)
        if len(proto.param) > n_params:
            raise CaffememError(f"{len(proto.param)} param {{}} blocks given, but the layer has {n_params} parameter blobs", where)
        pdown = [(proto.param[j].lr_mult if j < len(proto.param) else 1.0) != 0 for j in range(n_params)]
        layer_need |= any(pdown)
        for top in layer.tops:
            blob_needs.setdefault(top, False)
            if layer_need:
                blob_needs[top] = True
        need.append(layer_need)
        bottom_need.append(flags)
        param_down.append(pdown)
        weights.append(loss_weights(layer, bool(spec and spec.auto_top), file))

    under_loss: set[str] = set()
    skip: set[str] = set()
    for layer in reversed(graph.layers):
        i = layer.index
        contributes = any(weights[i][j] or top in under_loss for j, top in enumerate(layer.tops))
        skip_down = all(top in skip for top in layer.tops)
        if need[i] and skip_down:
            need[i] = False
            bottom_need[i] = [False] * len(layer.bottoms)
        if not contributes:
            need[i] = False
        for j, bottom in enumerate(layer.bottoms):
            if contributes:
                under_loss.add(bottom)
            else:
                bottom_need[i][j] = False
            if not bottom_need[i][j]:
                skip.add(bottom)

    if graph.force_backward:
        for layer in graph.layers:
            spec = specs.get(layer.type)
            barred = spec.no_force_backward if spec else ()
            i = layer.index
            need[i] = True
            bottom_need[i] = [flag or j not in barred for j, flag in enumerate(bottom_need[i])]
            param_down[i] = [True] * len(param_down[i])
    return tuple(LayerFlags(need[i], tuple(bottom_need[i]), tuple(param_down[i]), weights[i]) for i in range(len(graph.layers)))


# ----------------------------------------------------------------------------- SyncedMemory model


@dataclass(slots=True)
class _Storage:
    """One SyncedMemory: its size, whether it holds bytes, and who points at it."""

    bytes: int
    category: str
    allocated: bool = False
    refs: int = 1


@dataclass(slots=True)
class _Blob:
    elem_bytes: int
    category: str  # of its data; its diff is the matching gradient category
    shape_bytes: int = 0  # size of shape_data_ (None-equivalent: 0 and never written)
    has_shape: bool = False
    capacity: int = 0
    data: _Storage | None = None
    diff: _Storage | None = None


GRADIENT_OF = {"parameters": "parameter_gradients", "activations": "activation_gradients", "layer_buffers": "layer_buffers"}


class Heap:
    """Caffe's allocations as events; bytes are charged to the bucket that is current."""

    storage_type: type = _Storage  # what one SyncedMemory is in this model (take_over makes slots of it)

    def __init__(self, dtype_bytes: int) -> None:
        self.dtype_bytes = dtype_bytes
        self.blobs: dict[BlobId, _Blob] = {}
        self.bucket = Bucket("init")
        self.charged: dict[Bucket, int] = {}
        self.charged_by_category: dict[Bucket, dict[str, int]] = {}  # bucket -> category -> bytes
        self.by_blob: dict[BlobId, int] = {}

    def _charge(self, blob_id: BlobId, category: str, amount: int) -> None:
        bucket = self.bucket
        self.charged[bucket] = self.charged.get(bucket, 0) + amount
        by_category = self.charged_by_category.get(bucket)
        if by_category is None:
            by_category = self.charged_by_category[bucket] = {}
        by_category[category] = by_category.get(category, 0) + amount
        self.by_blob[blob_id] = self.by_blob.get(blob_id, 0) + amount

    def category_totals(self, buckets: Iterable[Bucket]) -> dict[str, int]:
        """Bytes of each category (all of CATEGORIES, in order) charged to the given buckets."""
        totals = dict.fromkeys(CATEGORIES, 0)
        for bucket in buckets:
            for category, amount in self.charged_by_category.get(bucket, {}).items():
                totals[category] += amount
        return totals

    def blob(self, blob_id: BlobId, elem: str = "float") -> _Blob:
        found = self.blobs.get(blob_id)
        if found is None:
            category = {"blob": "activations", "param": "parameters", "buffer": "layer_buffers"}[blob_id.kind]
            found = _Blob(INT_BYTES if elem == "int" else self.dtype_bytes, category)
            self.blobs[blob_id] = found
        return found

    def reshape(self, blob_id: BlobId, shape, elem: str = "float") -> None:
        blob = self.blob(blob_id, elem)
        needed = INT_BYTES * len(shape)
        if not blob.has_shape or blob.shape_bytes < needed:
            # A new shape_data_ (written at once in Reshape) replaces a smaller one, freed.
            self._charge(blob_id, blob.category, needed - blob.shape_bytes)
            blob.has_shape, blob.shape_bytes = True, needed
        elements = count(shape)
        if elements > blob.capacity:
            blob.capacity = elements
            for part in ("data", "diff"):
                self._drop(blob_id, blob, part)
                category = blob.category if part == "data" else GRADIENT_OF[blob.category]
                setattr(blob, part, self.storage_type(elements * blob.elem_bytes, category))

    def touch(self, blob_id: BlobId, part: str) -> None:
        storage = getattr(self.blob(blob_id), part)
        if storage is not None and not storage.allocated:
            storage.allocated = True
            self._charge(blob_id, storage.category, storage.bytes)

    def alloc(self, blob_id: BlobId, elements: int, elem: str = "float") -> None:
        """Memory no Blob owns (a bare SyncedMemory written at once, a cudaMalloc): data only."""
        blob = self.blob(blob_id, elem)
        if blob.data is None:
            blob.capacity, blob.data = elements, _Storage(elements * blob.elem_bytes, blob.category)
        self.touch(blob_id, "data")

    def share(self, dst: BlobId, src: BlobId, part: str) -> None:
        target, source = self.blob(dst), self.blob(src)
        storage = getattr(source, part)
        if storage is getattr(target, part):
            return
        self._drop(dst, target, part)
        if storage is not None:
            storage.refs += 1
        setattr(target, part, storage)

    def _drop(self, blob_id: BlobId, blob: _Blob, part: str) -> None:
        storage = getattr(blob, part)
        if storage is None:
            return
        storage.refs -= 1
        if storage.refs == 0 and storage.allocated:
            self._charge(blob_id, storage.category, -storage.bytes)
        setattr(blob, part, None)

    def take_over(self, slots: "SlotAssignment") -> None:
        """Point the assigned blob parts at shared slot storage (their own is dropped)."""
        storages: dict[int, _Storage] = {}
        for (blob_id, part), slot in slots.slot_of.items():
            blob = self.blob(blob_id)
            storage = storages.get(slot)
            if storage is None:
                category = "activations" if part == "data" else "activation_gradients"
                storage = storages[slot] = self.storage_type(slots.slot_bytes[slot], category, refs=0)
            self._drop(blob_id, blob, part)
            storage.refs += 1
            setattr(blob, part, storage)

    def apply(self, actions: Iterable[Action]) -> None:
        for action in actions:
            self.apply_one(action)

    def apply_one(self, action: Action) -> None:
        kind = type(action)
        if kind is Touch:  # the common case, kept short: this runs for every event
            blob = self.blobs.get(action.blob) or self.blob(action.blob)
            storage = blob.data if action.part == "data" else blob.diff
            if storage is not None and not storage.allocated:
                storage.allocated = True
                self._charge(action.blob, storage.category, storage.bytes)
        elif kind is Reshape:
            self.reshape(action.blob, action.shape, action.elem)
        elif kind is Share:
            self.share(action.dst, action.src, action.part)
        elif kind is Alloc:
            self.alloc(action.blob, action.count, action.elem)


# ----------------------------------------------------------------------------- the pass


@dataclass(frozen=True, slots=True)
class LayerBytes:
    """Bytes one layer makes Caffe allocate, as the ground truth measures them."""

    name: str
    type: str
    init: int
    fwd_alloc: int
    bwd_alloc: int
    need_backward: bool
    propagate_down: tuple[bool, ...]
    buffers: dict[str, int]  # internal buffer name -> bytes it ends up holding
    by_category: dict[str, int]  # what its SetUp, Forward and Backward allocated, by category
    verified: bool  # False: the layer's memory rule is a generic guess

    @property
    def total(self) -> int:
        return self.init + self.fwd_alloc + self.bwd_alloc


@dataclass(frozen=True)
class MemoryReport:
    """The whole footprint of one net in one phase."""

    phase: str
    dtype: str
    layers: tuple[LayerBytes, ...]
    flags: tuple[LayerFlags, ...]
    rules: tuple[LayerMemory, ...]  # each layer's events (the schedule reads them)
    heap_init: int
    input_bytes: int  # data of the data layers' tops, filled before Forward
    heap_forward: int  # includes input_bytes, as the ground truth counts it
    heap_backward: int
    prefetch_bytes: int  # prefetching data layers' batches (outside the heap figures)
    prefetched_input_bytes: int  # input bytes that a real run keeps in those batches instead
    memory_required_for_data: int  # Caffe's own log line
    learnable_param_bytes: int
    untouched_param_diff_bytes: int  # owner parameter diffs no Backward touched (a solver clears them)
    by_category: dict[str, int]
    peak_layer: str | None  # the layer whose single step allocates the most
    unverified_types: tuple[str, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())  # the layer rules' notes, each once

    @property
    def heap_total(self) -> int:
        """Everything the measured run allocates (nothing is freed during a run)."""
        return self.heap_init + self.heap_forward + self.heap_backward

    @property
    def outside_heap_bytes(self) -> int:
        """What a real run holds beyond the measured heap: the prefetch batches, less the
        data tops that live in them (the heap counts those once already)."""
        return self.prefetch_bytes - self.prefetched_input_bytes

    @property
    def total_bytes(self) -> int:
        """The net's real footprint: the heap plus prefetch batches, whose tops live in them.
        The one stock figure every command and report gives."""
        return self.heap_total + self.outside_heap_bytes

    def largest_layers(self, count: int) -> tuple[tuple[int, LayerBytes], ...]:
        """(index, bytes) of the ``count`` layers that make Caffe allocate the most,
        largest first (ties in net order)."""
        return tuple(sorted(enumerate(self.layers), key=lambda item: -item[1].total)[:count])

    def parts(self) -> dict[str, int]:
        """``total_bytes`` by cause, parts that add up: the categories (the data tops
        counted in the prefetch batches, not in activations) and the prefetch batches."""
        parts = dict(self.by_category)
        parts["activations"] -= self.prefetched_input_bytes
        if self.prefetch_bytes:
            parts["prefetch_batches"] = self.prefetch_bytes
        return parts


def layer_rules(shaped: ShapedGraph, specs: SpecTable, flags: tuple[LayerFlags, ...], engine: str = "caffe", device: str = "cpu") -> tuple[LayerMemory, ...]:
    """Each layer's memory events, from its spec (or the generic guess), for a run in
    ``device`` mode (a rule may differ on the GPU: loss layers' device scratch)."""
    rules = []
    for layer, flag in zip(shaped.graph.layers, flags):
        spec = specs.get(layer.type)
        query = MemoryQuery(
            layer=layer,
            bottoms=shaped.bottom_shapes(layer.index),
            tops=shaped.top_shapes(layer.index),
            params=shaped.layer_shapes[layer.index].params,
            phase=shaped.graph.phase,
            need_backward=flag.need_backward,
            propagate_down=flag.propagate_down,
            param_propagate_down=flag.param_propagate_down,
            engine=engine,
            device=device,
            run_inner_net=functools.partial(run_inner_net, engine=engine, device=device),
        )
        rule = spec.memory if spec is not None and spec.memory is not None else generic_memory
        rules.append(rule(query))
    return tuple(rules)




def run_inner_net(net: caffe_pb2.NetParameter, engine: str = "caffe", device: str = "cpu") -> InnerNet:
    """A net a layer builds inside itself (Recurrent's unrolled net, recurrent_layer.cpp
    LayerSetUp): the built-in specs, Caffe's splits and shapes, Net::Init's flags and the
    replayed events, exactly as for an outer net."""
    specs = SpecTable()
    shaped = infer_shapes(insert_splits(net), specs)
    flags = backward_flags(shaped, specs)
    rules = layer_rules(shaped, specs, flags, engine, device)
    sharers = frozenset(sharer for sharer, _ in shared_parameters(shaped))
    events = tuple(run_events(shaped, specs, flags, rules))
    return InnerNet(shaped, tuple(flag.need_backward for flag in flags), rules, sharers, events)


def shared_parameters(shaped: ShapedGraph) -> list[tuple[BlobId, BlobId]]:
    """(sharer, owner) for every parameter shared by name (Net::AppendParam)."""
    owners: dict[str, BlobId] = {}
    shared: list[tuple[BlobId, BlobId]] = []
    for layer in shaped.graph.layers:
        for j in range(len(shaped.layer_shapes[layer.index].params)):
            name = layer.proto.param[j].name if j < len(layer.proto.param) else ""
            param = param_id(layer, j)
            if name and name in owners:
                shared.append((param, owners[name]))
            elif name:
                owners[name] = param
    return shared


def owned_params(shaped: ShapedGraph, shared: list[tuple[BlobId, BlobId]] | None = None) -> dict[BlobId, tuple[Layer, Shape]]:
    """Every parameter blob the net owns, in net order, with its layer and shape: a param
    shared by name is owned once, by its first layer (``shared``: the net's
    :func:`shared_parameters`, when the caller has them already)."""
    sharers = {param for param, _ in (shared_parameters(shaped) if shared is None else shared)}
    owned = {}
    for layer in shaped.graph.layers:
        for j, shape in enumerate(shaped.layer_shapes[layer.index].params):
            param = param_id(layer, j)
            if param not in sharers:
                owned[param] = (layer, shape)
    return owned


def data_tops(shaped: ShapedGraph, specs: SpecTable) -> list[str]:
    """Tops of the data layers: the run fills them before the first Forward."""
    return [top for layer in shaped.graph.layers if (s := specs.get(layer.type)) is not None and s.is_data for top in layer.tops]


Group = tuple[Bucket, tuple[Action, ...]]  # consecutive events charged to one bucket


def runs_backward(graph: Graph) -> bool:
    """Does the run of this net include a Backward?  In TRAIN, always (the solver's step).
    In TEST, only with ``force_backward``: Net::Init computes need_backward the same in
    either phase (the phase only filters layers, BVLC net.cpp), and force_backward then
    gives every layer a Backward (layer_need_backward_, bottom_need_backward_ where
    AllowForceBackward, every param_propagate_down): a net kept for back-propagating to
    its input, whose Backward pycaffe's ``net.backward()`` runs.  Without it a TEST net is
    run Forward only (`caffe test`, the solver's test nets, ../shared/groundtruth)."""
    return graph.phase == "TRAIN" or graph.force_backward


def run_groups(shaped: ShapedGraph, specs: SpecTable, flags: tuple[LayerFlags, ...], rules: tuple[LayerMemory, ...]) -> list[Group]:
    """Every memory event of Net::Init, the inputs' fill, one Forward and (:func:`runs_backward`)
    one Backward, in order, grouped by the bucket their bytes are charged to.  A Forward or
    Backward group is the layer rule's own tuple, not a copy: a deep net's run is mostly
    these, and the rules are kept anyway."""
    groups: list[Group] = []
    layers = shaped.graph.layers
    for layer, flag, rule in zip(layers, flags, rules):
        init: list[Action] = []
        for j, shape in enumerate(shaped.layer_shapes[layer.index].params):
            param = param_id(layer, j)
            init.append(Reshape(param, shape))
            if rule.params_filled:
                init.append(write(param))  # every filler writes the data
        init.extend(Reshape(BlobId("blob", top), shape) for top, shape in zip(layer.tops, shaped.top_shapes(layer.index)))
        init.extend(rule.setup)
        init.extend(write(BlobId("blob", top), "diff") for top, w in zip(layer.tops, flag.loss_weights) if w)
        groups.append((Bucket("init", layer.index), tuple(init)))
    shares = tuple(Share(param, owner, part) for param, owner in shared_parameters(shaped) for part in ("data", "diff"))  # Net::ShareWeights
    groups.append((Bucket("share"), shares))
    groups.append((Bucket("input"), tuple(write(BlobId("blob", top)) for top in data_tops(shaped, specs))))
    for layer, flag, rule in zip(layers, flags, rules):
        # Layer::Forward then reads each loss top's data and diff (loss += data . diff),
        # with gpu_data/gpu_diff in a GPU run whatever the layer's own code (layer.hpp).
        loss_reads = tuple(Touch(BlobId("blob", top), part, False, "device") for top, w in zip(layer.tops, flag.loss_weights) if w for part in ("data", "diff"))
        groups.append((Bucket("forward", layer.index), rule.forward + loss_reads if loss_reads else rule.forward))
    if runs_backward(shaped.graph):
        groups.extend((Bucket("backward", layer.index), rule.backward) for layer, flag, rule in zip(reversed(layers), reversed(flags), reversed(rules)) if flag.need_backward)
    return [group for group in groups if group[1]]


def run_events(shaped: ShapedGraph, specs: SpecTable, flags: tuple[LayerFlags, ...], rules: tuple[LayerMemory, ...]) -> list[tuple[Bucket, Action]]:
    """Every memory event, in order, each with the bucket its bytes are charged to."""
    return [(bucket, action) for bucket, actions in run_groups(shaped, specs, flags, rules) for action in actions]


@dataclass(frozen=True)
class SlotAssignment:
    """Shared storage for a run: (blob, part) -> slot, and each slot's size in bytes.

    Storage is taken over after Net::Init, as the memory-multiloading fork does at the
    end of Init; each slot is allocated whole on the first touch of any member."""

    slot_of: dict[tuple[BlobId, str], int]
    slot_bytes: dict[int, int]


@dataclass(frozen=True)
class Run:
    """What one net's run does to memory, derived once and replayed as often as needed
    (stock, the fork's plan, each candidate plan)."""

    shaped: ShapedGraph
    dtype: str
    flags: tuple[LayerFlags, ...]
    rules: tuple[LayerMemory, ...]
    groups: tuple[Group, ...]  # the events, by bucket (run_groups)
    device: str = "cpu"  # the mode the rules were derived for

    @property
    def events(self) -> Iterator[tuple[Bucket, Action]]:
        """Every event, in order, with its bucket."""
        return ((bucket, action) for bucket, actions in self.groups for action in actions)

    @cached_property
    def layer_buffers(self) -> tuple[tuple[tuple[str, BlobId], ...], ...]:
        """Each layer's buffers as (name, blob), by name: found once, reported by every replay."""
        found = []
        for layer, rule in zip(self.shaped.graph.layers, self.rules):
            prefix = len(buffer_id(layer, "").name)
            blobs = {a.blob for a in rule.setup + rule.forward + rule.backward if isinstance(a, (Touch, Reshape, Alloc)) and a.blob.kind == "buffer"}
            found.append(tuple((blob.name[prefix:], blob) for blob in sorted(blobs, key=lambda b: b.name)))
        return tuple(found)


def prepare(shaped: ShapedGraph, specs: SpecTable, dtype: str = "float32", engine: str = "caffe", device: str = "cpu") -> Run:
    """Net::Init's flags, each layer's memory rule (for a run in ``device`` mode) and the
    whole event stream."""
    flags = backward_flags(shaped, specs)
    rules = layer_rules(shaped, specs, flags, engine, device)
    return Run(shaped, dtype, flags, rules, tuple(run_groups(shaped, specs, flags, rules)), device)


def merged_run(run: Run, other: Run, specs: SpecTable) -> Run:
    """A run each of whose steps touches what that step touches in ``run`` or in ``other``
    (the same net prepared for another mode or engine).  A plan that the verifier passes on
    it is safe in both: a GPU run with cuDNN and a CPU run with Caffe's own layers read and
    write different storage (the losses' device scratch, cuDNN's backward that skips the
    bottom when the weights are frozen).  ``run``'s prefetch, notes and mode are kept."""
    rules = tuple(
        replace(
            mine,
            setup=mine.setup + theirs.setup,
            forward=mine.forward + theirs.forward,
            backward=mine.backward + theirs.backward,
            pointer_only=tuple(dict.fromkeys(mine.pointer_only + theirs.pointer_only)),
            verified=mine.verified and theirs.verified,
        )
        for mine, theirs in zip(run.rules, other.rules)
    )
    return Run(run.shaped, run.dtype, run.flags, rules, tuple(run_groups(run.shaped, specs, run.flags, rules)), run.device)


def simulate(
    shaped: ShapedGraph,
    specs: SpecTable,
    dtype: str = "float32",
    engine: str = "caffe",
    slots: SlotAssignment | None = None,
) -> MemoryReport:
    """Replay Net::Init, one Forward and (in TRAIN) one Backward over the heap model
    (with ``slots``: as the run would go with that storage sharing)."""
    return replay(prepare(shaped, specs, dtype, engine), slots)


def replay(run: Run, slots: SlotAssignment | None = None) -> MemoryReport:
    """The bytes of a prepared run, with or without shared slots."""
    shaped, dtype, flags, rules = run.shaped, run.dtype, run.flags, run.rules
    graph = shaped.graph
    heap = Heap(DTYPE_BYTES[dtype])
    layers = graph.layers
    shared_params = shared_parameters(shaped)

    pending = slots
    apply_one = heap.apply_one
    for bucket, actions in run.groups:
        if pending is not None and not bucket.in_net_init:
            heap.take_over(pending)  # Net::Init is over
            pending = None
        heap.bucket = bucket
        for action in actions:
            apply_one(action)
    if pending is not None:
        heap.take_over(pending)
    inits = [heap.charged.get(Bucket("init", layer.index), 0) for layer in layers]
    heap_init = sum(v for k, v in heap.charged.items() if k.in_net_init)
    input_bytes = heap.charged.get(Bucket("input"), 0)

    heap.bucket = Bucket("prefetch")
    prefetched_input = 0
    for layer, rule in zip(layers, rules):
        if rule.prefetch:
            heap.apply(rule.prefetch)
            # The input data of the tops lives in the batch, unless Forward copies it into
            # them (older forks); the tops' shape and diff are their own either way.
            copied = {a.blob for a in rule.forward if isinstance(a, Touch) and a.write and a.part == "data"}
            inputs = (heap.blob(BlobId("blob", top)).data for top in layer.tops if BlobId("blob", top) not in copied)
            prefetched_input += sum(storage.bytes for storage in inputs if storage is not None and storage.allocated)

    heap.bucket = Bucket("unreached")
    untouched = 0
    for param in owned_params(shaped, shared_params):
        storage = heap.blob(param).diff
        if storage is not None and not storage.allocated:
            untouched += storage.bytes

    per_layer = tuple(_layer_bytes(layer, flag, rule, heap, inits[layer.index], buffers) for layer, flag, rule, buffers in zip(layers, flags, rules, run.layer_buffers))
    steps = [(l.fwd_alloc, l.name) for l in per_layer] + [(l.bwd_alloc, l.name) for l in per_layer]
    peak = max(steps)[1] if steps and max(steps)[0] > 0 else None
    owners_only = owned_params(shaped, shared_params)
    data_elements = sum(count(shape) for layer in layers for shape in shaped.top_shapes(layer.index))
    measured = {bucket for bucket in heap.charged if bucket.stage not in ("prefetch", "unreached")}
    return MemoryReport(
        phase=graph.phase,
        dtype=dtype,
        layers=per_layer,
        flags=flags,
        rules=rules,
        heap_init=heap_init,
        input_bytes=input_bytes,
        heap_forward=input_bytes + sum(l.fwd_alloc for l in per_layer),
        heap_backward=sum(l.bwd_alloc for l in per_layer),
        prefetch_bytes=heap.charged.get(Bucket("prefetch"), 0),
        prefetched_input_bytes=prefetched_input,
        memory_required_for_data=data_elements * heap.dtype_bytes,
        learnable_param_bytes=sum(count(shape) * heap.dtype_bytes for _, shape in owners_only.values()),
        untouched_param_diff_bytes=untouched,
        by_category=heap.category_totals(measured),
        peak_layer=peak,
        unverified_types=tuple(sorted({l.type for l in per_layer if not l.verified})),
        notes=rule_notes(rules),
    )


def rule_notes(rules: Sequence[LayerMemory]) -> tuple[str, ...]:
    """The layer rules' notes, each once, in layer order (MemoryReport.notes)."""
    return tuple(dict.fromkeys(note for rule in rules for note in rule.notes))


def _layer_bytes(layer: Layer, flag: LayerFlags, rule: LayerMemory, heap: Heap, init: int, buffers: tuple[tuple[str, BlobId], ...]) -> LayerBytes:
    buckets = (Bucket("init", layer.index), Bucket("forward", layer.index), Bucket("backward", layer.index))
    return LayerBytes(
        name=layer.name,
        type=layer.type,
        init=init,
        fwd_alloc=heap.charged.get(buckets[1], 0),
        bwd_alloc=heap.charged.get(buckets[2], 0),
        need_backward=flag.need_backward,
        propagate_down=flag.propagate_down,
        buffers={name: heap.by_blob[blob] for name, blob in buffers if heap.by_blob.get(blob)},
        by_category=heap.category_totals(buckets),
        verified=rule.verified,
    )
