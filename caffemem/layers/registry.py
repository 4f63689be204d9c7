"""The registry of layer specs: everything caffemem knows about one layer type.

Like Caffe's own ``layers/`` folder (or MXNet's operator attributes), a layer type's
knowledge lives in one :class:`LayerSpec`, registered by the module of its family.  The
passes never test a type name; they ask the spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from caffemem.errors import CaffememError, Location
from caffemem.graph import Layer, LayerShapes, Shape, count
from caffemem.layers.access import MemoryRule


@dataclass(frozen=True)
class ShapeQuery:
    """What a shape rule may look at: the layer, its bottoms' shapes, the run's settings."""

    layer: Layer
    bottoms: tuple[Shape, ...]
    phase: str
    inputs: Mapping[str, Shape]  # --input NAME=shape given by the user
    # The types of every layer in the net: a Python layer's code can depend on the
    # project it comes from (R-FCN's copies of py-faster-rcnn's layers are told apart
    # by the PSROIPooling beside them, see pylayers.py).
    net_types: frozenset[str] = frozenset()
    # The tops among ``inputs`` given with --override-input: they replace what the file states.
    overrides: frozenset[str] = frozenset()
    # What the layer's data source held, read as its SetUp reads it (passes/sources.py);
    # None: the layer reads no source, or it is missing (the rule then asks for --input).
    record: "SourceRecord | None" = None

    @property
    def proto(self):  # caffe_pb2.LayerParameter
        return self.layer.proto

    def fail(self, message: str) -> CaffememError:
        """An error about this layer, located at its line (raise the result)."""
        return CaffememError(message, Location.of_layer(self.layer))

    def check(self, condition: bool, message: str) -> None:
        """Caffe's CHECK in a layer's Reshape: a false condition is the user's error."""
        if not condition:
            raise self.fail(message)


ShapeRule = Callable[[ShapeQuery], LayerShapes]


@dataclass(frozen=True)
class SourceRecord:
    """The first record of a data layer's source, as Caffe's SetUp reads it, before the
    DataTransformer (crop) and the batch: the layer's rule applies those.

    Made by passes/sources.py (read_sources) for the layers whose spec names a
    ``source_kind``; each field is None (or empty) where that kind holds no such fact."""

    source: str  # the path as the net file writes it
    what: str  # what was read, for the output: "first Datum 3x256x256, crop_size 227"
    tops: tuple[int, ...] = (0,)  # the tops (by index) whose shapes it gives: the output says so
    # C, H, W of the image the DataTransformer gets: a Datum's, or an image decoded as
    # Caffe decodes it (resized to new_height/new_width, is_color's channels).
    image: tuple[int, int, int] | None = None
    # HDF5Data: the first file's datasets named by the tops, name -> shape.
    datasets: Mapping[str, Shape] | None = None
    # AnnotatedData: the box count of the first AnnotatedDatum, None without annotations.
    boxes: int | None = None
    # transform_param.mean_file's blob as DataTransformer loads it: C, H, W (Blob::LegacyShape 1-3).
    mean: tuple[int, int, int] | None = None
    # C3D-v1.0's blob files (util/image_io.cpp load_blob_from_binary): the first file's
    # header, N, C, L, H, W.
    volume: tuple[int, int, int, int, int] | None = None


@dataclass(frozen=True)
class Arity:
    """How many blobs a layer takes or gives (Caffe's ExactNum/MinNum/MaxNum...Blobs)."""

    min: int = 0
    max: int | None = None

    @staticmethod
    def exactly(n: int) -> "Arity":
        return Arity(n, n)

    def accepts(self, n: int) -> bool:
        return n >= self.min and (self.max is None or n <= self.max)

    def describe(self) -> str:
        if self.max == self.min:
            return f"exactly {self.min}"
        if self.max is None:
            return f"at least {self.min}"
        return f"{self.min} to {self.max}"


