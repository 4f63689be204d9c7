"""Shape rules of well-known Python layers, read from their source, so a user gives only
what the file cannot know (the image size) instead of one ``--input`` per top.

A Python layer shapes its tops in Python (``setup``/``reshape``, often again in
``forward``), which caffemem does not run.  For the layers below the code is public and
its shapes follow from the bottoms, ``param_str`` and the project's default config; the
figures are those of the shapes ``forward`` gives (the ones a run holds), and where
``forward`` sizes a top by the data (how many boxes an image has) the rule uses the
config's upper bound and says so in a note.

Sources: rbgirshick/py-faster-rcnn (lib/roi_data_layer/layer.py,
lib/rpn/anchor_target_layer.py, lib/rpn/proposal_layer.py,
lib/rpn/proposal_target_layer.py, lib/fast_rcnn/config.py and
experiments/cfgs/faster_rcnn_end2end.yml), which R-FCN and most Faster R-CNN forks copy.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from caffemem.graph import LayerShapes, Shape
from caffemem.layers.blob import with_batch
from caffemem.layers.registry import ShapeQuery

PythonRule = Callable[[ShapeQuery, dict], tuple[Shape, ...]]

# py-faster-rcnn's config (fast_rcnn/config.py, faster_rcnn_end2end.yml).
IMS_PER_BATCH = 1  # end2end training: one image per batch
FAST_RCNN_IMS_PER_BATCH = 2  # config.py's default, which Fast R-CNN training keeps
ROIS_PER_IMAGE = 128  # cfg.TRAIN.BATCH_SIZE: RoIs sampled per batch (per image when IMS_PER_BATCH is 1)
POST_NMS_TOP_N = {"TRAIN": 2000, "TEST": 300}  # cfg.{TRAIN,TEST}.RPN_POST_NMS_TOP_N: at most
ANCHOR_RATIOS = 3  # generate_anchors: ratios [0.5, 1, 2]
ANCHOR_SCALES = 3  # 2 ** arange(3, 6), unless param_str gives 'scales'
GT_BOXES = 1  # gt_boxes is (boxes in the image, 5): a few bytes, counted for one box


def param_dict(q: ShapeQuery) -> dict:
    """``param_str``, which these layers read with yaml.load: a Python-dict-like
    ``'num_classes': 21`` (braces optional).  Unreadable: empty."""
    text = q.proto.python_param.param_str.strip()
    if not text:
        return {}
    try:
        value = ast.literal_eval(text if text.startswith("{") else "{" + text + "}")
    except (ValueError, SyntaxError):
        return {}
    return value if isinstance(value, dict) else {}


def _roi_data(q: ShapeQuery, params: dict) -> tuple[Shape, ...]:
    """roi_data_layer/layer.py: data (IMS_PER_BATCH, 3, H, W) — the image size, which only
    the user knows (--input data=...); then, with an RPN (cfg.TRAIN.HAS_RPN), im_info
    (1, 3) and gt_boxes (boxes, 5), else Fast R-CNN's sampled RoIs (_fast_rcnn_tops)."""
    data = q.layer.tops[0]
    given = q.inputs.get(data)
    if given is None:
        raise q.fail(f"the image size is what the file cannot tell: pass --input {data}=3,600,1000 (C,H,W of the scaled image; py-faster-rcnn scales to 600x1000 at most)")
    if _fast_rcnn_layout(q.layer.tops):
        return (with_batch(given, (FAST_RCNN_IMS_PER_BATCH, 3, "H", "W")),) + _fast_rcnn_tops(q, params)[: len(q.layer.tops) - 1]
    tops: list[Shape] = [with_batch(given, (IMS_PER_BATCH, 3, "H", "W")), (1, 3), (GT_BOXES, 5)]
    return tuple(tops[: len(q.layer.tops)]) + tuple((1,) for _ in q.layer.tops[3:])  # im_inds of later forks


def _fast_rcnn_layout(tops: tuple[str, ...]) -> bool:
    """The layer maps its tops by position, in the order setup() gives them: with
    cfg.TRAIN.HAS_RPN data, im_info, gt_boxes; without (Fast R-CNN) data, rois, labels
    and, with cfg.TRAIN.BBOX_REG, bbox_targets, bbox_inside_weights,
    bbox_outside_weights.  The net shows which it was written for: six tops, or a
    second top named 'rois'."""
    return len(tops) == 6 or (len(tops) >= 2 and tops[1] == "rois")


