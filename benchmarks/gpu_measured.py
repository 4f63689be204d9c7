"""`python benchmarks/gpu_measured.py [ARCHIVE] [--json OUT] [--nets ...] [--readme-table]`:
the model held to a GPU measurement of benchmarks/gpu-groundtruth/ (benchmarks/gpu/measured.py
says how)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The kit's package (benchmarks/gpu/), then the checkout for caffemem itself.
sys.path[:0] = [str(HERE), str(HERE.parent)]

from gpu.measured import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
