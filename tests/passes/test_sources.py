"""Pass 4b, sources: a data layer's tops sized from its source's first record, as Caffe's
SetUp reads it (data_layer.cpp, image_data_layer.cpp, window_data_layer.cpp,
hdf5_data_layer.cpp, data_transformer.cpp).

Each test writes its own data in tmp_path (Datum protos from our caffe_pb2) and a copy
of a real net from ../shared/models whose sources point at it, then runs from tmp_path:
Caffe opens relative sources against the working directory."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import SHARED, needs_shared

import caffemem
from caffemem.cli import main
from caffemem.passes import sources as sources_pass
from caffemem.schema import caffe_pb2

lmdb = pytest.importorskip("lmdb")
h5py = pytest.importorskip("h5py")
Image = pytest.importorskip("PIL.Image")
np = pytest.importorskip("numpy")

MODELS = SHARED / "models"
ALEXNET = MODELS / "bvlc_alexnet" / "train_val.prototxt"  # Data, LMDB, crop_size 227, mean_file, batch 256/50
LENET = MODELS / "bvlc_examples_mnist" / "lenet_train_test.prototxt"  # Data, LMDB, scale, batch 64/100
CIFAR = MODELS / "bvlc_examples_cifar10" / "cifar10_quick_train_test.prototxt"  # Data, LMDB, mean_file, no crop, batch 100
FLICKR = MODELS / "finetune_flickr_style" / "train_val.prototxt"  # ImageData, new 256x256, crop 227, batch 50
PASCAL = MODELS / "bvlc_examples_finetune_pascal_detection" / "pascal_finetune_trainval_test.prototxt"  # WindowData, crop 227, batch 128
SSD = MODELS / "ssd_vgg16_voc0712_300x300" / "train.prototxt"  # AnnotatedData, resize 300x300, batch 4

pytestmark = needs_shared


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    """Every test runs in its own working directory, with no record kept from another."""
    monkeypatch.chdir(tmp_path)
    sources_pass._read.cache_clear()
    yield tmp_path
    sources_pass._read.cache_clear()


def datum(channels: int, height: int, width: int, **fields) -> bytes:
    return caffe_pb2.Datum(channels=channels, height=height, width=width, **fields).SerializeToString()


def encoded_datum(image: "Image.Image", kind: str) -> bytes:
    stream = io.BytesIO()
    image.save(stream, kind)
    return caffe_pb2.Datum(encoded=True, data=stream.getvalue(), label=0).SerializeToString()


def write_lmdb(path: Path, *values: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with lmdb.open(str(path), map_size=1 << 24) as env, env.begin(write=True) as txn:
        for i, value in enumerate(values):
            txn.put(f"{i:08d}".encode(), value)


def write_mean(path: Path, channels: int, height: int, width: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(caffe_pb2.BlobProto(num=1, channels=channels, height=height, width=width).SerializeToString())


def net_copy(model: Path, **replace: str) -> str:
    """The model's text with each ``old=new`` pair of strings replaced, written to the
    working directory (never into the project)."""
    text = model.read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    Path("net.prototxt").write_text(text)
    return "net.prototxt"


def analyze(path: str, phase: str = "TRAIN", **kwargs):
    return caffemem.analyze(path, phase=phase, **kwargs).nets[0]


def run(*args: str):
    return CliRunner().invoke(main, list(args))


# ---- Data: LMDB, LevelDB ------------------------------------------------------------


def test_alexnet_train_val_analyses_without_input_when_its_lmdbs_exist(in_tmp):
    # First Datum 3x256x256; crop_size 227 -> [256,3,227,227] (TRAIN), [50,3,227,227] (TEST).
    write_lmdb(in_tmp / "examples/imagenet/ilsvrc12_train_lmdb", datum(3, 256, 256), datum(1, 5, 5))
    write_lmdb(in_tmp / "examples/imagenet/ilsvrc12_val_lmdb", datum(3, 256, 256))
    write_mean(in_tmp / "data/ilsvrc12/imagenet_mean.binaryproto", 3, 256, 256)
    train, test = analyze(str(ALEXNET)), analyze(str(ALEXNET), "TEST")
    assert (train.blobs["data"], train.blobs["label"]) == ((256, 3, 227, 227), (256,))
    assert (test.blobs["data"], test.blobs["label"]) == ((50, 3, 227, 227), (50,))
    assert "data: [256,3,227,227] from examples/imagenet/ilsvrc12_train_lmdb (first Datum 3x256x256, crop_size 227; mean_file 3x256x256)" in train.shaped.notes


def test_the_channels_come_from_the_database(in_tmp):
    # A grey database: 1 channel, 256x256; AlexNet's conv1 then has 96x1x11x11 weights.
    write_lmdb(in_tmp / "examples/imagenet/ilsvrc12_train_lmdb", datum(1, 256, 256))
    net = analyze(str(ALEXNET))
    assert net.blobs["data"] == (256, 1, 227, 227)
    assert net.shaped.layer_shapes[1].params[0] == (96, 1, 11, 11)


def test_without_crop_the_datum_gives_height_and_width_and_scale_changes_nothing(in_tmp):
    # LeNet: scale 0.00390625, no crop; first Datum 1x28x28 -> [64,1,28,28].
    write_lmdb(in_tmp / "examples/mnist/mnist_train_lmdb", datum(1, 28, 28))
    assert analyze(str(LENET)).blobs["data"] == (64, 1, 28, 28)


def write_leveldb(path: Path, *values: bytes) -> None:
    plyvel = pytest.importorskip("plyvel")
    path.parent.mkdir(parents=True, exist_ok=True)
    db = plyvel.DB(str(path), create_if_missing=True)
    for i, value in enumerate(values):
        db.put(f"{i:08d}".encode(), value)
    db.close()


def test_a_leveldb_is_read_as_its_backend_says_and_left_as_it_was(in_tmp):
    path = in_tmp / "examples/mnist/mnist_train_leveldb"
    write_leveldb(path, datum(1, 28, 28), datum(3, 9, 9))
    before = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in path.iterdir()}
    net = net_copy(LENET, **{'source: "examples/mnist/mnist_train_lmdb"\n    batch_size: 64\n    backend: LMDB': 'source: "examples/mnist/mnist_train_leveldb"\n    batch_size: 64\n    backend: LEVELDB'})
    assert analyze(net).blobs["data"] == (64, 1, 28, 28)
    assert {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in path.iterdir()} == before  # no LOG, LOCK or MANIFEST written


def test_an_encoded_datum_is_sized_from_its_image_header(in_tmp):
    # A 40x30 JPEG in colour and a grey PNG: CIFAR-10 quick has no crop -> the image's own size.
    write_mean(in_tmp / "examples/cifar10/mean.binaryproto", 3, 30, 40)
    write_lmdb(in_tmp / "examples/cifar10/cifar10_train_lmdb", encoded_datum(Image.new("RGB", (40, 30)), "JPEG"))
    write_lmdb(in_tmp / "examples/cifar10/cifar10_test_lmdb", encoded_datum(Image.new("L", (40, 30)), "PNG"))
    train = analyze(str(CIFAR))
    assert train.blobs["data"] == (100, 3, 30, 40)
    assert "data: [100,3,30,40] from examples/cifar10/cifar10_train_lmdb (first Datum encoded JPEG 3x30x40; mean_file 3x30x40)" in train.shaped.notes
    result = run("analyze", str(CIFAR), "--phase", "TEST")  # the grey image against a colour mean
    assert result.exit_code == 2 and "mean_file examples/cifar10/mean.binaryproto is 3x30x40, but the images of examples/cifar10/cifar10_test_lmdb are 1x30x40" in result.output


@pytest.mark.parametrize(
    ("image", "kind", "channels"),
    [
        (Image.new("RGBA", (28, 28)), "PNG", 4),  # imdecode(data, -1) keeps the alpha channel
        (Image.new("LA", (28, 28)), "PNG", 4),  # grey with alpha: grfmt_png.cpp decodes it as BGRA
        (Image.new("P", (28, 28)), "PNG", 3),  # a palette without transparency: BGR
        (Image.new("CMYK", (28, 28)), "JPEG", 3),  # grfmt_jpeg.cpp: more than one component is BGR
    ],
    ids=["rgba-png", "grey-alpha-png", "palette-png", "cmyk-jpeg"],
)
def test_an_encoded_datum_has_the_channels_opencv_decodes(in_tmp, image, kind, channels):
    write_lmdb(in_tmp / "examples/mnist/mnist_train_lmdb", encoded_datum(image, kind))
    assert analyze(str(LENET)).blobs["data"] == (64, channels, 28, 28)


def test_force_color_decodes_a_grey_image_to_three_channels(in_tmp):
    write_lmdb(in_tmp / "examples/mnist/mnist_train_lmdb", encoded_datum(Image.new("L", (28, 28)), "PNG"))
    net = net_copy(LENET, **{"scale: 0.00390625\n  }\n  data_param {\n    source: \"examples/mnist/mnist_train_lmdb\"": "scale: 0.00390625\n    force_color: true\n  }\n  data_param {\n    source: \"examples/mnist/mnist_train_lmdb\""})
    assert analyze(net).blobs["data"] == (64, 3, 28, 28)


def test_a_mean_file_of_another_size_is_the_error_caffe_would_hit(in_tmp):
    # CIFAR-10's mean is 3x32x32; a database of 3x28x28 images stops Caffe at its first batch.
    write_lmdb(in_tmp / "examples/cifar10/cifar10_train_lmdb", datum(3, 28, 28))
    write_mean(in_tmp / "examples/cifar10/mean.binaryproto", 3, 32, 32)
    result = run("analyze", str(CIFAR))
    assert result.exit_code == 2
    assert re.search(r"cifar10_quick_train_test\.prototxt:\d+.*layer 'cifar'.*mean_file examples/cifar10/mean\.binaryproto is 3x32x32, but the images of examples/cifar10/cifar10_train_lmdb are 3x28x28", result.output)


def test_a_crop_larger_than_the_datum_is_refused(in_tmp):
    write_lmdb(in_tmp / "examples/imagenet/ilsvrc12_train_lmdb", datum(3, 200, 256))
    result = run("analyze", str(ALEXNET))
    assert result.exit_code == 2 and "crop_size 227 exceeds the first record of examples/imagenet/ilsvrc12_train_lmdb, 200x256" in result.output


def test_input_that_agrees_with_the_database_fills_and_one_that_contradicts_it_is_refused(in_tmp):
    write_lmdb(in_tmp / "examples/imagenet/ilsvrc12_train_lmdb", datum(3, 256, 256))
    assert analyze(str(ALEXNET), inputs={"data": (3, 227, 227)}).blobs["data"] == (256, 3, 227, 227)
    result = run("analyze", str(ALEXNET), "--input", "data=1,227,227")
    assert result.exit_code == 2
    assert "--input data=1,227,227 contradicts the file (with its data source examples/imagenet/ilsvrc12_train_lmdb): it states 256,3,227,227 for 'data' (axis 1: 3, not 1)" in result.output
    overridden = run("analyze", str(ALEXNET), "--override-input", "data=256,1,227,227", "--json")
    assert overridden.exit_code == 0, overridden.output
    document = json.loads(overridden.output)
    assert document["blobs"][0] == {"name": "data", "shape": [256, 1, 227, 227]}
    assert [note for note in document["notes"] if note.startswith("data: ")] == []  # the override's own note says where it came from


def test_the_note_gives_the_batch_analysed(in_tmp):
    write_lmdb(in_tmp / "examples/mnist/mnist_train_lmdb", datum(1, 28, 28))
    assert "data: [8,1,28,28] from examples/mnist/mnist_train_lmdb (first Datum 1x28x28)" in analyze(str(LENET), batch=8).shaped.notes


def test_the_json_output_says_where_the_shape_came_from(in_tmp):
    write_lmdb(in_tmp / "examples/mnist/mnist_train_lmdb", datum(1, 28, 28))
    result = run("analyze", str(LENET), "--json")
    assert result.exit_code == 0, result.output
    assert "data: [64,1,28,28] from examples/mnist/mnist_train_lmdb (first Datum 1x28x28)" in json.loads(result.output)["notes"]


def test_reading_an_lmdb_writes_nothing_into_it(in_tmp):
    path = in_tmp / "examples/mnist/mnist_train_lmdb"
    write_lmdb(path, datum(1, 28, 28))
    before = {p.name: p.stat().st_mtime_ns for p in path.iterdir()}
    analyze(str(LENET))
    assert {p.name: p.stat().st_mtime_ns for p in path.iterdir()} == before


# ---- where sources are looked for, and when they cannot be read ----------------------


def test_a_relative_source_resolves_against_the_working_directory_not_the_nets_folder(in_tmp, monkeypatch):
    (in_tmp / "models").mkdir()
    (in_tmp / "models/lenet.prototxt").write_text(LENET.read_text())
    write_lmdb(in_tmp / "examples/mnist/mnist_train_lmdb", datum(1, 28, 28))
    assert analyze("models/lenet.prototxt").blobs["data"] == (64, 1, 28, 28)
    monkeypatch.chdir(in_tmp / "models")  # the net's folder: no examples/ there
    result = run("analyze", "lenet.prototxt")
    assert result.exit_code == 2 and "--input data=_,C,H,W" in result.output
    # Issue 34: the request said nothing of where the source was looked for.
    assert f"; its source examples/mnist/mnist_train_lmdb is not at {in_tmp / 'models'}/examples/mnist/mnist_train_lmdb (Caffe opens a relative source from the folder it runs in" in result.output


def test_a_missing_source_keeps_the_precise_request_for_input(in_tmp):
    result = run("analyze", str(ALEXNET))
    assert result.exit_code == 2
    assert "the file does not tell the shape of 1 data blob(s): 'data' (layer 'data', Data, line 2)" in result.output
    assert "--input data=_,C,227,227" in result.output and "caffemem[data]" not in result.output


def test_a_corrupt_lmdb_is_one_message_naming_the_file_and_the_layer(in_tmp):
    path = in_tmp / "examples/imagenet/ilsvrc12_train_lmdb"
    path.mkdir(parents=True)
    (path / "data.mdb").write_bytes(b"not an lmdb" * 100)
    result = run("analyze", str(ALEXNET))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert re.search(r"train_val\.prototxt:2.*layer 'data'.*cannot read this layer's data source: .*examples/imagenet/ilsvrc12_train_lmdb is not an LMDB", result.output)


def test_a_record_that_is_not_a_datum_is_refused(in_tmp):
    write_lmdb(in_tmp / "examples/imagenet/ilsvrc12_train_lmdb", b"\xff\xff\xff garbage")
    result = run("analyze", str(ALEXNET))
    assert result.exit_code == 2 and "the first record of" in result.output and "is not a Datum" in result.output


def test_an_lmdb_read_as_the_default_leveldb_backend_says_which_backend_to_set(in_tmp):
    pytest.importorskip("plyvel")
    path = in_tmp / "examples/mnist/mnist_train_lmdb"
    write_lmdb(path, datum(1, 28, 28))
    before = sorted(p.name for p in path.iterdir())
    net = net_copy(LENET, **{"batch_size: 64\n    backend: LMDB": "batch_size: 64"})
    result = run("analyze", net)
    assert result.exit_code == 2
    assert "it holds an LMDB (data.mdb): set data_param { backend: LMDB } (the default is LEVELDB)" in result.output
    assert sorted(p.name for p in path.iterdir()) == before  # LevelDB's LOCK and LOG are not written into it


def test_without_the_extra_the_request_for_input_names_it_once(in_tmp, monkeypatch):
    # Databases need no library (caffemem/databases); an encoded image's header needs Pillow.
    write_lmdb(in_tmp / "examples/imagenet/ilsvrc12_train_lmdb", encoded_datum(Image.new("RGB", (256, 256)), "PNG"))
    monkeypatch.setitem(sys.modules, "PIL.Image", None)  # as if not installed: importing it raises ImportError
    result = run("analyze", str(ALEXNET))
    assert result.exit_code == 2
    assert "--input data=_,C,227,227" in result.output
    assert result.output.count("pip install 'caffemem[data]'") == 1 and "(Pillow is not installed (import PIL.Image))" in result.output


def test_a_database_needs_no_library(in_tmp, monkeypatch):
    write_lmdb(in_tmp / "examples/imagenet/ilsvrc12_train_lmdb", datum(3, 256, 256))
    for name in ("lmdb", "plyvel"):
        monkeypatch.setitem(sys.modules, name, None)
    assert analyze(str(ALEXNET)).blobs["data"] == (256, 3, 227, 227)


# ---- ImageData, WindowData ----------------------------------------------------------


def image_list(first_line: str, image: "Image.Image | bytes | None" = None) -> None:
    """FlickrStyle's TRAIN list with one line, and the image it names (or bytes in its place)."""
    Path("data/flickr_style").mkdir(parents=True)
    Path("data/flickr_style/train.txt").write_text(first_line + "\n")
    path = Path(first_line.rpartition(" ")[0])
    if image is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(image, bytes):
        path.write_bytes(image)
    else:
        image.save(path)


