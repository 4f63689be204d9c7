"""Single layers of other forks, each read in its repository.

- Gram: happynear/caffe-windows (branch ms, 967eedf2) ``src/caffe/layers/gram_layer.cpp``
  (c291a9e2) and its class in ``include/caffe/custom_layers.hpp``: the neural-style Gram
  matrix (the channel covariance, scaled by 1 / (H W C)), no parameter message.  Other
  ``Gram`` layers exist only as single-repository copies (one with a ``gram_param { axis
  }`` of its own, one with ``down_channel``); happynear's is the one in a fork people
  build, so its rule is the one here.
- Flip: happynear/caffe-windows (branch ms, 967eedf2) ``src/caffe/layers/flip_layer.cpp/.cu``
  (434b0fa2): mirrors each image (``flip_param``: width by default), as AM-Softmax's
  ``face_deploy_mirror_normalize.prototxt`` (happynear/AMSoftmax) does to add each face's
  mirror to the batch.
- Gather: two forks register a ``Gather`` type.
  * foss-for-synopsys-dwc-arc-processors/synopsys-caffe ``src/caffe/layers/
    gather_layer.cpp`` (1e93e856; read at 977ba36a) and ``include/caffe/layers/
    gather_layer.hpp``: TensorFlow's tf.gather with ``gather_param { indices shape axis
    }``, forward only.
  * hszhao/PSPNet (and the caffe-mpi line it comes from) ``src/caffe/layers/
    gather_layer.cpp`` and its class in ``include/caffe/common_layers.hpp`` (88d0b3ee, the
    initial commit; later commits dropped the files): the MPI all-gather of every bottom,
    no parameter, EqualNumBottomTopBlobs, no is_sharing declaration.  In
    one process (no USE_MPI, or not in MPI mode) each top is shaped like its bottom and
    shares its data and diff; Forward and Backward do nothing.
  A layer that gives ``gather_param`` is synopsys' tf.gather; one without is PSPNet's.
- DenseBlock: Tongcheng/caffe (master, 1625bb3b) ``src/caffe/layers/DenseBlock_layer.cpp``
  and ``include/caffe/layers/DenseBlock_layer.hpp``: DenseNet's whole dense block (BN,
  ReLU, 3x3 convolution per transition, optionally the BC bottleneck) fused in one layer,
  used as in Tongcheng/DN_CaffeScript ``train_test_BC_C10plus.prototxt``.  The layer has a
  CPU implementation (naive loops over Blobs it creates itself) and a cuDNN-only GPU one
  (``DenseBlock_layer.cu``: raw cudaMalloc buffers and workspaces, not Blobs).  caffemem
  models the CPU code, as for every layer; the GPU figures would differ.
- Transpose and Reverse: senlinuc/caffe_ocr (master, 81642f61) ``src/caffe/layers/
  transpose_layer.cpp/.cu``, ``reverse_layer.cpp/.cu`` and their classes in
  ``include/caffe/layers/``: the OCR fork's CRNN turns the CNN's N x C x H x W features
  into a W x H x N x C sequence (``transpose_param { dim: 3 dim: 2 dim: 0 dim: 1 }``)
  and reverses its time axis around the backward LSTM (``reverse_param { axis: 0 }``), as
  in its ``examples/ocr/*/deploy.prototxt``.
- Lstm, CTCGreedyDecoder and WarpCTCLoss: senlinuc/caffe_ocr (81642f61) too, the rest of
  its CRNN (``examples/ocr/resnet/ResNet-train_val.prototxt``: two bidirectional Lstm
  pairs over the T x N x C sequence, an InnerProduct on axis 2, WarpCTCLoss against the
  N x L label, CTCGreedyDecoder's accuracy in TEST).  ``Lstm`` is
  ``lstm_layer_Junhyuk.cpp/.cu`` (class LstmLayer, Junhyuk Oh's LSTM; not master's
  ``LSTM``, which the fork also has), ``CTCGreedyDecoder`` ``ctc_decoder_layer.cpp`` (no
  .cu: it runs on the host), ``WarpCTCLoss`` ``warp_ctc_loss_layer.cpp/.cu`` with Baidu's
  warp-ctc (``ctcpp_entrypoint.cpp``).
"""

from __future__ import annotations

from caffemem.graph import LayerShapes, Shape, count
from caffemem.layers.access import Action, Alloc, BlobId, LayerMemory, MemoryQuery, Reshape, Share, buffer_setup, read, write
from caffemem.layers.blob import MAX_BLOB_AXES, axis_index, format_shape, legacy4, reshaped
from caffemem.layers.registry import (
    CHEAP_ANSWER,
    LOSS,
    OUTPUT,
    PURE,
    PURE_ANSWER,
    PURE_CHEAP,
    Arity,
    Recompute,
    ShapeQuery,
    layer,
    never,
    recompute_rule,
)

