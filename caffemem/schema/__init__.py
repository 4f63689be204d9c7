"""Caffe protobuf schema used by caffemem.

``caffe_pb2`` is generated from ``proto/caffe.proto`` (BVLC master plus fork
additions, see docs/schema.md) by ``python -m caffemem.schema.regenerate``.
Do not edit it by hand.

Typical use::

    from google.protobuf import text_format
    from caffemem.schema import caffe_pb2

    net = text_format.Parse(text, caffe_pb2.NetParameter())

The generated module registers ``caffe.proto`` (package ``caffe``) in
protobuf's default descriptor pool, so it cannot be imported in the same
process as another ``caffe_pb2`` (for example pycaffe's).

``caffe_pb2`` is loaded on first access (``from caffemem.schema import
caffe_pb2`` and ``caffemem.schema.caffe_pb2`` both work).
"""

import importlib
from typing import Any

__all__ = ["caffe_pb2", "forks"]


def __getattr__(name: str) -> Any:
    # Lazy ``from . import caffe_pb2``: importing the package must not need a
    # loadable caffe_pb2, or ``python -m caffemem.schema.regenerate`` could not
    # repair a broken or version-mismatched one.
    if name in __all__:
        module = importlib.import_module(f"{__name__}.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
