"""The model held to the card: every run of a GPU measurement (benchmarks/gpu-groundtruth/,
made by `gpu_groundtruth.py run-bundle`) beside caffemem's figures for the same net. Its
command is benchmarks/gpu_measured.py:

    python benchmarks/gpu_measured.py [ARCHIVE] [--json OUT] [--nets SUBSTRING ...]
    python benchmarks/gpu_measured.py [ARCHIVE] --readme-table   # docs/gpu-mode.md's table

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
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from caffemem.api import OptimizeSettings, Options, analyze, optimize
from caffemem.api.analyze import prepare_run, spec_table
from caffemem.layers.access import LayerMemory
from caffemem.api.optimize import assignment_of, with_copies
from caffemem.passes.device import DeviceReport, device_footprint
from caffemem.plan.verify import plan_from_json
from caffemem.report.document import phase_plan_json
from gpu.configs import CONFIGS, Config
from gpu.paths import REPO

ARCHIVE = REPO / "benchmarks" / "gpu-groundtruth" / "h100-2026-11-26.tar.xz"
#: The cuDNN (de)convolution's own cudaMalloc sites (its workspace).
WORKSPACE_SITES = ("caffe::CuDNNConvolutionLayer<float>::Reshape", "caffe::CuDNNDeconvolutionLayer<float>::Reshape")


def plan_settings(plan: tuple[str, ...]) -> OptimizeSettings:
    """A configuration's `optimize` options (configs.Config.plan) as the API takes them."""
    if "--recompute" in plan:
        return OptimizeSettings(recompute=plan[plan.index("--recompute") + 1])
    return OptimizeSettings(share_buffers="--share-buffers" in plan)


#: The `optimize` options of each patched configuration (configs.CONFIGS: the same plans).
PLAN_OPTIONS = {c.name: plan_settings(c.plan) for c in CONFIGS if c.plan is not None}
#: The runtime patch that first shares cuDNN handles (V6-DESIGN, issue 32).
POOL_PATCH = 6
MIB = 1024 * 1024


@dataclass(frozen=True)
class Card:
    """What the probe measured for one run."""

    caffe_bytes: int  # counted at Caffe's cudaMalloc sites, less frees and workspaces
    workspace_bytes: int  # cuDNN workspaces as cuDNN chose them
    peak_bytes: int  # the probe's counted peak
    used_bytes: int  # total - free at the end
    before_net_bytes: int  # total - free before the net (context, cuBLAS, cuRAND)
    # Counted by a probe with the issue 32 counters (None from an older one): cuDNN handles
    # and CUDA streams Caffe holds at the end, the stack limit the card reports.
    cudnn_handles: int | None = None
    cuda_streams: int | None = None
    stack_limit_bytes: int | None = None


@dataclass(frozen=True)
class Row:
    config: str
    file: str
    phase: str
    card: Card
    model_caffe_bytes: int
    workspace_bound: int
    cudnn_handles: int
    plan_as_run: bool  # patched: the plan optimize makes today is the one the card ran (the one that ran is compared)
    # The runtime's handles and streams for this run (stock's, or runtime patch v6's pool)
    # and what the run asked of it (summary row: pool on/off, the stack limit).
    expected_handles: int = 0
    expected_streams: int = 0
    pool: bool | None = None
    stack_bytes: int | None = None

    @property
    def equal(self) -> bool:
        """The model's bytes are the card's."""
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
        cudnn_handles=summary_row.get("cudnn_handles"),
        cuda_streams=summary_row.get("cuda_streams"),
        stack_limit_bytes=summary_row.get("stack_limit_bytes"),
    )


def runtime_handles(rules: Sequence[LayerMemory], pooled: bool) -> tuple[int, int]:
    """(cuDNN handles, CUDA streams) Caffe holds for a net whose layers have these rules:
    stock's, each cuDNN (de)convolution 3 handles and 3 streams a group and every other cuDNN
    layer one handle (LayerMemory.cudnn_handles); or, `pooled`, runtime patch v6's one pool per
    device (V6-DESIGN): 3 handles and 3 streams if any cuDNN (de)convolution, 1 handle if any
    single-handle cuDNN layer."""
    convolutions = [rule.cudnn_handles for rule in rules if rule.cudnn_handles >= 3]
    singles = [rule.cudnn_handles for rule in rules if rule.cudnn_handles == 1]
    if pooled:
        return 3 * bool(convolutions) + bool(singles), 3 * bool(convolutions)
    return sum(convolutions) + sum(singles), sum(convolutions)