FAMILY = "fork_misc"
GRAM = "happynear/caffe-windows (ms) src/caffe/layers/gram_layer.cpp @c291a9e2, include/caffe/custom_layers.hpp @967eedf2"
GATHER_TF = "foss-for-synopsys-dwc-arc-processors/synopsys-caffe src/caffe/layers/gather_layer.cpp @1e93e856, include/caffe/layers/gather_layer.hpp"
GATHER_MPI = "hszhao/PSPNet src/caffe/layers/gather_layer.cpp @88d0b3ee"
OCR = "senlinuc/caffe_ocr src/caffe/layers/{}_layer.cpp/.cu, include/caffe/layers/{}_layer.hpp @81642f61"
FLIP = "happynear/caffe-windows (ms) src/caffe/layers/flip_layer.cpp/.cu @434b0fa2"
DENSE_BLOCK = "Tongcheng/caffe src/caffe/layers/DenseBlock_layer.cpp, include/caffe/layers/DenseBlock_layer.hpp @1625bb3b"


# ----------------------------------------------------------------------------------------
# Flip (happynear/caffe-windows flip_layer.cpp/.cu)
# ----------------------------------------------------------------------------------------


def _flip_memory(q: MemoryQuery) -> LayerMemory:
    """flip_layer.cpp/.cu: Forward reads the bottom and writes the top; Backward takes the
    top's diff and the bottom's (mutable) diff before testing propagate_down[0], and writes
    it only when that is set."""
    return LayerMemory(forward=(read(q.bottom(0)), write(q.top(0))), backward=(read(q.top(0), "diff"), write(q.bottom(0), "diff")))


# flip_layer.cpp/.cu Forward: an index permutation of the bottom.
@layer("Flip", FAMILY, bottoms=Arity.exactly(1), tops=Arity.exactly(1), source=FLIP, memory=_flip_memory, recompute=PURE_CHEAP)
def _flip(q: ShapeQuery) -> LayerShapes:
    """Reshape: top[0]->ReshapeLike(*bottom[0]); Forward indexes num, channels, height and
    width (the legacy accessors: at most 4 axes)."""
    legacy4(q, q.bottoms[0])
    return LayerShapes(tops=(q.bottoms[0],))


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


# gram_layer.cpp Forward: per image the bottom times its transpose (a gemm): pure, not
# cheap.  Its FLOPs (2 N C^2 HW) need the bottom's H x W, which forward_flops is not
# given: counted as the default, one per top element.
@layer("Gram", FAMILY, bottoms=Arity.exactly(1), tops=Arity(1, None), source=GRAM, memory=_gram_memory, recompute=PURE)
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


@recompute_rule
def _gather_recompute(proto, phase: str) -> Recompute:
    """synopsys' tf.gather (gather_param): caffe_copy of the indexed slices, pure.  PSPNet's
    MPI gather (no gather_param): an MPI collective across the processes of a run, which
    every process would have to repeat in step: not recomputed."""
    if proto.HasField("gather_param"):
        return CHEAP_ANSWER
    return Recompute(False, "PSPNet's Gather is an MPI collective across processes: a second run must be matched by every process")


@layer("Gather", FAMILY, bottoms=Arity(1, None), tops=Arity(1, None), source=f"{GATHER_TF}; {GATHER_MPI}", memory=_gather_memory, recompute=_gather_recompute)
def _gather(q: ShapeQuery) -> LayerShapes:
    """With ``gather_param``: synopsys' tf.gather.  Without: PSPNet's MPI gather, one top per
    bottom, each shaped like its bottom (one process: the batch is not multiplied by the
    MPI ranks)."""
    if q.proto.HasField("gather_param"):
        return _tf_gather(q)
    q.check(len(q.layer.tops) == len(q.bottoms), f"Gather (PSPNet's MPI gather) needs one top per bottom ({len(q.bottoms)} bottoms, {len(q.layer.tops)} tops)")
    return LayerShapes(tops=tuple(q.bottoms))


# ----------------------------------------------------------------------------------------
# DenseBlock (Tongcheng/caffe DenseBlock_layer.cpp)
# ----------------------------------------------------------------------------------------


class _Dense:
    """The block's sizes and the index of each parameter blob, as LayerSetUp lays them out:
    for transition i, blobs_[i] is the 3x3 filter, [T + i] the BN scaler, [2T + i] the BN
    bias, [3T + i] the global mean, [4T + i] the global variance; with use_BC also [5T + i]
    the 1x1 filter and [6T..9T + i] the bottleneck's scaler, bias, mean and variance; the
    last blob (index 5T, or 10T with BC) is the moving-average factor."""

    def __init__(self, param, bottom: Shape) -> None:
        self.transitions = param.numTransition
        self.init = param.initChannel
        self.growth = param.growthRate
        self.bc = param.use_BC
        self.num, self.height, self.width = bottom[0], bottom[2], bottom[3]

    def channels(self, i: int) -> int:
        """Channels entering transition i (i = T: the block's output)."""
        return self.init + i * self.growth

    def image(self, channels: int) -> Shape:
        return (self.num, channels, self.height, self.width)

    @property
    def factor(self) -> int:
        return (10 if self.bc else 5) * self.transitions

    def param_shapes(self) -> tuple[Shape, ...]:
        t, g = self.transitions, self.growth
        shapes: list[Shape] = [()] * (self.factor + 1)
        for i in range(t):
            c = self.channels(i)
            shapes[i] = (g, 4 * g if self.bc else c, 3, 3)
            for k in range(1, 5):  # scaler, bias, global mean, global variance
                shapes[k * t + i] = (1, c, 1, 1)
            if self.bc:
                shapes[5 * t + i] = (4 * g, c, 1, 1)
                for k in range(6, 10):
                    shapes[k * t + i] = (1, 4 * g, 1, 1)
        shapes[self.factor] = (1,)
        return tuple(shapes)


