"""The model held to the card: every run of a GPU measurement (benchmarks/gpu-groundtruth/,
made by `gpu_groundtruth.py run-bundle`) beside caffemem's figures for the same net.

    python benchmarks/gpu_measured.py [ARCHIVE] [--json OUT] [--nets SUBSTRING ...]

For each run it reads the probe's counts and asks the model the same question:
- Caffe's own allocations: every byte the probe counted at Caffe's cudaMalloc sites
  (SyncedMemory::to_gpu, a slot of the patched runtime), less what it freed, less the
  cuDNN workspaces; the model's device bytes less the process constant and the layers'
  own workspaces. These must be equal, byte for byte (stock: `analyze --device gpu`;
  patched: the same `optimize` plan that ran, re-made here and checked to be the same).
- The cuDNN workspaces cuDNN chose on the card, against the bound the model reports.
- What the card held (total minus free) against the model's card figure: the process
  constant, Caffe's allocations, the measured cost of each cuDNN handle, and the
  workspaces as chosen. What is left is the kernels CUDA loads lazily (not modelled);
  its range is printed.

Exit 0 when every Caffe-allocation figure is equal, 1 otherwise (each difference listed).
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from caffemem.api import OptimizeSettings, Options, analyze, optimize
from caffemem.passes.device import DeviceReport
from caffemem.report.document import phase_plan_json

ARCHIVE = REPO / "benchmarks" / "gpu-groundtruth" / "h100-2026-11-26.tar.xz"
#: The cuDNN (de)convolution's own cudaMalloc sites (its workspace).
WORKSPACE_SITES = ("caffe::CuDNNConvolutionLayer<float>::Reshape", "caffe::CuDNNDeconvolutionLayer<float>::Reshape")
#: The `optimize` options of each patched configuration (gpu_groundtruth.CONFIGS).
PLAN_OPTIONS = {"patched": OptimizeSettings(), "patched-buffers": OptimizeSettings(share_buffers=True)}
MIB = 1024 * 1024


@dataclass(frozen=True)
class Card:
    """What the probe measured for one run."""

    caffe_bytes: int  # counted at Caffe's cudaMalloc sites, less frees and workspaces
    workspace_bytes: int  # cuDNN workspaces as cuDNN chose them
    peak_bytes: int  # the probe's counted peak
    used_bytes: int  # total - free at the end
    before_net_bytes: int  # total - free before the net (context, cuBLAS, cuRAND)


@dataclass(frozen=True)
class Row:
    config: str
    file: str
    phase: str
    card: Card
    model_caffe_bytes: int
    workspace_bound: int
    cudnn_handles: int
    plan_as_run: bool  # patched: the plan re-made here is the one the card ran

    @property
    def equal(self) -> bool:
        """The model's bytes are the card's (compared only where the plan is the one that ran)."""
        return self.card.caffe_bytes == self.model_caffe_bytes

    @property
    def unmodelled(self) -> int:
        """What the card held beyond the process constant, Caffe's allocations, the chosen
        workspaces and the handles: bytes per handle are fitted over all rows, so this is the
        rest before that fit."""
        return self.card.used_bytes - self.card.before_net_bytes - self.card.peak_bytes


def unpack(archive: Path, into: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "gpu-groundtruth"


def card_figures(probe: dict, summary_row: dict) -> Card:
    steps = [probe["construct"], probe["fill_inputs"]] + [layer[k] for layer in probe["layers"] for k in ("setup", "forward", "backward") if k in layer]
    allocated = sum(sum(step["device_sites"].values()) for step in steps)
    freed = sum(step["device_freed"] for step in steps)
    workspace = sum(step["device_sites"].get(site, 0) for step in steps for site in WORKSPACE_SITES)
    return Card(
        caffe_bytes=allocated - freed - workspace,
        workspace_bytes=workspace,
        peak_bytes=summary_row["device_peak"],
        used_bytes=summary_row["device_used"],
        before_net_bytes=summary_row["process"]["device_used_before_net"],
    )


def model_figures(config: str, net: Path, phase: str, ran: dict | None) -> tuple[DeviceReport, bool]:
    """The model's report of the run, and (patched) whether the plan it makes is the one that ran."""
    options = Options(device="gpu", phase=phase)
    if config == "stock":
        device = analyze(net, options).nets[0].device
        assert device is not None
        return device, True
    result = optimize(net, options, PLAN_OPTIONS[config])
    phase_plan = result.phases[0]
    assert phase_plan.devices is not None
    same = ran is not None and phase_plan_json(phase_plan)["plan"] == ran["plan"]
    return phase_plan.devices.planned, same


