"""Pass 6b, device: what a GPU run of the net holds on the card, and on the host.

Entry point: :func:`device_footprint`.  It replays the events of a run prepared for
``device="gpu"`` (each layer's rule then includes what its .cu file does differently)
over a model of SyncedMemory with two copies (syncedmem.cpp, BVLC master 9b89154):

- ``to_gpu()`` cudaMallocs the device copy on the first device touch, ``to_cpu()`` the
  (pinned, ``CaffeMallocHost``) host copy on the first host touch; both copies then live
  until the blob is freed or grows.  A blob touched only on the device never gets host
  memory, and the other way round.
- Net::Init (fillers, multipliers, SetLossWeights) writes on the host; a layer's Forward
  and Backward touch the device when its spec's ``gpu`` says it has that GPU code, else
  the host (the default Forward_gpu calls Forward_cpu, layer.hpp 316-339).  Layer::Forward
  reads each loss top's data and diff on the device.
- A prefetching data layer's LayerSetUp writes every batch on the host and then on the
  device (base_data_layer.cpp 48-76); Forward_gpu points the tops at the batch
  (set_gpu_data), so the tops own no device data.
- A cudaMalloc a layer makes itself (cuDNN's workspace and LCN temporaries) is device
  memory.  The workspace's size is cuDNN's choice at run time: BVLC asks for algorithms
  needing at most 8 MiB per query, so a layer's own workspace is reported as a range, 0 to
  that bound.  A workspace a table written for runtime v5 or earlier puts in a slot is
  exact: the patched layer uses the slot instead of its cudaMalloc and asks cuDNN only for
  algorithms that fit it (layers/vision.py ``cudnn_workspace``); the slot is charged like
  any other.
- ``pooled`` (a caffemem-patched Caffe, runtime v6, every figure of a plan): every cuDNN
  layer takes its handles, streams and workspace from one pool per device: 3 (handle,
  stream) pairs, one handle on the default stream, one workspace of 3 blocks of the
  largest per-block bound, at most 24 MiB (:func:`pooled_handles`).  Stock's figure keeps
  BVLC's own handles and workspaces.

Per-process costs with no size in Caffe's source (the CUDA context, cuBLAS/cuRAND/cuDNN
handles, streams) are kept apart, as constants measured on a card (CUDA_CONTEXT,
CUDNN_HANDLE; the user's own with --card, --context-mib, --cuda-stack-bytes):
Caffe's own allocations in this model equal what an H100 counted at Caffe's cudaMalloc
sites, byte for byte, on every run of benchmarks/gpu-groundtruth (320 runs, two measurements).
../shared/caffe/GPU-MEMORY.md cites every fact used here (for the developers; no output
names a file an installed user does not have: :func:`gpu_caveat` points to the user guide).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from caffemem.layers.access import Action, Alloc, BlobId, Bucket, Reshape, Share, Touch
from caffemem.layers.registry import SpecTable
from caffemem.layers.vision import CUDNN_STREAMS_PER_GROUP, WORKSPACE_BUFFER, is_workspace
from caffemem.passes.memory import Heap, Run, SlotAssignment, owned_params
from caffemem.units import DTYPE_BYTES, INT_BYTES, format_size, plural

SIDES = ("device", "host")
# The causes a GPU run's bytes are reported by, in order.
CAUSES = (
    "parameters",
    "parameter_gradients",
    "activations",
    "activation_gradients",
    "layer_buffers",
    "cudnn_workspace",
    "prefetch",
    "solver_history",
    "library_handles",
    "cuda_context",
)


@dataclass(frozen=True)
class Constant:
    """A per-process cost with no size in Caffe's source: a figure taken from a cited
    measurement, reported apart and overridable (``--context-mib``)."""

    name: str
    bytes: int
    source: str
    measured_for_caffe: bool


# Measured on the card (docs/gpu-mode.md, benchmarks/gpu-groundtruth): one
# NVIDIA H100 80GB HBM3, driver 580.159.04, CUDA 13.0, cuDNN 9, BVLC Caffe 9b89154.
MEASURED_ON = "an H100 80GB (driver 580, CUDA 13.0, cuDNN 9)"
CUDA_CONTEXT = Constant(
    "cuda_context",
    623_706_112,
    f"measured on {MEASURED_ON}: the CUDA context (526.8 MiB) and the main thread's cuBLAS handle and cuRAND "
    "generator (68.0 MiB), total minus free memory before the net is built; another card, driver or CUDA differs",
    measured_for_caffe=True,
)


def context_constant(context_bytes: int | None) -> Constant:
    """The context constant, or the user's own figure for it."""
    if context_bytes is None:
        return CUDA_CONTEXT
    return Constant("cuda_context", context_bytes, "given with --context-mib", measured_for_caffe=True)


