"""Caffe protobuf schema used by caffemem.

``caffe_pb2`` is generated from ``proto/caffe.proto`` (BVLC master plus fork
additions, see docs/schema.md) by ``python -m caffemem.schema.regenerate``.
Do not edit it by hand.

Typical use::

    from google.protobuf import text_format
    from caffemem.schema import caffe_pb2

    net = text_format.Parse(text, caffe_pb2.NetParameter())

The generated module registers ``caffe.proto`` (package ``caffe``) in its own
descriptor pool, never protobuf's default one: pycaffe's ``caffe_pb2`` and
caffemem live in one process, imported in either order.  It carries no
runtime version check, so it loads on protobuf 3.20 to current
(see ``regenerate.portable``).

``caffe_pb2`` is loaded on first access (``from caffemem.schema import
caffe_pb2`` and ``caffemem.schema.caffe_pb2`` both work).
"""

import importlib
from typing import Any

__all__ = ["caffe_pb2", "forks"]


def is_repeated(field: Any) -> bool:
    """A FieldDescriptor's repeatedness on every protobuf runtime: ``is_repeated``
    (protobuf 5.28 on; ``label`` is gone in 7), else ``label`` (3.20 to 5.27)."""
    repeated = getattr(field, "is_repeated", None)
    return repeated if repeated is not None else field.label == field.LABEL_REPEATED


def __getattr__(name: str) -> Any:
    # Lazy ``from . import caffe_pb2``: importing the package must not need a
    # loadable caffe_pb2, or ``python -m caffemem.schema.regenerate`` could not
    # repair a broken or version-mismatched one.
    if name in __all__:
        module = importlib.import_module(f"{__name__}.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
