"""Which layer buffers the patched Caffe can bind: the names ``Layer::NamedBuffers`` lists.

MemorySlots::Bind (caffemem/runtime/cpp/common/src/caffe/util/mem_slots.cpp) knows a
net's blobs, its layers' parameters and, per layer, what that layer's ``NamedBuffers``
adds: nothing, unless runtime patch v3 gives its class one (runtime/cpp/bvlc/edits.txt).
A slot-table member it does not know stops Net::Init ("... is not a blob or layer buffer
this Caffe can bind").
caffemem's memory rules name more buffers than that (every Blob a layer owns, and the
blobs of RecurrentLayer's unrolled net as ``unrolled/<blob>``), so a plan keeps every other
buffer private (passes/liveness.py) and ``caffemem verify`` says what Caffe would say of a
table that names one (plan/verify.py).

The table is keyed by Caffe type, as edits.txt is by the layers' headers; a cuDNN layer is
its base type (CuDNNConvolutionLayer is a "Convolution").  Not in it, by design:

- LSTM and RNN: RecurrentLayer (caffe master layers/recurrent_layer.cpp) runs its
  unrolled net as a Net of its own, built in LayerSetUp with a NetParameter that carries no
  slot table; the outer Net's blobs(), layers() and NamedBuffers never reach its blobs or
  its layers' buffers, and patch v3 gives RecurrentLayer no NamedBuffers.
- Every other layer type (MVN, LSTMUnit's X_acts, the forks' layers, ...): no NamedBuffers.

tests/plan/test_runtime_binds.py checks this table against edits.txt.  The yjxiong fork's
patch (runtime/cpp/fork/edits.txt) binds a subset (Convolution, Pooling, Softmax,
SoftmaxWithLoss), which a plan does not know it runs on.
"""

from __future__ import annotations

from collections.abc import Mapping

from caffemem.graph import Graph
from caffemem.layers.access import BlobId
from caffemem.layers.vision import WORKSPACE_BUFFER

_CONVOLUTION = frozenset({"col_buffer", "bias_multiplier", WORKSPACE_BUFFER})  # base_conv_layer.hpp + cuDNN's PlannedWorkspace
_SOFTMAX = frozenset({"sum_multiplier", "scale"})
_BIAS = frozenset({"bias_multiplier"})

# Caffe type -> the buffer names its NamedBuffers gives ("inner/name" for LayerBuffers::AddNested).
BOUND_BUFFERS: Mapping[str, frozenset[str]] = {
    "Convolution": _CONVOLUTION,
    "Deconvolution": _CONVOLUTION,
    "Pooling": frozenset({"max_idx", "rand_idx"}),
    "BatchNorm": frozenset({"mean", "variance", "temp", "x_norm", "batch_sum_multiplier", "num_by_chans", "spatial_sum_multiplier"}),
    "Softmax": _SOFTMAX,
    "SoftmaxWithLoss": frozenset({"prob"} | {f"softmax/{name}" for name in _SOFTMAX}),
    "LRN": frozenset({"scale", "square_input", "square_output", "pool_output", "power_output", "product_input"}),
    "Dropout": frozenset({"rand_vec"}),
    "InnerProduct": _BIAS,
    "Scale": frozenset({"sum_multiplier", "sum_result", "temp"} | {f"bias/{name}" for name in _BIAS}),
    "Bias": _BIAS,
    "Eltwise": frozenset({"max_idx"}),
    "Accuracy": frozenset({"nums_buffer"}),
    "SigmoidCrossEntropyLoss": frozenset({"sigmoid_output"}),
    "EuclideanLoss": frozenset({"diff"}),
    "ContrastiveLoss": frozenset({"diff", "dist_sq", "diff_sq", "summer_vec"}),
    "PReLU": frozenset({"multiplier", "backward_buff", "bottom_memory"}),
}


def runtime_binds(graph: Graph, blob: BlobId) -> bool:
    """Can the patched Caffe bind ``blob`` by name?  Blobs and parameters always; a buffer
    ("<index>:<layer>/<name>") when its layer's NamedBuffers lists <name>."""
    if blob.kind != "buffer":
        return True
    index, _, rest = blob.name.partition(":")
    if not (index.isascii() and index.isdigit()) or int(index) >= len(graph.layers):
        return False
    layer = graph.layers[int(index)]
    prefix = f"{layer.name}/"
    return rest.startswith(prefix) and rest[len(prefix) :] in BOUND_BUFFERS.get(layer.type, ())
