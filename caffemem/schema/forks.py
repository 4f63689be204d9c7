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
C3D_V10 = "facebook/C3D@master:C3D-v1.0/src/caffe/proto/caffe.proto"
ENET = "TimoSaemann/caffe-enet@master"
OPENCV = "opencv/opencv:modules/dnn/src/caffe/opencv-caffe.proto"
SHUFFLENET = "farmingyard/ShuffleNet@master:README.md"
MOBILEYOLO = "eric612/MobileNet-YOLO@master"
CAFFEFACE = "ydwen/caffe-face@caffe-face"
SPHEREFACE = "wy1iu/sphereface@master:tools/caffe-sphereface/src/caffe/proto/caffe.proto"
HAPPYNEAR = "happynear/caffe-windows@ms"
SYNOPSYS = "foss-for-synopsys-dwc-arc-processors/synopsys-caffe@master"
TONGCHENG = "Tongcheng/caffe@master"
# DeepLab v1 (bitbucket deeplab/deeplab-public): its GitHub copy in DeepLab-Context
# keeps the v1 caffe.proto (old-style LayerParameter with the V1 enum).
DEEPLAB1 = "TheLegendAli/DeepLab-Context@master"
DEEPLAB2 = "talent518/deeplab-public-ver2@master"  # a mirror of bitbucket deeplab/deeplab-public-ver2
MSCAFFE = "Microsoft/caffe@master"  # py-R-FCN's Caffe (the OHEM layers)
LRCN = "LisaAnne/lisa-caffe-public@lstm_video_deploy"
OCR = "senlinuc/caffe_ocr@master"
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
    C3D_V10: "71336a2202e7d605a138c239f56be7b8fcfaaf5b",
    ENET: "22d356c956cdc5e752e6d40612e4f6c60fc8f471",
    OPENCV: "036f7218fcc37e0801ced4006270a55f20610e0d",
    SHUFFLENET: "b9624442bd410bbd2aadc820122b138e63039d70",
    MOBILEYOLO: "69b4441cb3ec8d553fbdef788ad033e246f901bd",
    CAFFEFACE: "48ff38e30dd303511ac6b5f9455474453fef2644",
    SPHEREFACE: "f20b130a6e080bb51d2e46a9e157686df622bef3",
    HAPPYNEAR: "967eedf25009e334b7f6f933bb5e17aaaff5bef6",
    SYNOPSYS: "977ba36af383208c2f734c207b573395cb6ab282",
    TONGCHENG: "1625bb3bf55a766fecbb905d6fe361f3d25f78eb",
    DEEPLAB1: "fb04e9e2fc2682490ad9f60533b9d6c4c0e0479c",
    DEEPLAB2: "51750fa92e9f9e6ccae78c2be5cf809a256e56d5",
    MSCAFFE: "ed05614cb020f782bad5cf31131c55a73697f374",
    LRCN: "49b8643ddef23a4f6120017968de30c45e693f59",
    OCR: "81642f61ea8f888e360cca30e08e05b7bc6d4556",
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
    _f("LayerParameter", "flip_param", 212, HAPPYNEAR),
    _f("LayerParameter", "normalize_param", 214, HAPPYNEAR),
    _f("LayerParameter", "transpose_param", 8266710, OCR),
    _f("LayerParameter", "reverse_param", 160, OCR),
    _f("LayerParameter", "ctc_decoder_param", 158, OCR),
    _f("LayerParameter", "ctc_loss_param", 159, OCR),
    _f("LayerParameter", "lstm_param", 8267711, OCR, 8266711, "LayerParameter.roi_pooling_param (rbgirshick/caffe-fast-rcnn)"),
    _f("CTCLossParameter", "expose_hidden", 1005, OCR, 5, "CTCLossParameter.loss_calculation_t: the fork numbers both 5"),
    _f("LayerParameter", "relu6_param", 211, MOBILEYOLO, 211,
       "the Caffe-ReLU6 ports use 100000 with a ReLU6Parameter holding only "
       "negative_slope = 1 (same text)"),
    # Face / metric-learning forks and synopsys-caffe's Gather.
    _f("LayerParameter", "center_loss_param", 1147, CAFFEFACE, 147,
       "LayerParameter.swish_param; happynear/caffe-windows uses 211 "
       "(LayerParameter.relu6_param)"),
    _f("LayerParameter", "margin_inner_product_param", 232, HAPPYNEAR, 232,
       "wy1iu/sphereface, whose layer code caffemem models, uses 147 "
       "(LayerParameter.swish_param)"),
    _f("LayerParameter", "triplet_loss_param", 1203, HAPPYNEAR, 203,
       "LayerParameter.prior_box_param (ssd); the BVLC PR #2603 branch and "
       "its copies use 147 (LayerParameter.swish_param)"),
    _f("LayerParameter", "gather_param", 1211, SYNOPSYS, 211,
       "LayerParameter.relu6_param (eric612/MobileNet-YOLO)"),
    _f("LayerParameter", "denseblock_param", 2147, TONGCHENG, 147,
       "LayerParameter.swish_param, and 1147 is center_loss_param's "
       "relocation (also 147 in ydwen/caffe-face)"),
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
    _f("MemoryOptimizationParameter", "recompute", 101, CAFFEMEM),
    # DeepLab and R-FCN (detection / segmentation forks).
    _f("V1LayerParameter", "interp_param", 43, DEEPLAB1),
    _f("V1LayerParameter", "seg_accuracy_param", 1042, DEEPLAB1, 42, "V1LayerParameter.loss_param"),
    _f("V1LayerParameter", "mat_write_param", 46, DEEPLAB1),
    _f("V1LayerParameter", "strict_dim", 1003, DEEPLAB1),
    _f("V1LayerParameter", "softmaxloss_param", 44, DEEPLAB1),
    _f("LayerParameter", "softmaxloss_param", 44, DEEPLAB1, 44,
       "DeepLab v1's own LayerParameter (the V1 layout); here so the upgrade can carry it"),
    _f("V1LayerParameter", "padding_param", 45, DEEPLAB1),
    _f("LayerParameter", "padding_param", 45, DEEPLAB1, 45,
       "DeepLab v1's own LayerParameter (the V1 layout); here so the upgrade can carry it"),
    _f("LayerParameter", "seg_accuracy_param", 1144, DEEPLAB2, 144, "LayerParameter.crop_param"),
    _f("LayerParameter", "mat_write_param", 1145, DEEPLAB2, 145, "LayerParameter.parameter_param"),
    _f("ImageDataParameter", "ignore_label", 15, DEEPLAB2, 15, "the same number in DeepLab v1"),
    _f("ImageDataParameter", "label_type", 16, DEEPLAB2, 16, "the same number in DeepLab v1"),
    _f("ImageDataParameter", "has_label", 1013, DEEPLAB1, 13, "ImageDataParameter.use_image (C3D-v1.0)"),
    _f("ConvolutionParameter", "hole", 1017, DEEPLAB1, 17, "ConvolutionParameter.force_nd_im2col"),
    _f("ConvolutionParameter", "hole_h", 1018, DEEPLAB1, 18, "ConvolutionParameter.dilation"),
    _f("ConvolutionParameter", "hole_w", 19, DEEPLAB1),
    _f("LossParameter", "pre_fixed_normalizer", 1004, RFCN, 4,
       "LossParameter.class_weighting (SegNet); Microsoft/caffe also uses 4"),
    # C3D-v1.0: its V1 layers keep the 3-D geometry in master's messages.
    _f("ConvolutionParameter", "kernel_depth", 1006, C3D_V10, 6, "ConvolutionParameter.stride"),
    _f("ConvolutionParameter", "temporal_stride", 1008, C3D_V10, 8, "ConvolutionParameter.bias_filler"),
    _f("ConvolutionParameter", "filter_group", 1011, C3D_V10, 11, "ConvolutionParameter.kernel_h"),
    _f("ConvolutionParameter", "temporal_pad", 1012, C3D_V10, 12, "ConvolutionParameter.kernel_w"),
    _f("PoolingParameter", "kernel_depth", 1005, C3D_V10, 5, "PoolingParameter.kernel_h"),
    _f("PoolingParameter", "temporal_stride", 1006, C3D_V10, 6, "PoolingParameter.kernel_w"),
    _f("ImageDataParameter", "new_length", 1011, C3D_V10, 11, "ImageDataParameter.is_color"),
    _f("ImageDataParameter", "show_data", 1012, C3D_V10, 12, "ImageDataParameter.root_folder"),
    _f("ImageDataParameter", "use_image", 13, C3D_V10),
    _f("ImageDataParameter", "sampling_rate", 14, C3D_V10),
    _f("ImageDataParameter", "use_label", 1015, C3D_V10, 15,
       "ImageDataParameter.ignore_label in hszhao/PSPNet and DeepLab v2"),
    _f("ImageDataParameter", "use_temporal_jitter", 1016, C3D_V10, 16,
       "ImageDataParameter.label_type in hszhao/PSPNet and DeepLab v2"),
    _f("ImageDataParameter", "mean_value", 17, C3D_V10),
    _f("ImageDataParameter", "num_truth_channels", 18, C3D_V10),
    _f("ImageDataParameter", "use_byte_input", 19, C3D_V10),
    _f("ImageDataParameter", "is_flow", 20, C3D_V10),
    _f("ImageDataParameter", "truth_scale", 21, C3D_V10),
    _f("ImageDataParameter", "clip_min", 22, C3D_V10),
    _f("ImageDataParameter", "clip_max", 23, C3D_V10),
    # py-faster-rcnn's Dropout; Netron's schema has it at 3 (another fork's sample_weights_test at 2).
    _f("DropoutParameter", "scale_train", 2, FRCNN),
    # ENet's DenseImageData (SegNet's layer with a smaller label).
    _f("DenseImageDataParameter", "label_divide_factor", 13, ENET),
    # PSPNet / DeepLab v2 ImageSegData augmentation.
    _f("TransformationParameter", "scale_factors", 1008, PSP, 8, "TransformationParameter.resize_param (ssd)"),
    # Tongcheng/caffe's BatchNorm options (parsed only: its cuDNN BatchNorm is never created).
    _f("BatchNormParameter", "use_log", 4, TONGCHENG),
    _f("BatchNormParameter", "scale_filler", 5, TONGCHENG),
    _f("BatchNormParameter", "bias_filler", 6, TONGCHENG),
    _f("BatchNormParameter", "engine", 15, TONGCHENG),
    # Tongcheng/caffe's debug-print switch (prints only).
    _f("AccuracyParameter", "use_log", 4, TONGCHENG),
    _f("ConcatParameter", "use_log", 3, TONGCHENG),
    _f("ConvolutionParameter", "use_log", 20, TONGCHENG),
    _f("ReLUParameter", "use_log", 3, TONGCHENG),
    _f("ScaleParameter", "use_log", 6, TONGCHENG),
)


