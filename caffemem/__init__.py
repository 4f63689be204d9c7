"""caffemem: static GPU-memory profiler and optimizer for Caffe networks.

The public API (the CLI is a thin layer over it)::

    import caffemem
    analysis = caffemem.analyze("train_val.prototxt", phase="TRAIN", inputs={"data": (32, 3, 224, 224)})
    result = caffemem.optimize(net_parameter)  # a path, prototxt text or a NetParameter (pycaffe's too)

The library measures a CPU run by default (``Options().device == "cpu"``: the heap real
Caffe's CPU mode allocates), where the ``caffemem`` command measures the card (``--device
gpu``): pass ``Options(device="gpu")`` for the command's figures.

Every problem with the user's input is a :class:`CaffememError` naming file, line and layer.
"""

from __future__ import annotations

from caffemem._version import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at start-up

# name -> the module that defines it.  Imported on first use (PEP 562), so that the
# `caffemem` command starts without loading the whole library before it can catch Ctrl-C.
_EXPORTS = {
    **dict.fromkeys(
        ["Analysis", "FitRequest", "FitResult", "NetAnalysis", "OptimizeResult", "OptimizeSettings", "Options", "PhasePlan", "Verdict", "analyze", "fit", "optimize", "verify"],
        "caffemem.api",
    ),
    "CaffememError": "caffemem.errors",
    "Location": "caffemem.errors",
    "NetText": "caffemem.passes.load",
    "load": "caffemem.passes.load",
}

__all__ = [
    "Analysis", "CaffememError", "FitRequest", "FitResult", "Location", "NetAnalysis", "NetText", "OptimizeResult",
    "OptimizeSettings", "Options", "PhasePlan", "Verdict", "__version__", "analyze", "fit", "load", "optimize",
    "verify",
]  # fmt: skip


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'caffemem' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from caffemem.api import (
        Analysis,
        FitRequest,
        FitResult,
        NetAnalysis,
        OptimizeResult,
        OptimizeSettings,
        Options,
        PhasePlan,
        Verdict,
        analyze,
        fit,
        optimize,
        verify,
    )
    from caffemem.errors import CaffememError, Location
    from caffemem.passes.load import NetText, load