def _bn_forward(q: MemoryQuery, x: BlobId, y: BlobId, xhat: BlobId, mean: BlobId, var: BlobId, params: tuple[int, int, int, int], channels: int, leaked: str) -> tuple[Action, ...]:
    """BN_train_Fwd (TRAIN) or BN_inf_Fwd (TEST) on x -> y.  ``params``: the indices of the
    scaler, bias, global mean and global variance.  BN_inf_Fwd news two (1, C, 1, 1) Blobs
    for the scaled mean and variance and never deletes them: each TEST Forward leaks them
    (``leaked`` names them here, counted once)."""
    scaler, bias, global_mean, global_var = (q.param(j) for j in params)
    if q.phase == "TRAIN":
        return (write(mean), write(var), read(x), write(global_mean), write(global_var), write(xhat), write(y), read(scaler), read(bias))
    inf_mean, inf_var = q.buffer(f"{leaked}_inf_mean"), q.buffer(f"{leaked}_inf_var")
    shape = (1, channels, 1, 1)
    return (
        (read(q.param(len(q.params) - 1)), Reshape(inf_mean, shape), read(global_mean), write(inf_mean), Reshape(inf_var, shape))
        + (read(global_var), write(inf_var), write(y), read(x), read(scaler), read(bias))
    )


def _bn_backward(q: MemoryQuery, x: BlobId, y: BlobId, xhat: BlobId, mean: BlobId, var: BlobId, scaler: BlobId, bias: BlobId) -> tuple[Action, ...]:
    """BN_train_Bwd: the bias and scaler diffs from y's diff and x-hat; x-hat's diff; the
    batch variance's and mean's diffs; x's diff (added to, for the merged input)."""
    return (
        (write(bias, "diff"), write(scaler, "diff"), read(y, "diff"), read(xhat), write(xhat, "diff"), read(scaler))
        + (write(var, "diff"), read(x), read(mean), read(var), write(mean, "diff"), write(x, "diff"))
    )


def _conv_backward(x: BlobId, y: BlobId, filt: BlobId) -> tuple[Action, ...]:
    """convolution_Bwd: the filter's diff and the input's diff from y's diff."""
    return (write(filt, "diff"), write(x, "diff"), read(y, "diff"), read(x), read(filt))


