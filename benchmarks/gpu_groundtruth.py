"""`python benchmarks/gpu_groundtruth.py toolkit|check|build|run|bundle|run-bundle`: the
commands of the GPU kit, the package benchmarks/gpu/ (its cli.py says what each does;
docs/gpu.md how to use them). CI runs `check` (.ci/run); the GPU machine runs `run-bundle`."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The kit's package (benchmarks/gpu/), then the checkout for caffemem itself, which the GPU
# machine's python3 does not have installed.
sys.path[:0] = [str(HERE), str(HERE.parent)]

from gpu.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