def test_image_data_resized_by_new_height_and_width_reads_only_the_list(in_tmp):
    # FlickrStyle: new 256x256, crop 227; the list's images need not exist to be resized.
    image_list("images/missing.jpg 3")
    write_mean(in_tmp / "data/ilsvrc12/imagenet_mean.binaryproto", 3, 256, 256)
    net = analyze(str(FLICKR))
    assert net.blobs["data"] == (50, 3, 227, 227)
    assert "data: [50,3,227,227] from data/flickr_style/train.txt (first image images/missing.jpg, resized to new_height/new_width 256x256, crop_size 227; mean_file 3x256x256)" in net.shaped.notes


def test_image_data_without_a_resize_takes_the_first_images_size(in_tmp):
    # No new_height/new_width, no crop: the first image, 300 wide and 240 high, grey on disk
    # but read in colour (is_color defaults to true) -> [50,3,240,300].
    image_list("images/a b.png 3", Image.new("L", (300, 240)))
    net = net_copy(FLICKR, **{"new_height: 256\n    new_width: 256\n": "", "crop_size: 227\n    mean_file": "mean_file"})
    assert analyze(net).blobs["data"] == (50, 3, 240, 300)


def test_image_data_in_grey_has_one_channel(in_tmp):
    image_list("images/a.jpg 0", Image.new("RGB", (256, 256)))
    net = net_copy(FLICKR, **{"new_height: 256\n    new_width: 256\n": "is_color: false\n", "    mean_file: \"data/ilsvrc12/imagenet_mean.binaryproto\"\n": ""})
    assert analyze(net).blobs["data"] == (50, 1, 227, 227)


