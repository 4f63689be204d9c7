"""Memory rules of the common family (caffemem/layers/common.py), in bytes derived by hand
from Caffe master's CPU code (float32: 4 bytes an element, a shape buffer 4 bytes an axis).

Each net is an Input per bottom, then the layer under test named "l"; ``force_backward``
(the helper's default) makes every Backward run with every propagate_down set.  Where
Caffe would abort under force_backward (a CHECK on an index bottom), the net trains a
Bias layer "b" instead and puts loss_weight 1 on the tested layer's top.
"""

from __future__ import annotations

TRAINABLE = 'layer { name: "b" type: "Bias" bottom: "x" top: "b" }\n'


def _bytes(layer) -> tuple[int, int, int]:
    return layer.init, layer.fwd_alloc, layer.bwd_alloc


def test_slice_copies_and_gives_every_top_a_diff(memory_of):
    # slice_layer.cpp: two tops (2,3): 8 + 8.  Forward_cpu writes both (24 + 24).
    # Backward_cpu writes the bottom's diff (48) and reads both tops' diffs, which no
    # consumer wrote (24 + 24).
    layer = memory_of('layer { name: "l" type: "Slice" bottom: "x" top: "y" top: "z" slice_param { axis: 1 } }', {"x": (2, 6)})["l"]
    assert _bytes(layer) == (16, 48, 96)


def test_single_top_slice_aliases_its_bottom(memory_of):
    # slice_layer.cpp Reshape: top.size() == 1 -> ShareData + ShareDiff; Forward_cpu and
    # Backward_cpu return at once.  Only the top's shape buffer (8).
    layer = memory_of('layer { name: "l" type: "Slice" bottom: "x" top: "y" }', {"x": (2, 6)})["l"]
    assert _bytes(layer) == (8, 0, 0)


def test_single_bottom_concat_aliases_its_bottom(memory_of):
    # concat_layer.cpp Reshape: bottom.size() == 1 -> ShareData + ShareDiff; nothing else.
    layer = memory_of('layer { name: "l" type: "Concat" bottom: "x" top: "y" }', {"x": (2, 6)})["l"]
    assert _bytes(layer) == (8, 0, 0)


def test_split_shares_data_and_sums_diffs(memory_of):
    # split_layer.cpp: two tops, shapes 8 + 8; Forward_cpu ShareData (0 bytes);
    # Backward_cpu reads both tops' diffs (24 + 24, nobody wrote them) into the bottom's (24).
    layer = memory_of('layer { name: "l" type: "Split" bottom: "x" top: "y" top: "z" }', {"x": (2, 3)})["l"]
    assert _bytes(layer) == (16, 0, 72)


def test_flatten_shares_both_ways(memory_of):
    # flatten_layer.cpp: Forward_cpu top.ShareData(bottom), Backward_cpu
    # bottom.ShareDiff(top): no bytes; the ReLU after it writes the shared top diff.
    layers = memory_of(
        'layer { name: "l" type: "Flatten" bottom: "x" top: "f" }\nlayer { name: "r" type: "ReLU" bottom: "f" top: "r" }',
        {"x": (2, 3, 2)},
    )
    assert _bytes(layers["l"]) == (8, 0, 0)
    assert _bytes(layers["r"]) == (8, 48, 96)


def test_reshape_aliases_at_setup(memory_of):
    # reshape_layer.cpp Reshape: top (6,) shape 4, then ShareData + ShareDiff; Forward_cpu
    # and Backward_cpu are empty.
    layer = memory_of('layer { name: "l" type: "Reshape" bottom: "x" top: "y" reshape_param { shape { dim: 6 } } }', {"x": (2, 3)})["l"]
    assert _bytes(layer) == (4, 0, 0)


def test_sum_reduction_keeps_a_multiplier(memory_of):
    # reduction_layer.cpp Reshape: axis 0 -> a 0-axis top (0 bytes); SUM writes
    # sum_multiplier_ [6] (4 + 24).  Forward: top 4.  Backward_cpu: top diff 4, bottom diff 24.
    layer = memory_of('layer { name: "l" type: "Reduction" bottom: "x" top: "y" }', {"x": (2, 3)})["l"]
    assert _bytes(layer) == (28, 4, 28)


def test_asum_reduction_has_no_multiplier(memory_of):
    # reduction_layer.cpp: ASUM needs no sum_multiplier_; top (2,) 4 bytes shape, 8 data.
    layer = memory_of('layer { name: "l" type: "Reduction" bottom: "x" top: "y" reduction_param { operation: ASUM axis: 1 } }', {"x": (2, 3)})["l"]
    assert _bytes(layer) == (4, 8, 32)


def test_tile(memory_of):
    # tile_layer.cpp: top (2,6) shape 8, data 48; Backward_cpu: top diff 48, bottom diff 24.
    layer = memory_of('layer { name: "l" type: "Tile" bottom: "x" top: "y" tile_param { tiles: 2 } }', {"x": (2, 3)})["l"]
    assert _bytes(layer) == (8, 48, 72)