@dataclass(frozen=True)
class LayerSpec:
    """All caffemem knows about one Caffe layer type."""

    type: str
    shape: ShapeRule
    family: str
    bottoms: Arity = Arity()
    tops: Arity = Arity()
    # Caffe's AutoTopBlobs(): true exactly for LossLayer subclasses, which also get a
    # default loss_weight of 1 on top 0 when the file gives none.
    auto_top: bool = False
    is_data: bool = False  # tops come from outside the net (files, memory, the user)
    # Tops whose shapes caffemem cannot read in the layer's code, only from the user
    # (--input, a declaration): Python layers and declared types.  Their first axis may
    # not be the batch, so `--batch` says so.
    opaque_tops: bool = False
    source: str = ""  # where the rule was checked: "caffe master layers/foo.cpp" or a fork
    # What it does to memory in SetUp/Forward/Backward (see access.py); None: unknown,
    # the memory pass then uses a generic guess and says so.
    memory: "MemoryRule | None" = None
    # Bottoms that force_backward must not give a gradient (Layer::AllowForceBackward),
    # e.g. the label of a loss layer.
    no_force_backward: tuple[int, ...] = ()
    # Which bottoms are laid out time first, T x N x ... (Recurrent's x, cont and exposed
    # hidden inputs), given the LayerParameter and the bottom count: their batch is axis 1,
    # which --batch and fit scale when a data layer feeds them.
    time_major_bottoms: "Callable[[Any, int], tuple[int, ...]] | None" = None
    # How to restate the parameters when --batch moves the batch on top axis ``axis``:
    # (LayerParameter, bottom rank, axis, new batch) -> the new LayerParameter, or None
    # when the parameters do not spell that axis out (it follows the bottom).  Reshape,
    # whose shape spells out T x N for the frames of a recurrent net, has one.
    rebatch: Callable[[Any, int, int, int], Any] | None = None
    # A data layer whose code fixes its tops whatever the batch: (LayerParameter) -> (why,
    # whether its first top is the batch's images), or None.  --batch leaves such tops as
    # they are, and is refused when it differs from the images the layer reads (Python
    # layers that allow one image a batch, see pylayers.py).
    fixed_tops: Callable[[Any], tuple[str, bool] | None] | None = None
    # Where a data layer's text states its batch (the first axis of its tops): the field
    # paths of those scalars in the LayerParameter, e.g. ("data_param", "batch_size") or
    # ("input_param", "shape", 1, "dim", 0).  `optimize --batch N -o` rewrites exactly
    # these; None: the batch is not in a field (Python layers), so it refuses.
    batch_fields: "Callable[[Any], tuple[tuple[str | int, ...], ...]] | None" = None
    # What the memory-multiloading fork declares this type shares between top i and
    # bottom i (is_sharing_data / is_sharing_diff): "data", "diff"; Split shares every
    # top's data with bottom 0.
    fork_shares: tuple[str, ...] = ()
    # The fork pairs top i with bottom i, except where every top shares bottom 0 (Split).
    fork_shares_first_bottom: bool = False
    # `optimize --inplace`: a test of the LayerParameter saying that Caffe's Forward and
    # Backward give the right result when top i is bottom i (read from the type's CPU and
    # GPU code, cited where it is set); None: never rewritten in place.
    in_place: "Callable[[Any], bool] | None" = None
    # Where a GPU run (Caffe::mode() == GPU) runs the layer: "full" (its .cu file has
    # Forward_gpu and Backward_gpu), "forward" (Forward_gpu only: Backward_gpu is the
    # default, which calls Backward_cpu) or "none" (no .cu file: both run on the host,
    # layer.hpp 316-339), so its reads and writes touch host copies.
    gpu: str = "full"
    # The kind of source a data layer's SetUp reads its first record from (a reader in
    # passes/sources.py READERS: "datum_db", "image_list", ...); None: none.
    source_kind: str | None = None
    # `optimize --recompute`: what running the layer's Forward a second time, inside
    # Net::Backward, does (read from its Forward_cpu and Forward_gpu, cited where set):
    # (LayerParameter, phase) -> Recompute.  None: never recomputed (not studied).
    recompute: "Callable[[Any, str], Recompute] | None" = None
    # The Forward's work in floating-point operations, from the shapes: (LayerParameter,
    # LayerShapes) -> FLOPs; None: one per top element (an elementwise layer).  The
    # recompute report adds these up for the Forwards run a second time.
    forward_flops: "Callable[[Any, LayerShapes], int] | None" = None


@dataclass(frozen=True)
class Recompute:
    """LayerSpec.recompute's answer: may the patched Caffe run this Forward again in
    Backward, and does that give the bytes its first run gave?

    ``safe``: the Forward is a function of its bottoms and parameters (no random draw, no
    cursor, no state another step reads), or its only state is its parameter blobs, which
    the runtime saves before and restores after (``restores_params``: BatchNorm in TRAIN
    updates its running averages in Forward).  ``cheap``: its Forward costs little beside a
    convolution's (no GEMM), MXNet's mirror rule.  ``why``: the reason, for the report."""

    safe: bool
    why: str
    cheap: bool = False
    restores_params: bool = False


NOT_STUDIED = Recompute(False, "not studied: caffemem does not know that its Forward gives the same bytes twice")


DATA_LAYER = Recompute(False, "a data layer: each Forward takes the next batch (a cursor, a prefetch thread, or the user's input)")


def recompute_of(spec: "LayerSpec | None", proto: Any, phase: str) -> Recompute:
    """The one answer for any layer: a data layer (``is_data``) or a type without a
    ``recompute`` rule is never recomputed."""
    if spec is not None and spec.recompute is not None:
        return spec.recompute(proto, phase)
    return DATA_LAYER if spec is not None and spec.is_data else NOT_STUDIED


