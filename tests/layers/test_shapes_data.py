"""Shape rules of BVLC Caffe's data layers (caffemem/layers/data.py).

Each expected shape is what the layer's (Data)LayerSetUp gives its tops in Caffe master:
parameters where Caffe's formula uses parameters only, --input where it reads the data.
"""

from __future__ import annotations

import pytest

from caffemem.errors import CaffememError
from caffemem.layers import NeedsInput, SpecTable


def needs_input(shape_of, text, **kwargs) -> NeedsInput:
    """The NeedsInput a rule raises (fails the test if it returns shapes)."""
    with pytest.raises(NeedsInput) as info:
        shape_of(text, **kwargs)
    return info.value


# ---------------------------------------------------------------- Input


def test_input_one_shape_for_every_top(shape_of):
    # input_layer.cpp: shape_size() == 1 -> every top gets shape(0).
    shapes = shape_of('type: "Input" top: "a" top: "b" input_param { shape { dim: 2 dim: 3 dim: 4 } }')
    assert shapes.tops == ((2, 3, 4), (2, 3, 4))
    assert shapes.params == ()


def test_input_one_shape_per_top(shape_of):
    text = 'type: "Input" top: "a" top: "b" input_param { shape { dim: 10 dim: 3 } shape { dim: 10 } }'
    assert shape_of(text).tops == ((10, 3), (10,))


def test_input_shape_count_must_match_tops(shape_of):
    # CHECK(num_shape == 0 || num_shape == 1 || num_shape == num_top).
    text = 'type: "Input" top: "a" top: "b" top: "c" input_param { shape { dim: 1 } shape { dim: 2 } }'
    with pytest.raises(CaffememError, match="once per top blob"):
        shape_of(text)


def test_input_without_shape_needs_input(shape_of):
    # With no shape the tops stay unshaped until the caller reshapes them.
    error = needs_input(shape_of, 'type: "Input" top: "a" input_param { }')
    assert error.blobs == ["a"]
    assert "--input a=" in error.hint


def test_override_input_wins_over_input_param(shape_of):
    text = 'type: "Input" top: "a" input_param { shape { dim: 2 dim: 3 } }'
    assert shape_of(text, inputs={"a": (5, 7)}, overrides={"a"}).tops == ((5, 7),)


def test_input_flag_that_contradicts_input_param_is_refused(shape_of):
    text = 'type: "Input" top: "a" input_param { shape { dim: 2 dim: 3 } }'
    with pytest.raises(CaffememError, match=r"--input a=5,7 contradicts the file: it states 2,3 for 'a' \(axis 0: 2, not 5\)"):
        shape_of(text, inputs={"a": (5, 7)})


def test_input_refuses_negative_dim(shape_of):
    # Blob::Reshape: CHECK_GE(shape[i], 0).
    with pytest.raises(CaffememError, match="negative"):
        shape_of('type: "Input" top: "a" input_param { shape { dim: 2 dim: -1 } }')


# ---------------------------------------------------------------- DummyData


def test_dummy_data_shape_per_top(shape_of):
    text = 'type: "DummyData" top: "a" top: "b" dummy_data_param { shape { dim: 2 dim: 3 } shape { dim: 4 } }'
    assert shape_of(text).tops == ((2, 3), (4,))


def test_dummy_data_legacy_dims_once_or_per_top(shape_of):
    # Reshape(num, channels, height, width); a field given once applies to every top.
    text = 'type: "DummyData" top: "a" top: "b" dummy_data_param { num: 5 channels: 3 channels: 1 height: 8 width: 8 width: 1 }'
    assert shape_of(text).tops == ((5, 3, 8, 8), (5, 1, 8, 1))


def test_dummy_data_refuses_shape_and_legacy_together(shape_of):
    with pytest.raises(CaffememError, match="legacy"):
        shape_of('type: "DummyData" top: "a" dummy_data_param { num: 1 shape { dim: 1 } }')