def _dense_block_memory(q: MemoryQuery) -> LayerMemory:
    """DenseBlock_layer.cpp, CPU code.

    LayerSetUp creates and fills (or writes) every parameter; Reshape shapes only the top.
    The first Forward_cpu (CPU_Initialization) news the block's Blobs, each shaped at once:
    per transition i (C_i = initChannel + i growthRate) batch_Mean/batch_Var (1, C_i, 1, 1),
    merged_conv, BN_XhatVec, postBN, postReLU (N, C_i, H, W) and postConv (N, growthRate, H,
    W); with use_BC also BC_BN_Xhat, postBN_BC, postReLU_BC, postConv_BC (N, 4 growthRate,
    H, W) and batch_Mean4G/Var4G (1, 4 growthRate, 1, 1); and merged_conv[T], the output.
    Forward copies the bottom into merged_conv[0], runs BN -> ReLU -> [1x1 conv -> BN ->
    ReLU] -> 3x3 conv per transition, concatenates into merged_conv[i + 1], and copies
    merged_conv[T] into the top.  Backward_cpu (no propagate_down test) walks back through
    the same Blobs' diffs, copies merged_conv[0]'s diff into the bottom's and zeroes the
    data and diff of every per-transition Blob.  TEST runs never touch the x-hat, batch
    statistics or diffs (their Blobs get only shape buffers)."""
    dense = _Dense(q.proto.denseblock_param, q.bottoms[0])
    t, g = dense.transitions, dense.growth
    names = ("batch_mean", "batch_var", "merged", "xhat", "post_bn", "post_relu", "post_conv")
    bc_names = ("bc_xhat", "bc_post_bn", "bc_post_relu", "bc_post_conv", "bc_batch_mean", "bc_batch_var")
    blob = {(name, i): q.buffer(f"{name}{i}") for i in range(t) for name in names + (bc_names if dense.bc else ())}
    blob["merged", t] = q.buffer(f"merged{t}")
    forward: list[Action] = []
    for i in range(t):  # CPU_Initialization: new Blob<Dtype>(shape) reshapes at once
        c = dense.channels(i)
        shapes = {"batch_mean": (1, c, 1, 1), "batch_var": (1, c, 1, 1), "post_conv": dense.image(g)}
        shapes.update({name: dense.image(c) for name in ("merged", "xhat", "post_bn", "post_relu")})
        if dense.bc:
            shapes.update({name: dense.image(4 * g) for name in bc_names[:4]})
            shapes.update({"bc_batch_mean": (1, 4 * g, 1, 1), "bc_batch_var": (1, 4 * g, 1, 1)})
        forward += [Reshape(blob[name, i], shapes[name]) for name in names + (bc_names if dense.bc else ())]
    forward += [Reshape(blob["merged", t], dense.image(dense.channels(t))), read(q.bottom(0)), write(blob["merged", 0])]
    for i in range(t):
        c = dense.channels(i)
        forward += _bn_forward(q, blob["merged", i], blob["post_bn", i], blob["xhat", i], blob["batch_mean", i], blob["batch_var", i], (t + i, 2 * t + i, 3 * t + i, 4 * t + i), c, f"t{i}")
        forward += [write(blob["post_relu", i]), read(blob["post_bn", i])]
        conv_x = blob["post_relu", i]
        if dense.bc:
            forward += [write(blob["bc_post_conv", i]), read(q.param(5 * t + i)), read(blob["post_relu", i])]
            bc_params = (6 * t + i, 7 * t + i, 8 * t + i, 9 * t + i)
            forward += _bn_forward(q, blob["bc_post_conv", i], blob["bc_post_bn", i], blob["bc_xhat", i], blob["bc_batch_mean", i], blob["bc_batch_var", i], bc_params, 4 * g, f"bc{i}")
            forward += [write(blob["bc_post_relu", i]), read(blob["bc_post_bn", i])]
            conv_x = blob["bc_post_relu", i]
        forward += [write(blob["post_conv", i]), read(q.param(i)), read(conv_x)]
        forward += [read(blob["merged", i]), read(blob["post_conv", i]), write(blob["merged", i + 1])]
    forward += [read(blob["merged", t]), write(q.top(0))]
    if q.phase == "TRAIN":
        forward.append(write(q.param(dense.factor)))
    backward: list[Action] = [read(q.top(0), "diff"), write(blob["merged", t], "diff")]
    for i in reversed(range(t)):
        backward += [read(blob["merged", i + 1], "diff"), write(blob["merged", i], "diff"), write(blob["post_conv", i], "diff")]
        conv_x = blob["bc_post_relu", i] if dense.bc else blob["post_relu", i]
        backward += _conv_backward(conv_x, blob["post_conv", i], q.param(i))
        if dense.bc:
            backward += [write(blob["bc_post_bn", i], "diff"), read(blob["bc_post_bn", i]), read(blob["bc_post_relu", i], "diff")]
            backward += _bn_backward(q, blob["bc_post_conv", i], blob["bc_post_bn", i], blob["bc_xhat", i], blob["bc_batch_mean", i], blob["bc_batch_var", i], q.param(6 * t + i), q.param(7 * t + i))
            backward += _conv_backward(blob["post_relu", i], blob["bc_post_conv", i], q.param(5 * t + i))
        backward += [write(blob["post_bn", i], "diff"), read(blob["post_bn", i]), read(blob["post_relu", i], "diff")]
        backward += _bn_backward(q, blob["merged", i], blob["post_bn", i], blob["xhat", i], blob["batch_mean", i], blob["batch_var", i], q.param(t + i), q.param(2 * t + i))
    backward += [read(blob["merged", 0], "diff"), write(q.bottom(0), "diff")]
    for i in range(t):  # LoopEndCleanup_cpu: BlobSetZero writes data and diff
        backward += [write(blob[name, i], part) for name in ("merged", "xhat", "post_bn", "post_relu", "post_conv") for part in ("data", "diff")]
    notes = ()
    if q.phase == "TEST":
        notes = (f"DenseBlock {q.layer.name}: each TEST Forward_cpu leaks its BN inference mean/variance Blobs (BN_inf_Fwd news them and never deletes them); counted once",)
    return LayerMemory(forward=tuple(forward), backward=tuple(backward), notes=notes)


# Exactly one bottom and one top: the hpp declares no counts, but Reshape and Forward use
# bottom[0] and top[0] only.
# DenseBlock_layer.cpp/.cu: in TRAIN each Forward updates the blocks' BN global mean and
# variance (parameter blobs) and, with use_dropout, draws dropout masks; the GPU code keeps
# its intermediate maps in storage shared by every DenseBlock of the net (it recomputes
# BN/ReLU itself in Backward).  Too much state to call a second run harmless.
_DENSE_BLOCK_RECOMPUTE = never("its Forward updates BN statistics, may draw dropout masks, and (GPU) shares scratch with every DenseBlock")