def rows(root: Path, only: Sequence[str] = ()) -> Iterator[Row]:
    summary = json.loads((root / "summary.json").read_text())
    for run in summary["runs"]:
        if not run["ok"] or (only and not any(name in run["file"] for name in only)):
            continue
        stem = f"{run['file'][:-len('.json')]}.{run['phase']}"
        nets = root / run["config"] / "nets"
        probe = json.loads((nets / f"{stem}.probe.json").read_text())
        ran = None
        if run["config"] != "stock":
            ran = next(p for p in json.loads((nets / f"{stem}.optimized.optimize.json").read_text())["phases"] if p["phase"] == run["phase"])
        device, same = model_figures(run["config"], nets / f"{stem}.prototxt", run["phase"], ran)
        yield Row(
            config=run["config"],
            file=run["file"],
            phase=run["phase"],
            card=card_figures(probe, run),
            model_caffe_bytes=device.device_bytes - device.device_by_cause["cuda_context"] - device.device_by_cause.get("library_handles", 0) - device.workspace_bytes_max,
            workspace_bound=device.workspace_bytes_max,
            cudnn_handles=device.handles.cudnn,
            plan_as_run=same,
        )


def handle_fit(table: Sequence[Row]) -> tuple[float, float, float]:
    """Bytes per cuDNN handle (least squares through the origin of what the card held beyond
    Caffe's counted peak and the process constant), and the smallest and largest rest."""
    xs = [row.cudnn_handles for row in table]
    ys = [row.unmodelled for row in table]
    slope = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    rests = [y - slope * x for x, y in zip(xs, ys)]
    return slope, min(rests), max(rests)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("archive", nargs="?", type=Path, default=ARCHIVE)
    parser.add_argument("--json", type=Path, help="write every row and the fit here")
    parser.add_argument("--nets", nargs="*", default=(), help="only the files whose name contains one of these")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = unpack(args.archive, Path(tmp))
        table = []
        for row in rows(root, args.nets):
            table.append(row)
            mark = ("=" if row.equal else "DIFFERS") if row.plan_as_run else "(plan changed since the run: not compared)"
            print(
                f"{row.config:15} {row.file[:-5][:48]:48} {row.phase:5} card {row.card.caffe_bytes:>12,} model {row.model_caffe_bytes:>12,} {mark}"
                f"  workspace {row.card.workspace_bytes / MIB:8.1f} of {row.workspace_bound / MIB:8.1f} MiB",
                flush=True,
            )
    compared = [row for row in table if row.plan_as_run]
    differ = [row for row in compared if not row.equal]
    slope, low, high = handle_fit(table)
    print(f"\n{len(compared) - len(differ)} of {len(compared)} runs compared: Caffe's allocations on the card equal the model's, byte for byte")
    print(f"{len(table) - len(compared)} runs not compared: the plan the model makes today is not the one the card ran")
    print(f"cuDNN handle: {slope / MIB:.2f} MiB each (fit over {len(table)} runs); the rest (kernels loaded lazily): {low / MIB:+.1f} to {high / MIB:+.1f} MiB")
    if args.json:
        args.json.write_text(json.dumps({"rows": [asdict(row) for row in table], "cudnn_handle_bytes": round(slope), "rest_bytes": [round(low), round(high)]}, indent=1) + "\n")
    for row in differ:
        print(f"DIFFERS: {row.config} {row.file} {row.phase}: card {row.card.caffe_bytes:,}, model {row.model_caffe_bytes:,}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