def test_dummy_data_filler_count(shape_of):
    # CHECK(num_data_filler == 0 || num_data_filler == 1 || num_data_filler == num_top).
    text = (
        'type: "DummyData" top: "a" top: "b" top: "c" dummy_data_param { shape { dim: 1 } '
        'data_filler { type: "constant" } data_filler { type: "constant" } }'
    )
    with pytest.raises(CaffememError, match="data fillers"):
        shape_of(text)


def test_dummy_data_legacy_field_count(shape_of):
    text = 'type: "DummyData" top: "a" top: "b" top: "c" dummy_data_param { num: 1 num: 2 channels: 1 height: 1 width: 1 }'
    with pytest.raises(CaffememError, match="'num'"):
        shape_of(text)


# ---------------------------------------------------------------- MemoryData


def test_memory_data(shape_of):
    # data: Reshape(batch_size, channels, height, width); label: vector<int>(1, batch_size).
    text = 'type: "MemoryData" top: "data" top: "label" memory_data_param { batch_size: 8 channels: 3 height: 5 width: 6 }'
    assert shape_of(text).tops == ((8, 3, 5, 6), (8,))


def test_memory_data_needs_every_dimension(shape_of):
    # CHECK_GT(batch_size_ * size_, 0).
    with pytest.raises(CaffememError, match="positive"):
        shape_of('type: "MemoryData" top: "data" top: "label" memory_data_param { batch_size: 8 channels: 3 height: 5 }')


# ---------------------------------------------------------------- Data


def test_data_needs_channels_from_the_database(shape_of):
    # InferBlobShape(datum): [1, datum.channels, crop, crop]; channels are in the LMDB.
    text = 'type: "Data" top: "data" top: "label" data_param { batch_size: 64 } transform_param { crop_size: 227 }'
    error = needs_input(shape_of, text)
    assert error.blobs == ["data"]
    assert "--input data=_,C,227,227" in error.hint


def test_data_label_is_derived_when_data_is_given(shape_of):
    # label: vector<int>(1, batch_size).
    text = 'type: "Data" top: "data" top: "label" data_param { batch_size: 64 }'
    assert shape_of(text, inputs={"data": (64, 1, 28, 28)}).tops == ((64, 1, 28, 28), (64,))


def test_data_without_label(shape_of):
    text = 'type: "Data" top: "data" data_param { batch_size: 4 }'
    assert shape_of(text, inputs={"data": (4, 3, 32, 32)}).tops == ((4, 3, 32, 32),)


def test_data_template_without_crop(shape_of):
    error = needs_input(shape_of, 'type: "Data" top: "data" top: "label" data_param { batch_size: 100 }')
    assert "--input data=_,C,H,W" in error.hint


# ---------------------------------------------------------------- ImageData


def test_image_data_resized_then_cropped(shape_of):
    # ReadImageToCVMat(new_height, new_width, is_color) -> 3 channels, then crop_size.
    text = (
        'type: "ImageData" top: "data" top: "label" transform_param { crop_size: 227 } '
        "image_data_param { batch_size: 50 new_height: 256 new_width: 256 }"
    )
    assert shape_of(text).tops == ((50, 3, 227, 227), (50,))


def test_image_data_grey_resized(shape_of):
    text = 'type: "ImageData" top: "data" top: "label" image_data_param { batch_size: 2 new_height: 20 new_width: 30 is_color: false }'
    assert shape_of(text).tops == ((2, 1, 20, 30), (2,))


def test_image_data_crop_only(shape_of):
    text = 'type: "ImageData" top: "data" top: "label" transform_param { crop_size: 10 } image_data_param { batch_size: 2 }'
    assert shape_of(text).tops == ((2, 3, 10, 10), (2,))


def test_image_data_without_size_needs_input(shape_of):
    error = needs_input(shape_of, 'type: "ImageData" top: "data" top: "label" image_data_param { batch_size: 2 }')
    assert error.blobs == ["data"]
    assert "--input data=_,3,H,W" in error.hint


def test_image_data_new_height_and_width_together(shape_of):
    with pytest.raises(CaffememError, match="same time"):
        shape_of('type: "ImageData" top: "data" top: "label" image_data_param { batch_size: 2 new_height: 20 }')