@dataclass(frozen=True)
class ForkEnumValue:
    """One enum value that BVLC master does not have."""

    enum: str  # "Message.Enum", e.g. "V1LayerParameter.LayerType"
    name: str
    number: int  # number in our schema
    source: str
    source_number: int
    note: str | None = None


FORK_ENUM_VALUES: tuple[ForkEnumValue, ...] = (
    # C3D-v1.0's layer types (its LayerParameter is the V1 message); 30, 31, 33 and 34
    # are master's ARGMAX, THRESHOLD, SLICE and MVN.
    ForkEnumValue("V1LayerParameter.LayerType", "CONVOLUTION3D", 1030, C3D_V10, 30, "V1 ARGMAX"),
    ForkEnumValue("V1LayerParameter.LayerType", "POOLING3D", 1031, C3D_V10, 31, "V1 THRESHOLD"),
    ForkEnumValue("V1LayerParameter.LayerType", "VIDEO_DATA", 1033, C3D_V10, 33, "V1 SLICE"),
    ForkEnumValue("V1LayerParameter.LayerType", "DECONVOLUTION3D", 1034, C3D_V10, 34, "V1 MVN"),
    # C3D-v1.0's video-to-video (V2V) layers (examples/v2v): 35-38 are master's ABSVAL, SILENCE,
    # CONTRASTIVE_LOSS and EXP.
    ForkEnumValue("V1LayerParameter.LayerType", "VIDEO_SEGMENTATION_DATA", 1035, C3D_V10, 35, "V1 ABSVAL"),
    ForkEnumValue("V1LayerParameter.LayerType", "VOXEL_SOFTMAX", 1036, C3D_V10, 36, "V1 SILENCE"),
    ForkEnumValue("V1LayerParameter.LayerType", "VOXEL_SOFTMAX_LOSS", 1037, C3D_V10, 37, "V1 CONTRASTIVE_LOSS"),
    ForkEnumValue("V1LayerParameter.LayerType", "VIDEO_WITH_VOXEL_TRUTH_DATA", 1038, C3D_V10, 38, "V1 EXP"),
    # DeepLab v1's V1 layer types (the V1 upgrade maps them to its V2 type names).
    ForkEnumValue("V1LayerParameter.LayerType", "IMAGE_SEG_DATA", 1039, DEEPLAB1, 39, "V1LayerParameter.DECONVOLUTION"),
    ForkEnumValue("V1LayerParameter.LayerType", "SEG_ACCURACY", 40, DEEPLAB1, 40),
    ForkEnumValue("V1LayerParameter.LayerType", "INTERP", 41, DEEPLAB1, 41),
    ForkEnumValue("V1LayerParameter.LayerType", "MAT_WRITE", 43, DEEPLAB1, 43),
    ForkEnumValue("V1LayerParameter.LayerType", "PADDING", 42, DEEPLAB1, 42),
    ForkEnumValue("LossParameter.NormalizationMode", "PRE_FIXED", 1003, RFCN, 3,
                  "LossParameter.NONE (R-FCN renumbers NONE to 4; Microsoft/caffe likewise)"),
)


