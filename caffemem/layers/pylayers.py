"""Shape rules of well-known Python layers, read from their source, so a user gives only
what the file cannot know (the image size) instead of one ``--input`` per top.

A Python layer shapes its tops in Python (``setup``/``reshape``, often again in
``forward``), which caffemem does not run.  For the layers below the code is public and
its shapes follow from the bottoms, ``param_str`` and the project's default config; the
figures are those of the shapes ``forward`` gives (the ones a run holds), and where
``forward`` sizes a top by the data (how many boxes an image has) the rule uses the
config's upper bound and says so in a note.

Sources (the commits read):
- rbgirshick/py-faster-rcnn@781a917b (lib/roi_data_layer/layer.py,
  lib/rpn/anchor_target_layer.py, lib/rpn/proposal_layer.py,
  lib/rpn/proposal_target_layer.py, lib/fast_rcnn/config.py and
  experiments/cfgs/faster_rcnn_end2end.yml), which most Faster R-CNN forks copy;
- YuwenXiong/py-R-FCN@290dba7f: the same modules under the same names, whose forward()
  gives 4-D tops ((n, c, 1, 1) for py-faster-rcnn's (n, c)), run with
  experiments/cfgs/rfcn_end2end.yml (RPN_POST_NMS_TOP_N 300) or rfcn_end2end_ohem.yml
  (also TRAIN.BATCH_SIZE -1: every proposal is kept for the OHEM layer to choose from);
  a net is R-FCN's when it holds PSROIPooling, and OHEM's when it holds BoxAnnotatorOHEM;
- shelhamer/fcn.berkeleyvision.org@1305c737 (voc_layers.py, siftflow_layers.py,
  nyud_layers.py, pascalcontext_layers.py): one image a batch, the net reshaped to it;
- LisaAnne/lisa-caffe-public@09b40dbb examples/LRCN_activity_recognition/
  sequence_input_layer.py: clips of 16 frames, 24 videos a batch (3 at test), 227x227;
- ENet's spatial_dropout.SpatialDropoutLayer (Timo Saemann's python/spatial_dropout.py
  of TimoSaemann/caffe-enet, the submodule TimoSaemann/ENet's prototxts use; read at its
  copy haanjack/caffe@3aede7b3): reshape() gives its one top the bottom's shape.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass

from caffemem.errors import NeedsInput
from caffemem.graph import LayerShapes, Shape
from caffemem.layers.blob import with_batch
from caffemem.layers.registry import ShapeQuery

PythonRule = Callable[[ShapeQuery, dict], tuple[Shape, ...]]

# py-faster-rcnn's config (fast_rcnn/config.py and the experiment's yml).
IMS_PER_BATCH = 1  # end2end training: one image per batch
FAST_RCNN_IMS_PER_BATCH = 2  # config.py's default, which Fast R-CNN training keeps
ROIS_PER_BATCH = 128  # cfg.TRAIN.BATCH_SIZE: RoIs sampled per batch
ANCHOR_RATIOS = 3  # generate_anchors: ratios [0.5, 1, 2]
ANCHOR_SCALES = 3  # 2 ** arange(3, 6), unless param_str gives 'scales'
GT_BOXES = 1  # gt_boxes is (boxes in the image, 5): a few bytes, counted for one box


@dataclass(frozen=True)
class Config:
    """What the project's config (config.py with the experiment's yml) sets that sizes tops."""

    project: str
    post_nms_top_n: dict[str, int]  # cfg.{TRAIN,TEST}.RPN_POST_NMS_TOP_N: proposals at most
    rois_per_batch: int | None  # cfg.TRAIN.BATCH_SIZE; None for -1, every proposal kept
    four_d: bool  # R-FCN's forward() reshapes (n, c) tops to (n, c, 1, 1)

    def tail(self, shape: Shape) -> Shape:
        """A 1-D or 2-D top as this project's forward() gives it."""
        return shape + (1,) * (4 - len(shape)) if self.four_d and len(shape) < 4 else shape