@layer("DenseBlock", FAMILY, bottoms=Arity.exactly(1), tops=Arity.exactly(1), source=DENSE_BLOCK, memory=_dense_block_memory, recompute=_DENSE_BLOCK_RECOMPUTE)
def _dense_block(q: ShapeQuery) -> LayerShapes:
    """Top (N, initChannel + numTransition growthRate, H, W).  The filters are always 3x3
    (and 1x1 in the bottleneck) whatever filter_H/filter_W/pad say: LayerSetUp and
    convolution_Fwd hard-code them, with zero padding and stride 1.  Forward's
    merged_conv[0]->CopyFrom(*bottom[0]) needs the bottom's count to be N x initChannel x
    H x W, so the bottom must have initChannel channels.  LayerSetUp adds its own ParamSpec
    per blob and CHECKs that the file gave none ("Nope")."""
    param = q.proto.denseblock_param
    bottom = q.bottoms[0]
    q.check(len(bottom) == 4, f"DenseBlock reads shape()[0], [2] and [3] of its bottom: it needs 4 axes, got {format_shape(bottom)}")
    q.check(len(q.proto.param) == 0, "DenseBlock sets its own param specs (lr_mult 0 for the global mean and variance): LayerSetUp CHECK-fails ('Nope') when the file gives any param { }")
    q.check(min(param.numTransition, param.initChannel, param.growthRate) >= 0, "numTransition, initChannel and growthRate must not be negative")
    q.check(
        bottom[1] == param.initChannel,
        f"the bottom {format_shape(bottom)} must have initChannel ({param.initChannel}) channels: Forward copies it into a blob of N x initChannel x H x W",
    )
    dense = _Dense(param, bottom)
    top = reshaped(q, dense.image(dense.channels(dense.transitions)))
    return LayerShapes(tops=(top,), params=dense.param_shapes())


# ----------------------------------------------------------------------------------------
# Transpose and Reverse (senlinuc/caffe_ocr)
# ----------------------------------------------------------------------------------------


def _transpose_memory(q: MemoryQuery) -> LayerMemory:
    """transpose_layer.cpp/.cu.  Reshape reshapes five Blob<int>: ``bottom_counts_``,
    ``top_counts_``, ``forward_map_`` and ``backward_map_`` [num_axes], which it writes
    (mutable_cpu_data), and ``buf_`` [count * num_axes], which only the GPU kernels write
    (each thread's axis indices, through buf_.mutable_gpu_data()).  Forward reads the
    bottom, the counts and the forward map and writes the top; Backward, when the bottom
    needs it, reads the top's diff, the counts and the backward map and writes the
    bottom's diff (never the bottom's data)."""
    axes = len(q.bottoms[0])
    counts = (q.buffer("bottom_counts"), q.buffer("top_counts"))
    forward_map, backward_map, buf = q.buffer("forward_map"), q.buffer("backward_map"), q.buffer("buf")
    setup: tuple[Action, ...] = ()
    for pair in (counts, (forward_map, backward_map)):  # Reshape both, then write both
        setup += tuple(Reshape(blob, (axes,), "int") for blob in pair) + tuple(write(blob) for blob in pair)
    setup += (Reshape(buf, (count(q.bottoms[0]) * axes,), "int"),)
    scratch: tuple[Action, ...] = (write(buf),) if q.device == "gpu" else ()
    forward = (read(q.bottom(0)), write(q.top(0))) + tuple(read(blob) for blob in counts + (forward_map,)) + scratch
    backward: tuple[Action, ...] = ()
    if q.propagate_down and q.propagate_down[0]:
        backward = (read(q.top(0), "diff"), write(q.bottom(0), "diff")) + tuple(read(blob) for blob in counts + (backward_map,)) + scratch
    return LayerMemory(setup=setup, forward=forward, backward=backward)


# transpose_layer.cpp/.cu Forward: an index permutation of the bottom (maps written in Reshape).
@layer("Transpose", FAMILY, bottoms=Arity.exactly(1), tops=Arity.exactly(1), source=OCR.format("transpose", "transpose"), memory=_transpose_memory, recompute=PURE_CHEAP)
def _transpose(q: ShapeQuery) -> LayerShapes:
    """Top axis i is bottom axis dim(i) (TransposeLayer::permute).  LayerSetUp refuses
    in-place; Reshape CHECKs 0 < num_axes <= kMaxBlobAxes and one dim per axis.  An
    index out of range (or repeated) is not checked there: it reads past the shape, so it
    is refused here."""
    bottom = q.bottoms[0]
    dims = list(q.proto.transpose_param.dim)
    q.check(q.layer.bottoms[0] != q.layer.tops[0], "Transpose Layer does not support in-place computation.")
    q.check(0 < len(bottom) <= MAX_BLOB_AXES, f"the dimension of the transposed blob should be greater than 0 and at most kMaxBlobAxes ({MAX_BLOB_AXES}), not {len(bottom)}")
    q.check(len(dims) == len(bottom), f"the dimensions of the top blob and bottom blob must be equal: transpose_param gives {len(dims)} dim, the bottom {format_shape(bottom)} has {len(bottom)} axes")
    q.check(sorted(dims) == list(range(len(bottom))), f"transpose_param's dim {dims} must name each axis of the bottom {format_shape(bottom)} once")
    return LayerShapes(tops=(tuple(bottom[axis] for axis in dims),))


