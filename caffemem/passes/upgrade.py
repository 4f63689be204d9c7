"""Bring old net and solver definitions to the current format, exactly as Caffe does.

Caffe never builds a net from a V0 (``layers { layer { type: "conv" } }``) or V1
(``layers { type: CONVOLUTION }``) definition: ``ReadNetParamsFromTextFileOrDie`` first
runs ``UpgradeNetAsNeeded`` (src/caffe/util/upgrade_proto.cpp), and the solver reader
runs ``UpgradeSolverAsNeeded``.  Every later pass of caffemem reads only the current
format, so the estimate is only right if this pass produces what Caffe's upgrade
produces: the same layers, in the same order, with the same names, types, blobs and
parameters.  That is why the steps, their order and their odd corners (which fields a
V0 layer loses, where the Input layer goes, what happens to BatchNorm param specs)
follow Caffe's code rather than what would look tidier.

Where Caffe's upgrade aborts (``LOG(FATAL)``/``CHECK``), this raises
:class:`CaffememError`.  Where Caffe only logs an error and goes on with the
field dropped, this goes on the same way and says so in the returned notes.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor

from caffemem.errors import CaffememError, Location
from caffemem.schema import caffe_pb2, is_repeated

__all__ = [
    "SOLVER_TYPE_NAMES",
    "V0_LAYER_TYPES",
    "V1_LAYER_TYPE_NAMES",
    "net_needs_batch_norm_upgrade",
    "net_needs_data_upgrade",
    "net_needs_hole_upgrade",
    "net_needs_input_upgrade",
    "net_needs_upgrade",
    "net_needs_v0_to_v1_upgrade",
    "net_needs_v1_to_v2_upgrade",
    "solver_needs_type_upgrade",
    "upgrade_net",
    "upgrade_solver",
]

# Caffe's UpgradeV1LayerType: V1 enum name -> current string type.  Keyed by enum
# name (not number) so a schema that renumbers nothing still maps by meaning.
V1_LAYER_TYPE_NAMES: dict[str, str] = {
    "NONE": "",
    "ABSVAL": "AbsVal",
    "ACCURACY": "Accuracy",
    "ARGMAX": "ArgMax",
    "BNLL": "BNLL",
    "CONCAT": "Concat",
    "CONTRASTIVE_LOSS": "ContrastiveLoss",
    "CONVOLUTION": "Convolution",
    "DECONVOLUTION": "Deconvolution",
    "DATA": "Data",
    "DROPOUT": "Dropout",
    "DUMMY_DATA": "DummyData",
    "EUCLIDEAN_LOSS": "EuclideanLoss",
    "ELTWISE": "Eltwise",
    "EXP": "Exp",
    "FLATTEN": "Flatten",
    "HDF5_DATA": "HDF5Data",
    "HDF5_OUTPUT": "HDF5Output",
    "HINGE_LOSS": "HingeLoss",
    "IM2COL": "Im2col",
    "IMAGE_DATA": "ImageData",
    "INFOGAIN_LOSS": "InfogainLoss",
    "INNER_PRODUCT": "InnerProduct",
    "LRN": "LRN",
    "MEMORY_DATA": "MemoryData",
    "MULTINOMIAL_LOGISTIC_LOSS": "MultinomialLogisticLoss",
    "MVN": "MVN",
    "POOLING": "Pooling",
    "POWER": "Power",
    "RELU": "ReLU",
    "SIGMOID": "Sigmoid",
    "SIGMOID_CROSS_ENTROPY_LOSS": "SigmoidCrossEntropyLoss",
    "SILENCE": "Silence",
    "SOFTMAX": "Softmax",
    "SOFTMAX_LOSS": "SoftmaxWithLoss",
    "SPLIT": "Split",
    "SLICE": "Slice",
    "TANH": "TanH",
    "WINDOW_DATA": "WindowData",
    "THRESHOLD": "Threshold",
    # DeepLab v1 (deeplab-public; TheLegendAli/DeepLab-Context@fb04e9e2 keeps its
    # sources): the types its layers register, renamed as deeplab-public-ver2
    # registers them (REGISTER_LAYER_CLASS(ImageSegData) etc.).
    "IMAGE_SEG_DATA": "ImageSegData",
    "SEG_ACCURACY": "SegAccuracy",
    "INTERP": "Interp",
    "MAT_WRITE": "MatWrite",
    "PADDING": "Padding",  # v1's padding_layer.cpp
    # C3D: facebook/C3D C3D-v1.0 (V1 is its own format; C3D-v1.1 names the same layers so).
    "CONVOLUTION3D": "Convolution3D",
    "POOLING3D": "Pooling3D",
    "VIDEO_DATA": "VideoData",
    "DECONVOLUTION3D": "Deconvolution3D",
    # C3D-v1.0's video-to-video layers (examples/v2v), which C3D-v1.1 dropped: named after
    # their classes (layers/fork_v2v.py).
    "VIDEO_WITH_VOXEL_TRUTH_DATA": "VideoWithVoxelTruthData",
    "VIDEO_SEGMENTATION_DATA": "VideoSegmentationData",
    "VOXEL_SOFTMAX": "VoxelWiseSoftmax",
    "VOXEL_SOFTMAX_LOSS": "VoxelWiseSoftmaxWithLoss",
}

# Caffe's UpgradeV0LayerType: V0 type string -> V1 enum name.  "padding" is not here:
# padding layers are folded away before types are mapped.
V0_LAYER_TYPES: dict[str, str] = {
    "accuracy": "ACCURACY",
    "bnll": "BNLL",
    "concat": "CONCAT",
    "conv": "CONVOLUTION",
    "data": "DATA",
    "dropout": "DROPOUT",
    "euclidean_loss": "EUCLIDEAN_LOSS",
    "flatten": "FLATTEN",
    "hdf5_data": "HDF5_DATA",
    "hdf5_output": "HDF5_OUTPUT",
    "im2col": "IM2COL",
    "images": "IMAGE_DATA",
    "infogain_loss": "INFOGAIN_LOSS",
    "innerproduct": "INNER_PRODUCT",
    "lrn": "LRN",
    "multinomial_logistic_loss": "MULTINOMIAL_LOGISTIC_LOSS",
    "pool": "POOLING",
    "relu": "RELU",
    "sigmoid": "SIGMOID",
    "softmax": "SOFTMAX",
    "softmax_loss": "SOFTMAX_LOSS",
    "split": "SPLIT",
    "tanh": "TANH",
    "window_data": "WINDOW_DATA",
}

# Caffe's UpgradeSolverType: SolverParameter.SolverType enum name -> `type` string.
SOLVER_TYPE_NAMES: dict[str, str] = {
    "SGD": "SGD",
    "NESTEROV": "Nesterov",
    "ADAGRAD": "AdaGrad",
    "RMSPROP": "RMSProp",
    "ADADELTA": "AdaDelta",
    "ADAM": "Adam",
}

# The V1 layer fields that hold one layer-specific parameter message; Caffe copies each
# one that is present into the current LayerParameter under the same name.
_V1_PARAM_MESSAGES: tuple[str, ...] = (
    "accuracy_param",
    "argmax_param",
    "concat_param",
    "contrastive_loss_param",
    "convolution_param",
    "data_param",
    "dropout_param",
    "dummy_data_param",
    "eltwise_param",
    "exp_param",
    "hdf5_data_param",
    "hdf5_output_param",
    "hinge_loss_param",
    "image_data_param",
    "infogain_loss_param",
    "inner_product_param",
    "lrn_param",
    "memory_data_param",
    "mvn_param",
    "pooling_param",
    "power_param",
    "relu_param",
    "sigmoid_param",
    "softmax_param",
    "slice_param",
    "tanh_param",
    "threshold_param",
    "window_data_param",
    "transform_param",
    "loss_param",
    # DeepLab v1's.
    "interp_param",
    "seg_accuracy_param",
    "mat_write_param",
    "softmaxloss_param",
    "padding_param",
)

# Old data layers that kept transformation fields in their own parameter message.
_DATA_TRANSFORM_LAYERS: tuple[tuple[str, str], ...] = (
    ("DATA", "data_param"),
    ("IMAGE_DATA", "image_data_param"),
    ("WINDOW_DATA", "window_data_param"),
    # C3D-v1.0's VIDEO_DATA reads scale, mean_file, crop_size and mirror from
    # image_data_param (video_data_layer.cpp); C3D-v1.1's VideoData from transform_param.
    ("VIDEO_DATA", "image_data_param"),
)
_TRANSFORM_FIELDS: tuple[str, ...] = ("scale", "mean_file", "crop_size", "mirror")


# --------------------------------------------------------------------------- helpers


def _copy(message: Any) -> Any:
    duplicate = type(message)()
    duplicate.CopyFrom(message)
    return duplicate


def _v1_type_value(enum_name: str) -> int:
    return caffe_pb2.V1LayerParameter.LayerType.Value(enum_name)


def _v1_type_name(layer: Any) -> str | None:
    """The V1 enum name of a V1 layer's type, or None if it has none set."""
    if not layer.HasField("type"):
        return None
    try:
        return caffe_pb2.V1LayerParameter.LayerType.Name(layer.type)
    except ValueError:
        return f"<{layer.type}>"