def model_figures(config: str, net: Path, phase: str, ran: dict | None) -> tuple[DeviceReport, bool]:
    """The model's report of the run: stock Caffe's, or the slot table that ran as the
    patched runtime binds it (read from the run's own optimize JSON, so a later change of
    the planner does not change what is compared); and whether `optimize` today makes the
    same table."""
    options = Options(device="gpu", phase=phase)
    if config not in PLAN_OPTIONS:  # stock Caffe (and its second run)
        device = analyze(net, options).nets[0].device
        assert device is not None
        return device, True
    assert ran is not None
    phase_plan = optimize(net, options, PLAN_OPTIONS[config]).phases[0]
    specs = spec_table(options)
    slots = assignment_of(plan_from_json(ran["plan"]), phase_plan.schedule)
    device = device_footprint(prepare_run(phase_plan.shaped, specs, options), specs, options.build_engine, slots=slots)
    device = with_copies(device, ran.get("recompute", {}).get("restored_param_bytes", 0))  # patch v4's copies of restored parameters
    return device, phase_plan_json(phase_plan)["plan"] == ran["plan"]


def rows(root: Path, only: Sequence[str] = ()) -> Iterator[Row]:
    summary = json.loads((root / "summary.json").read_text())
    for run in summary["runs"]:
        if not run["ok"] or (only and not any(name in run["file"] for name in only)):
            continue
        stem = f"{run['file'][:-len('.json')]}.{run['phase']}"
        nets = root / run["config"] / "nets"
        probe = json.loads((nets / f"{stem}.probe.json").read_text())
        ran = None
        if run["config"] in PLAN_OPTIONS:
            ran = next(p for p in json.loads((nets / f"{stem}.optimized.optimize.json").read_text())["phases"] if p["phase"] == run["phase"])
        device, same = model_figures(run["config"], nets / f"{stem}.prototxt", run["phase"], ran)
        config = next((c for c in CONFIGS if c.name == run["config"]), Config(run["config"], "patched", ()))
        pooled = bool(run.get("pool", config.pool)) and summary.get("runtime_patch", 0) >= POOL_PATCH
        handles, streams = runtime_handles(stock_rules(nets / f"{stem}.prototxt", run["phase"]), pooled) if run.get("cudnn_handles") is not None else (0, 0)
        yield Row(
            config=run["config"],
            file=run["file"],
            phase=run["phase"],
            card=card_figures(probe, run),
            model_caffe_bytes=device.device_bytes_min - device.device_by_cause["cuda_context"] - device.device_by_cause["library_handles"],
            workspace_bound=device.workspace_bytes_max,
            cudnn_handles=device.handles.cudnn,
            plan_as_run=same,
            expected_handles=handles,
            expected_streams=streams,
            pool=run.get("pool", config.pool),
            stack_bytes=run.get("stack_bytes", config.stack_bytes),
        )


def stock_rules(net: Path, phase: str) -> tuple[LayerMemory, ...]:
    """The memory rules of `net`'s layers in a GPU run (their cuDNN handles among them)."""
    options = Options(device="gpu", phase=phase)
    analysis = analyze(net, options).nets[0]
    return prepare_run(analysis.shaped, spec_table(options), options).rules