def _reverse_memory(q: MemoryQuery) -> LayerMemory:
    """reverse_layer.cpp/.cu: Forward copies the bottom's slices into the top in reverse
    order; Backward, when the bottom needs it, copies the top's diff back into the
    bottom's diff (no read of the bottom's data)."""
    backward: tuple[Action, ...] = ()
    if q.propagate_down and q.propagate_down[0]:
        backward = (write(q.bottom(0), "diff"), read(q.top(0), "diff"))
    return LayerMemory(forward=(read(q.bottom(0)), write(q.top(0))), backward=backward)


# reverse_layer.cpp/.cu Forward: the bottom's slices copied in reverse order.
@layer("Reverse", FAMILY, bottoms=Arity.exactly(1), tops=Arity.exactly(1), source=OCR.format("reverse", "reverse"), memory=_reverse_memory, recompute=PURE_CHEAP)
def _reverse(q: ShapeQuery) -> LayerShapes:
    """A NeuronLayer: the top is shaped like the bottom.  The constructor CHECKs axis >= 0,
    LayerSetUp refuses in-place and an axis past the bottom's."""
    axis = q.proto.reverse_param.axis
    q.check(axis >= 0, f"reverse_param's axis must be >= 0, not {axis}")
    q.check(q.layer.bottoms[0] != q.layer.tops[0], "Reverse Layer does not allow in-place computation.")
    q.check(axis < len(q.bottoms[0]), f"Axis must be less than the number of axis for reversing ({axis} for {format_shape(q.bottoms[0])})")
    return LayerShapes(tops=(q.bottoms[0],))


# --- senlinuc/caffe_ocr's Lstm, CTCGreedyDecoder, WarpCTCLoss ----------------------------------

OCR_FILES = "senlinuc/caffe_ocr src/caffe/layers/{} @81642f61"
# LstmLayer's four gates (input, forget, output, cell input), stacked on one axis.
LSTM_GATES = 4
# CTCDecoderLayer's accuracy top: [1, 2, 1, 1], the edit-distance and the whole-line accuracy.
CTC_ACCURACY_VALUES = 2


def _sequence(q: ShapeQuery, what: str) -> Shape:
    """T x N x C read with Blob's legacy accessors (num, channels, height): 3 or 4 axes."""
    bottom = q.bottoms[0]
    q.check(3 <= len(bottom) <= 4, f"{what} reads its bottom as T x N x C (the legacy num, channels, height): it needs 3 or 4 axes, not {format_shape(bottom)}")
    return bottom