@dataclass(frozen=True)
class Handles:
    """Library handles a GPU run creates (common.cpp 107-123, cudnn_conv_layer.cpp 51-56).
    Their memory is inside the driver and the libraries: sized from the measurement."""

    cudnn: int  # cudnnCreate: 3 per group of a cuDNN (de)convolution, 1 per other cuDNN layer (stock); the pool's (v6)
    cublas: int  # one per Caffe instance: the main thread and each prefetch thread
    curand: int  # likewise
    streams: int = 0  # cudaStreamCreate of the cuDNN (de)convolutions: one per handle (stock), the pool's 3 (v6)
    pooled: bool = False  # as a caffemem-patched Caffe (runtime v6) creates them: one pool per device


def shared_pool_bytes(test: "DeviceReport", train: "DeviceReport") -> int:
    """What a test net's pooled handles, streams and workspace already are in the train
    net's pool (runtime v6: one pool per device for every net of the process; its
    workspace grows to the larger need): bytes a training process does not hold twice."""
    if not (test.handles.pooled and train.handles.pooled):
        return 0
    pairs = min(test.handles.streams, train.handles.streams)
    singles = min(test.handles.cudnn - test.handles.streams, train.handles.cudnn - train.handles.streams)
    return (pairs + singles) * test.card.cudnn_handle.bytes + pairs * test.card.stream.bytes + min(test.workspace_bytes_max, train.workspace_bytes_max)


def stock_handles(rules: Iterable, prefetching: int) -> Handles:
    """Stock BVLC's: every cuDNN layer creates its own (cudnn_conv_layer.cpp LayerSetUp:
    CUDNN_STREAMS_PER_GROUP handles and streams per group; the others one handle each)."""
    rules = tuple(rules)
    return Handles(
        cudnn=sum(rule.cudnn_handles for rule in rules),
        cublas=1 + prefetching,
        curand=1 + prefetching,
        streams=sum(rule.cudnn_streams for rule in rules),
    )


def pooled_handles(rules: Iterable, prefetching: int) -> Handles:
    """A caffemem-patched Caffe's (runtime v6, cudnn_pool.hpp): one pool per device holding
    CUDNN_STREAMS_PER_GROUP (handle, stream) pairs if the net has a cuDNN (de)convolution,
    and one handle on the default stream if it has a single-handle cuDNN layer (ReLU,
    Sigmoid, TanH, pooling, LRN, LCN, softmax, the softmax inside SoftmaxWithLoss and
    InfogainLoss), whatever the groups."""
    rules = tuple(rules)
    convolutions = any(rule.cudnn_streams for rule in rules)
    singles = any(rule.cudnn_handles and not rule.cudnn_streams for rule in rules)
    pairs = CUDNN_STREAMS_PER_GROUP if convolutions else 0
    return Handles(cudnn=pairs + (1 if singles else 0), cublas=1 + prefetching, curand=1 + prefetching, streams=pairs, pooled=True)


# What the handles hold on the card, measured on the same card as CUDA_CONTEXT: the bytes
# per cudnnCreate are the least-squares slope, over the 136 runs of the measurement, of what
# the card held beyond the context and Caffe's own allocations against the cuDNN handles
# the model counted then (18 to 386 a run); a further thread's cuBLAS handle and cuRAND
# generator hold what the main thread's do.  That count missed the handle of the Softmax
# that SoftmaxWithLoss builds inside (71 of the 136 runs, 1 to 3 handles): counted, the
# first run alone fits 9.47 MiB, the second and third (H100, H200) 9.52 and 9.51, all three
# together 9.50, none with residuals smaller on every run; the constant is kept.
CUDNN_HANDLE = Constant("cudnn_handle", 9_977_633, f"9.52 MiB per cuDNN handle, fitted over 136 runs on {MEASURED_ON}", measured_for_caffe=True)
CUBLAS_HANDLE = Constant("cublas_handle", 71_303_168, f"68.0 MiB per further thread's cuBLAS handle and cuRAND generator, measured on {MEASURED_ON}", measured_for_caffe=True)
# A stream: measured alone on an H200 (issue 32: a fresh process per case, cudaStreamCreate
# 0.56 MiB, cudnnCreate 8.76 MiB).  In the fit above every convolution handle came with its
# stream (BVLC creates one per handle), so CUDNN_HANDLE already carries it: no stream is
# counted on its own unless the user gives both figures for their card.
CUDA_STREAM = Constant("cuda_stream", 0, f"in the {CUDNN_HANDLE.bytes / 2**20:.2f} MiB fitted per cuDNN handle (each convolution handle came with its stream); 0.56 MiB measured alone on an H200", measured_for_caffe=True)