def test_an_image_that_cannot_be_decoded_is_refused(in_tmp):
    image_list("images/a.jpg 0", b"not a jpeg")
    net = net_copy(FLICKR, **{"new_height: 256\n    new_width: 256\n": ""})
    result = run("analyze", net)
    assert result.exit_code == 2 and "the first image images/a.jpg cannot be decoded (cannot identify image file)" in result.output.replace(str(in_tmp) + os.sep, "")


def test_an_empty_image_list_is_refused_as_caffe_refuses_it(in_tmp):
    Path("data/flickr_style").mkdir(parents=True)
    Path("data/flickr_style/train.txt").write_text("")
    result = run("analyze", str(FLICKR))
    assert result.exit_code == 2 and 'is empty (Caffe stops: "File is empty")' in result.output


def test_window_data_takes_the_channels_of_the_window_files_first_image(in_tmp):
    # R-CNN fine-tuning: crop 227, batch 128; a window file of grey images -> [128,1,227,227].
    folder = in_tmp / "examples/finetune_pascal_detection"
    folder.mkdir(parents=True)
    (folder / "window_file_2007_trainval.txt").write_text("# 0\n/data/VOC2007/JPEGImages/000005.jpg\n1\n375\n500\n1\n9 1.0 262 210 323 338\n")
    net = analyze(str(PASCAL))
    assert net.blobs["data"] == (128, 1, 227, 227)
    assert "data: [128,1,227,227] from examples/finetune_pascal_detection/window_file_2007_trainval.txt (first image /data/VOC2007/JPEGImages/000005.jpg: 1x375x500, crop_size 227)" in net.shaped.notes
    assert analyze(str(PASCAL), "TEST").blobs["data"] == (128, 3, 227, 227)  # its window file is missing: colour, as before