PY_FASTER_RCNN = Config("py-faster-rcnn", {"TRAIN": 2000, "TEST": 300}, ROIS_PER_BATCH, False)
RFCN = Config("R-FCN (rfcn_end2end.yml)", {"TRAIN": 300, "TEST": 300}, ROIS_PER_BATCH, True)
RFCN_OHEM = Config("R-FCN OHEM (rfcn_end2end_ohem.yml)", {"TRAIN": 300, "TEST": 300}, None, True)


def config_of(q: ShapeQuery) -> Config:
    """R-FCN's nets run its copies of these layers: told apart by the layers only R-FCN
    has (PSROIPooling; BoxAnnotatorOHEM for the OHEM config)."""
    if "PSROIPooling" not in q.net_types:
        return PY_FASTER_RCNN
    return RFCN_OHEM if "BoxAnnotatorOHEM" in q.net_types else RFCN


def param_dict(q: ShapeQuery) -> dict:
    """``param_str`` as the layers read it: py-faster-rcnn's with yaml.load (``'num_classes':
    21``, one ``key: value`` a line, ``!!python/tuple [4, 8]``), FCN's with eval (a dict
    literal).  Only literals are read; anything else gives an empty dict."""
    text = q.proto.python_param.param_str.strip()
    if not text:
        return {}
    if not text.startswith("{"):
        text = re.sub(r"!!python/tuple\s*", "", text)
        entries = [re.sub(r"^([A-Za-z_]\w*)\s*:", r"'\1':", line.strip()) for line in text.splitlines() if line.strip()]
        text = "{" + ", ".join(entries) + "}"
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return {}
    return value if isinstance(value, dict) else {}


def _image(q: ShapeQuery, images: int) -> Shape:
    """The scaled image (images, 3, H, W): its size is what only the user knows."""
    data = q.layer.tops[0]
    given = q.inputs.get(data)
    if given is None:
        raise q.fail(f"the image size is what the file cannot tell: pass --input {data}=3,600,1000 (C,H,W of the scaled image; py-faster-rcnn scales to 600x1000 at most)")
    return with_batch(given, (images, 3, "H", "W"))


def _roi_data(q: ShapeQuery, params: dict) -> tuple[Shape, ...]:
    """roi_data_layer/layer.py.  With an RPN (end2end, 3 tops): data (1, 3, H, W), im_info
    (1, 3), gt_boxes (boxes, 5).  Fast R-CNN's (6 tops, cfg.TRAIN.HAS_RPN False): data
    (2, 3, H, W), then the RoIs minibatch.py samples, 128 a batch: rois (128, 5), labels
    (128,), bbox_targets and both weights (128, 4 * num_classes).  R-FCN's forward()
    makes every top but im_info 4-D."""
    config = config_of(q)
    tops = len(q.layer.tops)
    if not _fast_rcnn_layout(q.layer.tops):
        shapes: list[Shape] = [_image(q, IMS_PER_BATCH), (1, 3), config.tail((GT_BOXES, 5))]
        return tuple(shapes[:tops]) + tuple((1,) for _ in q.layer.tops[3:])  # im_inds of later forks
    classes = params.get("num_classes")
    q.check(isinstance(classes, int) and classes > 0, "RoIDataLayer needs 'num_classes' in param_str")
    if config.rois_per_batch is None:
        raise NeedsInput(list(q.layer.tops[1:]), f"{config.project} keeps every RoI of an image (cfg.TRAIN.BATCH_SIZE -1): their count is the proposal file's")
    rois = config.rois_per_batch
    regressed = 2 if config.four_d else classes  # R-FCN's configs are class-agnostic (TRAIN.AGNOSTIC)
    targets = config.tail((rois, 4 * regressed))
    return (_image(q, FAST_RCNN_IMS_PER_BATCH), config.tail((rois, 5)), config.tail((rois,)), targets, targets, targets)[:tops]


def _fast_rcnn_layout(tops: tuple[str, ...]) -> bool:
    """The layer maps its tops by position, in the order setup() gives them: with
    cfg.TRAIN.HAS_RPN data, im_info, gt_boxes; without (Fast R-CNN) data, rois, labels
    and, with cfg.TRAIN.BBOX_REG, bbox_targets, bbox_inside_weights,
    bbox_outside_weights.  The net shows which it was written for: six tops, or a
    second top named 'rois'."""
    return len(tops) == 6 or (len(tops) >= 2 and tops[1] == "rois")