def _lstm_memory(q: MemoryQuery) -> LayerMemory:
    """lstm_layer_Junhyuk.cpp/.cu.  LayerSetUp shapes ``c_0_``, ``h_0_``, ``c_T_``, ``h_T_``,
    ``h_to_h_`` [N, H] and ``h_to_gate_`` [N, 4, H]; Reshape shapes ``pre_gate_`` and
    ``gate_`` [T, N, 4, H], ``cell_`` and ``top_`` [T, N, H], points ``top_``'s data and
    diff at the top's (ShareData, ShareDiff), and writes the ones of ``bias_multiplier_``
    [T * N].  Forward (the CPU code first takes the top's cpu_data in a CHECK) writes the
    top, the gates, the cells and ``h_to_gate_``, zeroes ``c_0_``/``h_0_`` (or, with a
    second bottom, copies ``c_T_``/``h_T_`` into them), and keeps the last step in
    ``c_T_``/``h_T_``.  Backward takes the top's diff, writes the gates' and cells' diffs
    and ``h_to_h_``, reads ``c_T_``'s diff (never written: allocated zeros) and writes
    ``c_0_``'s and ``h_0_``'s; each parameter's diff when param_propagate_down, the
    bottom's diff when propagate_down."""
    steps, num, hidden = q.tops[0]
    state = tuple(q.buffer(name) for name in ("c_0", "h_0", "c_T", "h_T", "h_to_h"))
    c_0, h_0, c_T, h_T, h_to_h = state
    h_to_gate, pre_gate, gate, cell, top_ = (q.buffer(name) for name in ("h_to_gate", "pre_gate", "gate", "cell", "top_"))
    ones = q.buffer("bias_multiplier")
    setup: tuple[Action, ...] = tuple(Reshape(blob, (num, hidden)) for blob in state) + (Reshape(h_to_gate, (num, LSTM_GATES, hidden)),)
    setup += (Reshape(pre_gate, (steps, num, LSTM_GATES, hidden)), Reshape(gate, (steps, num, LSTM_GATES, hidden)), Reshape(cell, (steps, num, hidden)))
    setup += (Reshape(top_, (steps, num, hidden)), Share(top_, q.top(0), "data"), Share(top_, q.top(0), "diff"))
    setup += buffer_setup(ones, (steps * num,), filled=True)
    clip = len(q.bottoms) > 1
    forward: tuple[Action, ...] = (read(q.top(0)), write(q.top(0)), read(q.bottom(0))) + ((read(q.bottom(1)),) if clip else ())
    forward += tuple(read(q.param(j)) for j in range(3)) + (write(pre_gate), write(gate), write(cell), write(h_to_gate))
    forward += ((read(c_T), read(h_T)) if clip else ()) + (write(c_0), write(h_0), read(ones), write(c_T), write(h_T))
    backward: tuple[Action, ...] = (read(q.top(0)), read(q.bottom(0))) + ((read(q.bottom(1)),) if clip else ())
    backward += (read(q.param(0)), read(q.param(1)), read(gate), read(cell), write(q.top(0), "diff"))
    backward += (write(pre_gate, "diff"), write(gate, "diff"), write(cell, "diff"), read(c_T, "diff"), write(h_0, "diff"), write(c_0, "diff"), read(c_0), write(h_to_h))
    for j, also in ((0, ()), (1, (read(h_0),)), (2, (read(ones),))):
        if q.param_propagate_down[j]:
            backward += (write(q.param(j), "diff"),) + also
    if q.propagate_down[0]:
        backward += (write(q.bottom(0), "diff"),)
    return LayerMemory(setup=setup, forward=forward, backward=backward)


@recompute_rule
def _lstm_recompute(proto, phase: str) -> Recompute:
    """lstm_layer_Junhyuk.cpp/.cu Forward: with one bottom it zeroes c_0_/h_0_ and runs the
    gemms and gates from the bottom: pure, not cheap.  With the continuation flags (a
    second bottom) it first copies the previous batch's last state (c_T_, h_T_) into
    c_0_/h_0_ and keeps this batch's: a second run would start from this batch's end."""
    if len(proto.bottom) > 1:
        return Recompute(False, "with continuation flags its Forward carries the last state (c_T_, h_T_) into the next batch")
    return PURE_ANSWER


def _lstm_flops(proto, shapes: LayerShapes) -> int:
    """The input and hidden gemms (2 x 4H x (I + H) a timestep and sequence) and the bias;
    the gates' elementwise steps left out."""
    steps, num = shapes.tops[0][:2]
    return steps * num * sum(2 * count(w) if len(w) == 2 else count(w) for w in shapes.params)


@layer(
    "Lstm",
    FAMILY,
    bottoms=Arity(1, 2),
    tops=Arity.exactly(1),
    source=OCR_FILES.format("lstm_layer_Junhyuk.cpp/.cu, include/caffe/layers/lstm_layer_Junhyuk.hpp"),
    memory=_lstm_memory,
    recompute=_lstm_recompute,
    forward_flops=_lstm_flops,
)
def _lstm(q: ShapeQuery) -> LayerShapes:
    """T x N x I in, T x N x num_output out; weights [4H, I] (input), [4H, H] (hidden) and a
    bias [4H].  I is the bottom's axis 2 (``shape(2)``; the gemms read T * N * I values).
    A second bottom holds the sequence-continuation flags: Forward CHECKs its num equal to
    its count."""
    steps, num, inputs = _sequence(q, "Lstm")[:3]
    hidden = q.proto.lstm_param.num_output
    q.check(hidden > 0, "lstm_param.num_output must be positive (the number of hidden units)")
    if len(q.bottoms) > 1:
        flags = q.bottoms[1]
        q.check(flags[:1] == (count(flags),), f"the second bottom (the continuation flags) must have its whole count on axis 0 (CHECK_EQ(num, count)), not {format_shape(flags)}")
    params = ((LSTM_GATES * hidden, inputs), (LSTM_GATES * hidden, hidden), (LSTM_GATES * hidden,))
    return LayerShapes(tops=((steps, num, hidden),), params=params)


def _ctc_decoder_memory(q: MemoryQuery) -> LayerMemory:
    """ctc_decoder_layer.cpp (no .cu: Forward and Backward run on the host).  Forward reads
    the scores (Decode) and writes the top: the decoded sequences, or, with the label as
    second bottom, the accuracy from the label's data.  Backward does nothing."""
    reads = tuple(read(q.bottom(i)) for i in range(len(q.bottoms)))
    return LayerMemory(forward=reads + (write(q.top(0)),))