def test_a_window_file_in_another_format_is_refused(in_tmp):
    folder = in_tmp / "examples/finetune_pascal_detection"
    folder.mkdir(parents=True)
    (folder / "window_file_2007_trainval.txt").write_text("000005.jpg 1 375 500\n")
    result = run("analyze", str(PASCAL))
    assert result.exit_code == 2 and "is not a window file" in result.output


@pytest.mark.parametrize("channels", ["\u0663", "3_0", "-3"])
def test_a_window_files_counts_are_ascii_digits_as_caffes_stream_reads_them(in_tmp, channels):
    # Issue 31, item 18: int() took Arabic-Indic digits and "3_0"; `infile >> channels`
    # in the C locale reads neither.
    folder = in_tmp / "examples/finetune_pascal_detection"
    folder.mkdir(parents=True)
    (folder / "window_file_2007_trainval.txt").write_text(f"# 0\n/data/VOC2007/JPEGImages/000005.jpg\n{channels}\n375\n500\n1\n9 1.0 262 210 323 338\n", encoding="utf-8")
    result = run("analyze", str(PASCAL))
    assert result.exit_code == 2 and f"is not a window file (# index, image path, channels, height, width, windows...): {channels!r} is not a whole number" in result.output


# ---- HDF5Data -----------------------------------------------------------------------