# Enums a fork nests in a master message, with their source.
FORK_ENUMS: Dict[str, str] = {
    "ImageDataParameter.LabelType": DEEPLAB2,
    "BatchNormParameter.Engine": TONGCHENG,
}

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
    "MemoryRecompute": CAFFEMEM,
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
    "CenterLossParameter": CAFFEFACE,
    "MarginInnerProductParameter": SPHEREFACE,
    "TripletLossParameter": HAPPYNEAR,
    "GatherParameter": SYNOPSYS,
    "DenseBlockParameter": TONGCHENG,
    "SegAccuracyParameter": DEEPLAB2,  # v1: the same without reset
    "MatWriteParameter": DEEPLAB2,  # identical in v1
    "SoftmaxLossParameter": DEEPLAB1,
    "PaddingParameter": DEEPLAB1,
    "Yolov3DetectionOutputParameter": MOBILEYOLO,
    "Yolov3Parameter": MOBILEYOLO,
    "LabelSpecificAddParameter": HAPPYNEAR,
    "FlipParameter": HAPPYNEAR,
    "HappynearNormalizeParameter": HAPPYNEAR,  # its NormalizeParameter (ssd has one of that name)
    "TransposeParameter": OCR,
    "ReverseParameter": OCR,
    "CTCDecoderParameter": OCR,
    "CTCLossParameter": OCR,
    "LSTMParameter": OCR,
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