# --------------------------------------------------------------------------- detection


def net_needs_v0_to_v1_upgrade(net: caffe_pb2.NetParameter) -> bool:
    """Caffe's NetNeedsV0ToV1Upgrade: some ``layers`` entry wraps a V0 ``layer``."""
    return any(layer.HasField("layer") for layer in net.layers)


def net_needs_v1_to_v2_upgrade(net: caffe_pb2.NetParameter) -> bool:
    """Caffe's NetNeedsV1ToV2Upgrade: the net uses ``layers`` at all."""
    return len(net.layers) > 0


def net_needs_data_upgrade(net: caffe_pb2.NetParameter) -> bool:
    """Caffe's NetNeedsDataUpgrade: a V1 data layer keeps transformation fields in its own params."""
    for layer in net.layers:
        kind = _v1_type_name(layer)
        for v1_type, param_field in _DATA_TRANSFORM_LAYERS:
            if kind == v1_type:
                params = getattr(layer, param_field)
                if any(params.HasField(name) for name in _TRANSFORM_FIELDS):
                    return True
    return False


def net_needs_input_upgrade(net: caffe_pb2.NetParameter) -> bool:
    """Caffe's NetNeedsInputUpgrade: the net declares top-level ``input`` blobs."""
    return len(net.input) > 0


def net_needs_batch_norm_upgrade(net: caffe_pb2.NetParameter) -> bool:
    """Caffe's NetNeedsBatchNormUpgrade: a BatchNorm layer lists exactly three param specs."""
    return any(layer.type == "BatchNorm" and len(layer.param) == 3 for layer in net.layer)


_HOLE_FIELDS = ("hole", "hole_h", "hole_w")


def net_needs_hole_upgrade(net: caffe_pb2.NetParameter) -> bool:
    """A convolution written with DeepLab v1's ``hole`` fields (deeplab-public's atrous
    convolution: TheLegendAli/DeepLab-Context@fb04e9e2 src/caffe/layers/conv_layer.cpp),
    which master Caffe spells ``dilation``."""
    return any(
        any(layer.convolution_param.HasField(name) for name in _HOLE_FIELDS)
        for layer in list(net.layer) + list(net.layers)
    )


