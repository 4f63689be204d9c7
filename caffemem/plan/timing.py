"""Seconds, not FLOPs: what a layer's Forward and Backward cost, per device (issue 33).

A recomputation's price is the seconds its Forwards take again, over the seconds of one
training iteration (Forward + Backward + the solver's update): ``time ratio = 1 +
recomputed / iteration``.  FLOPs alone mislead both ways:

- on the CPU, Caffe's pooling and LRN loops (pooling_layer.cpp, lrn_layer.cpp) run far
  below the GEMMs' rate, so GoogLeNet's ``cheap`` (0.6% of the FLOPs, poolings and LRNs)
  costs about a quarter of an iteration (1.27x measured);
- on the card, a layer costs its bytes over the memory bandwidth (a ReLU, BatchNorm,
  Concat moves every element and computes little) plus what the host does per call: a
  kernel launch, and for a cuDNN convolution the Reshape that Layer::Forward runs first
  (layer.hpp), which asks cuDNN for three algorithms (cudnn_conv_layer.cpp Reshape:
  cudnnGetConvolution{Forward,BackwardFilter,BackwardData}Algorithm, the _v7 heuristics in
  cuDNN 9).  Fitted on the issue's H200 runs, that host work (0.7 ms a convolution)
  accounts for ResNet-50's ``sqrt`` (1.49x) where FLOPs say 1.31x; it does not account
  for GoogLeNet's 2.05x (the model says 1.21x), which no card has yet broken down.  The
  patched runtime (mem_recompute.cpp) now skips the Reshape of a recomputed cuDNN
  convolution, which the same iteration's Forward pass already ran: ``Prices.
  runtime_skips_reshape`` prices a run with and without that.

Three kinds of layer: ``compute`` (more than COMPUTE_OPS operations per top element:
convolutions, inner products: priced by FLOPs), ``window`` (pooling, LRN: their window
operations at a loop's rate) and ``memory`` (everything else: bytes of bottoms and tops).
Each device's prices (:data:`DEVICES`) say what they were fitted on; they are a model,
checked against measurements in tests/plan/test_timing.py, not a measure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from caffemem.graph import ShapedGraph, count

COMPUTE_OPS = 16  # operations per top element above which a layer is priced by FLOPs
WINDOW_TYPES = frozenset({"Pooling", "LRN", "Pooling3D", "SPP"})
# Backward over Forward, per kind: a GEMM layer computes the weight and the bottom
# gradients (two GEMMs of the Forward's size); a pooling's Backward scatters through its
# mask (cheaper than the Forward's window scan); an element-wise layer reads top data and
# diff and writes bottom diff (1.5x the Forward's bytes).
BACKWARD = {"compute": 2.0, "window": 0.5, "memory": 1.5}
# ... except LRN, whose Backward (lrn_layer.cpp CrossChannelBackward) scans the window again
# and more: 1.7x its Forward in `caffe time` on AlexNet and GoogLeNet.
BACKWARD_OF_TYPE = {"LRN": 1.7}


@dataclass(frozen=True)
class Prices:
    """One device's prices (see the module docstring for the kinds)."""

    device: str  # "cpu" (Caffe's CPU code) or "gpu" (cuDNN and Caffe's GPU code)
    measured_on: str  # what the prices were fitted on, for the reports
    compute_flops_per_s: float
    window_ops_per_s: float
    bytes_per_s: float
    call_s: float  # every Forward and Backward call: dispatch, a kernel launch
    reshape_s: float  # a compute layer's Reshape in Forward (cuDNN's three algorithm queries)
    # Whether the runtime's recomputed Forward skips the Reshape where it may (patch v5's
    # did not: measurements taken with it are priced with False).
    runtime_skips_reshape: bool = True

    def backward_factor(self, kind: str) -> float:
        return BACKWARD[kind]


DEVICES: Mapping[str, Prices] = {
    # Fitted (a grid over the four prices) on benchmarks/runtime.py --recompute's CPU table
    # in docs/patch.md (fixtures/timing/measured.json: BVLC Caffe CPU_ONLY, OpenBLAS one
    # thread, a 2-core x86 machine; GoogLeNet b2, AlexNet b2, a BatchNorm net b16; cheap
    # and sqrt): every ratio within 11%, stock seconds per iteration within 27%.  Six
    # ratios and three times for four prices: a fit, not a validation.
    "cpu": Prices(
        device="cpu",
        measured_on="fitted on BVLC Caffe's CPU code (OpenBLAS, 1 thread) on a 2-core x86 machine: GoogLeNet, AlexNet, a BatchNorm net",
        compute_flops_per_s=100e9,
        window_ops_per_s=0.3e9,
        bytes_per_s=6e9,
        call_s=20e-6,
        reshape_s=0.0,
    ),
    # Fitted on the H200 figures of issue 33 (GoogLeNet and ResNet-50 TRAIN b32 through
    # `caffe train`: stock 70.5 and 116.5 ms, cheap 0.98x both, sqrt 2.05x and 1.49x, with
    # runtime patch v5, whose recomputed Forwards reshaped again): five of the six within
    # 5%; GoogLeNet's sqrt, 2.05x, it puts at 1.21x and does not explain (tests/plan/
    # test_timing.py).  reshape_s, 0.7 ms a cuDNN convolution (three _v7 algorithm
    # queries), is what the fit needs; no card measured it alone.
    "gpu": Prices(
        device="gpu",
        measured_on="fitted on 6 measurements on one NVIDIA H200 (issue 33: GoogLeNet, ResNet-50 TRAIN b32; GoogLeNet's sqrt not explained)",
        compute_flops_per_s=15e12,
        window_ops_per_s=0.6e12,
        bytes_per_s=1.5e12,
        call_s=10e-6,
        reshape_s=0.7e-3,
    ),
}


