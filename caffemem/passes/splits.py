"""Pass 4, splits: wire the filtered net into a Graph, inserting Split layers as Caffe does.

Entry point: :func:`insert_splits`.  It follows Caffe's util/insert_splits.cpp to the
letter (a blob read by several layers, or read once and also carrying a loss weight, gets
a Split layer right after its producer, with Caffe's layer and blob names), then applies
the checks of Net::AppendTop / AppendBottom so wiring mistakes are reported per layer.
"""

from __future__ import annotations

from collections.abc import Callable

from caffemem.errors import CaffememError, Location
from caffemem.graph import Graph, Layer
from caffemem.schema import caffe_pb2

AUTOMATIC_TOP = "(automatic)"


def split_layer_name(layer_name: str, blob_name: str, blob_index: int) -> str:
    return f"{blob_name}_{layer_name}_{blob_index}_split"


def split_blob_name(layer_name: str, blob_name: str, blob_index: int, split_index: int) -> str:
    return f"{blob_name}_{layer_name}_{blob_index}_split_{split_index}"


def insert_splits(
    net: caffe_pb2.NetParameter,
    *,
    file: str | None = None,
    phase: str = "TEST",
    line_of: Callable[[str, int], int | None] = lambda name, occurrence: None,
    auto_tops: Callable[[str], int] = lambda layer_type: 0,
) -> Graph:
    """The Graph Caffe's Net::Init builds from a filtered net (splits included).

    ``line_of(name, k)`` gives the source line of the k-th layer called ``name``;
    ``auto_tops(type)`` how many tops Caffe creates for a layer that names fewer.
    """
    layers = list(net.layer)
    occurrences: dict[str, int] = {}
    lines: list[int | None] = []
    for layer in layers:
        k = occurrences.get(layer.name, 0)
        occurrences[layer.name] = k + 1
        lines.append(line_of(layer.name, k))

    def where(i: int) -> Location:
        return Location.of_layer(layers[i], file, lines[i])

    last_top: dict[str, tuple[int, int]] = {}
    source_of: dict[tuple[int, int], tuple[int, int]] = {}
    consumers: dict[tuple[int, int], int] = {}
    loss_weight_of: dict[tuple[int, int], float] = {}
    for i, layer in enumerate(layers):
        for j, bottom in enumerate(layer.bottom):
            if bottom not in last_top:
                raise CaffememError(_unknown_bottom_message(bottom, j, layers, i), where(i))
            source_of[(i, j)] = last_top[bottom]
            consumers[last_top[bottom]] = consumers.get(last_top[bottom], 0) + 1
        for j, top in enumerate(layer.top):
            last_top[top] = (i, j)
        for j in range(min(len(layer.loss_weight), len(layer.top))):
            loss_weight_of[(i, j)] = layer.loss_weight[j]
            if layer.loss_weight[j]:
                consumers[(i, j)] = consumers.get((i, j), 0) + 1

    split_used: dict[tuple[int, int], int] = {}
    wired: list[Layer] = []
    anonymous = 0
    for i, layer in enumerate(layers):
        bottoms = list(layer.bottom)
        for j, bottom in enumerate(bottoms):
            source = source_of[(i, j)]
            if consumers.get(source, 0) > 1:
                k = split_used.get(source, 0)
                split_used[source] = k + 1
                bottoms[j] = split_blob_name(layers[source[0]].name, bottom, source[1], k)
        proto = layer
        splits: list[Layer] = []
        for j, top in enumerate(layer.top):
            count = consumers.get((i, j), 0)
            if count <= 1:
                continue
            weight = loss_weight_of.get((i, j), 0.0)
            split = caffe_pb2.LayerParameter(name=split_layer_name(layer.name, top, j), type="Split", bottom=[top])
            split.top.extend(split_blob_name(layer.name, top, j, k) for k in range(count))
            if weight:
                split.loss_weight.append(weight)
                if proto is layer:
                    proto = caffe_pb2.LayerParameter()
                    proto.CopyFrom(layer)
                proto.ClearField("loss_weight")
                split_used[(i, j)] = split_used.get((i, j), 0) + 1
            splits.append(Layer(0, split.name, "Split", (top,), tuple(split.top), split, lines[i], inserted=True))
        if proto is layer and list(bottoms) != list(layer.bottom):
            proto = caffe_pb2.LayerParameter()
            proto.CopyFrom(layer)
        if proto is not layer:
            del proto.bottom[:]
            proto.bottom.extend(bottoms)
        tops = list(layer.top)
        for k in range(len(tops), auto_tops(layer.type)):
            # Caffe names every anonymous top "(automatic)"; later ones get a suffix here
            # so that each blob keeps a name of its own.
            tops.append(AUTOMATIC_TOP if anonymous == 0 else f"{AUTOMATIC_TOP}~{anonymous}")
            anonymous += 1
        wired.append(Layer(0, layer.name, layer.type, tuple(bottoms), tuple(tops), proto, lines[i]))
        wired.extend(splits)
    wired = [Layer(k, l.name, l.type, l.bottoms, l.tops, l.proto, l.line, l.inserted) for k, l in enumerate(wired)]
    _check_tops(wired, file)
    return Graph(
        name=net.name,
        source=file or "",
        phase=phase,
        layers=tuple(wired),
        proto=net,
        force_backward=net.force_backward,
    )


def _unknown_bottom_message(bottom: str, index: int, layers, i: int) -> str:
    later = [l.name for l in layers[i + 1 :] if bottom in l.top]
    message = f"bottom {index} '{bottom}' is not produced by any layer before it"
    if later:
        message += f" (layer '{later[0]}' produces it later: move that layer before this one)"
    else:
        message += " (no layer in this phase produces it: check the name, the phase/stage rules, or pass it with --input)"
    return message


def _check_tops(layers: list[Layer], file: str | None) -> None:
    """Net::AppendTop: a top may only reuse a name when it is the same-index bottom (in place)."""
    produced: dict[str, str] = {}
    for layer in layers:
        for j, top in enumerate(layer.tops):
            if top.startswith(AUTOMATIC_TOP):
                continue
            in_place = j < len(layer.bottoms) and layer.bottoms[j] == top
            if top in produced and not in_place:
                raise CaffememError(
                    f"top '{top}' is already produced by layer '{produced[top]}' "
                    "(a layer may reuse a name only to work in place, as top i = bottom i): rename one of them",
                    Location.of_layer(layer, file),
                )
            produced.setdefault(top, layer.name)
        seen: set[str] = set()
        for top in layer.tops:
            if top in seen:
                raise CaffememError(f"top '{top}' is named twice", Location.of_layer(layer, file))
            seen.add(top)