def _anchors(params: dict) -> int:
    scales = params.get("scales")
    return ANCHOR_RATIOS * (len(scales) if isinstance(scales, (list, tuple)) else ANCHOR_SCALES)


def _anchor_target(q: ShapeQuery, params: dict) -> tuple[Shape, ...]:
    """rpn/anchor_target_layer.py (the same in R-FCN): for rpn_cls_score (1, 2A, H, W),
    labels (1, 1, A*H, W) and bbox_targets, bbox_inside_weights, bbox_outside_weights
    (1, 4A, H, W)."""
    q.check(len(q.bottoms) >= 1 and len(q.bottoms[0]) == 4, "AnchorTargetLayer takes rpn_cls_score (1, 2A, H, W) first")
    height, width = q.bottoms[0][-2:]
    anchors = _anchors(params)
    return ((1, 1, anchors * height, width),) + ((1, anchors * 4, height, width),) * (len(q.layer.tops) - 1)


def _proposal(q: ShapeQuery, params: dict) -> tuple[Shape, ...]:
    """rpn/proposal_layer.py (the same in R-FCN): rois (R, 5) and, with a second top,
    scores (R, 1), R at most RPN_POST_NMS_TOP_N of the phase (2000 in py-faster-rcnn's
    TRAIN, 300 in its TEST and in both of R-FCN's)."""
    limits = config_of(q).post_nms_top_n
    rois = limits.get(q.phase, limits["TEST"])
    return ((rois, 5), (rois, 1))[: len(q.layer.tops)]


def _proposal_target(q: ShapeQuery, params: dict) -> tuple[Shape, ...]:
    """rpn/proposal_target_layer.py: rois (R, 5), labels (R,), bbox_targets and both
    weights (R, 4 * num_classes) for R = cfg.TRAIN.BATCH_SIZE = 128 sampled RoIs.  R-FCN's
    copy gives them 4-D, (R, 5, 1, 1) ...; with its OHEM config (BATCH_SIZE -1, BG_THRESH_LO
    0) every candidate is kept: the proposals (bottom 0) and the ground-truth boxes."""
    classes = params.get("num_classes")
    q.check(isinstance(classes, int) and classes > 0, "ProposalTargetLayer needs 'num_classes' in param_str")
    config = config_of(q)
    rois = config.rois_per_batch
    if rois is None:
        q.check(len(q.bottoms) >= 1 and len(q.bottoms[0]) >= 1, "ProposalTargetLayer takes the proposals (R, 5) first")
        rois = q.bottoms[0][0] + GT_BOXES
    targets = config.tail((rois, 4 * classes))
    return (config.tail((rois, 5)), config.tail((rois,)), targets, targets, targets)[: len(q.layer.tops)]


# FCN's data layers (fcn.berkeleyvision.org *_layers.py): reshape() loads one image and its
# labels and gives each top (1, channels, H, W) of that image.  What each top holds:
FCN_TOP_CHANNELS = {"color": 3, "data": 3, "hha": 3, "depth": 1, "label": 1, "sem": 1, "geo": 1}
VOC_LARGEST = "3,500,500"  # PASCAL VOC images are at most 500x500
SIFT_FLOW_SIZE = (256, 256)  # siftflow_layers.py reads spatial_envelope_256x256_static_8outdoorcategories


def _per_image(q: ShapeQuery, channels: tuple[int, ...], size: tuple[int, int] | None, example: str = "") -> tuple[Shape, ...]:
    """Tops (1, c, H, W) of one image: H, W from whichever top the user gave (the image,
    usually), else ``size`` when the data set has one, else the user is asked for the image."""
    given = next((q.inputs[top] for top in q.layer.tops if top in q.inputs and len(q.inputs[top]) >= 2), None)
    if given is not None:
        size = (given[-2], given[-1])
    if size is None:
        image = q.layer.tops[0]
        param = q.proto.python_param
        raise NeedsInput(
            [image],
            f"{param.module}.{param.layer} loads one image at a time and reshapes the net to it, so the image size is what the file cannot tell: "
            f"pass --input {image}={channels[0]},H,W{example}; its other tops follow at that H,W",
        )
    return tuple((1, c) + size for c in channels)