def net_needs_upgrade(net: caffe_pb2.NetParameter) -> bool:
    """Caffe's NetNeedsUpgrade: any of the net upgrades applies (and DeepLab's holes)."""
    return (
        net_needs_v0_to_v1_upgrade(net)
        or net_needs_v1_to_v2_upgrade(net)
        or net_needs_data_upgrade(net)
        or net_needs_input_upgrade(net)
        or net_needs_batch_norm_upgrade(net)
        or net_needs_hole_upgrade(net)
    )


def solver_needs_type_upgrade(solver: caffe_pb2.SolverParameter) -> bool:
    """Caffe's SolverNeedsTypeUpgrade: the deprecated ``solver_type`` enum is set."""
    return solver.HasField("solver_type")


# --------------------------------------------------------------------------- V0 -> V1


def _fold_v0_padding_layers(net: Any, file: str | None, notes: list[str]) -> Any:
    """Caffe's UpgradeV0PaddingLayers: drop "padding" layers, moving their pad into the consumer.

    V0 had a separate padding layer in front of a conv or pool layer; V1 has a ``pad``
    field on the conv/pool layer itself.  The consumer then reads the padding layer's
    input directly.
    """
    folded = _copy(net)
    del folded.layers[:]
    # blob name -> index (in the original net) of the layer that last wrote it; -1 for
    # a net input.
    last_writer: dict[str, int] = {name: -1 for name in net.input}
    for index, connection in enumerate(net.layers):
        v0 = connection.layer
        if v0.type != "padding":
            folded.layers.add().CopyFrom(connection)
        for j, blob in enumerate(connection.bottom):
            if blob not in last_writer:
                raise CaffememError(
                    f"bottom blob '{blob}' is not produced by any earlier layer or net input; "
                    "Caffe cannot upgrade this V0 net (check the spelling, or the order of the layers)",
                    Location(file=file, layer=v0.name or None, layer_type=v0.type or None),
                )
            source_index = last_writer[blob]
            if source_index == -1:
                continue
            source = net.layers[source_index]
            if source.layer.type != "padding":
                continue
            where = Location(file=file, layer=v0.name or None, layer_type=v0.type or None)
            if v0.type not in ("conv", "pool"):
                raise CaffememError(
                    f"V0 padding layer '{source.layer.name}' feeds a layer of type '{v0.type}'; Caffe "
                    "can only fold a padding layer into the conv or pool layer that follows it "
                    "(put the pad on that layer instead)",
                    where,
                )
            if len(connection.bottom) != 1:
                raise CaffememError(
                    f"a layer that reads V0 padding layer '{source.layer.name}' must have exactly one "
                    f"bottom, but it has {len(connection.bottom)}",
                    where,
                )
            if len(source.bottom) != 1 or len(source.top) != 1:
                raise CaffememError(
                    "a V0 padding layer must have exactly one bottom and one top, but it has "
                    f"{len(source.bottom)} and {len(source.top)}",
                    Location(file=file, layer=source.layer.name or None, layer_type="padding"),
                )
            consumer = folded.layers[len(folded.layers) - 1]
            consumer.layer.pad = source.layer.pad
            consumer.bottom[j] = source.bottom[0]
            notes.append(
                f"folded V0 padding layer '{source.layer.name}' (pad {source.layer.pad}) into "
                f"{v0.type} layer '{v0.name}'"
            )
        for blob in connection.top:
            last_writer[blob] = index
    return folded


def _v0_param_target(
    v0_type: str,
    field: str,
    targets: dict[str, tuple[str, str]],
    layer_name: str,
    notes: list[str],
) -> tuple[str, str] | None:
    """Which V1 parameter message a V0 field goes to for this layer type; None (and a note) if none."""
    target = targets.get(v0_type)
    if target is None:
        notes.append(
            f"warning: V0 layer '{layer_name}' of type '{v0_type}' has parameter '{field}', which "
            "Caffe does not know for that type; it was dropped, as Caffe does"
        )
    return target


