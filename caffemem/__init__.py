"""caffemem: static GPU-memory profiler and optimizer for Caffe networks.

The public API (the CLI is a thin layer over it)::

    import caffemem
    analysis = caffemem.analyze("train_val.prototxt", phase="TRAIN", inputs={"data": (32, 3, 224, 224)})
    result = caffemem.optimize(net_parameter)  # a path, prototxt text or a NetParameter (pycaffe's too)

Every problem with the user's input is a :class:`CaffememError` naming file, line and layer.
"""

from caffemem._version import __version__
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

__all__ = [
    "Analysis", "CaffememError", "FitRequest", "FitResult", "Location", "NetAnalysis", "NetText", "OptimizeResult",
    "OptimizeSettings", "Options", "PhasePlan", "Verdict", "__version__", "analyze", "fit", "load", "optimize",
    "verify",
]  # fmt: skip
