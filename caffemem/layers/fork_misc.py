"""Single layers of other forks, each read in its repository.

- Gram: happynear/caffe-windows (branch ms, 967eedf2) ``src/caffe/layers/gram_layer.cpp``
  (c291a9e2) and its class in ``include/caffe/custom_layers.hpp``: the neural-style Gram
  matrix (the channel covariance, scaled by 1 / (H W C)), no parameter message.  Other
  ``Gram`` layers exist only as single-repository copies (one with a ``gram_param { axis
  }`` of its own, one with ``down_channel``); happynear's is the one in a fork people
  build, so its rule is the one here.
- Gather: two forks register a ``Gather`` type.
  * foss-for-synopsys-dwc-arc-processors/synopsys-caffe ``src/caffe/layers/
    gather_layer.cpp`` (1e93e856; read at 977ba36a) and ``include/caffe/layers/
    gather_layer.hpp``: TensorFlow's tf.gather with ``gather_param { indices shape axis
    }``, forward only.
  * hszhao/PSPNet (and the caffe-mpi line it comes from) ``src/caffe/layers/
    gather_layer.cpp`` (88d0b3ee): the MPI all-gather of every bottom, no parameter.  In
    one process (no USE_MPI, or not in MPI mode) each top is shaped like its bottom and
    shares its data and diff; Forward and Backward do nothing.
  A layer that gives ``gather_param`` is synopsys' tf.gather; one without is PSPNet's.
"""

from __future__ import annotations

from caffemem.graph import LayerShapes, count
from caffemem.layers.access import Action, LayerMemory, MemoryQuery, Share, read, write
from caffemem.layers.blob import axis_index, format_shape, legacy4, reshaped
from caffemem.layers.registry import Arity, ShapeQuery, layer

FAMILY = "fork_misc"
GRAM = "happynear/caffe-windows (ms) src/caffe/layers/gram_layer.cpp @c291a9e2, include/caffe/custom_layers.hpp @967eedf2"
GATHER_TF = "foss-for-synopsys-dwc-arc-processors/synopsys-caffe src/caffe/layers/gather_layer.cpp @1e93e856, include/caffe/layers/gather_layer.hpp"
GATHER_MPI = "hszhao/PSPNet src/caffe/layers/gather_layer.cpp @88d0b3ee"


# ----------------------------------------------------------------------------------------
# Gram (happynear/caffe-windows gram_layer.cpp)
# ----------------------------------------------------------------------------------------


def _gram_memory(q: MemoryQuery) -> LayerMemory:
    """gram_layer.cpp.  Forward_cpu reads the bottom and writes the top; it also fills a
    local Blob ``temp`` (a copy of the bottom) that is freed when Forward returns: no bytes
    outlive the call, so none are counted (a transient bottom-sized peak inside Forward).
    Backward_cpu has no propagate_down test: it takes the top's diff through
    mutable_cpu_diff, reads the bottom and writes the bottom's diff."""
    backward = (write(q.top(0), "diff"), read(q.bottom(0)), write(q.bottom(0), "diff"))
    note = f"Gram {q.layer.name}: Forward_cpu also holds a copy of the bottom ({count(q.bottoms[0])} values) while it runs; freed on return, not counted"
    return LayerMemory(forward=(read(q.bottom(0)), write(q.top(0))), backward=backward, notes=(note,))


@layer("Gram", FAMILY, bottoms=Arity.exactly(1), tops=Arity(1, None), source=GRAM, memory=_gram_memory)
def _gram(q: ShapeQuery) -> LayerShapes:
    """Reshape: top (num, channels, channels, 1) through the legacy accessors (MinTopBlobs
    1; only top[0] is shaped or written).  Backward_cpu reads shape(2) and shape(3), so in
    a net that trains the bottom must have four axes."""
    bottom = q.bottoms[0]
    num, channels, _, _ = legacy4(q, bottom)
    q.check(len(q.layer.tops) == 1, "Gram shapes and writes only top[0]: give it one top")
    if q.phase == "TRAIN":
        q.check(len(bottom) == 4, f"Gram's Backward_cpu reads shape(2) and shape(3): the bottom {format_shape(bottom)} needs 4 axes")
    return LayerShapes(tops=(reshaped(q, (num, channels, channels, 1)),))


# ----------------------------------------------------------------------------------------
# Gather (synopsys-caffe's tf.gather, or PSPNet's MPI gather)
# ----------------------------------------------------------------------------------------


def _gather_memory(q: MemoryQuery) -> LayerMemory:
    """synopsys' gather_layer.cpp: Forward_cpu reads the bottom and writes the top (one
    caffe_copy per index); Backward_cpu is NOT_IMPLEMENTED (Caffe aborts if it runs, as for
    ArgMax).  PSPNet's in one process: Reshape shares each top's data and diff with its
    bottom (and Layer::Forward calls Reshape again); Forward and Backward touch nothing."""
    if q.proto.HasField("gather_param"):
        return LayerMemory(forward=(read(q.bottom(0)), write(q.top(0))))
    alias: tuple[Action, ...] = tuple(Share(q.top(i), q.bottom(i), part) for i in range(len(q.tops)) for part in ("data", "diff"))
    return LayerMemory(setup=alias, forward=alias)


def _tf_gather(q: ShapeQuery) -> LayerShapes:
    """synopsys' Reshape: indices of shape ``shape`` (a scalar when ``shape: 0`` or none is
    given: then exactly one index) replace the ``axis`` dimension; each index must be below
    that dimension (CHECK_LT)."""
    param = q.proto.gather_param
    bottom = q.bottoms[0]
    q.check(len(q.bottoms) == 1 and len(q.layer.tops) == 1, "a Gather with gather_param (synopsys-caffe) takes exactly one bottom and one top")
    q.check(len(bottom) >= 1, "the dimension of input should be larger than or equal to 1")
    axis = axis_index(q, bottom, param.axis)
    indices, shape = list(param.indices), tuple(param.shape)
    if shape == (0,) or not shape:
        q.check(len(indices) == 1, f"indices should be scalar! ({len(indices)} indices, no shape)")
        shape = ()
    else:
        q.check(len(indices) == count(shape), f"the size and shape of indices do not match ({len(indices)} indices, shape {format_shape(shape)})")
    for i, index in enumerate(indices):
        q.check(index < bottom[axis], f"indices_ element with idx {i} ({index}) is out of range {bottom[axis]} (axis {axis} of {format_shape(bottom)})")
    return LayerShapes(tops=(reshaped(q, bottom[:axis] + shape + bottom[axis + 1 :]),))


@layer("Gather", FAMILY, bottoms=Arity(1, None), tops=Arity(1, None), source=f"{GATHER_TF}; {GATHER_MPI}", memory=_gather_memory)
def _gather(q: ShapeQuery) -> LayerShapes:
    """With ``gather_param``: synopsys' tf.gather.  Without: PSPNet's MPI gather, one top per
    bottom, each shaped like its bottom (one process: the batch is not multiplied by the
    MPI ranks)."""
    if q.proto.HasField("gather_param"):
        return _tf_gather(q)
    q.check(len(q.layer.tops) == len(q.bottoms), f"Gather (PSPNet's MPI gather) needs one top per bottom ({len(q.bottoms)} bottoms, {len(q.layer.tops)} tops)")
    return LayerShapes(tops=tuple(q.bottoms))