# V0 field -> {V0 layer type -> (V1 parameter message, field in it)}, in the order Caffe
# handles them.  A target that is repeated in the current proto (convolution pad,
# kernel_size, stride) gets the value appended.  An empty map means "any type": those
# are the transformation fields, which always go to transform_param.
_V0_SCALAR_FIELDS: dict[str, dict[str, tuple[str, str]]] = {
    "num_output": {
        "conv": ("convolution_param", "num_output"),
        "innerproduct": ("inner_product_param", "num_output"),
    },
    "biasterm": {
        "conv": ("convolution_param", "bias_term"),
        "innerproduct": ("inner_product_param", "bias_term"),
    },
    "weight_filler": {
        "conv": ("convolution_param", "weight_filler"),
        "innerproduct": ("inner_product_param", "weight_filler"),
    },
    "bias_filler": {
        "conv": ("convolution_param", "bias_filler"),
        "innerproduct": ("inner_product_param", "bias_filler"),
    },
    "pad": {"conv": ("convolution_param", "pad"), "pool": ("pooling_param", "pad")},
    "kernelsize": {"conv": ("convolution_param", "kernel_size"), "pool": ("pooling_param", "kernel_size")},
    "group": {"conv": ("convolution_param", "group")},
    "stride": {"conv": ("convolution_param", "stride"), "pool": ("pooling_param", "stride")},
    "pool": {"pool": ("pooling_param", "pool")},
    "dropout_ratio": {"dropout": ("dropout_param", "dropout_ratio")},
    "local_size": {"lrn": ("lrn_param", "local_size")},
    "alpha": {"lrn": ("lrn_param", "alpha")},
    "beta": {"lrn": ("lrn_param", "beta")},
    "k": {"lrn": ("lrn_param", "k")},
    "source": {
        "data": ("data_param", "source"),
        "hdf5_data": ("hdf5_data_param", "source"),
        "images": ("image_data_param", "source"),
        "window_data": ("window_data_param", "source"),
        "infogain_loss": ("infogain_loss_param", "source"),
    },
    # Transformation fields go to transform_param whatever the layer type.
    "scale": {},
    "meanfile": {},
    "batchsize": {
        "data": ("data_param", "batch_size"),
        "hdf5_data": ("hdf5_data_param", "batch_size"),
        "images": ("image_data_param", "batch_size"),
        "window_data": ("window_data_param", "batch_size"),
    },
    "cropsize": {},
    "mirror": {},
    "rand_skip": {"data": ("data_param", "rand_skip"), "images": ("image_data_param", "rand_skip")},
    "shuffle_images": {"images": ("image_data_param", "shuffle")},
    "new_height": {"images": ("image_data_param", "new_height")},
    "new_width": {"images": ("image_data_param", "new_width")},
    "concat_dim": {"concat": ("concat_param", "concat_dim")},
    "det_fg_threshold": {"window_data": ("window_data_param", "fg_threshold")},
    "det_bg_threshold": {"window_data": ("window_data_param", "bg_threshold")},
    "det_fg_fraction": {"window_data": ("window_data_param", "fg_fraction")},
    "det_context_pad": {"window_data": ("window_data_param", "context_pad")},
    "det_crop_mode": {"window_data": ("window_data_param", "crop_mode")},
    "hdf5_output_param": {"hdf5_output": ("hdf5_output_param", "")},
}

# V0 fields that land in transform_param for every layer type.
_V0_TRANSFORM_FIELDS: dict[str, str] = {
    "scale": "scale",
    "meanfile": "mean_file",
    "cropsize": "crop_size",
    "mirror": "mirror",
}

# V0 fields Caffe's upgrade ignores without a word (they have no V1 counterpart).
_V0_SILENTLY_DROPPED: tuple[str, ...] = ("new_num", "new_channels")


def _set_field(message: Any, field: str, value: Any) -> None:
    """Set (or, for a repeated field, append to) `field`; copy sub-messages."""
    descriptor = message.DESCRIPTOR.fields_by_name[field]
    repeated = is_repeated(descriptor)
    value = _converted(value, descriptor.cpp_type)
    if repeated:
        getattr(message, field).append(value)
    elif descriptor.message_type is not None:
        getattr(message, field).CopyFrom(value)
    else:
        setattr(message, field, value)


# C++ integer types by protobuf cpp_type: (bits, signed).
_INTEGER_TYPES = {
    FieldDescriptor.CPPTYPE_INT32: (32, True),
    FieldDescriptor.CPPTYPE_UINT32: (32, False),
    FieldDescriptor.CPPTYPE_INT64: (64, True),
    FieldDescriptor.CPPTYPE_UINT64: (64, False),
}


def _converted(value: Any, cpp_type: int) -> Any:
    """A value copied between fields of different integer types (V0 int32 ``pad`` into V1
    uint32 ``pad``) as C++'s implicit conversion does: modulo 2^bits, never an exception."""
    if cpp_type not in _INTEGER_TYPES or isinstance(value, bool) or not isinstance(value, int):
        return value
    bits, signed = _INTEGER_TYPES[cpp_type]
    value %= 2**bits
    return value - 2**bits if signed and value >= 2 ** (bits - 1) else value


def _upgrade_v0_layer(connection: Any, file: str | None, notes: list[str]) -> Any:
    """Caffe's UpgradeV0LayerParameter: one ``layers { layer { ... } }`` entry -> a V1 layer.

    Only bottoms and tops come from the outer entry; everything else from the V0 layer.
    A parameter the V0 layer's type does not use is dropped (Caffe logs an error).
    """
    v1 = caffe_pb2.V1LayerParameter()
    v1.bottom.extend(connection.bottom)
    v1.top.extend(connection.top)
    if not connection.HasField("layer"):
        if connection.name or connection.HasField("type"):
            notes.append(
                f"warning: layer '{connection.name}' is in V1 format inside a V0 net; Caffe keeps only "
                "its bottoms and tops, and so does caffemem"
            )
        return v1
    v0 = connection.layer
    kind = v0.type
    name = v0.name
    if v0.HasField("name"):
        v1.name = name
    if v0.HasField("type"):
        if kind not in V0_LAYER_TYPES:
            known = ", ".join(sorted(V0_LAYER_TYPES))
            raise CaffememError(
                f"unknown V0 layer type '{kind}'; Caffe's upgrade knows only: {known}",
                Location(file=file, layer=name or None, layer_type=kind or None),
            )
        v1.type = _v1_type_value(V0_LAYER_TYPES[kind])
    for blob in v0.blobs:
        v1.blobs.add().CopyFrom(blob)
    v1.blobs_lr.extend(v0.blobs_lr)
    v1.weight_decay.extend(v0.weight_decay)

    for field, targets in _V0_SCALAR_FIELDS.items():
        if not v0.HasField(field):
            continue
        value = getattr(v0, field)
        if field in _V0_TRANSFORM_FIELDS:
            _set_field(v1.transform_param, _V0_TRANSFORM_FIELDS[field], value)
            continue
        target = _v0_param_target(kind, field, targets, name, notes)
        if target is None:
            continue
        param_message_name, param_field = target
        param_message = getattr(v1, param_message_name)
        if field == "hdf5_output_param":
            param_message.CopyFrom(value)
        elif field == "pool":
            pool_name = caffe_pb2.V0LayerParameter.PoolMethod.Name(value)
            param_message.pool = caffe_pb2.PoolingParameter.PoolMethod.Value(pool_name)
        else:
            _set_field(param_message, param_field, value)
    for field in _V0_SILENTLY_DROPPED:
        if v0.HasField(field):
            notes.append(
                f"warning: V0 layer '{name}' sets '{field}', which has no counterpart in later formats; "
                "Caffe drops it, and so does caffemem"
            )
    return v1