HDF5_LAYER = 'layer {\n  name: "mnist"\n  type: "HDF5Data"\n  top: "data"\n  top: "label"\n  include {\n    phase: TRAIN\n  }\n  hdf5_data_param {\n    source: "examples/mnist/train_h5.txt"\n    batch_size: 64\n  }\n}\n'


def lenet_on_hdf5() -> str:
    """LeNet with its TRAIN Data layer replaced by an HDF5Data layer reading the same tops."""
    text = LENET.read_text()
    start = text.index("layer {")
    end = text.index("layer {", start + 1)
    Path("net.prototxt").write_text(text[:start] + HDF5_LAYER + text[end:])
    return "net.prototxt"


def write_h5(path: Path, **datasets: tuple[int, ...]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as h5:
        for name, shape in datasets.items():
            h5.create_dataset(name, data=np.zeros(shape, dtype=np.float32))


def test_hdf5_data_takes_the_first_listed_files_datasets_after_the_batch(in_tmp):
    # The first file's data is 10x1x28x28 and label 10: batch 64 -> [64,1,28,28], [64].
    write_h5(in_tmp / "h5/part0.h5", data=(10, 1, 28, 28), label=(10,))
    write_h5(in_tmp / "h5/part1.h5", data=(10, 3, 9, 9), label=(10,))
    Path("examples/mnist").mkdir(parents=True)
    Path("examples/mnist/train_h5.txt").write_text("h5/part0.h5\nh5/part1.h5\n")
    net = analyze(lenet_on_hdf5())
    assert (net.blobs["data"], net.blobs["label"]) == ((64, 1, 28, 28), (64,))
    assert "label: [64] from examples/mnist/train_h5.txt (first file h5/part0.h5: data 10x1x28x28, label 10)" in net.shaped.notes


def test_hdf5_datasets_with_different_rows_are_refused(in_tmp):
    write_h5(in_tmp / "h5/part0.h5", data=(10, 1, 28, 28), label=(9,))
    Path("examples/mnist").mkdir(parents=True)
    Path("examples/mnist/train_h5.txt").write_text("h5/part0.h5\n")
    result = run("analyze", lenet_on_hdf5())
    assert result.exit_code == 2 and "different row counts (data 10, label 9)" in result.output


def test_an_hdf5_file_without_a_tops_dataset_is_refused(in_tmp):
    write_h5(in_tmp / "h5/part0.h5", data=(10, 1, 28, 28))
    Path("examples/mnist").mkdir(parents=True)
    Path("examples/mnist/train_h5.txt").write_text("h5/part0.h5\n")
    result = run("analyze", lenet_on_hdf5())
    assert result.exit_code == 2 and "has no dataset 'label' for the top of that name" in result.output


# ---- AnnotatedData (weiliu89/caffe ssd) ---------------------------------------------


def annotated_datum(boxes: int, typed: bool = True) -> bytes:
    message = caffe_pb2.AnnotatedDatum()
    message.datum.CopyFrom(caffe_pb2.Datum.FromString(encoded_datum(Image.new("RGB", (500, 375)), "JPEG")))
    if typed:
        message.type = caffe_pb2.AnnotatedDatum.BBOX
    group = message.annotation_group.add(group_label=12)
    for _ in range(boxes):
        group.annotation.add()
    return message.SerializeToString()


def test_annotated_data_takes_the_channels_and_the_first_datums_boxes(in_tmp):
    # SSD300: resize 300x300, batch 4; 3 boxes -> label [1,1,3,8].
    source = re.search(r'source: "([^"]+)"', SSD.read_text()).group(1)
    write_lmdb(in_tmp / source, annotated_datum(3))
    net = analyze(str(SSD))
    assert (net.blobs["data"], net.blobs["label"]) == ((4, 3, 300, 300), (1, 1, 3, 8))


def test_annotated_data_without_a_type_has_a_label_per_image(in_tmp):
    source = re.search(r'source: "([^"]+)"', SSD.read_text()).group(1)
    write_lmdb(in_tmp / source, annotated_datum(3, typed=False))
    text = SSD.read_text()
    assert "anno_type" not in text.split("layer {")[1]
    assert analyze(str(SSD)).blobs["label"] == (4, 1, 1, 1)


def test_a_listed_image_that_is_missing_keeps_the_request_for_input_and_names_it(in_tmp):
    image_list("images/gone.jpg 0")
    net = net_copy(FLICKR, **{"new_height: 256\n    new_width: 256\n": "", "crop_size: 227\n    mean_file": "mean_file"})
    result = run("analyze", net)
    assert result.exit_code == 2
    assert "--input data=_,3,H,W" in result.output and "the first image images/gone.jpg that data/flickr_style/train.txt lists does not exist" in result.output


# ---- the forks' image-and-label-map lists -------------------------------------------

SEGNET = MODELS / "segnet" / "segnet_train.prototxt"  # DenseImageData, no resize or crop, batch 4
HED = MODELS / "hed" / "train_val.prototxt"  # ImageLabelmapData, root_folder ../../data/HED-BSDS/, batch 1


def test_segnets_dense_image_data_takes_the_first_images_size_for_image_and_label(in_tmp):
    # CamVid: 480x360 frames -> data [4,3,360,480], label [4,1,360,480].
    Path("CamVid/train").mkdir(parents=True)
    Image.new("RGB", (480, 360)).save("CamVid/train/0001TP_006690.png")
    Path("CamVid/train.txt").write_text("CamVid/train/0001TP_006690.png CamVid/trainannot/0001TP_006690.png\n")
    net = analyze(net_copy(SEGNET, **{'"/SegNet/CamVid/train.txt"': '"CamVid/train.txt"'}))
    assert (net.blobs["data"], net.blobs["label"]) == ((4, 3, 360, 480), (4, 1, 360, 480))
    assert "label: [4,1,360,480] from CamVid/train.txt (first image CamVid/train/0001TP_006690.png: PNG 480x360, read with 3 channel(s))" in net.shaped.notes


def test_heds_image_labelmap_data_reads_its_list_through_root_folder(in_tmp, monkeypatch):
    # HED's list and images are under ../../data/HED-BSDS/ from where it is run: 481x321 -> [1,3,321,481].
    root = in_tmp / "data/HED-BSDS"
    (root / "train/aug_data").mkdir(parents=True)
    Image.new("RGB", (481, 321)).save(root / "train/aug_data/100075.jpg")
    (root / "train_pair.lst").write_text("train/aug_data/100075.jpg train/aug_gt/100075.png\n")
    (in_tmp / "examples/hed").mkdir(parents=True)
    monkeypatch.chdir(in_tmp / "examples/hed")
    net = analyze(str(HED))
    assert (net.blobs["data"], net.blobs["label"]) == ((1, 3, 321, 481), (1, 1, 321, 481))


def test_mean_values_that_do_not_fit_the_databases_channels_are_refused(in_tmp):
    # SSD's three mean_values against a grey database: Caffe stops at its first batch.
    write_lmdb(in_tmp / "examples/imagenet/ilsvrc12_train_lmdb", datum(1, 256, 256))
    net = net_copy(ALEXNET, **{'    mean_file: "data/ilsvrc12/imagenet_mean.binaryproto"\n  }\n  data_param {\n    source: "examples/imagenet/ilsvrc12_train_lmdb"': '    mean_value: 104\n    mean_value: 117\n    mean_value: 123\n  }\n  data_param {\n    source: "examples/imagenet/ilsvrc12_train_lmdb"'})
    result = run("analyze", net)
    assert result.exit_code == 2 and "transform_param has 3 mean_value(s) for the 1 channel(s) of examples/imagenet/ilsvrc12_train_lmdb" in result.output



# ---- old formats: the upgraded layer reads its source as the new one does -------------


def test_a_v1_data_layer_reads_its_lmdb_after_the_upgrade(in_tmp):
    # legacy V1 GoogLeNet: DATA, LMDB, batch 32, crop_size 224 -> [32,3,224,224].
    write_lmdb(in_tmp / "examples/imagenet/ilsvrc12_train_lmdb", datum(3, 256, 256))
    assert analyze(str(MODELS / "legacy_v1_bvlc_googlenet" / "train_val.prototxt")).blobs["data"] == (32, 3, 224, 224)


def test_a_v0_data_layer_reads_its_leveldb_and_meanfile_from_where_caffe_runs(in_tmp, monkeypatch):
    # V0 ImageNet, run from examples/imagenet: source ilvsrc12_train_leveldb (LEVELDB, the
    # default), meanfile ../../data/ilsvrc12/imagenet_mean.binaryproto, batchsize 256, cropsize 227.
    write_leveldb(in_tmp / "examples/imagenet/ilvsrc12_train_leveldb", datum(3, 256, 256))
    write_mean(in_tmp / "data/ilsvrc12/imagenet_mean.binaryproto", 3, 256, 256)
    monkeypatch.chdir(in_tmp / "examples/imagenet")
    net = analyze(str(MODELS / "legacy_v0_bvlc_imagenet" / "imagenet_train.prototxt"))
    assert net.blobs["data"] == (256, 3, 227, 227)
    assert "data: [256,3,227,227] from ilvsrc12_train_leveldb (first Datum 3x256x256, crop_size 227; mean_file 3x256x256)" in net.shaped.notes


# ---- issue 31: a source is read in place, read-only, in bounded work ---------------------
#
# LevelDB and LMDB are read by caffemem/databases (never by the libraries: LevelDB writes on
# every open, the lmdb binding maps the file); every file a reader opens is a regular file
# checked from its opened descriptor, and noted as read by the run.

LENET_LEVELDB = {'source: "examples/mnist/mnist_train_lmdb"\n    batch_size: 64\n    backend: LMDB': 'source: "examples/mnist/mnist_train_leveldb"\n    batch_size: 64\n    backend: LEVELDB'}
HERE = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "CAFFEMEM_DEVICE": "cpu"}


