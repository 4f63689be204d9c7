"""A hypothesis strategy for random valid Caffe nets, as prototxt text.

The generator keeps every blob's shape itself (Caffe's own formulas), so it only ever
builds layers whose bottoms fit: Concat over blobs that agree off the channel axis,
Eltwise over equal shapes, kernels no larger than the input.  Blobs are drawn from all
earlier ones, so fan-out (Split insertion), in-place layers, dangling outputs, frozen
parameters (``lr_mult: 0``) and ``propagate_down`` all occur; the net ends in an
InnerProduct scored by SoftmaxWithLoss against a label, sometimes with an Accuracy
included in TEST only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hypothesis import strategies as st

Shape = tuple[int, ...]


@dataclass(frozen=True)
class RandomNet:
    text: str  # the prototxt
    shapes: tuple[tuple[str, Shape], ...]  # every named blob's shape, by Caffe's formulas


@dataclass
class NetText:
    """A net under construction: its layer texts and every blob's current shape."""

    layers: list[str] = field(default_factory=list)
    shapes: dict[str, Shape] = field(default_factory=dict)  # in creation order
    readable: list[str] = field(default_factory=list)  # blobs later layers may read
    readers: dict[str, int] = field(default_factory=dict)  # layers reading a blob's latest producer

    def may_work_in_place(self, blob: str) -> bool:
        """Caffe's Split insertion renames the bottoms of a blob read twice but not the
        tops, so an in-place layer must be the only reader of what it overwrites."""
        return self.readers[blob] == 0

    def fresh(self, stem: str) -> str:
        return f"{stem}{len(self.layers)}"

    def add(self, kind: str, bottoms: list[str], tops: list[tuple[str, Shape]], body: str = "") -> None:
        lines = [f'name: "{kind.lower()}{len(self.layers)}" type: "{kind}"']
        lines += [f'bottom: "{b}"' for b in bottoms] + [f'top: "{t}"' for t, _ in tops]
        self.layers.append("layer { " + " ".join(lines) + (" " + body if body else "") + " }")
        for name in bottoms:
            self.readers[name] += 1
        for name, shape in tops:
            self.readers[name] = 0
            if name not in self.shapes:
                self.readable.append(name)
            self.shapes[name] = shape

    def text(self) -> str:
        return "\n".join(self.layers) + "\n"


def _dims(shape: Shape) -> str:
    return " ".join(f"dim: {d}" for d in shape)


def _frozen(draw, blobs: int) -> str:
    """Sometimes every parameter of the layer gets lr_mult 0 (no parameter gradient)."""
    return " ".join("param { lr_mult: 0 }" for _ in range(blobs)) if draw(st.booleans()) else ""


def _propagate_down(draw, bottoms: int) -> str:
    """For about one layer in four, a random propagate_down flag per bottom."""
    if draw(st.integers(0, 3)):
        return ""
    return " ".join(f"propagate_down: {str(flag).lower()}" for flag in draw(st.lists(st.booleans(), min_size=bottoms, max_size=bottoms)))


def _bottom(draw, net: NetText, ndim: int | None = None) -> str:
    """An earlier blob (the latest one more often, for depth); optionally of one rank."""
    choices = [b for b in net.readable if ndim is None or len(net.shapes[b]) == ndim]
    if draw(st.booleans()) and (ndim is None or len(net.shapes[net.readable[-1]]) == ndim):
        return net.readable[-1]
    return draw(st.sampled_from(choices))


def convolution(draw, net: NetText) -> None:
    bottom = _bottom(draw, net, 4)
    n, _, h, w = net.shapes[bottom]
    kernel, pad = draw(st.sampled_from([(k, p) for k in (1, 2, 3) for p in range(k) if min(h, w) + 2 * p >= k]))
    stride = draw(st.sampled_from((1, 1, 2)))
    outputs = draw(st.integers(1, 3))
    bias = draw(st.booleans())
    out = lambda x: (x + 2 * pad - kernel) // stride + 1  # noqa: E731
    param = f"convolution_param {{ num_output: {outputs} kernel_size: {kernel} pad: {pad} stride: {stride} bias_term: {str(bias).lower()} }}"
    top = net.fresh("conv")
    net.add("Convolution", [bottom], [(top, (n, outputs, out(h), out(w)))], " ".join(filter(None, [param, _frozen(draw, 1 + bias), _propagate_down(draw, 1)])))


def pooling(draw, net: NetText) -> None:
    bottom = _bottom(draw, net, 4)
    n, c, h, w = net.shapes[bottom]
    method = draw(st.sampled_from(("MAX", "AVE")))
    top = net.fresh("pool")
    if draw(st.integers(0, 3)) == 0:
        net.add("Pooling", [bottom], [(top, (n, c, 1, 1))], f"pooling_param {{ pool: {method} global_pooling: true }}")
        return
    kernel = draw(st.integers(1, min(3, h, w)))
    stride = draw(st.integers(1, 2))
    out = lambda x: math.ceil((x - kernel) / stride) + 1  # noqa: E731  (pad 0: no clipping)
    net.add("Pooling", [bottom], [(top, (n, c, out(h), out(w)))], f"pooling_param {{ pool: {method} kernel_size: {kernel} stride: {stride} }}")


