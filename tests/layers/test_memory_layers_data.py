"""Memory rules of the data family (caffemem/layers/data.py), in bytes derived by hand from
Caffe master's CPU code (float32: 4 bytes an element, a shape buffer 4 bytes an axis).

A data top's data is the run's input (filled before Forward, as the ground truth's Input
layers have it); what a data layer holds besides goes to ``prefetch_bytes``, and the input
its tops point at instead of owning it to ``prefetched_input_bytes``.
"""

from __future__ import annotations

from caffemem.api.analyze import Options, analyze


def _report(tmp_path, body: str, phase: str = "TEST", **inputs):
    path = tmp_path / "net.prototxt"
    path.write_text(body)
    return analyze(str(path), Options(phase=phase, inputs=inputs)).nets[0].memory


def _bytes(layer) -> tuple[int, int, int]:
    return layer.init, layer.fwd_alloc, layer.bwd_alloc


IMAGE_DATA = 'layer { name: "d" type: "ImageData" top: "data" top: "label" image_data_param { batch_size: 2 new_height: 4 new_width: 4 } }'


def test_input_shapes_its_tops_and_leaves_the_data_to_the_caller(tmp_path):
    # input_layer.cpp LayerSetUp: tops (2,3) and (2,) reshaped: 8 + 4; nothing else.
    report = _report(tmp_path, 'layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 2 dim: 3 } shape { dim: 2 } } }')
    assert _bytes(report.layers[0]) == (12, 0, 0)
    assert report.input_bytes == 24 + 8


def test_dummy_data_fills_constant_tops_in_setup(tmp_path):
    # dummy_data_layer.cpp LayerSetUp: the default filler is "constant", filled by the
    # Forward that LayerSetUp runs with refill_ inverted: shape 8 + data 24 at SetUp.
    report = _report(tmp_path, 'layer { name: "d" type: "DummyData" top: "x" dummy_data_param { shape { dim: 2 dim: 3 } } }')
    assert _bytes(report.layers[0]) == (32, 0, 0)
    assert report.input_bytes == 0


def test_dummy_data_leaves_other_fillers_to_forward(tmp_path):
    # dummy_data_layer.cpp: a gaussian top is only filled by Forward (every one), so SetUp
    # pays its shape (8); the data (24) is the run's input, filled before Forward.
    body = 'layer { name: "d" type: "DummyData" top: "x" dummy_data_param { shape { dim: 2 dim: 3 } data_filler { type: "gaussian" } } }'
    report = _report(tmp_path, body)
    assert report.layers[0].init == 8
    assert report.input_bytes == 24


def test_memory_data_keeps_its_added_blobs_outside_the_heap(tmp_path):
    # memory_data_layer.cpp DataLayerSetUp: tops (2,3,2,2) 16 and (2,) 4; added_data_ 16 + 96
    # and added_label_ 4 + 8, both read (allocated): 124 of prefetch.  Forward reshapes the
    # label top to (2,1,1,1): a 16-byte shape buffer replaces the 4-byte one (+12), and points
    # both tops at that memory (set_cpu_data): their input 96 + 8 lives there.
    body = 'layer { name: "d" type: "MemoryData" top: "data" top: "label" memory_data_param { batch_size: 2 channels: 3 height: 2 width: 2 } }'
    report = _report(tmp_path, body)
    assert _bytes(report.layers[0]) == (20, 12, 0)
    assert (report.prefetch_bytes, report.prefetched_input_bytes) == (124, 104)


def test_data_layer_prefetches_four_batches_by_default(tmp_path):
    # base_data_layer.cpp BasePrefetchingDataLayer: data_param.prefetch (default 4) batches,
    # each data_ (2,3,4,4) 16 + 384 and label_ (2,) 4 + 8 written in LayerSetUp; data_layer.cpp
    # shapes transformed_data_ (1,3,4,4): 16.  SetUp pays the tops' shapes only (16 + 4).
    body = 'layer { name: "d" type: "Data" top: "data" top: "label" data_param { batch_size: 2 } }'
    report = _report(tmp_path, body, data=(2, 3, 4, 4), label=(2,))
    assert _bytes(report.layers[0]) == (20, 0, 0)
    assert report.prefetch_bytes == 16 + 4 * (400 + 12)


def test_data_param_prefetch_sets_the_batch_count(tmp_path):
    # base_data_layer.cpp: prefetch_(param.data_param().prefetch()): 2 batches of 412.
    body = 'layer { name: "d" type: "Data" top: "data" top: "label" data_param { batch_size: 2 prefetch: 2 } }'
    assert _report(tmp_path, body, data=(2, 3, 4, 4), label=(2,)).prefetch_bytes == 16 + 2 * 412


def test_prefetching_tops_point_into_the_batch(tmp_path):
    # base_data_layer.cpp Forward_cpu: top->set_cpu_data(batch): the input (384 + 8) is the
    # batch's, not the tops' own.
    report = _report(tmp_path, IMAGE_DATA)
    assert report.prefetched_input_bytes == 384 + 8
    assert report.total_bytes == report.heap_total + report.prefetch_bytes - 392


def test_prefetched_input_is_only_the_data(tmp_path):
    # The tops' diffs stay their own: an InnerProduct's Backward (force_backward) reads its
    # top's diff (8, no consumer wrote it), writes weight and bias diffs and the data top's
    # diff (384), and still only the data (384 + 8) lives in the batch.
    body = "force_backward: true\n" + IMAGE_DATA + '\nlayer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { num_output: 1 } }'
    report = _report(tmp_path, body, phase="TRAIN")
    assert report.layers[1].bwd_alloc == 8 + 4 * 48 + 4 + 384
    assert report.prefetched_input_bytes == 384 + 8


def test_image_data_reads_the_batch_count_from_data_param(tmp_path):
    # image_data_layer.cpp: 4 (data_param.prefetch default) batches of (2,3,4,4) and (2,),
    # transformed_data_ (1,3,4,4).
    assert _report(tmp_path, IMAGE_DATA).prefetch_bytes == 16 + 4 * 412


def test_window_data_never_shapes_transformed_data(tmp_path):
    # window_data_layer.cpp DataLayerSetUp reshapes the batches only: 4 x 412.
    body = 'layer { name: "d" type: "WindowData" top: "data" top: "label" transform_param { crop_size: 4 } window_data_param { batch_size: 2 } }'
    assert _report(tmp_path, body).prefetch_bytes == 4 * 412


def test_hdf5_data_tops_are_plain_input(tmp_path):
    # hdf5_data_layer.cpp: no prefetch; Forward copies rows into the tops' own data (the
    # run's input, 24); the file's datasets (hdf_blobs_) are not known, not counted.
    body = 'layer { name: "d" type: "HDF5Data" top: "x" hdf5_data_param { source: "list.txt" batch_size: 2 } }'
    report = _report(tmp_path, body, x=(2, 3))
    assert _bytes(report.layers[0]) == (8, 0, 0)
    assert (report.input_bytes, report.prefetch_bytes, report.prefetched_input_bytes) == (24, 0, 0)


def test_python_layer_memory_is_a_guess(tmp_path):
    # python_layer.hpp: what the Python code allocates is unknown; its tops count as input.
    body = 'layer { name: "d" type: "Python" top: "x" python_param { module: "m" layer: "L" } }'
    report = _report(tmp_path, body, x=(2, 3))
    assert report.input_bytes == 24
    assert report.unverified_types == ("Python",)