def _upgrade_v0_net(net: Any, file: str | None, notes: list[str]) -> Any:
    """Caffe's UpgradeV0Net: fold padding layers, then upgrade each V0 layer to V1.

    Caffe builds the V1 net from scratch and carries over only the net's name, inputs,
    input_dim and force_backward: anything else at top level is lost.
    """
    padded = _fold_v0_padding_layers(net, file, notes)
    upgraded = caffe_pb2.NetParameter()
    if padded.HasField("name"):
        upgraded.name = padded.name
    for connection in padded.layers:
        upgraded.layers.add().CopyFrom(_upgrade_v0_layer(connection, file, notes))
    upgraded.input.extend(padded.input)
    upgraded.input_dim.extend(padded.input_dim)
    if padded.HasField("force_backward"):
        upgraded.force_backward = padded.force_backward
    lost = [
        field
        for field in ("input_shape", "state", "debug_info", "layer")
        if (len(getattr(padded, field)) if field in ("input_shape", "layer") else padded.HasField(field))
    ]
    if lost:
        notes.append(
            "warning: Caffe's V0 upgrade keeps only name, layers, input, input_dim and force_backward; "
            f"it dropped: {', '.join(lost)}"
        )
    return upgraded


# --------------------------------------------------------------------------- data transform


def _upgrade_data_transformation(net: Any, notes: list[str]) -> None:
    """Caffe's UpgradeNetDataTransformation, in place on `net` (a private copy).

    Old Data/ImageData/WindowData layers kept scale, mean_file, crop_size and mirror in
    their own parameter message; they now live in transform_param.  Like Caffe, every
    layer of those types ends up with both messages present, even if nothing moved.
    """
    for layer in net.layers:
        kind = _v1_type_name(layer)
        for v1_type, param_field in _DATA_TRANSFORM_LAYERS:
            if kind != v1_type:
                continue
            params = getattr(layer, param_field)
            params.SetInParent()
            layer.transform_param.SetInParent()
            moved = []
            for name in _TRANSFORM_FIELDS:
                if params.HasField(name):
                    setattr(layer.transform_param, name, getattr(params, name))
                    params.ClearField(name)
                    moved.append(name)
            if moved:
                notes.append(
                    f"moved data transformation fields ({', '.join(moved)}) of layer '{layer.name}' "
                    f"from {param_field} to transform_param"
                )


# --------------------------------------------------------------------------- V1 -> V2

# C3D-v1.0 (facebook/C3D C3D-v1.0/src/caffe/layers/*3d*, video_data_layer.cpp) keeps
# its 3-D geometry in master's parameter messages; C3D-v1.1 gave the same layers
# messages of their own.  C3D never upgrades a V1 net (V1 is C3D-v1.0's own format), so
# this step is caffemem's: it moves the fields by name, so that a C3D-v1.0 net is read
# as C3D-v1.1 runs the same layers (C3D-v1.1 is that code on a current Caffe; v1.0's
# 2014 Blob, whose allocations caffemem does not model, differs only in bookkeeping --
# and in VIDEO_DATA's label, [batch, 1, 1, 1, 1] there, [batch] in v1.1).
_C3D_PARAM_MOVES: dict[str, tuple[str, str]] = {
    "CONVOLUTION3D": ("convolution_param", "convolution3d_param"),
    "DECONVOLUTION3D": ("convolution_param", "convolution3d_param"),
    "POOLING3D": ("pooling_param", "pooling3d_param"),
    "VIDEO_DATA": ("image_data_param", "video_data_param"),
}
# C3D-v1.0 ImageDataParameter fields its VIDEO_DATA layer does not read (its voxel and
# segmentation data layers do): dropped with a note.
_C3D_UNREAD_VIDEO_FIELDS = frozenset({"use_label", "num_truth_channels", "use_byte_input", "is_flow", "truth_scale", "clip_min", "clip_max"})


