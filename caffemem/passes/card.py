"""The per-process constants of the user's own card (``--card FILE``), read from a result of
the GPU kit run on it (benchmarks/gpu-groundtruth/*.summary.json has the format).

What a kit summary measures for every run, before the net is built (benchmarks/gpu/probe.cpp):
``process.device_used_before_net`` (the CUDA context with the main thread's cuBLAS handle and
cuRAND generator: the model's ``cuda_context``) and ``process.handles_bytes`` (that cuBLAS
handle and cuRAND generator: what each further thread's cost).  The cuDNN handle is a fit
over the nets the kit ran (``benchmarks/gpu_measured.py ARCHIVE --json OUT`` writes it as
``cudnn_handle_bytes``), so it is read from a top-level key, as are ``stream_bytes`` and
``context_bytes`` (a figure the user measured by other means).  Each constant not found
keeps the cited measurement's, and every constant says where it came from.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import replace

from caffemem.errors import CaffememError, Location, excerpt
from caffemem.passes.device import CardConstants, Constant
from caffemem.prototxt.read import read_input

MAX_CARD_BYTES = 64 * 1024 * 1024  # a kit summary of thousands of runs is a few MiB
MAX_CONSTANT = 2**40  # a TiB: no per-process cost is near it
# Top-level keys: the constant each sets, and what it is called in the model.
TOP_LEVEL = {"context_bytes": "context", "cudnn_handle_bytes": "cudnn_handle", "stream_bytes": "stream", "cublas_handle_bytes": "cublas_handle"}
NAMES = {"context": "cuda_context", "cudnn_handle": "cudnn_handle", "stream": "cuda_stream", "cublas_handle": "cublas_handle"}


def _line_of(text: str, key: str) -> int | None:
    """The line where ``"key"`` first appears in the file (for the message), if it does."""
    at = text.find(f'"{key}"')
    return text.count("\n", 0, at) + 1 if at >= 0 else None


def _size(value: object, key: str, file: str, text: str) -> int:
    """A byte count as the file gives it: a whole number, 0 to a TiB (not true/false)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CONSTANT:
        raise CaffememError(f"not a kit result: {key} must be a whole number of bytes from 0 to 2^40, not {excerpt(json.dumps(value), 40)}", Location(file=file, line=_line_of(text, key)))
    return value


def read_card(file: str) -> CardConstants:
    """The constants ``file`` measures, the cited measurement's for the others; a file that
    is not a kit result (or gives no constant) is refused with its file and line."""
    where = Location(file=file)
    try:
        text = read_input(file, MAX_CARD_BYTES, what="kit result (JSON)").decode("utf-8")
        document = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise CaffememError(f"cannot read the kit result as JSON: {excerpt(error.msg, 200)}", Location(file=file, line=error.lineno, column=error.colno)) from None
    except ValueError as error:  # UnicodeDecodeError, NaN or Infinity
        raise CaffememError(f"cannot read the kit result as JSON: {excerpt(str(error), 200)}", where) from None
    except RecursionError:
        raise CaffememError("cannot read the kit result as JSON: it nests too deeply", where) from None
    if not isinstance(document, dict):
        raise CaffememError(f"not a kit result: the JSON is {type(document).__name__}, not an object", where)
    found: dict[str, Constant] = {}
    runs = document.get("runs")
    if runs is not None:
        if not isinstance(runs, list) or not all(isinstance(run, dict) for run in runs):
            raise CaffememError("not a kit result: 'runs' must be a list of objects", Location(file=file, line=_line_of(text, "runs")))
        processes = [run["process"] for run in runs if run.get("ok", True) is True and "process" in run]
        if not all(isinstance(process, dict) for process in processes):
            raise CaffememError("not a kit result: a run's 'process' must be an object", Location(file=file, line=_line_of(text, "process")))
        for key, name, what in (
            ("device_used_before_net", "context", "the CUDA context with the main thread's cuBLAS handle and cuRAND generator"),
            ("handles_bytes", "cublas_handle", "a further thread's cuBLAS handle and cuRAND generator"),
        ):
            values = [_size(process[key], key, file, text) for process in processes if key in process]
            if values:
                median = round(statistics.median(values))
                found[name] = Constant(NAMES[name], median, f"{what}: {median / 2**20:.1f} MiB, the median of {len(values)} run(s) of {file}", measured_for_caffe=True)
    for key, name in TOP_LEVEL.items():
        if key in document:
            value = _size(document[key], key, file, text)
            found[name] = Constant(NAMES[name], value, f"{value / 2**20:.2f} MiB, {key} of {file}", measured_for_caffe=True)
    if not found:
        raise CaffememError(
            "not a kit result: no constant in it (expected runs[].process.device_used_before_net and handles_bytes, or cudnn_handle_bytes, stream_bytes, context_bytes)",
            where,
        )
    return replace(CardConstants(file=file), **found)


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number of bytes")
