"""Pass 3, filter: keep the layers a NetState selects, exactly as Caffe's Net::FilterNet.

Entry point: :func:`filter_net`.  A layer with include rules is kept when any rule is
met; a layer with exclude rules is dropped when any rule is met; a layer with neither is
kept; a layer with both is an error (Caffe refuses it too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from caffemem.errors import CaffememError, Location
from caffemem.schema import caffe_pb2, is_repeated

PHASES = {"TRAIN": caffe_pb2.TRAIN, "TEST": caffe_pb2.TEST}


def make_state(phase: str, stages: Iterable[str] = (), level: int | None = None, base: caffe_pb2.NetState | None = None) -> caffe_pb2.NetState:
    """The NetState a run uses: the file's own state, with the phase set and stages added."""
    state = caffe_pb2.NetState()
    if base is not None:
        state.CopyFrom(base)
    state.phase = PHASES[phase]
    state.stage.extend(stages)
    if level is not None:
        state.level = level
    return state


def phase_name(state: caffe_pb2.NetState) -> str:
    return caffe_pb2.Phase.Name(state.phase)


def state_meets_rule(state: caffe_pb2.NetState, rule: caffe_pb2.NetStateRule) -> bool:
    """Caffe's Net::StateMeetsRule."""
    if rule.HasField("phase") and rule.phase != state.phase:
        return False
    if rule.HasField("min_level") and state.level < rule.min_level:
        return False
    if rule.HasField("max_level") and state.level > rule.max_level:
        return False
    if any(stage not in state.stage for stage in rule.stage):
        return False
    if any(stage in state.stage for stage in rule.not_stage):
        return False
    return True


def filter_net(
    net: caffe_pb2.NetParameter,
    state: caffe_pb2.NetState,
    file: str | None = None,
    line_of: Callable[[str], int | None] = lambda name: None,
) -> caffe_pb2.NetParameter:
    """A copy of an upgraded (V2) net holding only the layers the state selects."""
    filtered = caffe_pb2.NetParameter()
    for field, value in net.ListFields():  # all but the layers: a copy of them would stay in
        if field.name != "layer":  # protobuf's arena after a delete, doubling a deep net's memory
            _copy_field(filtered, field, value)
    filtered.state.CopyFrom(state)
    for layer in net.layer:
        if len(layer.include) and len(layer.exclude):
            raise CaffememError(
                "specify either include rules or exclude rules, not both",
                Location.of_layer(layer, file, line_of(layer.name)),
            )
        included = len(layer.include) == 0
        if any(state_meets_rule(state, rule) for rule in layer.exclude):
            included = False
        if any(state_meets_rule(state, rule) for rule in layer.include):
            included = True
        if included:
            filtered.layer.add().CopyFrom(layer)
    return filtered


def _copy_field(message, field, value) -> None:
    """Set one field of ``message`` to another message's ``value`` of it."""
    if is_repeated(field):
        target = getattr(message, field.name)
        if field.message_type is not None:
            for item in value:
                target.add().CopyFrom(item)
        else:
            target.extend(value)
    elif field.message_type is not None:
        getattr(message, field.name).CopyFrom(value)
    else:
        setattr(message, field.name, value)
