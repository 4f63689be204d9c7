"""The vocabulary a layer spec uses to say what memory it touches, and when.

Caffe allocates lazily: a Blob's data or diff (each one SyncedMemory) gets its bytes on
the first touch, a Blob's shape buffer on Reshape, and ShareData/ShareDiff swap one
SyncedMemory for another.  A layer's memory rule lists those events for its SetUp, its
Forward and its Backward; the memory pass replays them to count bytes exactly, and the
liveness pass reads the same lists to know what each step reads and writes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Literal, NamedTuple

from caffemem.graph import Layer, Shape

Part = Literal["data", "diff"]
Elem = Literal["float", "int"]  # int covers Caffe's Blob<int> and Blob<unsigned int>: 4 bytes


class BlobId(NamedTuple):
    """One Caffe Blob: a net blob, a parameter blob or a layer's own buffer.

    A NamedTuple, not a dataclass: the memory model hashes these hundreds of thousands
    of times per net, and a tuple hashes in C."""

    kind: Literal["blob", "param", "buffer"]
    name: str  # blob name; "i:layer#j" for parameter j, "i:layer/buffer" for a buffer (i: layer index)


Side = Literal["", "host", "device"]


@dataclass(frozen=True, slots=True)
class Touch:
    """cpu_data/mutable_cpu_data (or the diff, or their gpu_ forms): allocates on first
    touch.  ``side`` says which copy a GPU run touches when it is not where the step runs
    ("": the layer's own side, see LayerSpec.gpu), e.g. AccuracyLayer::Forward_gpu writes
    its output with mutable_cpu_data; the CPU model ignores it."""

    blob: BlobId
    part: Part
    write: bool
    side: Side = ""


@dataclass(frozen=True, slots=True)
class Reshape:
    """Blob::Reshape: the shape buffer (4 bytes an axis) and, on growth, new data/diff."""

    blob: BlobId
    shape: Shape
    elem: Elem = "float"


@dataclass(frozen=True, slots=True)
class Share:
    """dst.ShareData(src) or dst.ShareDiff(src): dst's own storage is dropped."""

    dst: BlobId
    src: BlobId
    part: Part


@dataclass(frozen=True, slots=True)
class Alloc:
    """Memory no Blob owns, allocated at once: a bare SyncedMemory the layer writes (C3D's
    bias multiplier) or a cudaMalloc (cuDNN workspaces).  No shape buffer; ``count``
    elements of ``elem`` (use "int" for a byte size: 4 bytes each); a repeat is a no-op.
    ``device``: a cudaMalloc, so memory on the card in a GPU run."""

    blob: BlobId
    count: int
    elem: Elem = "float"
    device: bool = False


Action = Touch | Reshape | Share | Alloc


@dataclass(frozen=True, slots=True)
class LayerMemory:
    """What a layer does to memory in SetUp (beyond the generic part), Forward, Backward."""

    setup: tuple[Action, ...] = ()
    forward: tuple[Action, ...] = ()
    backward: tuple[Action, ...] = ()
    verified: bool = True  # False: a generic guess, reported as such
    params_filled: bool = True  # False: LayerSetUp only reshapes its parameter blobs (no filler writes them)
    # A prefetching data layer's batches (BasePrefetchingDataLayer): real memory, but
    # outside the measured heap; its tops then point into a batch instead of owning data
    # (unless ``forward`` writes them: older forks copy the batch into the tops).
    prefetch: tuple[Action, ...] = ()
    notes: tuple[str, ...] = ()  # what the user must know about these figures (estimates)
    # Reads above that only take the pointer (cpu_data()) and never use the values, e.g.
    # Eltwise SUM's top data in Backward: they allocate like any read, but what they would
    # see may change (`optimize --inplace` asks).
    pointer_only: tuple[Touch, ...] = ()
    # cudnnCreate calls of a cuDNN class (CUDNN_STREAMS_PER_GROUP * group for a convolution,
    # one for the others): driver memory the GPU model counts, not sizes.
    cudnn_handles: int = 0
    # cudaStreamCreate calls of the same class: a convolution's handles each run on a
    # stream of their own (cudnn_conv_layer.cpp LayerSetUp); the other cuDNN classes use
    # the legacy default stream.  Nonzero marks a cuDNN (de)convolution.
    cudnn_streams: int = 0


class Bucket(NamedTuple):
    """A step of the run that allocations are charged to (a tuple hashes in C: the
    memory model keys every byte by it).

    ``stage``: "init" (layer ``layer``'s SetUp in Net::Init), "share" (Net::ShareWeights),
    "input" (the data filled before the first Forward), "forward" / "backward" (layer
    ``layer``'s pass), "prefetch" / "unreached" (outside the measured run)."""

    stage: str
    layer: int | None = None

    @property
    def before_forward(self) -> bool:
        """Net::Init, ShareWeights or the input fill: one step for the liveness pass."""
        return self.stage in ("init", "share", "input")

    @property
    def in_net_init(self) -> bool:
        return self.stage in ("init", "share")


@dataclass(frozen=True)
class InnerNet:
    """A net a layer builds inside itself (Recurrent's unrolled net), after the same passes
    as the outer net: splits, shapes, Net::Init's flags, every layer's memory rule and the
    replayed events.  The memory pass builds it on a rule's request
    (:attr:`MemoryQuery.run_inner_net`), so layer modules never import a pass."""

    shaped: Any  # caffemem.graph.ShapedGraph
    need_backward: tuple[bool, ...]  # per inner layer
    rules: tuple["LayerMemory", ...]
    sharers: frozenset[BlobId]  # parameters shared by name (Net::AppendParam): not owned
    events: tuple[tuple[Bucket, "Action"], ...]  # in replay order


@dataclass(frozen=True)
class MemoryQuery:
    """What a memory rule may look at: shapes and the backward flags Net::Init derived."""

    layer: Layer
    bottoms: tuple[Shape, ...]
    tops: tuple[Shape, ...]
    params: tuple[Shape, ...]
    phase: str
    need_backward: bool
    propagate_down: tuple[bool, ...]  # per bottom: Caffe's bottom_need_backward_
    param_propagate_down: tuple[bool, ...]  # per parameter: lr_mult != 0 (or force_backward)
    engine: str = "caffe"  # the build's default engine: "caffe" or "cudnn" (a layer's own engine: wins)
    device: str = "cpu"  # Caffe::mode(): "gpu" runs each layer's Forward_gpu/Backward_gpu
    # Runs a NetParameter the layer builds inside itself through the passes (see InnerNet).
    run_inner_net: Callable[[Any], InnerNet] | None = None

    @property
    def proto(self):  # caffe_pb2.LayerParameter
        return self.layer.proto

    def top(self, i: int) -> BlobId:
        return BlobId("blob", self.layer.tops[i])

    def bottom(self, i: int) -> BlobId:
        return BlobId("blob", self.layer.bottoms[i])

    def param(self, j: int) -> BlobId:
        return param_id(self.layer, j)

    def buffer(self, name: str) -> BlobId:
        return buffer_id(self.layer, name)

    def in_place(self, i: int = 0) -> bool:
        """Is top i the same blob as bottom i?"""
        return i < len(self.layer.bottoms) and i < len(self.layer.tops) and self.layer.bottoms[i] == self.layer.tops[i]


def param_id(layer: Layer, j: int) -> BlobId:
    """Parameter blob j of a layer.  Keyed by the layer's position as well as its name:
    Caffe accepts unnamed layers and repeated names (HED has six unnamed loss layers)."""
    return BlobId("param", f"{layer.index}:{layer.name}#{j}")


def buffer_id(layer: Layer, name: str) -> BlobId:
    """A layer's own Blob ``name`` (keyed like :func:`param_id`)."""
    return BlobId("buffer", f"{layer.index}:{layer.name}/{name}")


def read(blob: BlobId, part: Part = "data", side: Side = "") -> Touch:
    return Touch(blob, part, False, side)


def write(blob: BlobId, part: Part = "data", side: Side = "") -> Touch:
    return Touch(blob, part, True, side)


def on_side(actions: tuple[Action, ...], side: Side) -> tuple[Action, ...]:
    """``actions`` with every Touch that names no side of its own made on ``side``: the
    work of a layer built inside another that runs on the other side (InfogainLoss has no
    GPU code, but its inner Softmax's Layer::Forward runs Forward_gpu in a GPU run)."""
    return tuple(replace(action, side=side) if isinstance(action, Touch) and not action.side else action for action in actions)


def buffer_setup(blob: BlobId, shape: Shape, elem: Elem = "float", filled: bool = False) -> tuple[Action, ...]:
    """A buffer reshaped in SetUp/Reshape, and written there when ``filled`` (a multiplier)."""
    actions: tuple[Action, ...] = (Reshape(blob, shape, elem),)
    return actions + ((write(blob),) if filled else ())


MemoryRule = Callable[[MemoryQuery], LayerMemory]


def elementwise_memory(q: MemoryQuery) -> LayerMemory:
    """The common case (most neuron layers): Forward reads the bottom and writes the top;
    Backward, when the bottom needs it, reads the top's diff and writes the bottom's."""
    forward = (read(q.bottom(0)), write(q.top(0)))
    backward: tuple[Action, ...] = ()
    if q.propagate_down and q.propagate_down[0]:
        backward = (read(q.top(0), "diff"), read(q.bottom(0)), write(q.bottom(0), "diff"))
    return LayerMemory(forward=forward, backward=backward)


def generic_memory(q: MemoryQuery) -> LayerMemory:
    """A guess for a layer whose rule is unknown: reads every bottom and parameter, writes
    every top; Backward reads every top diff and writes the diffs it is asked for."""
    forward = tuple(read(q.bottom(i)) for i in range(len(q.bottoms))) + tuple(read(q.param(j)) for j in range(len(q.params)))
    forward += tuple(write(q.top(i)) for i in range(len(q.tops)))
    backward = tuple(read(q.top(i), "diff") for i in range(len(q.tops))) + tuple(read(q.bottom(i)) for i in range(len(q.bottoms)))
    backward += tuple(write(q.param(j), "diff") for j, on in enumerate(q.param_propagate_down) if on)
    backward += tuple(write(q.bottom(i), "diff") for i, on in enumerate(q.propagate_down) if on)
    return LayerMemory(forward=forward, backward=backward, verified=False)

