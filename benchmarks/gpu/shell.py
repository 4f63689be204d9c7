"""The kit's log (stderr, one tagged line each: the committed logs under
benchmarks/gpu-groundtruth/ read so) and the commands it runs, each logged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def log(msg: str) -> None:
    print(f"[gpu_groundtruth] {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], cwd: Path | None = None, env: dict | None = None, log_to: Path | None = None) -> None:
    """`cmd`, logged; its output on stderr, or in `log_to` (whose end a failure quotes)."""
    log(" ".join(cmd) + (f"  (in {cwd})" if cwd else ""))
    if log_to is None:
        subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=sys.stderr)
        return
    with open(log_to, "w") as out:
        proc = subprocess.run(cmd, check=False, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log_to.read_text(errors="replace").splitlines()[-60:]
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed (exit {proc.returncode}); the end of {log_to}:\n" + "\n".join(tail))