def _seg_pair(q: ShapeQuery, params: dict) -> tuple[Shape, ...]:
    """voc_layers.py VOCSegDataLayer / SBDDSegDataLayer, pascalcontext_layers.py: data
    (1, 3, H, W) and label (1, 1, H, W) of one image."""
    q.check(len(q.layer.tops) == 2, "Need to define two tops: data and label.")
    return _per_image(q, (3, 1), None, f" (e.g. {VOC_LARGEST}, the largest PASCAL VOC image)")


def _siftflow(q: ShapeQuery, params: dict) -> tuple[Shape, ...]:
    """siftflow_layers.py SIFTFlowSegDataLayer: data (1, 3, H, W), semantic and geometric
    labels (1, 1, H, W); SIFT Flow's images are all 256x256."""
    q.check(len(q.layer.tops) == 3, "Need to define three tops: data, semantic label, and geometric label.")
    return _per_image(q, (3, 1, 1), SIFT_FLOW_SIZE)


def _nyud(q: ShapeQuery, params: dict) -> tuple[Shape, ...]:
    """nyud_layers.py NYUDSegDataLayer: one top per name in param_str 'tops': color and hha
    (1, 3, H, W), depth and label (1, 1, H, W)."""
    names = params.get("tops")
    q.check(isinstance(names, (list, tuple)) and len(names) == len(q.layer.tops), "NYUDSegDataLayer needs 'tops' in param_str, one name per top")
    q.check(all(name in ("color", "hha", "depth", "label") for name in names), f"unknown output type in 'tops': {list(names)}")
    return _per_image(q, tuple(FCN_TOP_CHANNELS[name] for name in names), None)


# LRCN's sequence_input_layer.py: frames x videos a batch; tops data, label, clip_markers.
LRCN_FRAMES = 16  # train_frames = test_frames
LRCN_VIDEOS = {"TRAIN": 24, "TEST": 3}  # train_buffer, test_buffer
LRCN_CROP = 227


def _lrcn_clips(videos: int) -> PythonRule:
    def rule(q: ShapeQuery, params: dict) -> tuple[Shape, ...]:
        """sequence_input_layer.py videoRead: data (16 x videos, 3, 227, 227), label and
        clip_markers (16 x videos,), frame-major (T x N on axis 0)."""
        frames = LRCN_FRAMES * videos
        q.check(len(q.layer.tops) == 3, "Incorrect number of outputs (expected 3: data, label, clip_markers)")
        return ((frames, 3, LRCN_CROP, LRCN_CROP), (frames,), (frames,))

    return rule


def _bottom_shape(q: ShapeQuery, params: dict) -> tuple[Shape, ...]:
    """spatial_dropout.py reshape(): top[0].reshape(*bottom[0].data.shape), after setup()
    checks one bottom and one top."""
    q.check(len(q.bottoms) == 1, f"Dropout layer needs one blob as input; received bottom blobs = {len(q.bottoms)}")
    q.check(len(q.layer.tops) == 1, f"Output of dropout layer is just one blob; received top blobs = {len(q.layer.tops)}")
    return (q.bottoms[0],)


