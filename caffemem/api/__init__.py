"""The importable API: each command's work as a function of a file and options.

:func:`analyze` (load → upgrade → filter → splits → shapes → memory), :func:`optimize`
(… → schedule → liveness → plan → verify), :func:`verify`, :func:`fit` and
:func:`check_file`.  The CLI (caffemem.cli) is a thin layer over these.
"""

from caffemem.api.analyze import Analysis, NetAnalysis, Options, analyze
from caffemem.api.check import CheckSettings, Measurement, Problem, check_file
from caffemem.api.fit import FitRequest, FitResult, fit
from caffemem.api.optimize import OptimizeResult, OptimizeSettings, PhasePlan, optimize, planned_report
from caffemem.api.verify import Verdict, verify

__all__ = [
    "Analysis", "CheckSettings", "FitRequest", "FitResult", "Measurement", "NetAnalysis", "OptimizeResult",
    "OptimizeSettings", "Options", "PhasePlan", "Problem", "Verdict", "analyze", "check_file", "fit", "optimize",
    "planned_report", "verify",
]  # fmt: skip