def _move_c3d_params(enum_name: str, v1: Any, layer: Any, file: str | None, notes: list[str]) -> None:
    """Move a C3D-v1.0 layer's fields into the message C3D-v1.1 reads (see _C3D_PARAM_MOVES).

    A repeated master field (convolution pad, kernel_size, stride) takes its one value; a
    field C3D-v1.0's message never had is refused, since C3D-v1.0 could not parse it.
    VIDEO_DATA: a single mean_value goes to transform_param (C3D-v1.0 uses it only
    without a mean_file); new_length and use_image are always written, so that
    new_length's CHECK sees C3D-v1.0's default 0 and the VideoData rule reads the layer
    as C3D's.  DECONVOLUTION3D keeps bias_term in convolution_param too, where C3D-v1.1's
    deconvolution3d_layer.cpp reads it.
    """
    source_name, target_name = _C3D_PARAM_MOVES[enum_name]
    source, target = _copy(getattr(layer, source_name)), getattr(layer, target_name)
    where = Location(file=file, layer=v1.name or None, layer_type=enum_name)
    target.SetInParent()
    for field, value in source.ListFields():
        name = field.name
        if enum_name == "VIDEO_DATA" and name in _C3D_UNREAD_VIDEO_FIELDS:
            notes.append(f"warning: layer '{v1.name}' sets image_data_param.{name}, which C3D's VIDEO_DATA does not read; ignored")
            continue
        if enum_name == "VIDEO_DATA" and name == "mean_value":
            if not layer.transform_param.mean_file:
                layer.transform_param.mean_value.append(value)
            continue
        into = target.DESCRIPTOR.fields_by_name.get(name)
        if into is None:
            raise CaffememError(
                f"{source_name}.{name} is not a field C3D-v1.0's {enum_name} has "
                f"(it reads {', '.join(sorted(target.DESCRIPTOR.fields_by_name))})",
                where,
            )
        if is_repeated(field):
            if len(value) > 1:
                raise CaffememError(f"{source_name}.{name} has {len(value)} values; C3D-v1.0's {enum_name} takes one", where)
            value = value[0]
        if into.enum_type is not None:
            value = into.enum_type.values_by_name[field.enum_type.values_by_number[value].name].number
        if into.message_type is not None:
            getattr(target, name).CopyFrom(value)
        else:
            setattr(target, name, type(getattr(target, name))(value))
    layer.ClearField(source_name)
    if enum_name == "VIDEO_DATA":
        target.new_length = source.new_length
        target.use_image = source.use_image
    if enum_name == "DECONVOLUTION3D" and source.HasField("bias_term"):
        layer.convolution_param.bias_term = source.bias_term
    notes.append(f"moved the C3D-v1.0 fields of layer '{v1.name}' from {source_name} to {target_name}")



def _upgrade_v1_layer(v1: Any, file: str | None, notes: list[str]) -> Any:
    """Caffe's UpgradeV1LayerParameter: one V1 ``layers`` entry -> a current ``layer``."""
    layer = caffe_pb2.LayerParameter()
    layer.bottom.extend(v1.bottom)
    layer.top.extend(v1.top)
    if v1.HasField("name"):
        layer.name = v1.name
    for rule in v1.include:
        layer.include.add().CopyFrom(rule)
    for rule in v1.exclude:
        layer.exclude.add().CopyFrom(rule)
    if v1.HasField("type"):
        enum_name = _v1_type_name(v1)
        if enum_name not in V1_LAYER_TYPE_NAMES:
            raise CaffememError(
                f"unknown V1 layer type {enum_name}; Caffe's upgrade cannot map it to a current type "
                '(write this layer as layer { type: "..." } instead)',
                Location(file=file, layer=v1.name or None, layer_type=enum_name),
            )
        layer.type = V1_LAYER_TYPE_NAMES[enum_name]
    for blob in v1.blobs:
        layer.blobs.add().CopyFrom(blob)

    def param_spec(i: int) -> Any:
        while len(layer.param) <= i:
            layer.param.add()
        return layer.param[i]

    for i, name in enumerate(v1.param):
        param_spec(i).name = name
    for i, mode in enumerate(v1.blob_share_mode):
        try:
            mode_name = caffe_pb2.V1LayerParameter.DimCheckMode.Name(mode)
            value = caffe_pb2.ParamSpec.DimCheckMode.Value(mode_name)
        except ValueError:
            raise CaffememError(
                f"unknown blob_share_mode {mode}; use STRICT or PERMISSIVE",
                Location(file=file, layer=v1.name or None, layer_type=layer.type or None),
            ) from None
        param_spec(i).share_mode = value
    for i, lr in enumerate(v1.blobs_lr):
        param_spec(i).lr_mult = lr
    for i, decay in enumerate(v1.weight_decay):
        param_spec(i).decay_mult = decay
    layer.loss_weight.extend(v1.loss_weight)
    for field in _V1_PARAM_MESSAGES:
        if v1.HasField(field):
            getattr(layer, field).CopyFrom(getattr(v1, field))
    if _v1_type_name(v1) in _C3D_PARAM_MOVES:
        _move_c3d_params(_v1_type_name(v1), v1, layer, file, notes)
    if v1.HasField("layer"):
        notes.append(f"warning: V1 layer '{v1.name}' still holds a V0 layer; Caffe ignores it, and so does caffemem")
    return layer


def _upgrade_v1_net(net: Any, file: str | None, notes: list[str]) -> Any:
    """Caffe's UpgradeV1Net: every ``layers`` entry becomes a ``layer``; the rest is kept."""
    if len(net.layer) > 0:
        raise CaffememError(
            "the net has both 'layer' and 'layers' entries; Caffe refuses to upgrade such a mix. "
            'Write every layer in the current format: layer { type: "Convolution" ... } rather '
            "than layers { type: CONVOLUTION ... }",
            Location(file=file),
        )
    upgraded = _copy(net)
    del upgraded.layers[:]
    del upgraded.layer[:]
    for v1 in net.layers:
        upgraded.layer.add().CopyFrom(_upgrade_v1_layer(v1, file, notes))
    _note_strict_dim(net, notes)
    _mark_deeplab_v1_softmax_loss(net, upgraded, notes)
    return upgraded


# What only DeepLab v1's V1 nets hold: its layer types and its fields (caffe.proto of
# TheLegendAli/DeepLab-Context@fb04e9e2).
_DEEPLAB_V1_TYPES = frozenset({"IMAGE_SEG_DATA", "SEG_ACCURACY", "INTERP", "MAT_WRITE", "PADDING"})
_DEEPLAB_V1_FIELDS = ("strict_dim", "softmaxloss_param", "interp_param", "seg_accuracy_param", "mat_write_param", "padding_param")