# The bare CUDA context by cudaLimitStackSize (issue 32: an H200, CUDA 13, a fresh process
# per case): the local-memory reservation is SMs x threads x stack.  A caffemem-patched
# Caffe (runtime v6) sets the limit when CAFFEMEM_CUDA_STACK_BYTES is set (default: the
# driver's 1 KiB, as stock); stock Caffe never does.
CONTEXT_BY_STACK = {1024: 552_402_944, 512: 395 * 2**20, 256: 329 * 2**20, 128: 295 * 2**20}


def stack_context(stack_bytes: int) -> Constant:
    """The context constant (the bare context and the main thread's cuBLAS handle and cuRAND
    generator) of a patched Caffe run with CAFFEMEM_CUDA_STACK_BYTES=``stack_bytes``."""
    bare = CONTEXT_BY_STACK[stack_bytes]
    return Constant(
        "cuda_context",
        bare + CUBLAS_HANDLE.bytes,
        f"measured on an H200 (CUDA 13) with cudaLimitStackSize {stack_bytes} B (CAFFEMEM_CUDA_STACK_BYTES): the context ({bare / 2**20:.1f} MiB) "
        f"and the main thread's cuBLAS handle and cuRAND generator ({CUBLAS_HANDLE.bytes / 2**20:.1f} MiB)",
        measured_for_caffe=True,
    )


@dataclass(frozen=True)
class CardConstants:
    """The per-process costs a GPU figure adds to Caffe's allocations, each with where it
    came from: the cited measurement's, or the user's own card's (--card, --context-mib)."""

    context: Constant = CUDA_CONTEXT
    cudnn_handle: Constant = CUDNN_HANDLE
    stream: Constant = CUDA_STREAM
    cublas_handle: Constant = CUBLAS_HANDLE
    file: str | None = None  # --card FILE: the kit result they were read from (passes/card.py)
    # --cuda-stack-bytes: the stack limit the patched Caffe sets (CAFFEMEM_CUDA_STACK_BYTES),
    # whose context (CONTEXT_BY_STACK) its figures then count; None: the driver's default.
    stack_bytes: int | None = None
# Not in any figure: the kernels CUDA loads lazily, on their first launch (Caffe's, cuDNN's,
# cuBLAS's), which depend on the layers and the algorithms cuDNN picks.  Across the 136
# runs the card held this much more (or less) than the model with the two constants above
# (the same on each of the three measurements); the most is what `fit` keeps free by
# default in GPU mode.  (Before the inner Softmax's handle was counted, the most was
# GoogLeNet train_val's +197.3 MiB: its three SoftmaxWithLoss handles.)
LAZY_KERNELS_LOW, LAZY_KERNELS_HIGH = -116_806_222, 176_944_377
LAZY_KERNELS = Constant(
    "lazy_kernels",
    LAZY_KERNELS_HIGH,
    f"what the card held beyond the figure on {MEASURED_ON}: {LAZY_KERNELS_LOW / 2**20:+.1f} to {LAZY_KERNELS_HIGH / 2**20:+.1f} MiB over 136 runs "
    "(the kernels CUDA loads lazily)",
    measured_for_caffe=True,
)


def handle_bytes(handles: Handles, card: CardConstants = CardConstants()) -> int:
    """What ``handles`` hold on the card beyond the process constant (which has the main
    thread's cuBLAS handle and cuRAND generator)."""
    return handles.cudnn * card.cudnn_handle.bytes + handles.streams * card.stream.bytes + max(handles.cublas - 1, 0) * card.cublas_handle.bytes