def prices_for(device: str, engine: str = "cudnn") -> Prices:
    """The prices of a run on ``device`` ("cpu" or "gpu") with the build's default
    ``engine``: Caffe's own GPU convolution (engine caffe) queries no algorithm."""
    prices = DEVICES["gpu" if device == "gpu" else "cpu"]
    if device == "gpu" and engine != "cudnn":
        return replace(prices, reshape_s=0.0, measured_on=prices.measured_on + " (Caffe's own GPU convolutions: no cuDNN algorithm queries)")
    return prices


@dataclass(frozen=True)
class LayerTime:
    """One layer's estimated seconds in one iteration."""

    kind: str  # "compute", "window", "memory", or "none" (no bottoms: a data layer)
    forward: float  # its Forward, Reshape included
    again: float  # its Forward run again in Backward (the Reshape skipped where the runtime skips it)
    backward: float


def kind_of(layer_type: str, flops: int, top_elements: int) -> str:
    """Which prices a layer pays (module docstring)."""
    if layer_type in WINDOW_TYPES:
        return "window"
    if flops > COMPUTE_OPS * max(top_elements, 1):
        return "compute"
    return "memory"


def layer_time(prices: Prices, layer_type: str, flops: int, bottom_elements: int, top_elements: int, dtype_bytes: int, has_bottoms: bool, skips_reshape: bool) -> LayerTime:
    """A layer's seconds: its Forward, its Forward again (``skips_reshape``: as the patched
    runtime runs it, mem_recompute.cpp SkipsReshape) and its Backward."""
    if not has_bottoms:
        return LayerTime("none", 0.0, 0.0, 0.0)
    kind = kind_of(layer_type, flops, top_elements)
    moved = (bottom_elements + top_elements) * dtype_bytes
    if kind == "compute":
        work, reshape = flops / prices.compute_flops_per_s, prices.reshape_s
    elif kind == "window":
        work, reshape = flops / prices.window_ops_per_s, 0.0
    else:
        work, reshape = moved / prices.bytes_per_s, 0.0
    forward = prices.call_s + reshape + work
    again = prices.call_s + (0.0 if skips_reshape else reshape) + work
    factor = BACKWARD_OF_TYPE.get(layer_type, prices.backward_factor(kind))
    return LayerTime(kind, forward, again, prices.call_s + factor * work)


def skips_reshape(device: str, kind: str, binds_buffers: bool) -> bool:
    """Whether the patched runtime's recomputed Forward skips the layer's Reshape
    (mem_recompute.cpp SkipsReshape): no buffer of the layer in a slot, or a cuDNN
    convolution on the card."""
    return not binds_buffers or (device == "gpu" and kind == "compute")


def layer_times(shaped: ShapedGraph, flops_of: Callable[[int], int], dtype_bytes: int, prices: Prices, binds_buffers: Callable[[int], bool] = lambda layer: True) -> tuple[LayerTime, ...]:
    """Every layer's :class:`LayerTime`, parallel to ``shaped.graph.layers``; ``flops_of``:
    a layer's Forward FLOPs (plan/recompute.forward_flops), ``binds_buffers``: whether the
    plan puts one of its buffers in a slot."""
    found = []
    for layer in shaped.graph.layers:
        bottoms = sum(count(shape) for shape in shaped.bottom_shapes(layer.index))
        tops = sum(count(shape) for shape in shaped.layer_shapes[layer.index].tops)
        flops = flops_of(layer.index)
        kind = kind_of(layer.type, flops, tops)
        skips = prices.runtime_skips_reshape and skips_reshape(prices.device, kind, binds_buffers(layer.index))
        found.append(layer_time(prices, layer.type, flops, bottoms, tops, dtype_bytes, bool(layer.bottoms), skips))
    return tuple(found)


def update_seconds(shaped: ShapedGraph, dtype_bytes: int, prices: Prices) -> float:
    """The solver's update of every parameter (SGD: data, diff and history read, two
    written: five passes over the parameters' bytes)."""
    params = sum(count(shape) for shapes in shaped.layer_shapes for shape in shapes.params)
    return 5 * params * dtype_bytes / prices.bytes_per_s


def iteration_seconds(times: tuple[LayerTime, ...], update: float) -> float:
    """One training iteration: every Forward and Backward, and the update."""
    return sum(t.forward + t.backward for t in times) + update