def _is_deeplab_v1(net: Any) -> bool:
    """A V1 net written for DeepLab v1: one of its layer types or fields, or a hole."""
    for v1 in net.layers:
        if _v1_type_name(v1) in _DEEPLAB_V1_TYPES or any(v1.HasField(name) for name in _DEEPLAB_V1_FIELDS):
            return True
        if v1.HasField("convolution_param") and any(v1.convolution_param.HasField(name) for name in _HOLE_FIELDS):
            return True
    return False


def _mark_deeplab_v1_softmax_loss(net: Any, upgraded: Any, notes: list[str]) -> None:
    """DeepLab v1's SOFTMAX_LOSS is its own SoftmaxWithLossLayer (softmax_loss_layer.cpp
    and .cu at fb04e9e2: class-weighted, run on the host), whatever options it is given:
    in a DeepLab v1 net each one gets ``softmaxloss_param`` (empty when the file gives
    none), which is how the SoftmaxWithLoss spec (caffemem/layers/loss.py) knows it."""
    if not _is_deeplab_v1(net):
        return
    marked = []
    for layer in upgraded.layer:
        if layer.type == "SoftmaxWithLoss":
            layer.softmaxloss_param.SetInParent()
            marked.append(f"'{layer.name}'")
    if marked:
        notes.append(f"SoftmaxWithLoss layer(s) {', '.join(marked)} are DeepLab v1's (this V1 net is DeepLab v1's): its layer code is counted")


def _note_strict_dim(net: Any, notes: list[str]) -> None:
    """DeepLab v1's ``strict_dim: false`` (TheLegendAli/DeepLab-Context@fb04e9e2
    src/caffe/net.cpp, Net::CopyTrainedLayersFrom) only relaxes the check made when
    pretrained weights are copied in: the counts must match, not num/channels/height/width
    (VGG's fully connected fc6/fc7 loaded into convolutions).  The layer's blobs keep the
    shapes its own SetUp gives, so nothing changes here; the current LayerParameter has no
    such field, and the upgrade says it dropped it."""
    relaxed = [v1.name for v1 in net.layers if v1.HasField("strict_dim") and not v1.strict_dim]
    if relaxed:
        names = ", ".join(f"'{name}'" for name in relaxed)
        notes.append(
            f"dropped DeepLab's strict_dim: false of layer(s) {names}: it only lets pretrained weights of the same count "
            "but another shape be loaded (net.cpp CopyTrainedLayersFrom); the parameter blobs and bytes are the layer's own"
        )


# --------------------------------------------------------------------------- DeepLab's holes


def _upgrade_hole(net: Any, file: str | None, notes: list[str]) -> None:
    """DeepLab v1's conv_layer.cpp: ``hole`` for both axes, or ``hole_h`` and ``hole_w``
    together (its CHECK), widen the kernel to k + (k - 1)(hole - 1), exactly as master's
    ``dilation`` does: the values move there, so one convolution rule serves both."""
    for layer in net.layer:
        param = layer.convolution_param
        if not any(param.HasField(name) for name in _HOLE_FIELDS):
            continue
        where = Location(file=file, layer=layer.name or None, layer_type=layer.type or None)
        if not ((not param.HasField("hole") and param.HasField("hole_h") and param.HasField("hole_w")) or not (param.HasField("hole_h") or param.HasField("hole_w"))):
            raise CaffememError("hole is hole OR hole_h and hole_w are required (DeepLab's conv_layer.cpp CHECK)", where)
        if len(param.dilation):
            raise CaffememError("the convolution sets both DeepLab's hole and dilation; give only one", where)
        holes = [param.hole_h, param.hole_w] if param.HasField("hole_h") else [param.hole]
        for name in _HOLE_FIELDS:
            param.ClearField(name)
        param.dilation.extend(holes)
        notes.append(f"moved DeepLab's hole {holes} of layer '{layer.name}' to dilation (the same atrous convolution)")


# --------------------------------------------------------------------------- inputs, BatchNorm


def _c3d_v10_input_dims(net: Any) -> int:
    """Values of input_dim per input: C3D-v1.0's net.cpp CHECKs 5 per input (its Blob is
    N, C, L, H, W) -- taken for a net with C3D-v1.0 layer types and exactly 5 per input;
    Caffe's 4 otherwise."""
    c3d = any(_v1_type_name(layer) in _C3D_PARAM_MOVES for layer in net.layers)
    return 5 if c3d and len(net.input_dim) == 5 * len(net.input) > 0 else 4