@dataclass(frozen=True)
class LayerSides:
    """Bytes one layer makes a GPU run allocate, on each side, in SetUp, Forward, Backward."""

    name: str
    type: str
    runs_on: str  # "gpu", "gpu forward, cpu backward" or "cpu" (no GPU code)
    device: tuple[int, int, int]  # init, forward, backward
    host: tuple[int, int, int]
    cudnn_handles: int = 0  # stock BVLC's cudnnCreate calls for this layer (3 per group of a convolution)

    @property
    def device_total(self) -> int:
        return sum(self.device)

    @property
    def host_total(self) -> int:
        return sum(self.host)

    @property
    def total(self) -> int:
        """The layer's figure in GPU mode (rankings, check's per-layer baseline): its device bytes."""
        return self.device_total


@dataclass(frozen=True)
class DeviceReport:
    """One net's GPU run: device and host bytes by cause and by layer (one GPU's share)."""

    phase: str
    engine: str
    layers: tuple[LayerSides, ...]
    device_by_cause: dict[str, int]  # every cause of CAUSES; the workspace at its upper bound
    host_by_cause: dict[str, int]
    workspace_bytes_max: int  # the layers' own cuDNN workspaces (not in a plan's slot): the most BVLC's 8 MiB limit lets them take
    untouched_param_diff_bytes: int  # owners' device diffs no Backward touched (ClearParamDiffs allocates them)
    handles: Handles
    context: Constant
    gpus: int = 1
    notes: tuple[str, ...] = field(default=())
    # Every (blob, part) the run touches on the device: a plan may share only these on the
    # card, where the patched runtime cudaMallocs every slot whole (api/optimize.py).
    on_device: frozenset[tuple[BlobId, str]] = frozenset()
    # With a plan's slots: the part of each layer's ``device`` (SetUp, Forward, Backward)
    # that cudaMallocs a slot, and all the slots put on the card (api/timeline.py: what the
    # planned run holds live is its bytes less the slots' free space).
    slot_device: tuple[tuple[int, int, int], ...] = ()
    slot_device_bytes: int = 0
    card: CardConstants = CardConstants()  # the per-process constants counted, with their sources

    @property
    def device_bytes(self) -> int:
        """What one card holds, with the cuDNN workspaces at their bound."""
        return sum(self.device_by_cause.values())

    @property
    def device_bytes_min(self) -> int:
        """What one card holds if cuDNN picks algorithms needing no workspace."""
        return self.device_bytes - self.workspace_bytes_max

    @property
    def host_bytes(self) -> int:
        return sum(self.host_by_cause.values())

    @property
    def total_bytes(self) -> int:
        """The one figure of every command in GPU mode: what one card holds."""
        return self.device_bytes

    def largest_layers(self, count: int) -> tuple[tuple[int, LayerSides], ...]:
        """(index, layer) of the ``count`` layers that put the most on the card, largest first."""
        return tuple(sorted(enumerate(self.layers), key=lambda item: -item[1].device_total)[:count])

    @property
    def caveat(self) -> str:
        """:func:`gpu_caveat` of this run: the line its output carries once."""
        return gpu_caveat(self)

    def largest_step(self) -> tuple[int, str, int] | None:
        """(layer index, "Forward" or "Backward", bytes) of the step that cudaMallocs the
        most (the first of equals), or None when no step allocates on the card."""
        steps = [(layer.device[step], index, stage) for index, layer in enumerate(self.layers) for step, stage in ((1, "Forward"), (2, "Backward"))]
        allocated, index, stage = max(steps, key=lambda step: step[0], default=(0, 0, ""))
        return (index, stage, allocated) if allocated else None


@dataclass(slots=True)
class _Copies:
    """One SyncedMemory: its size and which of its two copies exist."""

    bytes: int
    category: str
    host: bool = False
    device: bool = False
    refs: int = 1