def test_embed_learns_its_table_not_its_input(memory_of):
    # embed_layer.cpp LayerSetUp: weight [10,3] 8 + 120, bias [3] 4 + 12; Reshape: top (4,3) 8,
    # bias_multiplier_ [M = 4] 4 + 16; the top's loss diff 48 -> 220.  Forward: top 48.
    # Backward_cpu: weight diff 120, bias diff 12 -- the indices get no diff (it CHECKs
    # !propagate_down[0], which is why this net does not force backward).
    body = 'layer { name: "l" type: "Embed" bottom: "x" top: "y" loss_weight: 1 embed_param { input_dim: 10 num_output: 3 } }'
    layer = memory_of(body, {"x": (4,)}, force_backward=False)["l"]
    assert _bytes(layer) == (220, 48, 132)


def test_argmax(memory_of):
    # argmax_layer.cpp Reshape: no axis -> (N, 1, top_k) = (2,1,1): 12; Forward: 8.
    layer = memory_of('layer { name: "l" type: "ArgMax" bottom: "x" top: "y" }', {"x": (2, 5)}, phase="TEST")["l"]
    assert _bytes(layer) == (12, 8, 0)


def test_batch_reindex_scatters_into_the_bottom_diff(memory_of):
    # batch_reindex_layer.cpp: top (2,3) 8 + loss diff 24.  Forward: top 24.  Backward_cpu
    # (propagate_down[0] only: the indices CHECK false) writes the bottom's diff (48).
    body = TRAINABLE + 'layer { name: "l" type: "BatchReindex" bottom: "b" bottom: "i" top: "y" loss_weight: 1 }'
    layer = memory_of(body, {"x": (4, 3), "i": (2,)}, force_backward=False)["l"]
    assert _bytes(layer) == (32, 24, 48)


def test_filter_reads_its_selector_at_setup(memory_of):
    # filter_layer.cpp Reshape reads the selector's data at SetUp: the Input's (4,1) data
    # is allocated there (16) rather than when the input is filled.  Top (4,3) 8, loss
    # diff 48.  Forward: top 48.  Backward_cpu: the bottom's diff (48).
    body = TRAINABLE + 'layer { name: "l" type: "Filter" bottom: "b" bottom: "s" top: "y" loss_weight: 1 }'
    layer = memory_of(body, {"x": (4, 3), "s": (4, 1)}, force_backward=False)["l"]
    assert _bytes(layer) == (72, 48, 48)


def test_parameter_blob_is_allocated_by_its_first_reader(memory_of):
    # parameter_layer.hpp LayerSetUp: blobs_[0]->Reshape (8), no filler; top shape 8.
    # Forward_cpu: top ShareData/ShareDiff(blob): 0.  The ReLU reading it allocates the
    # blob's data (24) besides its own top (24).
    body = 'layer { name: "l" type: "Parameter" top: "p" parameter_param { shape { dim: 2 dim: 3 } } }\n'
    layers = memory_of(body + 'layer { name: "r" type: "ReLU" bottom: "p" top: "r" }', {}, phase="TEST")
    assert _bytes(layers["l"]) == (16, 0, 0)
    assert layers["r"].fwd_alloc == 48


def test_silence_zeroes_the_diffs_asked_for(memory_of):
    # silence_layer.cpp: no tops, empty Forward; Backward_cpu writes the bottom's diff (24).
    layer = memory_of('layer { name: "l" type: "Silence" bottom: "x" }', {"x": (2, 3)})["l"]
    assert _bytes(layer) == (0, 0, 24)


def test_eltwise_max_keeps_the_winners(memory_of):
    # eltwise_layer.cpp Reshape: top 8, max_idx_ (int) 8.  Forward_cpu: top 24, mask 24.
    # Backward_cpu: top diff 24, each bottom's diff 24 + 24 (the mask is allocated already).
    body = 'layer { name: "l" type: "Eltwise" bottom: "x" bottom: "y" top: "z" eltwise_param { operation: MAX } }'
    layer = memory_of(body, {"x": (2, 3), "y": (2, 3)})["l"]
    assert _bytes(layer) == (16, 48, 72)


def test_parameter_loss_top_is_read_through_the_shared_blob(memory_of):
    # layer.hpp Layer::Forward: after Forward_cpu, a loss top's data and diff are read
    # (loss += data . diff).  Init: blob shape 8, top shape 8, SetLossWeights writes the
    # top's own diff 24.  Forward: ShareDiff drops that diff (-24); the reads then allocate
    # the blob's data (24) and diff (24) -> 24 net.
    body = 'layer { name: "l" type: "Parameter" top: "p" loss_weight: 1 parameter_param { shape { dim: 2 dim: 3 } } }'
    layer = memory_of(body, {}, phase="TEST")["l"]
    assert _bytes(layer) == (40, 24, 0)