def _upgrade_input(net: Any, file: str | None, notes: list[str], dims_per_input: int = 4) -> Any:
    """Caffe's UpgradeNetInput: top-level input fields -> an Input layer named "input", first.

    With neither input_shape nor input_dim the inputs are only removed (Caffe treats that
    as a legacy weights file); a net that reads them then fails later for lack of a blob.
    ``dims_per_input`` is 5 for a C3D-v1.0 net, whose Net::Init reads N, C, L, H, W.
    """
    names = list(net.input)
    has_shape = len(net.input_shape) > 0
    has_dim = len(net.input_dim) > 0
    upgraded = _copy(net)
    upgraded.ClearField("input")
    upgraded.ClearField("input_shape")
    upgraded.ClearField("input_dim")
    if not (has_shape or has_dim):
        notes.append(
            f"removed top-level input {', '.join(repr(n) for n in names)} that had no input_shape or "
            "input_dim, as Caffe does: no layer produces it now"
        )
        return upgraded
    if has_shape and len(net.input_shape) < len(names):
        raise CaffememError(
            f"the net declares {len(names)} input blobs but only {len(net.input_shape)} input_shape "
            "entries; give one input_shape per input",
            Location(file=file),
        )
    if not has_shape and len(net.input_dim) < 4 * len(names):
        raise CaffememError(
            f"the net declares {len(names)} input blobs but {len(net.input_dim)} input_dim values; "
            "input_dim needs exactly four values (N, C, H, W) per input",
            Location(file=file),
        )
    if has_shape and len(net.input_shape) > len(names):
        notes.append(
            f"warning: {len(net.input_shape) - len(names)} input_shape entries have no input name; "
            "ignored, as Caffe does"
        )
    elif not has_shape and len(net.input_dim) > dims_per_input * len(names):
        notes.append(
            f"warning: {len(net.input_dim) - dims_per_input * len(names)} input_dim values have no input name; "
            "ignored, as Caffe does"
        )
    elif has_shape and has_dim:
        notes.append("warning: both input_shape and input_dim given; input_dim ignored, as Caffe does")

    input_layer = caffe_pb2.LayerParameter()
    input_layer.name = "input"
    input_layer.type = "Input"
    for i, name in enumerate(names):
        input_layer.top.append(name)
        shape = input_layer.input_param.shape.add()
        if has_shape:
            shape.CopyFrom(net.input_shape[i])
        else:
            shape.dim.extend(net.input_dim[dims_per_input * i : dims_per_input * (i + 1)])
    input_layer.input_param.SetInParent()
    existing = list(upgraded.layer)
    del upgraded.layer[:]
    upgraded.layer.add().CopyFrom(input_layer)
    for layer in existing:
        upgraded.layer.add().CopyFrom(layer)
    shapes = "; ".join(
        f"{name} {'x'.join(str(d) for d in shape.dim)}" for name, shape in zip(names, input_layer.input_param.shape)
    )
    notes.append(f"replaced top-level input fields by an Input layer named 'input' ({shapes})")
    return upgraded


def _upgrade_batch_norm(net: Any, notes: list[str]) -> None:
    """Caffe's UpgradeNetBatchNorm, in place on `net` (a private copy).

    Old BatchNorm definitions listed three param specs (usually lr_mult: 0) to keep the
    solver off its statistics; Caffe now forces lr_mult and decay_mult to 0 in each of
    them and keeps the rest (names for sharing).
    """
    for layer in net.layer:
        if layer.type == "BatchNorm" and len(layer.param) == 3:
            for spec in layer.param:
                spec.lr_mult = 0.0
                spec.decay_mult = 0.0
            notes.append(f"set lr_mult and decay_mult to 0 in the 3 param specs of BatchNorm layer '{layer.name}'")


# --------------------------------------------------------------------------- entry points


def upgrade_net(net: caffe_pb2.NetParameter, file: str | None = None) -> tuple[caffe_pb2.NetParameter, list[str]]:
    """Caffe's UpgradeNetAsNeeded on a copy of `net`: the current-format net and what changed.

    Later passes only understand the current format, and Caffe runs exactly these steps,
    in this order, before it builds any net read from a file.  `file` only goes into
    error locations.  Raises CaffememError where Caffe's upgrade would abort.  A net
    already current comes back as it is (nothing changes it later; a copy of a deep net
    costs as much memory as reading it).
    """
    notes: list[str] = []
    if not net_needs_upgrade(net):
        return net, notes
    current = _copy(net)
    dims_per_input = _c3d_v10_input_dims(current)
    if net_needs_v0_to_v1_upgrade(current):
        current = _upgrade_v0_net(current, file, notes)
        notes.insert(0, "upgraded V0 layers (layers { layer { ... } }) to V1 layers")
    if net_needs_data_upgrade(current):
        _upgrade_data_transformation(current, notes)
    if net_needs_v1_to_v2_upgrade(current):
        current = _upgrade_v1_net(current, file, notes)
        notes.append("upgraded V1 layers to the current format")
    if net_needs_input_upgrade(current):
        current = _upgrade_input(current, file, notes, dims_per_input)
    if net_needs_batch_norm_upgrade(current):
        _upgrade_batch_norm(current, notes)
    if net_needs_hole_upgrade(current):
        _upgrade_hole(current, file, notes)
    return current, notes


def upgrade_solver(
    solver: caffe_pb2.SolverParameter, file: str | None = None
) -> tuple[caffe_pb2.SolverParameter, list[str]]:
    """Caffe's UpgradeSolverAsNeeded on a copy of `solver`: the deprecated solver_type -> type.

    The solver type decides which history buffers the solver allocates, so it must be
    read as Caffe reads it.  Nets inside the solver (net_param, ...) are not upgraded
    here, since Caffe does not upgrade them either.  Raises CaffememError where Caffe aborts.
    """
    notes: list[str] = []
    current = _copy(solver)
    if solver_needs_type_upgrade(current):
        if current.HasField("type"):
            raise CaffememError(
                "the solver sets both the old 'solver_type' (enum) and the new 'type' (string); "
                "Caffe refuses this: keep only type",
                Location(file=file),
            )
        try:
            enum_name = caffe_pb2.SolverParameter.SolverType.Name(current.solver_type)
        except ValueError:
            enum_name = str(current.solver_type)
        if enum_name not in SOLVER_TYPE_NAMES:
            raise CaffememError(
                f"unknown solver_type {enum_name}; use type: with one of "
                + ", ".join(f'"{t}"' for t in SOLVER_TYPE_NAMES.values()),
                Location(file=file),
            )
        current.type = SOLVER_TYPE_NAMES[enum_name]
        current.ClearField("solver_type")
        notes.append(f'upgraded solver_type: {enum_name} to type: "{current.type}"')
    return current, notes