@layer(
    "CTCGreedyDecoder",
    FAMILY,
    bottoms=Arity(1, 3),
    tops=Arity(1, 3),
    source=OCR_FILES.format("ctc_decoder_layer.cpp, include/caffe/layers/ctc_decoder_layer.hpp"),
    memory=_ctc_decoder_memory,
    gpu="none",
    recompute=OUTPUT,
)
def _ctc_greedy_decoder(q: ShapeQuery) -> LayerShapes:
    """T x N x C scores -> the best class per step, merged.  The fork's LayerSetUp knows
    two uses: scores alone -> the sequences [N, T, 1, 1] (-1 after each one's end); scores
    and the N x L label -> the accuracy [1, 2, 1, 1] (1 - mean edit distance, whole lines
    right).  Other bottom/top counts leave its extra tops never shaped: refused here."""
    steps, num = _sequence(q, "CTCGreedyDecoder")[:2]
    uses = {(1, 1): (num, steps, 1, 1), (2, 1): (1, CTC_ACCURACY_VALUES, 1, 1)}
    key = (len(q.bottoms), len(q.layer.tops))
    q.check(key in uses, f"{key[0]} bottom(s) and {key[1]} top(s): the fork's CTCGreedyDecoder shapes only scores -> sequences (1, 1) and scores, label -> accuracy (2, 1)")
    return LayerShapes(tops=(uses[key],))


def _warp_ctc_workspace(q: MemoryQuery) -> int:
    """get_workspace_size (ctcpp_entrypoint.cpp) in bytes for the 2-bottom use, with maxT =
    T and maxL at its most, the label's L (the non-blank labels of the longest line: data).
    S = 2 maxL + 1.  CPU: per item C + S T + S values and 3 S ints, plus C T N values.  GPU:
    2 N values, 4 N ints, maxL N and S N ints, S T N + T N + C T N values."""
    steps, num, classes = q.bottoms[0][:3]
    longest = q.bottoms[1][1] if len(q.bottoms[1]) > 1 else 1
    s = 2 * longest + 1
    value = 4  # a float (Dtype) or an int
    if q.device == "gpu":
        return value * (2 * num + 4 * num + longest * num + s * num + s * steps * num + steps * num + classes * steps * num)
    return value * (num * (classes + s * steps + s + 3 * s) + classes * steps * num)


def _warp_ctc_loss_memory(q: MemoryQuery) -> LayerMemory:
    """warp_ctc_loss_layer.cpp/.cu.  Forward reads the scores and the label (on the host
    in both), writes the scores' *diff* (warp-ctc computes the gradients with the loss),
    allocates the workspace, a bare SyncedMemory of get_workspace_size bytes (host or
    card, as the run), and writes the loss.  Backward only CHECKs propagate_down.  The
    workspace's size follows the longest label line, data caffemem cannot see: it is
    counted at the label's full length L, an upper bound, and a note says so."""
    workspace = q.buffer("workspace")
    size = _warp_ctc_workspace(q)
    forward = (read(q.bottom(0)), read(q.bottom(1), side="host"), write(q.bottom(0), "diff"), Alloc(workspace, size // 4, device=q.device == "gpu"), write(q.top(0), side="host"))
    note = f"layer '{q.layer.name}' (WarpCTCLoss): its warp-ctc workspace ({size} B) is counted for labels of {q.bottoms[1][1] if len(q.bottoms[1]) > 1 else 1} non-blank classes, the most the label holds; shorter lines take less"
    return LayerMemory(forward=forward, notes=(note,))


@layer(
    "WarpCTCLoss",
    FAMILY,
    bottoms=Arity(2, 4),
    tops=Arity.exactly(1),
    auto_top=True,
    no_force_backward=(1, 2, 3),
    source=OCR_FILES.format("warp_ctc_loss_layer.cpp/.cu, ctcpp_entrypoint.cpp, include/caffe/layers/warp_ctc_loss_layer.hpp"),
    memory=_warp_ctc_loss_memory,
    recompute=LOSS,
)
def _warp_ctc_loss(q: ShapeQuery) -> LayerShapes:
    """CTC loss of T x N x C scores (width 1) against the N x L label: a scalar.

    LayerSetUp CHECKs width() == 1 and the label's num == N.  Only the 2-bottom form of
    the fork's nets is modelled (3 and 4 bottoms take sequence indicators or lengths).
    """
    steps, num = _sequence(q, "WarpCTCLoss")[:2]
    q.check(len(q.bottoms[0]) == 3 or q.bottoms[0][3] == 1, f"the scores {format_shape(q.bottoms[0])} must have width 1 (CHECK_EQ(probs->width(), 1))")
    q.check(len(q.bottoms) == 2, f"{len(q.bottoms)} bottoms: caffemem models the fork's 2-bottom WarpCTCLoss (scores, label), as its nets use it")
    label = q.bottoms[1]
    q.check(bool(label) and label[0] == num, f"the label {format_shape(label)} must have the scores' N = {num} on axis 0 (CHECK_EQ(N_, label_seq->num()))")
    return LayerShapes(tops=((),))
