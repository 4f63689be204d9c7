"""Snapshot `analyze --json` and `optimize --json` over every net of ../shared/models.

A re-layout must not change a byte of what the tool prints: run this before and after
and compare the two folders (``diff -r``).  Each net runs per phase with the inputs its
ground-truth file names (when there is one); nets without ground truth run as they are,
and their error output is part of the snapshot too.

    python tests/tools/json_snapshot.py OUTDIR
    PYTHONPATH=/path/to/other/checkout python tests/tools/json_snapshot.py OUTDIR2
    diff -r OUTDIR OUTDIR2
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
# The CLI as every layout of the package has it (PYTHONPATH picks the checkout to run).
CLI = "import sys; sys.argv[0] = 'caffemem'; from caffemem.cli import main; main()"


def runs_of(relative: str) -> list[tuple[str | None, list[str]]]:
    """(phase, --input args) for each ground-truth run of a model file, or one plain run."""
    folder, name = relative.split("/", 1)
    truth = SHARED / "groundtruth" / f"{folder}__{Path(name).stem}.json"
    if not truth.exists():
        return [(None, [])]
    runs = []
    for run in json.loads(truth.read_text())["runs"]:
        args = []
        for top, shape in (run.get("inputs") or {}).items():
            args += ["--input", f"{top}={','.join(map(str, shape))}"]
        runs.append((run["phase"], args))
    return runs or [(None, [])]


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    manifest = (SHARED / "models" / "MANIFEST.tsv").read_text().splitlines()[1:]
    for line in manifest:
        relative = line.split("\t")[0]
        net = SHARED / "models" / relative
        for phase, inputs in runs_of(relative):
            phase_args = ["--phase", phase] if phase else []
            for command in ("analyze", "optimize"):
                done = subprocess.run(
                    [sys.executable, "-c", CLI, command, str(net), "--json", *phase_args, *inputs],
                    capture_output=True, text=True, cwd=SHARED / "models",  # the same cwd from any checkout
                )
                key = f"{relative.replace('/', '__')}.{phase or 'default'}.{command}"
                (out / key).write_text(f"exit {done.returncode}\n{done.stdout}\n--stderr--\n{done.stderr}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