# (python_param.module, python_param.layer) -> rule; the note says which figures are bounds.
KNOWN: dict[tuple[str, str], tuple[PythonRule, str]] = {
    ("roi_data_layer.layer", "RoIDataLayer"): (_roi_data, "py-faster-rcnn's RoIDataLayer (or R-FCN's): gt_boxes counted for one box"),
    ("rpn.anchor_target_layer", "AnchorTargetLayer"): (_anchor_target, "py-faster-rcnn's AnchorTargetLayer (or R-FCN's): 9 anchors unless param_str gives 'scales'"),
    ("rpn.proposal_layer", "ProposalLayer"): (_proposal, "py-faster-rcnn's ProposalLayer (or R-FCN's): RPN_POST_NMS_TOP_N rois, the most a run holds"),
    (
        "rpn.proposal_target_layer",
        "ProposalTargetLayer",
    ): (_proposal_target, "py-faster-rcnn's ProposalTargetLayer (or R-FCN's): 128 sampled RoIs (cfg.TRAIN.BATCH_SIZE), R-FCN's OHEM config every proposal and one ground-truth box"),
    ("voc_layers", "VOCSegDataLayer"): (_seg_pair, "FCN's VOCSegDataLayer: one image a batch, at the size given"),
    ("voc_layers", "SBDDSegDataLayer"): (_seg_pair, "FCN's SBDDSegDataLayer: one image a batch, at the size given"),
    ("pascalcontext_layers", "PASCALContextSegDataLayer"): (_seg_pair, "FCN's PASCALContextSegDataLayer: one image a batch, at the size given"),
    ("siftflow_layers", "SIFTFlowSegDataLayer"): (_siftflow, "FCN's SIFTFlowSegDataLayer: one 256x256 SIFT Flow image a batch unless --input gives another size"),
    ("nyud_layers", "NYUDSegDataLayer"): (_nyud, "FCN's NYUDSegDataLayer: one image a batch, at the size given"),
    ("spatial_dropout", "SpatialDropoutLayer"): (_bottom_shape, "ENet's SpatialDropoutLayer: the bottom's shape"),
    **{
        ("sequence_input_layer", f"videoRead{phase.title()}_{kind}"): (_lrcn_clips(videos), f"LRCN's sequence_input_layer: {LRCN_FRAMES} frames x {videos} videos")
        for phase, videos in LRCN_VIDEOS.items()
        for kind in ("RGB", "flow")
    },
}


def known_shapes(q: ShapeQuery) -> LayerShapes | None:
    """The tops of a well-known Python layer, or None.  A top the user gave with --input
    keeps that shape (its batch taken from the rule's when it is left out)."""
    param = q.proto.python_param
    known = KNOWN.get((param.module, param.layer))
    if known is None:
        return None
    shapes = known[0](q, param_dict(q))
    return LayerShapes(tops=tuple(with_batch(q.inputs[top], shape) if top in q.inputs else shape for top, shape in zip(q.layer.tops, shapes)))


# How --batch meets a known layer whose code fixes its tops: "images" for the layers that
# read one image a batch (py-faster-rcnn's code asserts 'Only single item batches are
# supported', FCN's reshape() gives (1, ...)), "fixed" for those whose tops are counts of
# anchors, boxes or RoIs set by the config; LRCN's clips follow the batch (videos).
FIXED_TOPS: dict[tuple[str, str], tuple[str, bool]] = {
    ("roi_data_layer.layer", "RoIDataLayer"): ("py-faster-rcnn's RoIDataLayer reads cfg.TRAIN.IMS_PER_BATCH images, not --batch", True),
    **{
        key: ("its tops are counts of anchors, proposals or RoIs its config sets, not a batch", False)
        for key in (("rpn.anchor_target_layer", "AnchorTargetLayer"), ("rpn.proposal_layer", "ProposalLayer"), ("rpn.proposal_target_layer", "ProposalTargetLayer"))
    },
    **{
        (module, name): (f"FCN's {name} loads one image a batch", True)
        for module, name in (
            ("voc_layers", "VOCSegDataLayer"),
            ("voc_layers", "SBDDSegDataLayer"),
            ("pascalcontext_layers", "PASCALContextSegDataLayer"),
            ("siftflow_layers", "SIFTFlowSegDataLayer"),
            ("nyud_layers", "NYUDSegDataLayer"),
        )
    },
}


def fixed_tops(python_param) -> tuple[str, bool] | None:
    """Why --batch leaves a known layer's tops as they are, and whether they are the images
    of the batch (then another batch is refused), or None (they follow the batch)."""
    return FIXED_TOPS.get((python_param.module, python_param.layer))


def known_note(python_param) -> str | None:
    """How a well-known Python layer's tops were sized (for the report), or None."""
    known = KNOWN.get((python_param.module, python_param.layer))
    return None if known is None else f"shapes from the code of {known[1]}"