def elementwise(kind: str, body: str = ""):
    """A neuron layer (same shape out as in), in place or not."""

    def make(draw, net: NetText) -> None:
        bottom = _bottom(draw, net)
        top = bottom if net.may_work_in_place(bottom) and draw(st.booleans()) else net.fresh(kind.lower())
        net.add(kind, [bottom], [(top, net.shapes[bottom])], body)

    return make


def inner_product(draw, net: NetText) -> None:
    bottom = _bottom(draw, net)
    outputs = draw(st.integers(1, 4))
    bias = draw(st.booleans())
    param = f"inner_product_param {{ num_output: {outputs} bias_term: {str(bias).lower()} }}"
    net.add("InnerProduct", [bottom], [(net.fresh("ip"), (net.shapes[bottom][0], outputs))], " ".join(filter(None, [param, _frozen(draw, 1 + bias), _propagate_down(draw, 1)])))


def _group(draw, net: NetText, key) -> list[str]:
    """Two to four earlier blobs (repeats allowed) that agree on ``key`` of their shape."""
    first = _bottom(draw, net)
    fellows = [b for b in net.readable if key(net.shapes[b]) == key(net.shapes[first])]
    return [first] + draw(st.lists(st.sampled_from(fellows), min_size=1, max_size=3))


def concat(draw, net: NetText) -> None:
    bottoms = _group(draw, net, lambda s: (len(s), s[0]) + s[2:])
    shape = net.shapes[bottoms[0]]
    out = (shape[0], sum(net.shapes[b][1] for b in bottoms)) + shape[2:]
    net.add("Concat", bottoms, [(net.fresh("concat"), out)], _propagate_down(draw, len(bottoms)))


def eltwise(draw, net: NetText) -> None:
    bottoms = _group(draw, net, lambda s: s)
    operation = draw(st.sampled_from(("SUM", "SUM", "PROD", "MAX")))
    body = " ".join(filter(None, [f"eltwise_param {{ operation: {operation} }}", _propagate_down(draw, len(bottoms))]))
    net.add("Eltwise", bottoms, [(net.fresh("eltwise"), net.shapes[bottoms[0]])], body)


def flatten(draw, net: NetText) -> None:
    bottom = _bottom(draw, net)
    shape = net.shapes[bottom]
    net.add("Flatten", [bottom], [(net.fresh("flat"), (shape[0], math.prod(shape[1:])))])


def reshape(draw, net: NetText) -> None:
    bottom = _bottom(draw, net)
    shape = net.shapes[bottom]
    if len(shape) == 4 and draw(st.booleans()):
        dims, out = (0, 0, -1, 1), (shape[0], shape[1], shape[2] * shape[3], 1)
    else:
        dims, out = (0, -1), (shape[0], math.prod(shape[1:]))
    net.add("Reshape", [bottom], [(net.fresh("reshape"), out)], f"reshape_param {{ shape {{ {_dims(dims)} }} }}")


def batch_norm_scale(draw, net: NetText) -> None:
    """BatchNorm (statistics frozen, as Caffe nets declare them) followed by Scale."""
    bottom = _bottom(draw, net)
    shape = net.shapes[bottom]
    normed = bottom if net.may_work_in_place(bottom) and draw(st.booleans()) else net.fresh("bn")
    net.add("BatchNorm", [bottom], [(normed, shape)], "param { lr_mult: 0 } param { lr_mult: 0 } param { lr_mult: 0 }")
    scaled = normed if net.may_work_in_place(normed) and draw(st.booleans()) else net.fresh("scale")
    net.add("Scale", [normed], [(scaled, shape)], " ".join(filter(None, ["scale_param { bias_term: true }", _frozen(draw, 2)])))


LAYER_MAKERS = {
    "Convolution": convolution,
    "Pooling": pooling,
    "ReLU": elementwise("ReLU"),
    "Sigmoid": elementwise("Sigmoid"),
    "Dropout": elementwise("Dropout", "dropout_param { dropout_ratio: 0.3 }"),
    "InnerProduct": inner_product,
    "Concat": concat,
    "Eltwise": eltwise,
    "Flatten": flatten,
    "Reshape": reshape,
    "BatchNorm+Scale": batch_norm_scale,
}
SPATIAL = ("Convolution", "Pooling")


@st.composite
def caffe_nets(draw, max_layers: int = 10) -> RandomNet:
    """A random valid net with a loss (see the module docstring)."""
    batch, channels = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    height, width = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    net = NetText()
    data = (batch, channels, height, width)
    net.add("Input", [], [("data", data), ("label", (batch,))], f"input_param {{ shape {{ {_dims(data)} }} shape {{ {_dims((batch,))} }} }}")
    net.readable.remove("label")
    for _ in range(draw(st.integers(1, max_layers))):
        has_4d = any(len(net.shapes[b]) == 4 for b in net.readable)
        kind = draw(st.sampled_from([k for k in LAYER_MAKERS if has_4d or k not in SPATIAL]))
        LAYER_MAKERS[kind](draw, net)
    classes = draw(st.integers(2, 4))
    scores = net.fresh("score")
    net.add("InnerProduct", [_bottom(draw, net)], [(scores, (batch, classes))], f"inner_product_param {{ num_output: {classes} }}")
    net.add("SoftmaxWithLoss", [scores, "label"], [("loss", ())])
    if draw(st.booleans()):
        net.add("Accuracy", [scores, "label"], [("accuracy", ())], "include { phase: TEST }")
    return RandomNet(net.text(), tuple(net.shapes.items()))