def test_image_data_crop_larger_than_resize(shape_of):
    # InferBlobShape: CHECK_GE(img_height, crop_size).
    text = (
        'type: "ImageData" top: "data" top: "label" transform_param { crop_size: 32 } '
        "image_data_param { batch_size: 2 new_height: 20 new_width: 40 }"
    )
    with pytest.raises(CaffememError, match="crop_size"):
        shape_of(text)


def test_image_data_positive_batch(shape_of):
    # CHECK_GT(batch_size, 0).
    with pytest.raises(CaffememError, match="batch_size"):
        shape_of('type: "ImageData" top: "data" top: "label" image_data_param { batch_size: 0 new_height: 2 new_width: 2 }')


# ---------------------------------------------------------------- WindowData


def test_window_data(shape_of):
    # Reshape(batch_size, channels, crop_size, crop_size); label [batch_size].
    text = 'type: "WindowData" top: "data" top: "label" transform_param { crop_size: 227 } window_data_param { batch_size: 128 }'
    assert shape_of(text).tops == ((128, 3, 227, 227), (128,))


def test_window_data_needs_crop_size(shape_of):
    # CHECK_GT(crop_size, 0).
    with pytest.raises(CaffememError, match="crop_size"):
        shape_of('type: "WindowData" top: "data" top: "label" window_data_param { batch_size: 128 }')


# ---------------------------------------------------------------- HDF5Data


def test_hdf5_data_needs_every_top(shape_of):
    error = needs_input(shape_of, 'type: "HDF5Data" top: "data" top: "label" hdf5_data_param { batch_size: 16 }')
    assert error.blobs == ["data", "label"]
    assert "--input data=_,..." in error.hint


def test_hdf5_data_from_inputs(shape_of):
    text = 'type: "HDF5Data" top: "data" top: "label" hdf5_data_param { batch_size: 16 }'
    shapes = shape_of(text, inputs={"data": (16, 10), "label": (16,)})
    assert shapes.tops == ((16, 10), (16,))


def test_hdf5_data_refuses_transform_param(shape_of):
    text = 'type: "HDF5Data" top: "data" transform_param { scale: 2 } hdf5_data_param { batch_size: 16 }'
    with pytest.raises(CaffememError, match="transform"):
        shape_of(text)


# ---------------------------------------------------------------- Python


def test_python_layer_needs_every_top(shape_of):
    text = 'type: "Python" top: "data" top: "label" python_param { module: "voc_layers" layer: "SegDataLayer" }'
    error = needs_input(shape_of, text)
    assert error.blobs == ["data", "label"]
    assert "voc_layers.SegDataLayer" in error.hint
    assert "--input data=" in error.hint and "--input label=" in error.hint


def test_python_layer_only_missing_tops_are_listed(shape_of):
    text = 'type: "Python" bottom: "x" top: "rois" top: "scores" python_param { module: "m" layer: "L" }'
    error = needs_input(shape_of, text, inputs={"rois": (300, 5)})
    assert error.blobs == ["scores"]


def test_python_layer_from_inputs(shape_of):
    text = 'type: "Python" bottom: "x" top: "rois" python_param { module: "m" layer: "L" }'
    assert shape_of(text, (1, 3), inputs={"rois": (300, 5)}).tops == ((300, 5),)


# ---------------------------------------------------------------- specs


@pytest.mark.parametrize("type_", ["Input", "DummyData", "MemoryData", "Data", "ImageData", "WindowData", "HDF5Data", "Python"])
def test_data_layers_are_marked_data(type_):
    spec = SpecTable().get(type_)
    assert spec is not None and spec.is_data


@pytest.mark.parametrize("type_,low,high", [("Data", 1, 2), ("ImageData", 2, 2), ("WindowData", 2, 2), ("MemoryData", 2, 2)])
def test_data_layer_top_counts(type_, low, high):
    # data_layer.hpp: Min 1 / Max 2 tops; image/window/memory data: exactly 2.
    spec = SpecTable().get(type_)
    assert (spec.tops.min, spec.tops.max) == (low, high)
    assert spec.bottoms.max == 0
