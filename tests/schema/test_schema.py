"""Tests of the Caffe schema: proto/caffe.proto and caffemem/schema/."""

from __future__ import annotations

import csv
import hashlib
import struct
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # running from a checkout without installing
    sys.path.insert(0, str(ROOT))

from google.protobuf import descriptor_pb2, text_format  # noqa: E402

from caffemem.schema import caffe_pb2, forks, is_repeated, regenerate  # noqa: E402

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
MODELS = SHARED / "models"
MANIFEST = MODELS / "MANIFEST.tsv"
NO_SHARED = f"shared test corpus not found at {MODELS}"


# ---------------------------------------------------------------------------
# (a) the generated module matches proto/caffe.proto


def test_generated_module_is_not_stale():
    pytest.importorskip(
        "grpc_tools.protoc",
        reason="grpcio-tools not installed; it is part of the test extras",
    )
    fresh = regenerate.generate(regenerate.DEFAULT_PROTO)
    committed = regenerate.DEFAULT_OUTPUT.read_text(encoding="utf-8")
    reason = regenerate.stale_reason(committed, fresh)
    assert reason is None, f"{reason}; run: python -m caffemem.schema.regenerate"


def test_regenerate_check_flag(tmp_path):
    pytest.importorskip(
        "grpc_tools.protoc",
        reason="grpcio-tools not installed; it is part of the test extras",
    )
    out = tmp_path / "caffe_pb2.py"
    assert regenerate.main(["--check", "--output", str(out)]) == 1  # missing
    assert regenerate.main(["--output", str(out)]) == 0  # written
    assert regenerate.main(["--check", "--output", str(out)]) == 0
    out.write_text(out.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    assert regenerate.main(["--check", "--output", str(out)]) == 1
    assert regenerate.main(["--check", "--proto", str(tmp_path / "nope.proto")]) == 2


# ---------------------------------------------------------------------------
# (b) every real file in ../shared/models parses


def _manifest_rows():
    with MANIFEST.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def _corpus_params():
    if not MANIFEST.is_file():
        return [pytest.param(None, None, marks=pytest.mark.skip(reason=NO_SHARED), id="no-shared")]
    return [
        pytest.param(row["relative_path"], row["format"], id=row["relative_path"])
        for row in _manifest_rows()
    ]


def _message_for(fmt):
    return caffe_pb2.SolverParameter() if fmt == "solver" else caffe_pb2.NetParameter()


@pytest.mark.parametrize("relative_path,fmt", _corpus_params())
def test_shared_file_parses(relative_path, fmt):
    text = (MODELS / relative_path).read_text(encoding="utf-8")
    message = text_format.Parse(text, _message_for(fmt))
    if fmt == "solver":
        assert message.ListFields(), "solver parsed to an empty message"
    elif fmt == "v2":
        assert len(message.layer) > 0 and len(message.layers) == 0
    else:  # v1 and v0: legacy "layers"
        assert len(message.layers) > 0 and len(message.layer) == 0
        if fmt == "v0":
            assert all(l.HasField("layer") for l in message.layers)


@pytest.mark.skipif(not MANIFEST.is_file(), reason=NO_SHARED)
def test_manifest_lists_every_prototxt():
    listed = {row["relative_path"] for row in _manifest_rows()}
    on_disk = {p.relative_to(MODELS).as_posix() for p in MODELS.rglob("*.prototxt")}
    assert on_disk - listed == set(), "prototxt files missing from MANIFEST.tsv"
    assert {row["format"] for row in _manifest_rows()} <= {"v0", "v1", "v2", "solver"}


@pytest.mark.skipif(not MANIFEST.is_file(), reason=NO_SHARED)
def test_fork_fields_in_shared_files_land_where_expected():
    def parse(rel, cls=caffe_pb2.NetParameter):
        return text_format.Parse((MODELS / rel).read_text(encoding="utf-8"), cls())

    tsn = parse("tsn_ucf101/tsn_bn_inception_rgb_train_val.prototxt")
    video = next(l for l in tsn.layer if l.type == "VideoData")
    assert video.video_data_param.modality == caffe_pb2.VideoDataParameter.RGB
    assert video.video_data_param.num_segments == 3
    assert video.transform_param.fix_crop and video.transform_param.multi_scale
    bns = [l for l in tsn.layer if l.type == "BN"]
    assert bns and all(l.bn_param.HasField("slope_filler") for l in bns)
    assert any(l.bn_param.frozen for l in bns)

    solver = parse("tsn_ucf101/tsn_bn_inception_rgb_solver.prototxt", caffe_pb2.SolverParameter)
    assert list(solver.device_id) == [0, 1, 2, 3]
    assert solver.richness == 200

    segnet = parse("segnet/segnet_train.prototxt")
    bn = next(l for l in segnet.layer if l.type == "BN")
    assert bn.bn_param.HasField("scale_filler") and bn.bn_param.HasField("shift_filler")
    assert any(l.upsample_param.scale == 2 for l in segnet.layer if l.type == "Upsample")

    densenet = parse("densenet/DenseNet_121.prototxt")
    assert any(
        l.pooling_param.HasField("ceil_mode") and not l.pooling_param.ceil_mode
        for l in densenet.layer
    )

    c3d = parse("c3d_v1.1/train_simple.prototxt")
    conv = next(l for l in c3d.layer if l.type == "Convolution3D")
    assert conv.convolution3d_param.kernel_depth == 3
    vd = next(l for l in c3d.layer if l.type == "VideoData").video_data_param
    assert vd.new_length == 16 and vd.use_image and vd.root_folder

    ssd = parse("ssd_vgg16_voc0712_300x300/solver.prototxt", caffe_pb2.SolverParameter)
    assert ssd.eval_type == "detection" and ssd.ap_version == "11point"


@pytest.mark.skipif(not MANIFEST.is_file(), reason=NO_SHARED)
def test_largest_file_parses():
    # The largest file of the corpus (83 KB).  How fast it parses is not a test's business.
    text = (MODELS / "inception" / "deploy_inception-v3.prototxt").read_text(encoding="utf-8")
    net = text_format.Parse(text, caffe_pb2.NetParameter())
    assert len(net.layer) > 300


# ---------------------------------------------------------------------------
# (c) field numbers equal the real ones

FIELD_NUMBERS = [
    # BVLC master (a few)
    ("NetParameter", "layer", 100),
    ("NetParameter", "layers", 2),
    ("LayerParameter", "convolution_param", 106),
    ("LayerParameter", "input_param", 143),
    ("LayerParameter", "embed_param", 137),
    ("LayerParameter", "clip_param", 148),
    ("PoolingParameter", "round_mode", 13),
    ("SolverParameter", "snapshot_format", 37),
    ("SolverParameter", "weights", 42),
    ("V1LayerParameter", "blobs_lr", 7),
    ("V0LayerParameter", "kernelsize", 8),
    # memory multiloading (yjxiong/caffe action_recog) and our slot table
    ("NetParameter", "mem_param", 200),
    ("MemoryOptimizationParameter", "optimize_train", 1),
    ("MemoryOptimizationParameter", "optimize_test", 2),
    ("MemoryOptimizationParameter", "exclude_blob", 3),
    ("MemoryOptimizationParameter", "slot", 100),
    ("MemorySlot", "id", 1),
    ("MemorySlot", "bytes", 2),
    ("MemorySlot", "member", 3),
    ("MemorySlotMember", "blob", 1),
    ("MemorySlotMember", "kind", 2),
    # fork layer parameters
    ("LayerParameter", "bn_param", 152),  # PSPNet (yjxiong: 137 = embed_param)
    ("LayerParameter", "interp_param", 301),  # yjxiong/caffe@interp
    ("LayerParameter", "annotated_data_param", 200),
    ("LayerParameter", "multibox_loss_param", 201),
    ("LayerParameter", "permute_param", 202),
    ("LayerParameter", "prior_box_param", 203),
    ("LayerParameter", "detection_output_param", 204),
    ("LayerParameter", "norm_param", 206),
    ("LayerParameter", "video_data_param", 6660),
    ("LayerParameter", "convolution3d_param", 6661),
    ("LayerParameter", "pooling3d_param", 6662),
    ("LayerParameter", "roi_pooling_param", 8266711),
    ("LayerParameter", "smooth_l1_loss_param", 8266712),
    ("LayerParameter", "psroi_pooling_param", 10001),
    ("LayerParameter", "dense_image_data_param", 46),
    ("TransformationParameter", "resize_param", 8),
    ("TransformationParameter", "distort_param", 13),
    ("TransformationParameter", "flow", 1006),  # LRCN's 6 is master's force_color
    ("AnnotatedDataParameter", "yolo_data_type", 4),  # eric612/MobileNet-YOLO
    ("AnnotatedDataParameter", "yolo_data_jitter", 5),
    ("DropoutParameter", "sample_weights_test", 1002),  # SegNet's 2 is caffe-fast-rcnn's scale_train
    ("SolverParameter", "device_id", 18),
    # kept numbers of the fork fields added for issue 15
    ("DropoutParameter", "scale_train", 2),  # rbgirshick/caffe-fast-rcnn
    ("DenseImageDataParameter", "label_divide_factor", 13),  # TimoSaemann/caffe-enet
    ("ImageDataParameter", "use_image", 13),  # facebook/C3D C3D-v1.0
]


@pytest.mark.parametrize("message,field,number", FIELD_NUMBERS)
def test_field_number(message, field, number):
    fields = getattr(caffe_pb2, message).DESCRIPTOR.fields_by_name
    assert field in fields, f"{message}.{field} missing"
    assert fields[field].number == number


def test_memory_optimization_parameter_matches_fork():
    desc = caffe_pb2.MemoryOptimizationParameter.DESCRIPTOR.fields_by_name
    assert desc["optimize_train"].default_value is True
    assert desc["optimize_test"].default_value is False
    assert is_repeated(desc["exclude_blob"])  # (FieldDescriptor.label is gone in protobuf 7)
    assert desc["slot"].message_type.name == "MemorySlot"
    msg = caffe_pb2.MemoryOptimizationParameter()
    assert msg.optimize_train is True and msg.optimize_test is False


def test_fork_registry_matches_descriptors():
    for entry in forks.FORK_FIELDS:
        fields = getattr(caffe_pb2, entry.message).DESCRIPTOR.fields_by_name
        assert entry.field in fields, entry
        assert fields[entry.field].number == entry.number, entry
        if entry.relocated:
            assert entry.note, f"relocated without a note: {entry}"
    for name, source in forks.FORK_MESSAGES.items():
        assert hasattr(caffe_pb2, name), name
        assert source in forks.SOURCE_COMMITS or source == forks.CAFFEMEM
    for entry in forks.FORK_FIELDS:
        assert entry.source in forks.SOURCE_COMMITS or entry.source == forks.CAFFEMEM
    for entry in forks.FORK_ENUM_VALUES:
        message, enum = entry.enum.split(".")
        enum_type = getattr(caffe_pb2, message).DESCRIPTOR.enum_types_by_name[enum]
        assert enum_type.values_by_name[entry.name].number == entry.number, entry
        assert entry.source in forks.SOURCE_COMMITS
        if entry.number != entry.source_number:
            assert entry.note, f"relocated without a note: {entry}"
    for path, source in forks.FORK_ENUMS.items():
        message, enum = path.split(".")
        assert enum in getattr(caffe_pb2, message).DESCRIPTOR.enum_types_by_name, path
        assert source in forks.SOURCE_COMMITS
    for message, field in forks.MASTER_DEVIATIONS:
        assert forks.is_master(message, field)
    for value in forks.FORK_ENUM_VALUES:
        message, enum = value.enum.split(".")
        assert getattr(caffe_pb2, message).DESCRIPTOR.enum_types_by_name[enum].values_by_name[value.name].number == value.number, value
        assert value.source in forks.SOURCE_COMMITS and (value.number == value.source_number or value.note), value
    assert not forks.is_master("LayerParameter", "bn_param")
    assert not forks.is_master("BNParameter")
    assert forks.is_master("LayerParameter", "convolution_param")


# Digest of every BVLC master field and enum (name, number, label, type,
# type name, default, packed), taken from BVLC/caffe master 9b891540
# src/caffe/proto/caffe.proto with the same function. Fields listed in
# forks.FORK_FIELDS / MASTER_DEVIATIONS and messages in forks.FORK_MESSAGES
# are left out, so adding a fork field without registering it, or touching a
# master field, changes the digest.
BVLC_MASTER_DIGEST = "c921fd759baafdecdc76a9d2af0de314a1bed66280b11bc178f29983d4c964fc"
BVLC_MASTER_ENTRIES = 448  # 422 fields (423 less device_id) + 26 enums


def _default(field):
    if not field.HasField("default_value"):
        return None
    value = field.default_value
    if field.type == field.TYPE_FLOAT:  # upb re-renders float defaults
        return repr(struct.unpack("<f", struct.pack("<f", float(value)))[0])
    if field.type == field.TYPE_DOUBLE:
        return repr(float(value))
    return value


def master_signature(file_proto):
    skip = {(e.message, e.field) for e in forks.FORK_FIELDS} | set(forks.MASTER_DEVIATIONS)
    fork_values = {(e.enum, e.name) for e in forks.FORK_ENUM_VALUES}
    lines = []

    def values(path, enum):
        return [(v.name, v.number) for v in enum.value if (path, v.name) not in fork_values]

    for enum in file_proto.enum_type:
        lines.append("enum %s %s" % (enum.name, values(enum.name, enum)))

    def walk(msg, path):
        for enum in msg.enum_type:
            if "%s.%s" % (path, enum.name) in forks.FORK_ENUMS:
                continue
            lines.append("enum %s.%s %s" % (path, enum.name, values(path + "." + enum.name, enum)))
        for f in msg.field:
            if (path, f.name) in skip:
                continue
            packed = f.options.packed if f.options.HasField("packed") else None
            lines.append(
                "field %s.%s %d %d %d %s %r %s"
                % (path, f.name, f.number, f.label, f.type, f.type_name.lstrip("."), _default(f), packed)
            )
        for nested in msg.nested_type:
            walk(nested, path + "." + nested.name)

    for msg in file_proto.message_type:
        if msg.name not in forks.FORK_MESSAGES:
            walk(msg, msg.name)
    lines.sort()
    return hashlib.sha256("\n".join(lines).encode()).hexdigest(), len(lines)


def test_master_messages_unchanged():
    file_proto = descriptor_pb2.FileDescriptorProto.FromString(caffe_pb2.DESCRIPTOR.serialized_pb)
    digest, entries = master_signature(file_proto)
    assert entries == BVLC_MASTER_ENTRIES, (
        "fields were added to master messages without an entry in "
        "caffemem/schema/forks.py FORK_FIELDS (or master fields removed)"
    )
    assert digest == BVLC_MASTER_DIGEST, "a BVLC master field or enum differs from Caffe master"


# ---------------------------------------------------------------------------
# behaviour of the fork additions on small inline texts


def test_inline_fork_texts_parse():
    net = text_format.Parse(
        """
        name: "n"
        mem_param {
          optimize_test: true
          exclude_blob: "fc8"
          slot { id: 0 bytes: 4096 member { blob: "conv1" kind: "data" }
                                    member { blob: "conv2" kind: "diff" } }
        }
        layer { name: "p" type: "Pooling" pooling_param { pool: MAX ceil_mode: false } }
        layer { name: "bn" type: "BN" bn_param { bn_mode: INFERENCE frozen: true } }
        layer { name: "i" type: "Interp" interp_param { zoom_factor: 8 } }
        layer { name: "v" type: "VideoData" video_data_param { modality: FLOW } }
        layer { name: "r" type: "PSROIPooling"
                psroi_pooling_param { spatial_scale: 0.0625 output_dim: 21 group_size: 7 } }
        """,
        caffe_pb2.NetParameter(),
    )
    assert net.mem_param.optimize_train and net.mem_param.optimize_test
    assert net.mem_param.slot[0].member[1].kind == "diff"
    assert net.layer[0].pooling_param.ceil_mode is False
    assert net.layer[0].pooling_param.round_mode == caffe_pb2.PoolingParameter.CEIL
    assert net.layer[1].bn_param.bn_mode == caffe_pb2.BNParameter.INFERENCE
    assert net.layer[3].video_data_param.new_length == 1  # TSN default
    again = caffe_pb2.NetParameter.FromString(net.SerializeToString())
    assert again == net


def test_c3d_v10_v1_layers_parse():
    # facebook/C3D C3D-v1.0/examples/c3d_train_ucf101/conv3d_ucf101_train.prototxt, abridged
    net = text_format.Parse(
        """
        layers { name: "data" type: VIDEO_DATA top: "data" top: "label"
                 image_data_param { use_image: true new_length: 16 show_data: 0 sampling_rate: 2 } }
        layers { name: "conv1a" type: CONVOLUTION3D bottom: "data" top: "conv1a"
                 convolution_param { num_output: 64 kernel_size: 3 kernel_depth: 3 pad: 1 temporal_pad: 1 } }
        layers { name: "pool1" type: POOLING3D bottom: "conv1a" top: "pool1"
                 pooling_param { pool: MAX kernel_size: 2 kernel_depth: 1 stride: 2 temporal_stride: 1 } }
        layers { name: "up" type: DECONVOLUTION3D bottom: "pool1" top: "up" convolution_param { num_output: 2 } }
        """,
        caffe_pb2.NetParameter(),
    )
    V1 = caffe_pb2.V1LayerParameter
    assert [layer.type for layer in net.layers] == [V1.VIDEO_DATA, V1.CONVOLUTION3D, V1.POOLING3D, V1.DECONVOLUTION3D]
    assert net.layers[0].image_data_param.new_length == 16 and net.layers[0].image_data_param.sampling_rate == 2
    assert net.layers[1].convolution_param.kernel_depth == 3 and net.layers[2].pooling_param.kernel_depth == 1
    again = caffe_pb2.NetParameter.FromString(net.SerializeToString())
    assert again == net


def test_device_id_accepts_scalar_and_list():
    one = text_format.Parse("device_id: 2", caffe_pb2.SolverParameter())
    many = text_format.Parse("device_id: [0, 1, 2, 3]", caffe_pb2.SolverParameter())
    assert list(one.device_id) == [2]
    assert list(many.device_id) == [0, 1, 2, 3]


def test_unknown_field_is_rejected():
    with pytest.raises(text_format.ParseError):
        text_format.Parse('layer { name: "x" no_such_param { } }', caffe_pb2.NetParameter())
