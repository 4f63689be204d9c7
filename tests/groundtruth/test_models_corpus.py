"""Every file in ../shared/models either analyses (with the inputs a user would give) or
fails with one clear message naming the file — pinned per file, so a change in either
direction is noticed."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from conftest import SHARED, needs_shared

from caffemem.cli import main

MODELS = SHARED / "models"
IMAGENET = ["data=10,3,227,227"]

# file -> (arguments after the file, None for success or a phrase the error must contain)
OUTCOMES: dict[str, tuple[list[str], str | None]] = {
    "bvlc_alexnet/deploy.prototxt": ([], None),
    "bvlc_alexnet/train_val.prototxt": (["--input", "data=256,3,227,227"], None),
    "bvlc_alexnet/solver.prototxt": (["--input", "train:data=256,3,227,227", "--input", "test:data=50,3,227,227"], None),
    "bvlc_examples_cifar10/cifar10_quick.prototxt": ([], None),
    "bvlc_examples_cifar10/cifar10_quick_train_test.prototxt": (["--input", "data=100,3,32,32"], None),
    "bvlc_examples_cifar10/cifar10_quick_solver.prototxt": (["--input", "data=100,3,32,32"], None),
    "bvlc_examples_feature_extraction/imagenet_val.prototxt": ([], None),
    "bvlc_examples_finetune_pascal_detection/pascal_finetune_trainval_test.prototxt": ([], None),
    "bvlc_examples_finetune_pascal_detection/pascal_finetune_solver.prototxt": ([], None),
    "bvlc_examples_mnist/lenet.prototxt": ([], None),
    "bvlc_examples_mnist/lenet_train_test.prototxt": (["--input", "data=64,1,28,28"], None),
    "bvlc_examples_mnist/lenet_solver.prototxt": (["--input", "train:data=64,1,28,28", "--input", "test:data=100,1,28,28"], None),
    "bvlc_examples_mnist/mnist_autoencoder.prototxt": (["--input", "data=100,1,28,28"], None),
    "bvlc_examples_mnist/mnist_autoencoder_solver.prototxt": (["--input", "data=100,1,28,28"], None),
    "bvlc_googlenet/deploy.prototxt": ([], None),
    "bvlc_googlenet/train_val.prototxt": (["--input", "data=32,3,224,224"], None),
    "bvlc_googlenet/solver.prototxt": (["--input", "train:data=32,3,224,224", "--input", "test:data=50,3,224,224"], None),
    "bvlc_googlenet/quick_solver.prototxt": (["--input", "train:data=32,3,224,224", "--input", "test:data=50,3,224,224"], None),
    "bvlc_reference_rcnn_ilsvrc13/deploy.prototxt": ([], None),
    "c3d_v1.1/train_simple.prototxt": ([], None),
    "c3d_v1.1/solver.prototxt": ([], None),
    "densenet/DenseNet_121.prototxt": ([], None),
    "faster_rcnn_vgg16_end2end/test.prototxt": (["--input", "rois=300,5"], None),
    # Its Python layers compute shapes in Python: the message lists the ones to give.
    # py-faster-rcnn's Python layers are sized from their code (layers/pylayers.py): the image size is enough.
    "faster_rcnn_vgg16_end2end/train.prototxt": (["--input", "data=3,600,1000"], None),
    "faster_rcnn_vgg16_end2end/solver.prototxt": ([], "the image size is what the file cannot tell: pass --input data=3,600,1000"),
    "fcn_voc-fcn8s/deploy.prototxt": ([], None),
    "fcn_voc-fcn8s/train.prototxt": (["--input", "data=1,3,500,500", "--input", "label=1,1,500,500"], None),
    "fcn_voc-fcn8s/solver.prototxt": ([], "test_net 'val.prototxt' not found"),
    "finetune_flickr_style/deploy.prototxt": ([], None),
    "finetune_flickr_style/train_val.prototxt": ([], None),
    "finetune_flickr_style/solver.prototxt": ([], None),
    "hed/deploy.prototxt": ([], None),
    "hed/train_val.prototxt": (["--input", "data=1,3,400,400", "--input", "label=1,1,400,400"], None),
    "hed/solver.prototxt": (["--input", "data=1,3,400,400", "--input", "label=1,1,400,400"], None),
    "inception/deploy_inception-v3.prototxt": ([], None),
    "legacy_v0_bvlc_imagenet/imagenet_deploy.prototxt": ([], None),
    "legacy_v0_bvlc_imagenet/imagenet_train.prototxt": (["--input", "data=256,3,227,227"], None),
    "legacy_v0_bvlc_imagenet/imagenet_solver.prototxt": (["--input", "data=256,3,227,227"], "test_net 'imagenet_val.prototxt' not found"),
    "legacy_v1_bvlc_googlenet/train_val.prototxt": (["--input", "data=32,3,224,224"], None),
    "legacy_v1_vgg19/VGG_ILSVRC_19_layers_deploy.prototxt": ([], None),
    "lrcn_activity_recognition/deploy_lstm.prototxt": ([], None),
    "lrcn_activity_recognition/train_test_lstm_RGB.prototxt": (
        ["--phase", "TRAIN", "--input", "data=384,3,227,227", "--input", "label=384", "--input", "clip_markers=384"],
        None,
    ),
    # The test net (stage test-on-test) reshapes to 16 clips of 3 frames: 48 images.
    "lrcn_activity_recognition/lstm_solver_RGB.prototxt": (
        ["--input", "train:data=384,3,227,227", "--input", "train:label=384", "--input", "train:clip_markers=384",
         "--input", "test:data=48,3,227,227", "--input", "test:label=48", "--input", "test:clip_markers=48"],
        None,
    ),
    "mobilenet/mobilenet_deploy.prototxt": ([], None),
    "mobilenet/mobilenet_v2_deploy.prototxt": ([], None),
    "openpose/pose_deploy_linevec.prototxt": ([], None),
    "places365/deploy_vgg16_places365.prototxt": ([], None),
    "places365/train_val_vgg16.prototxt": (["--input", "data=48,3,224,224"], None),
    "places365/solver_vgg16.prototxt": (["--input", "train:data=48,3,224,224", "--input", "test:data=12,3,224,224"], None),
    "pspnet/pspnet50_ADE20K_473.prototxt": ([], None),
    "resnet/ResNet-50-deploy.prototxt": ([], None),
    "resnext/deploy_resnext50-32x4d.prototxt": ([], None),
    "segnet/segnet_inference.prototxt": (["--input", "data=1,3,360,480", "--input", "label=1,1,360,480"], None),
    "segnet/segnet_train.prototxt": (["--input", "data=4,3,360,480", "--input", "label=4,1,360,480"], None),
    "segnet/segnet_solver.prototxt": (["--input", "data=4,3,360,480", "--input", "label=4,1,360,480"], None),
    "senet/SE-ResNet-50.prototxt": ([], None),
    "squeezenet_v1.0/deploy.prototxt": ([], None),
    "squeezenet_v1.0/train_val.prototxt": (["--input", "data=32,3,227,227"], None),
    "squeezenet_v1.0/solver.prototxt": (["--input", "train:data=32,3,227,227", "--input", "test:data=25,3,227,227"], None),
    "ssd_vgg16_voc0712_300x300/deploy.prototxt": ([], None),
    "ssd_vgg16_voc0712_300x300/train.prototxt": (["--input", "data=_,3,_,_", "--input", "label=1,1,40,8"], None),  # batch_size 4 and 300x300 are the file's
    "ssd_vgg16_voc0712_300x300/solver.prototxt": ([], "test_net 'models/VGGNet/VOC0712/SSD_300x300/test.prototxt' not found"),
    "tsn_ucf101/tsn_bn_inception_rgb_deploy.prototxt": ([], None),
    "tsn_ucf101/tsn_bn_inception_rgb_train_val.prototxt": ([], None),
    "tsn_ucf101/tsn_bn_inception_rgb_solver.prototxt": ([], None),
}


@needs_shared
def test_every_model_file_is_pinned():
    files = {str(p.relative_to(MODELS)) for p in MODELS.rglob("*.prototxt")}
    assert files == set(OUTCOMES)


@needs_shared
@pytest.mark.parametrize("name", sorted(OUTCOMES))
def test_model_file_outcome(name):
    arguments, error = OUTCOMES[name]
    result = CliRunner().invoke(main, ["analyze", str(MODELS / name), "--json", *arguments])
    if error is None:
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code == 2, result.output
        assert error in result.output
        assert "Traceback" not in result.output
        assert str(MODELS / name.split("/")[0]) in result.output or name in result.output
