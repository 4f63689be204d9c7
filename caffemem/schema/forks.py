"""Where every non-master part of ``proto/caffe.proto`` comes from.

The schema is BVLC Caffe master plus what several forks add. This module is
the machine-readable record of those additions; ``docs/schema.md`` has the
same table for people. ``tests/test_schema.py`` checks it against the
generated descriptors, so the two cannot drift apart.

Numbering rules (see the header of proto/caffe.proto):

* master fields keep master's numbers, types, labels and defaults; the only
  deviation is listed in :data:`MASTER_DEVIATIONS`;
* a fork field keeps its fork's number when that number is free;
* otherwise it takes the number another real fork uses for the same field;
* failing both, it is relocated to ``fork number + 1000``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

# Short names for the source trees. Each value is "owner/repo@branch", and the
# proto file is src/caffe/proto/caffe.proto unless a path is given after ':'.
BVLC = "BVLC/caffe@master"
YJX = "yjxiong/caffe@action_recog"
YJX_INTERP = "yjxiong/caffe@interp"
SSD = "weiliu89/caffe@ssd"
PSP = "hszhao/PSPNet@master"
SEGNET = "alexgkendall/caffe-segnet@segnet-cleaned"
SEGNET5 = "TimoSaemann/caffe-segnet-cudnn5@master"
FRCNN = "rbgirshick/caffe-fast-rcnn@faster-rcnn"
RFCN = "daijifeng001/caffe-rfcn@r-fcn"
C3D = "facebook/C3D@master:C3D-v1.1/src/caffe/proto/caffe.proto"
OPENCV = "opencv/opencv:modules/dnn/src/caffe/opencv-caffe.proto"
SHUFFLENET = "farmingyard/ShuffleNet@master:README.md"
MOBILEYOLO = "eric612/MobileNet-YOLO@master"
LRCN = "LisaAnne/lisa-caffe-public@lstm_video_deploy"
HAPPYNEAR = "happynear/caffe-windows@ms"
CAFFEMEM = "caffemem"

# Commits the numbers were read from (checked 2026; see docs/schema.md).
SOURCE_COMMITS: Dict[str, str] = {
    BVLC: "9b891540183ddc834a02b2bd81b31afae71b2153",
    YJX: "9831a2b4d67e3f99418b6f2f99b6dde716853672",
    YJX_INTERP: "065007e8e9596cf64f79a358c944b7670ae26880",
    SSD: "4817bf8b4200b35ada8ed0dc378dceaf38c539e4",
    PSP: "798bdc907c8630e8c3997ebfdd0d7cae0c5ab03b",
    SEGNET: "344c113bf1832886f1cbe9f33ffe28a3beeaf412",
    SEGNET5: "abcf30dca449245e101bf4ced519f716177f0885",
    FRCNN: "4115385deb3b907fcd428ac0ab53b694d741a3c4",
    RFCN: "543f8f6a4b7c88256ea1445ae951a12d1ad9cffd",
    C3D: "71336a2202e7d605a138c239f56be7b8fcfaaf5b",
    OPENCV: "036f7218fcc37e0801ced4006270a55f20610e0d",
    SHUFFLENET: "b9624442bd410bbd2aadc820122b138e63039d70",
    MOBILEYOLO: "69b4441cb3ec8d553fbdef788ad033e246f901bd",
    LRCN: "49b8643ddef23a4f6120017968de30c45e693f59",
    HAPPYNEAR: "967eedf25009e334b7f6f933bb5e17aaaff5bef6",
}


@dataclass(frozen=True)
class ForkField:
    """One field that BVLC master does not have, or that moved."""

    message: str  # containing message, e.g. "LayerParameter"
    field: str
    number: int  # number in our schema
    source: str  # one of the source names above
    source_number: int  # number in that source's caffe.proto
    # What the source number clashes with here, and the numbers other forks
    # give the same field; None when there is nothing to say.
    note: Optional[str] = None

    @property
    def relocated(self) -> bool:
        return self.number != self.source_number


def _f(message, field, number, source, source_number=None, note=None):
    return ForkField(
        message,
        field,
        number,
        source,
        number if source_number is None else source_number,
        note,
    )


FORK_FIELDS: Tuple[ForkField, ...] = (
    # NetParameter
    _f("NetParameter", "mem_param", 200, YJX),
    # SolverParameter
    _f("SolverParameter", "richness", 1037, YJX, 37, "SolverParameter.snapshot_format"),
    _f("SolverParameter", "group_id", 1038, YJX, 38, "SolverParameter.rms_decay"),
    _f("SolverParameter", "eval_type", 1041, SSD, 41, "SolverParameter.layer_wise_reduce"),
    _f("SolverParameter", "ap_version", 1042, SSD, 42, "SolverParameter.weights"),
    _f("SolverParameter", "plateau_winsize", 43, SSD),
    _f("SolverParameter", "show_per_class_result", 44, SSD),
    _f("SolverState", "minimum_loss", 5, SSD),
    _f("SolverState", "iter_last_event", 6, SSD),
    # LayerParameter
    _f("LayerParameter", "bn_param", 152, PSP, 152,
       "yjxiong/caffe@action_recog uses 137 (LayerParameter.embed_param); "
       "caffe-segnet uses 45 for its own BN variant"),
    _f("LayerParameter", "interp_param", 301, YJX_INTERP, 301,
       "hszhao/PSPNet uses 143 (LayerParameter.input_param)"),
    _f("LayerParameter", "upsample_param", 1137, SEGNET, 137,
       "LayerParameter.embed_param; caffe-segnet-cudnn5 uses 147 "
       "(LayerParameter.swish_param); eric612/MobileNet-YOLO uses 150 for "
       "YOLO's one-field UpsampleParameter (scale = 1, int32, default 1)"),
    _f("LayerParameter", "dense_image_data_param", 46, SEGNET5, 46,
       "caffe-segnet uses 138 (LayerParameter.tile_param)"),
    _f("LayerParameter", "annotated_data_param", 200, SSD),
    _f("LayerParameter", "multibox_loss_param", 201, SSD),
    _f("LayerParameter", "permute_param", 202, SSD),
    _f("LayerParameter", "prior_box_param", 203, SSD),
    _f("LayerParameter", "detection_output_param", 204, SSD),
    _f("LayerParameter", "detection_evaluate_param", 205, SSD),
    _f("LayerParameter", "norm_param", 206, SSD),
    _f("LayerParameter", "video_data_param", 6660, C3D, 6660,
       "yjxiong/caffe uses 140 (LayerParameter.elu_param); weiliu89 ssd has "
       "an unrelated webcam VideoDataParameter at 207, left out"),
    _f("LayerParameter", "convolution3d_param", 6661, C3D),
    _f("LayerParameter", "pooling3d_param", 6662, C3D),
    _f("LayerParameter", "roi_pooling_param", 8266711, FRCNN, 8266711,
       "yjxiong/caffe has the same message at 150"),
    _f("LayerParameter", "smooth_l1_loss_param", 8266712, FRCNN),
    _f("LayerParameter", "box_annotator_ohem_param", 10000, RFCN),
    _f("LayerParameter", "psroi_pooling_param", 10001, RFCN),
    _f("LayerParameter", "shuffle_channel_param", 164, SHUFFLENET),
    _f("LayerParameter", "yolov3_detection_output_param", 602, MOBILEYOLO),
    _f("LayerParameter", "yolov3_param", 603, MOBILEYOLO),
    _f("LayerParameter", "label_specific_add_param", 241, HAPPYNEAR),
    _f("LayerParameter", "relu6_param", 211, MOBILEYOLO, 211,
       "the Caffe-ReLU6 ports use 100000 with a ReLU6Parameter holding only "
       "negative_slope = 1 (same text)"),
    # TransformationParameter: ssd keeps its numbers, TSN's clashing ones move.
    _f("TransformationParameter", "resize_param", 8, SSD, 8,
       "repeated as in eric612/MobileNet-YOLO (multi-scale training lists several); "
       "optional in ssd: one value has the same text and wire format"),
    _f("TransformationParameter", "noise_param", 9, SSD),
    _f("TransformationParameter", "emit_constraint", 10, SSD),
    _f("TransformationParameter", "crop_h", 11, SSD),
    _f("TransformationParameter", "crop_w", 12, SSD),
    _f("TransformationParameter", "distort_param", 13, SSD),
    _f("TransformationParameter", "expand_param", 14, SSD),
    _f("TransformationParameter", "fix_crop", 1010, YJX, 10, "TransformationParameter.emit_constraint (ssd)"),
    _f("TransformationParameter", "multi_scale", 1011, YJX, 11, "TransformationParameter.crop_h (ssd)"),
    _f("TransformationParameter", "scale_ratios", 1012, YJX, 12, "TransformationParameter.crop_w (ssd)"),
    _f("TransformationParameter", "max_distort", 1013, YJX, 13, "TransformationParameter.distort_param (ssd)"),
    _f("TransformationParameter", "is_flow", 1014, YJX, 14, "TransformationParameter.expand_param (ssd)"),
    _f("TransformationParameter", "more_fix_crop", 15, YJX),
    _f("TransformationParameter", "stride", 16, YJX),
    _f("TransformationParameter", "upper_size", 17, YJX),
    _f("TransformationParameter", "upper_height", 18, YJX),
    _f("TransformationParameter", "upper_width", 19, YJX),
    _f("TransformationParameter", "original_image", 20, YJX),
    # LossParameter: SegNet class balancing.
    _f("LossParameter", "weight_by_label_freqs", 1003, SEGNET, 3, "LossParameter.normalization"),
    _f("LossParameter", "class_weighting", 4, SEGNET),
    # InnerProductParameter: happynear's weight normalisation (NormFace, AM-Softmax).
    _f("InnerProductParameter", "normalize", 7, HAPPYNEAR),
    # TransformationParameter: LRCN's flow images (mirroring negates the x flow).
    _f("TransformationParameter", "flow", 1006, LRCN, 6, "TransformationParameter.force_color"),
    # AnnotatedDataParameter: eric612/MobileNet-YOLO's YOLO data options.
    _f("AnnotatedDataParameter", "yolo_data_type", 4, MOBILEYOLO),
    _f("AnnotatedDataParameter", "yolo_data_jitter", 5, MOBILEYOLO),
    _f("AnnotatedDataParameter", "train_diffcult", 6, MOBILEYOLO),
    _f("AnnotatedDataParameter", "single_class", 7, MOBILEYOLO),
    _f("AnnotatedDataParameter", "seg_scales", 8, MOBILEYOLO),
    _f("AnnotatedDataParameter", "seg_resize_width", 9, MOBILEYOLO),
    _f("AnnotatedDataParameter", "seg_resize_height", 10, MOBILEYOLO),
    # DropoutParameter: SegNet's Bayesian (Monte Carlo) dropout at TEST.
    _f("DropoutParameter", "sample_weights_test", 1002, SEGNET, 2,
       "DropoutParameter.scale_train (rbgirshick/caffe-fast-rcnn@faster-rcnn)"),
    # PoolingParameter
    _f("PoolingParameter", "ceil_mode", 1013, OPENCV, 13,
       "PoolingParameter.round_mode (BVLC PR #3057 also used 13)"),
    # Relocations inside fork messages.
    _f("BNParameter", "scale_filler", 1001, SEGNET, 1, "BNParameter.slope_filler (yjxiong/PSPNet)"),
    _f("BNParameter", "shift_filler", 1002, SEGNET, 2, "BNParameter.bias_filler (yjxiong/PSPNet)"),
    _f("BNParameter", "bn_mode", 1003, SEGNET, 3, "BNParameter.momentum (yjxiong/PSPNet)"),
    _f("VideoDataParameter", "new_length", 13, YJX, 11,
       "VideoDataParameter.is_color (C3D); C3D's own new_length is 13"),
    _f("VideoDataParameter", "num_segments", 1012, YJX, 12, "VideoDataParameter.root_folder (C3D)"),
    _f("VideoDataParameter", "modality", 1013, YJX, 13, "VideoDataParameter.new_length (C3D)"),
    _f("VideoDataParameter", "name_pattern", 1014, YJX, 14, "VideoDataParameter.show_data (C3D)"),
    _f("VideoDataParameter", "encoded", 1015, YJX, 15, "VideoDataParameter.use_image (C3D)"),
    _f("VideoDataParameter", "grayscale", 1016, YJX, 16, "VideoDataParameter.use_temporal_jitter (C3D)"),
    _f("MemoryOptimizationParameter", "slot", 100, CAFFEMEM),
)

# Messages that master does not define, with the source of their contents.
_SSD_MESSAGES = (
    "LabelMapItem", "LabelMap", "Sampler", "SampleConstraint", "BatchSampler",
    "EmitConstraint", "NormalizedBBox", "Annotation", "AnnotationGroup",
    "AnnotatedDatum", "ResizeParameter", "SaltPepperParameter",
    "NoiseParameter", "DistortionParameter", "ExpansionParameter",
    "AnnotatedDataParameter", "DetectionEvaluateParameter",
    "NonMaximumSuppressionParameter", "SaveOutputParameter",
    "DetectionOutputParameter", "MultiBoxLossParameter", "NormalizeParameter",
    "PermuteParameter", "PriorBoxParameter",
)
FORK_MESSAGES: Dict[str, str] = {
    "MemoryOptimizationParameter": YJX,
    "MemorySlot": CAFFEMEM,
    "MemorySlotMember": CAFFEMEM,
    "BNParameter": YJX,  # identical in PSPNet; SegNet fields relocated
    "InterpParameter": PSP,  # identical in yjxiong/caffe@interp
    "UpsampleParameter": SEGNET,
    "DenseImageDataParameter": SEGNET,
    "VideoDataParameter": C3D,  # yjxiong fields merged in
    "Convolution3DParameter": C3D,
    "Pooling3DParameter": C3D,
    "ROIPoolingParameter": FRCNN,
    "SmoothL1LossParameter": FRCNN,
    "PSROIPoolingParameter": RFCN,
    "BoxAnnotatorOHEMParameter": RFCN,
    "ShuffleChannelParameter": SHUFFLENET,
    "Yolov3DetectionOutputParameter": MOBILEYOLO,
    "Yolov3Parameter": MOBILEYOLO,
    "LabelSpecificAddParameter": HAPPYNEAR,
}
FORK_MESSAGES.update({name: SSD for name in _SSD_MESSAGES})

# Master fields whose definition we changed, and why.
MASTER_DEVIATIONS: Dict[Tuple[str, str], str] = {
    ("SolverParameter", "device_id"): (
        "repeated (yjxiong/caffe) instead of optional with default 0, so that "
        "'device_id: [0,1,2,3]' parses; one id has the same wire format"
    ),
}

# Defaults that differ from the field's source, and why.
DEFAULT_DEVIATIONS: Dict[Tuple[str, str], str] = {
    ("VideoDataParameter", "new_length"): (
        "default 1 (yjxiong/caffe) on C3D's field 13, which has no default "
        "in C3D; 0 frames is never valid there"
    ),
}


def fork_field(message: str, field: str) -> Optional[ForkField]:
    """The record of ``message.field`` if it is a fork addition, else None."""
    for entry in FORK_FIELDS:
        if entry.message == message and entry.field == field:
            return entry
    return None


def is_master(message: str, field: Optional[str] = None) -> bool:
    """True when the message (or message.field) is part of BVLC master."""
    if message in FORK_MESSAGES:
        return False
    if field is None:
        return True
    return fork_field(message, field) is None


def markdown_table() -> str:
    """The fork-field table of docs/schema.md, generated from FORK_FIELDS."""
    rows = [
        "| message | field | our number | source | source number | conflict / other forks |",
        "|---|---|---|---|---|---|",
    ]
    for e in FORK_FIELDS:
        rows.append(
            "| {m} | `{f}` | {n} | {s} | {sn} | {c} |".format(
                m=e.message,
                f=e.field,
                n=e.number,
                s=e.source,
                sn=e.source_number,
                c=e.note or "-",
            )
        )
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(markdown_table(), end="")
