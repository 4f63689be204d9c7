"""Gram (happynear/caffe-windows), Gather (synopsys-caffe's tf.gather, PSPNet's MPI gather)
and DenseBlock (Tongcheng/caffe) from caffemem/layers/fork_misc.py: shapes and bytes worked
out by hand from each repository's source (named in the comments), and planned nets.

Bytes: float32, 4 bytes a value; a Blob's shape buffer is 4 bytes an axis.
"""

from __future__ import annotations

import pytest

from caffemem.errors import CaffememError
from tests.layers.test_faces import check_plans

# --- Gram (happynear/caffe-windows gram_layer.cpp) -----------------------------------------


def test_gram_shape(shape_of):
    # Reshape(num, channels, channels, 1)
    assert shape_of('type: "Gram" bottom: "x" top: "g"', (2, 8, 5, 7)).tops == ((2, 8, 8, 1),)
    # legacy accessors: a (2, 8) bottom reads height = width = 1 -- fine in TEST ...
    assert shape_of('type: "Gram" bottom: "x" top: "g"', (2, 8), phase="TEST").tops == ((2, 8, 8, 1),)
    # ... but Backward_cpu reads shape(2) * shape(3)
    with pytest.raises(CaffememError, match="4 axes"):
        shape_of('type: "Gram" bottom: "x" top: "g"', (2, 8))


def test_gram_memory(memory_of):
    # x (2,3,4,5) -> g (2,3,3,1): 18 values, 72 bytes.  SetUp: g's shape 16.  Forward: g 72
    # (the local temp copy of x is freed on return).  Backward, no propagate_down test: g's
    # diff 72 (mutable_cpu_diff), x's diff 120 values = 480.
    got = memory_of('layer { name: "gram" type: "Gram" bottom: "x" top: "g" }', {"x": (2, 3, 4, 5)})["gram"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (16, 72, 72 + 480)


# --- Gather -------------------------------------------------------------------------------

TF_GATHER = 'type: "Gather" bottom: "x" top: "y" gather_param {{ {p} }}'


def test_tf_gather_shapes(shape_of):
    # synopsys-caffe: params.shape[:axis] + indices.shape + params.shape[axis+1:]
    assert shape_of(TF_GATHER.format(p="indices: 0 indices: 2 shape: 2 axis: 1"), (4, 3, 5)).tops == ((4, 2, 5),)
    # indices of shape (2, 2) on axis 0
    assert shape_of(TF_GATHER.format(p="indices: [0, 1, 1, 0] shape: [2, 2]"), (3, 5)).tops == ((2, 2, 5),)
    # one index, no shape: the axis disappears (shape: 0 says the same)
    assert shape_of(TF_GATHER.format(p="indices: 1 axis: -1"), (3, 5)).tops == ((3,),)
    assert shape_of(TF_GATHER.format(p="indices: 1 shape: 0"), (3, 5)).tops == ((5,),)


def test_tf_gather_checks(shape_of):
    with pytest.raises(CaffememError, match="out of range"):
        shape_of(TF_GATHER.format(p="indices: 3 axis: 0"), (3, 5))
    with pytest.raises(CaffememError, match="do not match"):
        shape_of(TF_GATHER.format(p="indices: 0 indices: 1 shape: 3"), (3, 5))
    with pytest.raises(CaffememError, match="scalar"):
        shape_of(TF_GATHER.format(p="indices: 0 indices: 1"), (3, 5))


def test_mpi_gather_is_an_alias_per_bottom(shape_of, memory_of):
    # hszhao/PSPNet: one process, each top ReshapeLike its bottom and shares data and diff
    assert shape_of('type: "Gather" bottom: "a" bottom: "b" top: "c" top: "d"', (2, 3), (4,)).tops == ((2, 3), (4,))
    with pytest.raises(CaffememError, match="one top per bottom"):
        shape_of('type: "Gather" bottom: "a" bottom: "b" top: "c"', (2, 3), (4,))
    # SetUp: the two tops' shapes 8 + 4, no bytes of their own; Forward nothing
    body = 'layer { name: "g" type: "Gather" bottom: "a" bottom: "b" top: "c" top: "d" }'
    got = memory_of(body, {"a": (2, 3), "b": (4,)}, force_backward=False)["g"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (12, 0, 0)


def test_tf_gather_memory(memory_of):
    # x (4,3,5) -> y (4,2,5): 40 values.  SetUp: y's shape 12.  Forward: y 160.  No Backward
    # (NOT_IMPLEMENTED: nothing below needs a gradient here).
    body = f'layer {{ name: "g" {TF_GATHER.format(p="indices: 0 indices: 2 shape: 2 axis: 1")} }}'
    got = memory_of(body, {"x": (4, 3, 5)}, force_backward=False)["g"]
    assert (got.init, got.fwd_alloc, got.bwd_alloc) == (12, 160, 0)


# --- planned nets -------------------------------------------------------------------------

# Neural style: Gram matrices of two conv features compared to targets by EuclideanLoss
# (the style loss of Gatys et al.; happynear/caffe-windows has the layer but no example
# net); a tf.gather picking channels as synopsys-caffe's converted nets do (an output only:
# its Backward is NOT_IMPLEMENTED), and PSPNet's MPI Gather in one process before gram2.
STYLE_NET = """name: "style_block"
layer { name: "data" type: "Input" top: "data" top: "target1" top: "target2" input_param { shape { dim: 1 dim: 3 dim: 16 dim: 16 } shape { dim: 1 dim: 8 dim: 8 dim: 1 } shape { dim: 1 dim: 6 dim: 6 dim: 1 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1" convolution_param { num_output: 8 kernel_size: 3 pad: 1 } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "gram1" type: "Gram" bottom: "conv1" top: "gram1" }
layer { name: "style1" type: "EuclideanLoss" bottom: "gram1" bottom: "target1" top: "style1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2" convolution_param { num_output: 6 kernel_size: 3 pad: 1 } }
layer { name: "pick" type: "Gather" bottom: "conv2" top: "pick" gather_param { indices: [0, 2, 3, 5] shape: 4 axis: 1 } }
layer { name: "mpi" type: "Gather" bottom: "conv2" top: "conv2_all" }
layer { name: "gram2" type: "Gram" bottom: "conv2_all" top: "gram2" }
layer { name: "style2" type: "EuclideanLoss" bottom: "gram2" bottom: "target2" top: "style2" }
"""


def test_optimize_plans_a_style_net_with_gram_and_gather(tmp_path):
    check_plans(tmp_path, STYLE_NET)