def stack_context(table: Sequence[Row]) -> dict[int, int]:
    """Stack limit -> the bytes the card held less than under the driver's limit, for the
    same net, phase and plan (the `patched` run beside each `patched-stack-N` one): what a
    smaller cudaLimitStackSize gives back of the context (the median over the nets)."""
    base = {(row.file, row.phase): row.card.used_bytes for row in table if row.config == "patched"}
    given: dict[int, list[int]] = {}
    for row in table:
        if row.stack_bytes is not None and (row.file, row.phase) in base:
            given.setdefault(row.stack_bytes, []).append(base[(row.file, row.phase)] - row.card.used_bytes)
    return {limit: sorted(values)[len(values) // 2] for limit, values in sorted(given.items())}


def handle_fit(table: Sequence[Row]) -> tuple[float, float, float]:
    """Bytes per cuDNN handle (least squares through the origin of what the card held beyond
    Caffe's counted peak and the process constant), and the smallest and largest rest."""
    xs = [row.cudnn_handles for row in table]
    ys = [row.unmodelled for row in table]
    slope = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    rests = [y - slope * x for x, y in zip(xs, ys)]
    return slope, min(rests), max(rests)


#: The nets of the README's "Measured on the card" table: (ground-truth file, phase, label).
README_NETS = (
    ("resnet__ResNet-50-deploy.json", "TEST", "ResNet-50 deploy (TEST, batch 1)"),
    ("bvlc_googlenet__train_val.json", "TRAIN", "GoogLeNet train_val (TRAIN, batch 32)"),
    ("bvlc_alexnet__train_val.json", "TRAIN", "AlexNet train_val (TRAIN, batch 256)"),
    ("places365__train_val_vgg16.json", "TRAIN", "VGG16 Places365 (TRAIN)"),
    ("fcn_voc-fcn8s__train.json", "TRAIN", "FCN-8s (TRAIN)"),
    ("squeezenet_v1.0__train_val.json", "TRAIN", "SqueezeNet 1.0 (TRAIN)"),
    ("hed__train_val.json", "TRAIN", "HED (TRAIN)"),
    ("bvlc_examples_cifar10__cifar10_quick.json", "TEST", "cifar10_quick deploy (TEST)"),
)


def readme_table(summary: dict) -> str:
    """The README's table of what the card held, stock and under both plans (MiB): counted
    at Caffe's allocation sites (peak) and total minus free at the end."""
    runs = {(r["config"], r["file"], r["phase"]): r for r in summary["runs"] if r["ok"]}
    lines = [
        "| net | counted: stock | blob plan | `--share-buffers` | on the card: stock | blob plan | `--share-buffers` |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for file, phase, label in README_NETS:
        stock, blobs, buffers = (runs[(config, file, phase)] for config in ("stock", "patched", "patched-buffers"))
        cells = []
        for key in ("device_peak", "device_used"):
            cells += [f"{stock[key] / MIB:,.1f}", f"{blobs[key] / MIB:,.1f}", f"{buffers[key] / MIB:,.1f} ({buffers[key] / stock[key]:.2f}×)"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("archive", nargs="?", type=Path, default=ARCHIVE)
    parser.add_argument("--json", type=Path, help="write every row and the fit here")
    parser.add_argument("--nets", nargs="*", default=(), help="only the files whose name contains one of these")
    parser.add_argument("--readme-table", action="store_true", help="print docs/gpu-mode.md's table of this measurement and stop")
    args = parser.parse_args(argv)
    if args.readme_table:
        with tarfile.open(args.archive) as tar:
            print(readme_table(json.load(tar.extractfile("gpu-groundtruth/summary.json"))))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        root = unpack(args.archive, Path(tmp))
        table = []
        for row in rows(root, args.nets):
            table.append(row)
            mark = ("=" if row.equal else "DIFFERS") + ("" if row.plan_as_run else " (optimize makes another table today)")
            print(
                f"{row.config:15} {row.file[:-5][:48]:48} {row.phase:5} card {row.card.caffe_bytes:>12,} model {row.model_caffe_bytes:>12,} {mark}"
                f"  workspace {row.card.workspace_bytes / MIB:8.1f} of {row.workspace_bound / MIB:8.1f} MiB",
                flush=True,
            )
    differ = [row for row in table if not row.equal]
    slope, low, high = handle_fit(table)
    print(f"\n{len(table) - len(differ)} of {len(table)} runs compared: Caffe's allocations on the card equal the model's, byte for byte")
    print(f"{sum(not row.plan_as_run for row in table)} runs whose table optimize would now make otherwise (the table that ran is the one compared)")
    print(f"cuDNN handle: {slope / MIB:.2f} MiB each (fit over {len(table)} runs); the rest (kernels loaded lazily): {low / MIB:+.1f} to {high / MIB:+.1f} MiB")
    if args.json:
        args.json.write_text(json.dumps({"rows": [asdict(row) for row in table], "cudnn_handle_bytes": round(slope), "rest_bytes": [round(low), round(high)]}, indent=1) + "\n")
    counted = [row for row in table if row.card.cudnn_handles is not None]
    if counted:
        off = [row for row in counted if (row.card.cudnn_handles, row.card.cuda_streams) != (row.expected_handles, row.expected_streams)]
        print(f"cuDNN handles and streams as the runtime holds them (stock's, or the v{POOL_PATCH} pool's) on {len(counted) - len(off)} of {len(counted)} runs")
        for row in off:
            print(f"HANDLES DIFFER: {row.config} {row.file} {row.phase}: card {row.card.cudnn_handles} handles, {row.card.cuda_streams} streams; "
                  f"model {row.expected_handles}, {row.expected_streams}")
    for limit, given in stack_context(table).items():
        print(f"stack limit {limit} B: the card held {given / MIB:.1f} MiB less than under the driver's (median over the nets)")
    for row in differ:
        print(f"DIFFERS: {row.config} {row.file} {row.phase}: card {row.card.caffe_bytes:,}, model {row.model_caffe_bytes:,}")
    return 1 if differ else 0