def folder_state(path: Path) -> dict:
    """Each entry of a folder: its link target, or its bytes and mtime."""
    return {p.name: os.readlink(p) if p.is_symlink() else (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(path.iterdir())}


def write_leveldb_tables(path: Path, values: list[bytes], compression: str | None = "snappy") -> None:
    """A LevelDB whose records sit in tables, as convert_imageset's do (a small write
    buffer, 64 KiB at least, flushes them out of the log)."""
    plyvel = pytest.importorskip("plyvel")
    path.parent.mkdir(parents=True, exist_ok=True)
    db = plyvel.DB(str(path), create_if_missing=True, write_buffer_size=1 << 12, compression=compression)
    for i, value in enumerate(values):
        db.put(f"{i:08d}".encode(), value)
    db.close()
    assert any(p.suffix == ".ldb" for p in path.iterdir())


def cli(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    """``caffemem ARGS`` in its own process (what a hang or a signal would do to pytest,
    it does to that process alone)."""
    try:
        return subprocess.run([sys.executable, "-m", "caffemem", *args], cwd=cwd, env=HERE, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"caffemem {' '.join(args)} did not end in {timeout} s")


def test_reading_a_leveldb_writes_nothing_through_a_link_in_it(in_tmp):
    # LevelDB's recovery of this log writes the table 000005.ldb and MANIFEST-000004: a link
    # of that name in the user's folder took the write to the file it points at.
    path = in_tmp / "examples/mnist/mnist_train_leveldb"
    write_leveldb(path, datum(1, 28, 28))
    precious = in_tmp / "precious.txt"
    precious.write_text("keep me\n")
    (path / "000005.ldb").symlink_to(precious)
    before = folder_state(path)
    assert analyze(net_copy(LENET, **LENET_LEVELDB)).blobs["data"] == (64, 1, 28, 28)
    assert precious.read_text() == "keep me\n"
    assert folder_state(path) == before


def test_reading_a_leveldb_leaves_files_of_the_names_leveldb_would_write(in_tmp):
    path = in_tmp / "examples/mnist/mnist_train_leveldb"
    write_leveldb(path, datum(1, 28, 28))
    (path / "000005.ldb").write_bytes(b"the user's own file\n")
    (path / "MANIFEST-000004").write_bytes(b"another one\n")
    before = folder_state(path)
    assert analyze(net_copy(LENET, **LENET_LEVELDB)).blobs["data"] == (64, 1, 28, 28)
    assert folder_state(path) == before


@pytest.mark.parametrize("compression", [None, "snappy"])
def test_a_leveldb_whose_records_sit_in_tables_is_read(in_tmp, compression):
    path = in_tmp / "examples/mnist/mnist_train_leveldb"
    write_leveldb_tables(path, [datum(1, 20, 24, data=bytes(480))] + [datum(3, 9, 9, data=bytes(243))] * 1000, compression)
    before = folder_state(path)
    assert analyze(net_copy(LENET, **LENET_LEVELDB)).blobs["data"] == (64, 1, 20, 24)
    assert folder_state(path) == before


def test_a_corrupt_leveldb_table_is_one_message_naming_the_users_folder(in_tmp):
    # A flipped first byte: LevelDB's iterator raised CorruptionError (exit 3), and a
    # truncated table's IOError named the temporary folder the old reader linked it from.
    path = in_tmp / "examples/mnist/mnist_train_leveldb"
    write_leveldb_tables(path, [datum(1, 28, 28, data=bytes(784))] * 200)
    for table in path.glob("*.ldb"):
        table.write_bytes(bytes([table.read_bytes()[0] ^ 0xFF]) + table.read_bytes()[1:])
    result = run("analyze", net_copy(LENET, **LENET_LEVELDB))
    assert result.exit_code == 2, result.output
    assert f"cannot read this layer's data source: the LevelDB {path} is corrupt: " in result.output and "fails its checksum" in result.output
    assert "caffemem-leveldb-" not in result.output and "Traceback" not in result.output


def test_a_truncated_leveldb_table_names_the_users_folder(in_tmp):
    path = in_tmp / "examples/mnist/mnist_train_leveldb"
    write_leveldb_tables(path, [datum(1, 28, 28, data=bytes(784))] * 200)
    for table in path.glob("*.ldb"):
        table.write_bytes(table.read_bytes()[:100])
    result = run("analyze", net_copy(LENET, **LENET_LEVELDB))
    assert result.exit_code == 2, result.output
    assert f"the LevelDB {path} is corrupt: " in result.output and "its MANIFEST says" in result.output
    assert "caffemem-leveldb-" not in result.output and "tmp" + os.sep + "caffemem" not in result.output


def test_a_leveldb_manifest_that_is_a_fifo_is_refused_without_waiting(in_tmp):
    path = in_tmp / "examples/mnist/mnist_train_leveldb"
    write_leveldb(path, datum(1, 28, 28))
    manifest = next(path.glob("MANIFEST-*"))
    manifest.unlink()
    os.mkfifo(manifest)
    done = cli("analyze", net_copy(LENET, **LENET_LEVELDB), cwd=in_tmp)
    assert done.returncode == 2, done.stderr
    assert f"{manifest}: is a FIFO (named pipe), not a LevelDB MANIFEST: save it to a regular file first" in done.stderr


def test_an_lmdb_data_file_that_is_a_fifo_is_refused_without_waiting(in_tmp):
    path = in_tmp / "examples/mnist/mnist_train_lmdb"
    path.mkdir(parents=True)
    os.mkfifo(path / "data.mdb")
    done = cli("analyze", str(LENET), cwd=in_tmp)
    assert done.returncode == 2, done.stderr
    assert f"{path / 'data.mdb'}: is a FIFO (named pipe), not a database file: save it to a regular file first" in done.stderr


def test_an_lmdb_whose_first_size_field_runs_past_the_file_is_refused_not_a_sigbus(in_tmp):
    # The lmdb binding maps data.mdb: a value size of 0x7fffffff (the node header, 8 bytes
    # before the key) read past the file's end and killed the process (SIGBUS, rc -7).
    path = in_tmp / "examples/mnist/mnist_train_lmdb"
    write_lmdb(path, datum(1, 28, 28))
    data = bytearray((path / "data.mdb").read_bytes())
    key = data.index(b"00000000")
    data[key - 8 : key - 4] = (0x7FFFFFFF).to_bytes(4, "little")
    (path / "data.mdb").write_bytes(bytes(data))
    done = cli("analyze", str(LENET), cwd=in_tmp)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert f"the LMDB {path} is corrupt: page 2's first value (2147483647 bytes) runs past the page" in done.stderr


def test_an_lmdb_value_on_overflow_pages_is_read(in_tmp):
    # A 3x256x256 Datum is 196 KB: LMDB puts it on overflow pages (F_BIGDATA).
    write_lmdb(in_tmp / "examples/imagenet/ilsvrc12_train_lmdb", datum(3, 256, 256, data=bytes(3 * 256 * 256)))
    assert analyze(str(ALEXNET)).blobs["data"] == (256, 3, 227, 227)


def test_a_listed_image_that_is_a_fifo_or_a_folder_says_what_it_is(in_tmp):
    net = net_copy(FLICKR, **{"new_height: 256\n    new_width: 256\n": ""})
    image_list("images/a.jpg 0")
    Path("images").mkdir()
    os.mkfifo("images/a.jpg")
    result = run("analyze", net)
    assert result.exit_code == 2 and "the first image images/a.jpg that data/flickr_style/train.txt lists is a FIFO (named pipe), not a regular file" in result.output
    os.unlink("images/a.jpg")
    os.mkdir("images/a.jpg")
    result = run("analyze", net)
    assert result.exit_code == 2 and "the first image images/a.jpg that data/flickr_style/train.txt lists is a directory, not a regular file" in result.output


def test_a_listed_hdf5_file_that_is_a_fifo_says_what_it_is(in_tmp):
    Path("examples/mnist").mkdir(parents=True)
    Path("examples/mnist/train_h5.txt").write_text("h5/part0.h5\n")
    Path("h5").mkdir()
    os.mkfifo("h5/part0.h5")
    result = run("analyze", lenet_on_hdf5())
    assert result.exit_code == 2 and "the first file h5/part0.h5 that examples/mnist/train_h5.txt lists is a FIFO (named pipe), not a regular file" in result.output


def test_a_list_that_is_a_folder_is_refused_not_taken_for_missing(in_tmp):
    Path("data/flickr_style/train.txt").mkdir(parents=True)
    result = run("analyze", str(FLICKR))
    assert result.exit_code == 2 and f"the list {in_tmp / 'data/flickr_style/train.txt'} is a directory, not a list file" in result.output


def test_an_hdf5_external_link_to_a_fifo_is_refused_without_waiting(in_tmp):
    # h5py followed the link when the dataset was looked up: opening the FIFO blocked.
    Path("h5").mkdir()
    os.mkfifo("h5/elsewhere.h5")
    with h5py.File("h5/part0.h5", "w") as h5:
        h5["data"] = h5py.ExternalLink("elsewhere.h5", "/data")  # resolved from the file's folder
        h5.create_dataset("label", data=np.zeros((10,), dtype=np.float32))
    Path("examples/mnist").mkdir(parents=True)
    Path("examples/mnist/train_h5.txt").write_text("h5/part0.h5\n")
    done = cli("analyze", lenet_on_hdf5(), cwd=in_tmp)
    assert done.returncode == 2, done.stderr
    assert f"{in_tmp / 'h5/elsewhere.h5'}, the file of the external link 'data' in {in_tmp / 'h5/part0.h5'}, is a FIFO (named pipe), not a regular file" in done.stderr


def test_an_hdf5_external_link_to_a_regular_file_is_followed(in_tmp):
    write_h5(in_tmp / "h5/elsewhere.h5", data=(10, 1, 28, 28))
    with h5py.File("h5/part0.h5", "w") as h5:
        h5["data"] = h5py.ExternalLink("elsewhere.h5", "/data")
        h5["label"] = h5py.SoftLink("/labels/all")
        h5.create_dataset("labels/all", data=np.zeros((10,), dtype=np.float32))
    Path("examples/mnist").mkdir(parents=True)
    Path("examples/mnist/train_h5.txt").write_text("h5/part0.h5\n")
    net = analyze(lenet_on_hdf5())
    assert (net.blobs["data"], net.blobs["label"]) == ((64, 1, 28, 28), (64,))


def test_every_file_a_source_reader_reads_is_noted_on_every_run(in_tmp):
    # The records are cached for the process (fit and optimize build a net many times):
    # a second command reads none of the files again, yet no output may land on them.
    from caffemem.prototxt.read import forget_reads, read_by_this_run

    image_list("images/a.png 0", Image.new("RGB", (256, 256)))
    write_mean(in_tmp / "data/ilsvrc12/imagenet_mean.binaryproto", 3, 256, 256)
    net = net_copy(FLICKR, **{"new_height: 256\n    new_width: 256\n": ""})
    read = ["data/flickr_style/train.txt", "images/a.png", "data/ilsvrc12/imagenet_mean.binaryproto"]
    for _ in range(2):
        forget_reads()
        analyze(net)
        assert [read_by_this_run(name) for name in read] == [True, True, True]