# Fields (and enum values) that only some fork's caffe.proto has and our schema does not:
# which fork, so that an "unknown field" message can say where the file comes from.  Keyed
# by field name, or by (message or enum, name) where the name alone would mislead.  Sources: each fork's caffe.proto
# where it could be read (named), else the file that uses the field; Netron's
# tools/caffe-schema.js (lutzroeder/netron) lists many of the same.
_PSP_DEEPLAB = "hszhao/PSPNet and DeepLab v2 (deeplab-public-ver2)"
_FLOWNET = "lmb-freiburg/flownet2 (FlowNet's Caffe)"
_AUGMENT = "twtygqyy/caffe-augmentation (kevinlin311tw's data augmentation)"
_COLORIZATION = "richzhang/colorization's Caffe (caffe-colorization)"
FORK_ONLY_FIELDS: dict[str, str] = {
    **dict.fromkeys(("image_data_modify_param", "color_conv_param"), _COLORIZATION),
    **dict.fromkeys(
        ("seg_accuracy_param", "mat_write_param", "mat_read_param", "dense_crf_param", "domain_transform_param",
         "adaptive_bias_channel_param", "bias_channel_param", "unique_label_param", "update_global_stats"),
        _PSP_DEEPLAB,
    ),
    **dict.fromkeys(("hole", "hole_h", "hole_w"), "DeepLab v1 (deeplab-public; also pathak22/caffe-ccnn)"),
    **dict.fromkeys(("seg_data_param", "batch_reduction_param"), YJX),
    "sample_weights_test": "alexgkendall/caffe-segnet (Bayesian SegNet's Dropout)",
    "pre_fixed_normalizer": RFCN,
    **dict.fromkeys(
        ("correlation_param", "flow_warp_param", "resample_param", "downsample_param", "l1_loss_param", "lpq_loss_param",
         "accum_param", "black_augmentation_param", "augmentation_param", "coeff_schedule_param", "reshape_every_iter"),
        _FLOWNET,
    ),
    **dict.fromkeys(
        ("min_scaling_factor", "max_scaling_factor", "max_rotation_angle", "contrast_brightness_adjustment",
         "smooth_filtering", "min_contrast", "max_contrast", "max_brightness_shift", "max_smooth", "max_color_shift",
         "min_side_min", "min_side_max", "min_side", "apply_probability", "debug_params"),
        _AUGMENT,
    ),
    **dict.fromkeys(("yolo_detection_output_param", "yolov3_detection_output_param", "yolov3_param"), MOBILEYOLO),
    "quantization_param": "pmgysel/caffe (Ristretto)",
    **dict.fromkeys(("multinode", "mn_activation_param"), "intel/caffe (Intel Caffe)"),
    **dict.fromkeys(("squeeze_convolution_param", "squeeze_inner_product_param"), "foss-for-synopsys-dwc-arc-processors/synopsys-caffe"),
    **dict.fromkeys(("box_output_param", "ring_pad_param"), "gdlg/panoramic-object-detection"),
    "down_sampling_param": "facebook/C3D C3D-v1.0 (DOWN_SAMPLING)",
    "center_loss_param": "ydwen/caffe-face (CenterLoss)",
    "margin_inner_product_param": "wy1iu/sphereface (MarginInnerProduct)",
    "denseblock_param": "Tongcheng/caffe (DenseNet's DenseBlock)",
}
_C3D_V10_TYPE = "facebook/C3D C3D-v1.0 (a layer type caffemem does not model)"
FORK_ONLY_SCOPED_NAMES: dict[tuple[str, str], str] = {
    ("TransformationParameter", "crop_width"): PSP + " (= DeepLab v2)",
    ("TransformationParameter", "crop_height"): PSP + " (= DeepLab v2)",
    ("ImageDataParameter", "label_type"): _PSP_DEEPLAB,
    ("ImageDataParameter", "ignore_label"): _PSP_DEEPLAB,
    ("LayerParameter", "engine"): "intel/caffe (Intel Caffe)",
    # layer type strings (the value of LayerParameter.type) of layers caffemem does not model
    **dict.fromkeys((("LayerParameter.type", t) for t in ("SoftmaxCrossEntropyLoss", "ColorConv")), _COLORIZATION),
    **dict.fromkeys((("LayerParameter.type", t) for t in ("Correlation", "FlowWarp", "DataAugmentation", "L1Loss")), _FLOWNET),
    **{
        ("V1LayerParameter.LayerType", name): _C3D_V10_TYPE
        for name in ("VOLUME_DATA", "VOXEL_CUSTOM_LOSS", "DOWN_SAMPLING")
    },
}


def fork_defining(scope: str, name: str) -> str | None:
    """The fork whose caffe.proto defines ``name`` in ``scope`` (a message's field, an
    enum's value: scope "V1LayerParameter.LayerType", or a layer type string: scope
    "LayerParameter.type"), for a name caffemem lacks; None when no fork is known to have
    it (then it is most likely a typo)."""
    return FORK_ONLY_SCOPED_NAMES.get((scope, name)) or (FORK_ONLY_FIELDS.get(name) if "." not in scope else None)


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


def markdown_enum_table() -> str:
    """The fork enum-value table of docs/schema.md, generated from FORK_ENUM_VALUES."""
    rows = [
        "| enum | value | our number | source | source number | conflict |",
        "|---|---|---|---|---|---|",
    ]
    for e in FORK_ENUM_VALUES:
        rows.append(f"| {e.enum} | `{e.name}` | {e.number} | {e.source} | {e.source_number} | {e.note or '-'} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(markdown_table(), end="")
    print()
    print(markdown_enum_table(), end="")