def _fast_rcnn_tops(q: ShapeQuery, params: dict) -> tuple[Shape, ...]:
    """roi_data_layer/minibatch.py without an RPN: BATCH_SIZE / IMS_PER_BATCH RoIs sampled
    per image, so at most ROIS_PER_IMAGE (128) in all: rois (128, 5), labels (128,), and
    bbox_targets and both weights (128, 4 * num_classes)."""
    classes = params.get("num_classes")
    q.check(isinstance(classes, int) and classes > 0, "RoIDataLayer without an RPN needs 'num_classes' in param_str")
    targets = (ROIS_PER_IMAGE, 4 * classes)
    return ((ROIS_PER_IMAGE, 5), (ROIS_PER_IMAGE,), targets, targets, targets)


def _anchors(params: dict) -> int:
    scales = params.get("scales")
    return ANCHOR_RATIOS * (len(scales) if isinstance(scales, (list, tuple)) else ANCHOR_SCALES)


def _anchor_target(q: ShapeQuery, params: dict) -> tuple[Shape, ...]:
    """rpn/anchor_target_layer.py: for rpn_cls_score (1, 2A, H, W), labels (1, 1, A*H, W)
    and bbox_targets, bbox_inside_weights, bbox_outside_weights (1, 4A, H, W)."""
    q.check(len(q.bottoms) >= 1 and len(q.bottoms[0]) == 4, "AnchorTargetLayer takes rpn_cls_score (1, 2A, H, W) first")
    height, width = q.bottoms[0][-2:]
    anchors = _anchors(params)
    return ((1, 1, anchors * height, width),) + ((1, anchors * 4, height, width),) * (len(q.layer.tops) - 1)


def _proposal(q: ShapeQuery, params: dict) -> tuple[Shape, ...]:
    """rpn/proposal_layer.py: rois (R, 5) and, with a second top, scores (R, 1), R at most
    RPN_POST_NMS_TOP_N of the phase."""
    rois = POST_NMS_TOP_N.get(q.phase, POST_NMS_TOP_N["TEST"])
    return ((rois, 5), (rois, 1))[: len(q.layer.tops)]


def _proposal_target(q: ShapeQuery, params: dict) -> tuple[Shape, ...]:
    """rpn/proposal_target_layer.py: rois (128, 5), labels (128,), bbox_targets and both
    weights (128, 4 * num_classes), for cfg.TRAIN.BATCH_SIZE = 128 RoIs."""
    classes = params.get("num_classes")
    q.check(isinstance(classes, int) and classes > 0, "ProposalTargetLayer needs 'num_classes' in param_str")
    targets = (ROIS_PER_IMAGE, 4 * classes)
    return ((ROIS_PER_IMAGE, 5), (ROIS_PER_IMAGE,), targets, targets, targets)[: len(q.layer.tops)]


# (python_param.module, python_param.layer) -> rule; the note says which figures are bounds.
KNOWN: dict[tuple[str, str], tuple[PythonRule, str]] = {
    ("roi_data_layer.layer", "RoIDataLayer"): (_roi_data, "py-faster-rcnn's RoIDataLayer: gt_boxes counted for one box; without an RPN 128 RoIs, the most a batch samples"),
    ("rpn.anchor_target_layer", "AnchorTargetLayer"): (_anchor_target, "py-faster-rcnn's AnchorTargetLayer: 9 anchors unless param_str gives 'scales'"),
    ("rpn.proposal_layer", "ProposalLayer"): (_proposal, "py-faster-rcnn's ProposalLayer: RPN_POST_NMS_TOP_N rois, the most a run holds"),
    ("rpn.proposal_target_layer", "ProposalTargetLayer"): (_proposal_target, "py-faster-rcnn's ProposalTargetLayer: 128 sampled RoIs (cfg.TRAIN.BATCH_SIZE)"),
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


def known_note(python_param) -> str | None:
    """How a well-known Python layer's tops were sized (for the report), or None."""
    known = KNOWN.get((python_param.module, python_param.layer))
    return None if known is None else f"shapes from the code of {known[1]}"