# ---- LayerSpec.recompute rules, shared by the family modules -------------------------
#
# A rule answers for one layer in one phase.  Every rule that can say "safe" goes through
# ``recompute_rule``, which refuses a layer given a loss_weight: Layer::SetLossWeights
# makes its top an output of the net (Net::ForwardFromTo sums it into the loss), kept to
# the end, never worth recomputing, and its Backward reads the weight in the top's diff.

RecomputeRule = Callable[[Any, str], Recompute]

LOSS_WEIGHTED = Recompute(False, "it has a loss_weight: its top is a loss, an output of the net, never recomputed")


def recompute_rule(rule: RecomputeRule) -> RecomputeRule:
    """A type's rule, with a layer given a nonzero loss_weight refused first."""

    def guarded(proto: Any, phase: str) -> Recompute:
        if any(weight != 0 for weight in proto.loss_weight):
            return LOSS_WEIGHTED
        return rule(proto, phase)

    guarded.__doc__ = rule.__doc__
    return guarded


def always(answer: Recompute) -> RecomputeRule:
    """The rule of a type whose answer depends on no parameter and no phase."""
    return recompute_rule(lambda proto, phase: answer)


def never(why: str) -> RecomputeRule:
    """The rule of a type never recomputed; ``why`` goes into the report."""
    answer = Recompute(False, why)
    return lambda proto, phase: answer


PURE_ANSWER = Recompute(True, "its Forward writes its tops and scratch from its bottoms and parameters alone")
CHEAP_ANSWER = Recompute(True, "its Forward writes its tops and scratch from its bottoms and parameters alone, with no matrix product", cheap=True)
# A convolution-like Forward: a function of bottoms and weights, but a GEMM.
PURE = always(PURE_ANSWER)
# MXNet's mirror set: elementwise, normalisation, pooling, copies.
PURE_CHEAP = always(CHEAP_ANSWER)
# Reshape/Flatten/Split: the top shares the bottom's storage, a second Forward writes nothing
# (safe, and the planner has nothing to gain).
SHARES = always(Recompute(True, "its top shares its bottom's storage: a second Forward writes nothing", cheap=True))
LOSS = never("a loss layer: its top is an output of the net, kept to the end")
OUTPUT = never("its top is an output of the net (a score or a result), read by no Backward")


# ---- LayerSpec.forward_flops: a cost model, not a measure ------------------------------
#
# Counts of multiply-adds (2 FLOPs each) and elementwise operations as the Caffe code
# spells them out, from the shapes alone; they rank Forwards against each other for the
# recompute report, they do not predict seconds.


def per_top_element(n: int) -> "Callable[[Any, LayerShapes], int]":
    """forward_flops of a Forward doing ``n`` operations for each element of its tops."""
    return lambda proto, shapes: n * sum(count(top) for top in shapes.tops)


def in_place_always(proto: Any) -> bool:
    """LayerSpec.in_place for a type that is right in place whatever its parameters."""
    return True


_REGISTRY: dict[str, LayerSpec] = {}


def register(spec: LayerSpec) -> LayerSpec:
    """Add a spec; a second spec for one type is a programming error."""
    if spec.type in _REGISTRY:
        raise ValueError(f"layer type {spec.type!r} registered twice")
    _REGISTRY[spec.type] = spec
    return spec


def layer(type: str, family: str, **options) -> Callable[[ShapeRule], ShapeRule]:
    """Decorator form: ``@layer("ReLU", "neuron", bottoms=Arity.exactly(1))``."""

    def wrap(rule: ShapeRule) -> ShapeRule:
        register(LayerSpec(type=type, shape=rule, family=family, **options))
        return rule

    return wrap


def builtin_specs() -> Mapping[str, LayerSpec]:
    """Every built-in spec, keyed by Caffe type string.  The family modules register
    themselves when :mod:`caffemem.layers` is imported, which any import of this module
    does first."""
    return _REGISTRY


class SpecTable:
    """The specs one run uses: built-ins plus any declared with --layers.  ``root``: the
    fork's tree (--caffe-root, schema/caffe_root.py), whose registered layer types tell an
    unknown type from a typo."""

    def __init__(self, extra: Mapping[str, LayerSpec] | None = None, root: Any = None) -> None:
        self._specs = dict(builtin_specs())
        self._specs.update(extra or {})
        self.root = root

    def get(self, type: str) -> LayerSpec | None:
        return self._specs.get(type)

    def __contains__(self, type: str) -> bool:
        return type in self._specs

    def types(self) -> list[str]:
        return sorted(self._specs)
