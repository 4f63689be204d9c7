"""What the library API accepts as a net: a path, prototxt text, or a NetParameter (or
SolverParameter) message from any ``caffe_pb2`` — pycaffe's included, whose descriptors
live in another pool: it is read through its text form, which every Caffe schema shares."""

from __future__ import annotations

import os
from typing import Any, Union

from caffemem.errors import CaffememError
from caffemem.passes.load import NetText

NetLike = Union[str, "os.PathLike[str]", NetText, Any]  # Any: a protobuf message
_MESSAGES = ("caffe.NetParameter", "caffe.SolverParameter", "caffe.V1LayerParameter")


def as_source(net: NetLike) -> str | NetText:
    """A path (as given) or the text of ``net``.  A string that names no file but reads
    like a definition (braces or ``field:``) is text."""
    descriptor = getattr(net, "DESCRIPTOR", None)
    if descriptor is not None and hasattr(net, "SerializeToString"):
        if descriptor.full_name not in _MESSAGES[:2]:
            raise CaffememError(f"expected a caffe.NetParameter or caffe.SolverParameter message, not {descriptor.full_name}")
        from google.protobuf import text_format

        return NetText(text_format.MessageToString(net), f"<{descriptor.name}>")
    if isinstance(net, NetText):
        return net
    if isinstance(net, os.PathLike):
        return os.fspath(net)
    if isinstance(net, str):
        if not os.path.exists(net) and ("{" in net or "\n" in net or ":" in net.split("/")[-1]):
            return NetText(net)
        return net
    raise CaffememError(f"expected a path, prototxt text or a NetParameter, not {type(net).__name__}")
