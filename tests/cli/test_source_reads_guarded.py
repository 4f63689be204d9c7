"""Issue 31 item 12: no output lands on a file a data source's reader read (the ImageData
list, the mean file), even when the source's record comes from the cache of an earlier
command in the same process (fit and optimize build a net many times; tests and the API
run several commands in one process)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from conftest import SHARED, needs_shared

from caffemem.cli import main
from caffemem.schema import caffe_pb2

FLICKR = SHARED / "models" / "finetune_flickr_style" / "train_val.prototxt"  # ImageData (new 256x256: no image read), mean_file
LIST = "data/flickr_style/train.txt"
MEAN = "data/ilsvrc12/imagenet_mean.binaryproto"

pytestmark = needs_shared


@pytest.fixture
def flickr_sources(tmp_path, monkeypatch):
    """FlickrStyle's sources in the working directory: its TRAIN and TEST lists and the
    ImageNet mean (their bytes, to compare after the run)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data/flickr_style").mkdir(parents=True)
    (tmp_path / "data/ilsvrc12").mkdir(parents=True)
    for name in (LIST, "data/flickr_style/test.txt"):
        (tmp_path / name).write_text("images/a.jpg 3\n")
    (tmp_path / MEAN).write_bytes(caffe_pb2.BlobProto(num=1, channels=3, height=256, width=256).SerializeToString())
    return {name: (tmp_path / name).read_bytes() for name in (LIST, MEAN)}


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_an_html_report_is_not_written_over_the_image_list_the_run_read(flickr_sources, tmp_path):
    assert run("analyze", FLICKR).exit_code == 0  # the list's record is cached from here on
    result = run("analyze", FLICKR, "--html", LIST)
    assert result.exit_code == 2, result.output
    assert f"{LIST}: --html names a file this run read; choose another file" in result.stderr
    assert (tmp_path / LIST).read_bytes() == flickr_sources[LIST]


def test_a_plan_is_not_written_over_the_mean_file_the_run_read(flickr_sources, tmp_path):
    result = run("optimize", FLICKR, "-o", tmp_path / "out.prototxt", "--plan-json", MEAN)
    assert result.exit_code == 2, result.output
    assert f"{MEAN}: --plan-json names a file this run read; choose another file" in result.stderr
    assert (tmp_path / MEAN).read_bytes() == flickr_sources[MEAN]
    assert not (tmp_path / "out.prototxt").exists()
