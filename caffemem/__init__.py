"""caffemem: static GPU-memory profiler and optimizer for Caffe networks.

The public API (the CLI is a thin layer over it)::

    import caffemem
    analysis = caffemem.analyze("train_val.prototxt", caffemem.Options(phase="TRAIN"))
    result = caffemem.optimize("train_val.prototxt", caffemem.Options(), caffemem.OptimizeSettings())

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
from caffemem.passes.load import load

__all__ = [
    "Analysis", "CaffememError", "FitRequest", "FitResult", "Location", "NetAnalysis", "OptimizeResult",
    "OptimizeSettings", "Options", "PhasePlan", "Verdict", "__version__", "analyze", "fit", "load", "optimize",
    "verify",
]  # fmt: skip