class _TwoSidedHeap:
    """Caffe's allocations in a GPU run; each byte charged to (side, bucket, cause)."""

    storage_type = _Copies

    def __init__(self, dtype_bytes: int, batch_tops: frozenset[BlobId], pooled: bool = False) -> None:
        self.dtype_bytes = dtype_bytes
        # v6: every cuDNN (de)convolution's workspace is the pool's one, of
        # CUDNN_STREAMS_PER_GROUP blocks of the largest per-block need (grown, never shrunk).
        self.pooled = pooled
        self.pool: _Copies | None = None
        self.streams = 0  # the current layer's stock streams (its workspace has one block each)
        self.batch_tops = batch_tops  # data tops pointed into a prefetch batch: no device data of their own
        self.blobs: dict = {}  # BlobId -> memory._Blob, whose data and diff are _Copies
        self.bucket = Bucket("init")
        self.side = "host"
        self.charged: dict[tuple[str, Bucket], int] = {}
        self.by_cause: dict[tuple[str, str], int] = {}
        self.on_device: set[tuple[BlobId, str]] = set()
        self.slots: dict[int, _Copies] = {}  # id -> a plan's slot storage (kept, so an id is never reused)
        self.slot_charged: dict[Bucket, int] = {}  # device bytes of slots, by step

    def _charge(self, blob_id: BlobId, category: str, amount: int, side: str = "host") -> None:
        key = (side, self.bucket)
        self.charged[key] = self.charged.get(key, 0) + amount
        cause = "prefetch" if self.bucket.stage == "prefetch" else category
        self.by_cause[(side, cause)] = self.by_cause.get((side, cause), 0) + amount

    # A Blob, its shape buffer (written on the host: _charge's default side) and its growth
    # are as in a CPU run; only a SyncedMemory has two copies here.
    blob = Heap.blob
    reshape = Heap.reshape

    def apply(self, action: Action) -> None:
        if isinstance(action, Touch):
            self.touch(action.blob, action.part, action.side or self.side)
        elif isinstance(action, Reshape):
            self.reshape(action.blob, action.shape, action.elem)
        elif isinstance(action, Share):
            self.share(action.dst, action.src, action.part)
        elif isinstance(action, Alloc):
            blob = self.blob(action.blob, action.elem)
            if blob.data is None:
                # A layer's own cuDNN workspace is its own cause (the range); in a slot it is not.
                workspace = action.device and is_workspace(action.blob)
                category = "cudnn_workspace" if workspace else blob.category
                if workspace and self.pooled and self.streams:
                    blob.capacity, blob.data = action.count, self._pooled_workspace(action.count * blob.elem_bytes // self.streams)
                else:
                    blob.capacity, blob.data = action.count, self.storage_type(action.count * blob.elem_bytes, category)
            self.touch(action.blob, "data", "device" if action.device else "host")

    def _pooled_workspace(self, block: int) -> _Copies:
        """The pool's workspace as a layer of per-block need ``block`` leases it: created,
        or grown (free + cudaMalloc, as stock grows its own) where this layer needs more."""
        want = CUDNN_STREAMS_PER_GROUP * block
        if self.pool is None:
            self.pool = self.storage_type(want, "cudnn_workspace")
            return self.pool
        self.pool.refs += 1
        if want > self.pool.bytes:
            if self.pool.device:
                self._charge(BlobId("buffer", WORKSPACE_BUFFER), "cudnn_workspace", want - self.pool.bytes, "device")
            self.pool.bytes = want
        return self.pool

    def touch(self, blob_id: BlobId, part: str, side: str) -> None:
        if side == "device" and part == "data" and blob_id in self.batch_tops:
            return  # set_gpu_data: the batch's device copy, counted as prefetch
        if side == "device":
            self.on_device.add((blob_id, part))
        copies = getattr(self.blob(blob_id), part)
        if copies is not None and not getattr(copies, side):
            setattr(copies, side, True)
            self._charge(blob_id, copies.category, copies.bytes, side)
            if side == "device" and id(copies) in self.slots:
                self.slot_charged[self.bucket] = self.slot_charged.get(self.bucket, 0) + copies.bytes

    share = Heap.share  # ShareData/ShareDiff: the same pointer swap as in a CPU run

    def _drop(self, blob_id: BlobId, blob, part: str) -> None:
        copies = getattr(blob, part)
        if copies is None:
            return
        copies.refs -= 1
        if copies.refs == 0:
            for side in SIDES:
                if getattr(copies, side):
                    self._charge(blob_id, copies.category, -copies.bytes, side)
        setattr(blob, part, None)

    # The plan's slots replace the members' own storage, as the runtime binds one buffer per
    # slot at the end of Net::Init (on the device in a GPU run).
    def take_over(self, slots: SlotAssignment) -> None:
        Heap.take_over(self, slots)
        found = (getattr(self.blob(blob_id), part) for blob_id, part in slots.slot_of)
        self.slots = {id(storage): storage for storage in found if storage is not None}


def layer_sides(run: Run, specs: SpecTable) -> tuple[tuple[str, str], ...]:
    """(Forward side, Backward side) of each layer in a GPU run, from its spec's ``gpu``."""
    sides = []
    for layer in run.shaped.graph.layers:
        spec = specs.get(layer.type)
        gpu = spec.gpu if spec is not None else "full"
        sides.append(("device" if gpu in ("full", "forward") else "host", "device" if gpu == "full" else "host"))
    return tuple(sides)


def _runs_on(sides: tuple[str, str]) -> str:
    return {("device", "device"): "gpu", ("device", "host"): "gpu forward, cpu backward"}.get(sides, "cpu")


def _batch_tops(run: Run) -> frozenset[BlobId]:
    """Data tops a prefetching layer points into its batch (unless its Forward copies)."""
    tops = set()
    for layer, rule in zip(run.shaped.graph.layers, run.rules):
        if rule.prefetch:
            copied = {a.blob for a in rule.forward if isinstance(a, Touch) and a.write and a.part == "data"}
            tops.update(BlobId("blob", top) for top in layer.tops if BlobId("blob", top) not in copied)
    return frozenset(tops)


def device_footprint(
    run: Run,
    specs: SpecTable,
    engine: str,
    slots: SlotAssignment | None = None,
    context_bytes: int | None = None,
    gpus: int = 1,
    pooled: bool = False,
    card: CardConstants | None = None,
) -> DeviceReport:
    """Replay a run prepared for ``device="gpu"`` over the two-sided SyncedMemory model
    (with ``slots``: as the patched runtime would bind them).  ``pooled``: as a
    caffemem-patched Caffe (runtime v6) runs it, its cuDNN handles, streams and workspace
    one pool per device (:func:`pooled_handles`); else as stock BVLC does.  ``card``: the
    per-process constants (``context_bytes`` overrides its context)."""
    if run.device != "gpu":
        raise ValueError("device_footprint needs a run prepared with device='gpu'")
    card = card or CardConstants()
    if context_bytes is not None:
        card = replace(card, context=context_constant(context_bytes))
    elif pooled and card.stack_bytes is not None:  # stock Caffe never sets the stack limit
        card = replace(card, context=stack_context(card.stack_bytes))
    layers = run.shaped.graph.layers
    sides = layer_sides(run, specs)
    heap = _TwoSidedHeap(DTYPE_BYTES[run.dtype], _batch_tops(run), pooled)
    pending = slots
    for bucket, actions in run.groups:
        if pending is not None and not bucket.in_net_init:
            heap.take_over(pending)
            pending = None
        heap.bucket = bucket
        heap.streams = run.rules[bucket.layer].cudnn_streams if bucket.layer is not None else 0
        if bucket.stage == "forward":
            heap.side = sides[bucket.layer][0]
        elif bucket.stage == "backward":
            heap.side = sides[bucket.layer][1]
        else:
            heap.side = "host"
        for action in actions:
            if bucket.stage == "input" and isinstance(action, Touch) and action.blob in heap.batch_tops:
                continue  # the prefetch thread fills the batch, not the tops
            heap.apply(action)
    if pending is not None:
        heap.take_over(pending)

    heap.bucket = Bucket("prefetch")
    for layer, rule, side in zip(layers, run.rules, sides):
        if rule.prefetch:
            for heap.side in ("host", "device") if side[0] == "device" else ("host",):
                for action in rule.prefetch:
                    heap.apply(action)

    heap.bucket = Bucket("unreached")
    untouched = 0
    for param in owned_params(run.shaped):
        copies = heap.blob(param).diff
        if copies is not None and not copies.device:
            untouched += copies.bytes

    per_layer = []
    for layer, side, rule in zip(layers, sides, run.rules):
        stages = (Bucket("init", layer.index), Bucket("forward", layer.index), Bucket("backward", layer.index))
        per_layer.append(
            LayerSides(
                name=layer.name,
                type=layer.type,
                runs_on=_runs_on(side),
                device=tuple(heap.charged.get(("device", b), 0) for b in stages),
                host=tuple(heap.charged.get(("host", b), 0) for b in stages),
                cudnn_handles=rule.cudnn_handles,
            )
        )
    context = card.context
    device_causes = {cause: heap.by_cause.get(("device", cause), 0) for cause in CAUSES}
    host_causes = {cause: heap.by_cause.get(("host", cause), 0) for cause in CAUSES}
    prefetching = sum(1 for rule, side in zip(run.rules, sides) if rule.prefetch and side[0] == "device")
    handles = (pooled_handles if pooled else stock_handles)(run.rules, prefetching)
    device_causes["library_handles"] = handle_bytes(handles, card)
    device_causes["cuda_context"] = context.bytes
    notes = _notes(run, sides, card)
    if not pooled:
        notes += _pool_note(run, handles, device_causes["cudnn_workspace"], prefetching, card)
    return DeviceReport(
        phase=run.shaped.graph.phase,
        engine=engine,
        layers=tuple(per_layer),
        device_by_cause=device_causes,
        host_by_cause=host_causes,
        workspace_bytes_max=device_causes["cudnn_workspace"],
        untouched_param_diff_bytes=untouched,
        handles=handles,
        context=context,
        gpus=gpus,
        notes=notes,
        on_device=frozenset(heap.on_device),
        slot_device=tuple(tuple(heap.slot_charged.get(Bucket(stage, layer.index), 0) for stage in ("init", "forward", "backward")) for layer in layers) if slots is not None else (),
        slot_device_bytes=sum(heap.slot_charged.values()),
        card=card,
    )


def _notes(run: Run, sides: Iterable[tuple[str, str]], card: CardConstants = CardConstants()) -> tuple[str, ...]:
    """What this net's layers do on the card that its figures hide: the layers without GPU
    code.  A Flatten or Reshape only points its top at its bottom's memory (ShareData,
    ShareDiff), so it copies nothing; the others' blobs are copied to the host and back
    (a layer whose Forward and Backward do nothing, such as Input, is not named).
    What holds for every GPU figure is :func:`gpu_caveat`'s, said once per output."""
    fallback = [(layer.type, rule) for layer, rule, side in zip(run.shaped.graph.layers, run.rules, sides) if side[0] == "host"]
    copying = sorted({kind for kind, rule in fallback if any(isinstance(a, Touch) for a in rule.forward + rule.backward)})
    sharing = sorted({kind for kind, rule in fallback if any(isinstance(a, Share) for a in rule.forward + rule.backward)} - set(copying))
    notes = []
    if copying:
        notes.append(f"no GPU code (run on the host, their blobs copied both ways): {', '.join(copying)}")
    if sharing:
        notes.append(f"no GPU code, nothing copied (the top shares memory already there): {', '.join(sharing)}")
    return tuple(notes) + _grouped_handles_note(run, card)


# Said when the handles of grouped cuDNN convolutions hold at least this much of the card,
# and when a caffemem-patched Caffe's pool would hold at least this much less.
GROUPED_HANDLES_NOTE_BYTES = 1024 * 1024 * 1024


def pool_workspace_bound(run: Run) -> int:
    """The v6 pool's workspace at its bound: CUDNN_STREAMS_PER_GROUP blocks of the largest
    per-block bound of the net's cuDNN (de)convolutions (BVLC's 8 MiB limit per algorithm
    query, so at most 24 MiB), 0 without one."""
    blocks = [
        action.count * INT_BYTES // rule.cudnn_streams  # vision.cudnn_workspace: a byte size in ints
        for rule in run.rules
        if rule.cudnn_streams
        for action in rule.setup
        if isinstance(action, Alloc) and action.device and is_workspace(action.blob)
    ]
    return CUDNN_STREAMS_PER_GROUP * max(blocks, default=0)


def _pool_note(run: Run, handles: Handles, workspace: int, prefetching: int, card: CardConstants) -> tuple[str, ...]:
    """What a caffemem-patched Caffe (runtime v6) would hold instead of stock's handles
    and workspaces, said where it is at least GROUPED_HANDLES_NOTE_BYTES less."""
    pool = pooled_handles(run.rules, prefetching)
    pool_workspace = pool_workspace_bound(run)
    saved = handle_bytes(handles, card) + workspace - handle_bytes(pool, card) - pool_workspace
    if saved < GROUPED_HANDLES_NOTE_BYTES:
        return ()
    return (
        f"a caffemem-patched Caffe (runtime v6, `caffemem patch CAFFE_DIR`) shares one pool of cuDNN handles and one workspace per card: "
        f"{pool_words(handles, workspace, pool, pool_workspace)}: up to {format_size(saved)} less on the card (what `optimize` states for its plans)",
    )


def pool_words(stock: Handles, stock_workspace: int, pool: Handles, pool_workspace: int) -> str:
    """The pool's handles, streams and workspace against stock BVLC's, in words."""
    return (
        f"{pool.cudnn} handles and {pool.streams} streams instead of {stock.cudnn:,} and {stock.streams:,}, "
        f"the workspace at most {format_size(pool_workspace)} instead of {format_size(stock_workspace)}"
    )


def pool_line(stock: DeviceReport, planned: DeviceReport) -> str | None:
    """What a plan's figure counts of the v6 pool against stock's handles (optimize's
    output), or None where the net has no cuDNN layer."""
    if not planned.handles.pooled or not stock.handles.cudnn:
        return None
    return f"the plan runs on a caffemem-patched Caffe (runtime v6), one pool per card: {pool_words(stock.handles, stock.workspace_bytes_max, planned.handles, planned.workspace_bytes_max)}"


def grouped_convolutions(layers: Iterable[LayerSides]) -> tuple[str, ...]:
    """The cuDNN (de)convolutions of more than one group: stock BVLC creates 3 handles and
    streams for each group, Caffe's engine none."""
    return tuple(layer.name for layer in layers if layer.type in ("Convolution", "Deconvolution") and layer.cudnn_handles > CUDNN_STREAMS_PER_GROUP)


def _grouped_handles_note(run: Run, card: CardConstants = CardConstants()) -> tuple[str, ...]:
    """BVLC's cuDNN convolution creates CUDNN_STREAMS_PER_GROUP handles (and streams) for
    every group (cudnn_conv_layer.cpp LayerSetUp), so a depthwise convolution of C channels
    asks for 3C of them, each holding CUDNN_HANDLE on the card as measured.  Where that
    reaches a GiB, say which layers and what Caffe's own engine (no handle, im2col instead)
    would change: the user's fix, one field per layer."""
    grouped = [
        (layer.name, rule.cudnn_handles)
        for layer, rule in zip(run.shaped.graph.layers, run.rules)
        if layer.type in ("Convolution", "Deconvolution") and rule.cudnn_handles > 3
    ]
    handles = sum(count for _, count in grouped)
    each = card.cudnn_handle.bytes + card.stream.bytes
    if handles * each < GROUPED_HANDLES_NOTE_BYTES:
        return ()
    first = grouped[0][0]
    more = f" and {plural(len(grouped) - 1, 'more')}" if len(grouped) > 1 else ""
    return (
        f"grouped cuDNN convolutions ('{first}'{more}) create 3 cuDNN handles per group: {handles:,} handles, "
        f"{format_size(handles * each)} on the card at {format_size(each)} each as measured; "
        "'engine: CAFFE' in their convolution_param (or --engine caffe to see the figure) creates none",
    )


def gpu_caveat(device: DeviceReport) -> str:
    """The one line every output in GPU mode carries once (not per net): what its figures
    rest on, and where the user guide says more."""
    card = device.card
    if card.file is not None:
        given = [constant for constant in (card.context, card.cudnn_handle, card.stream, card.cublas_handle) if card.file in constant.source]
        constants = f"{', '.join(constant.name for constant in given)} from {card.file}, the rest as measured there"
    else:
        constants = "the context and handles as measured there (--context-mib or --card FILE gives yours)"
    parts = [
        f"GPU figures: Caffe's allocations exact (equal to {MEASURED_ON}'s on 320 runs), {constants}, kernels loaded lazily not counted "
        f"({LAZY_KERNELS_LOW / 2**20:+.0f} to {LAZY_KERNELS_HIGH / 2**20:+.0f} MiB there)"
    ]
    if device.engine == "cudnn" and device.device_by_cause.get("cudnn_workspace", 0) > 0:
        parts.append("cuDNN picks its workspace at run time (0 to the bound shown)")
    if device.gpus > 1:
        parts.append(f"with --gpus {device.gpus} every card holds the figure (NCCL's buffers not counted)")
    return "; ".join(parts) + " — user guide: GPU mode (docs/gpu-mode.md)"
