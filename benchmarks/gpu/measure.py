"""Measures every BVLC run of a corpus (../shared, or an unpacked kit's corpus/) in every
configuration, with one variant's programs each, and writes the ground truth's JSON with the
GPU figures beside the CPU ones (docs/gpu.md, "The full build and the measurement")."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from caffemem.runtime import PATCH_VERSION
from gpu.configs import Config
from gpu.estimate import committed_seconds, estimated_seconds, timed_seconds
from gpu.nets import cudnn_groups, prepare_net
from gpu.paths import REPO, REQUIREMENTS
from gpu.probe import Programs, probe_run
from gpu.shell import log


def caffemem(args: list[str], stdout: Path) -> None:
    """This checkout's `caffemem ARGS` in GPU mode, its JSON on `stdout` kept beside the run
    (the model's figures for the same net, to compare with the measurement)."""
    proc = subprocess.run(
        [sys.executable, "-m", "caffemem", *args, "--device", "gpu", "--json"],
        check=False, capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    stdout.write_text(proc.stdout)
    if proc.returncode != 0:
        raise RuntimeError(f"caffemem {' '.join(args[:1])} {Path(args[1]).name}: exit {proc.returncode}: {proc.stderr.strip()[-2000:]}")


def optimize(net: Path, phase: str, out: Path, options: tuple[str, ...] = ()) -> Path:
    """`caffemem optimize` for a patched run (the slot table for this phase); its JSON goes
    to OUT.optimize.json."""
    caffemem(["optimize", str(net), "--phase", phase.lower(), *options, "-o", str(out)], out.with_suffix(".optimize.json"))
    return out


def merge(gt_run: dict, measured: dict) -> dict:
    """The ground truth's run (CPU figures) with the GPU figures added: per layer `gpu`
    (setup, forward, backward), per run `gpu` (construction, inputs, end state)."""
    run = dict(gt_run)
    by_name = {layer["name"]: layer for layer in measured["layers"]}
    layers = []
    for layer in gt_run.get("layers", []):
        entry = dict(layer)
        got = by_name.get(layer["name"])
        if got is not None:
            entry["gpu"] = {k: got[k] for k in ("setup", "forward", "backward") if k in got}
        layers.append(entry)
    run["layers"] = layers
    run["gpu"] = {k: measured[k] for k in ("construct", "fill_inputs", "end")}
    run["gpu"]["layers_not_in_groundtruth"] = sorted(set(by_name) - {layer["name"] for layer in gt_run.get("layers", [])})
    return run


@dataclass(frozen=True)
class Task:
    """One run of one ground-truth file in one configuration, and its estimated seconds."""

    gt_file: Path
    gt: dict
    gt_run: dict
    config: Config
    seconds: float = 0.0

    @property
    def stem(self) -> str:
        return f"{self.gt_file.stem}.{self.gt_run['phase']}"


def tasks(corpus: Path, configs: tuple[Config, ...], names: list[str] | None) -> list[Task]:
    """Every BVLC run of the corpus in every configuration that runs on it, a net's
    configurations side by side (so a run cut short by the time budget still compares whole
    nets), the nets whose runs are estimated fastest first (the mean of their runs' seconds,
    gpu/estimate.py: from the committed results), so that the budget cuts the slowest. A run
    the CPU ground truth has not (Caffe refused the net) takes no time."""
    files = sorted((corpus / "groundtruth").glob("*.json"))
    if names:
        files = [f for f in files if any(n in f.stem for n in names)]
    measured = committed_seconds()
    nets = []
    for gt_file in files:
        gt = json.loads(gt_file.read_text())
        if gt.get("caffe") != "bvlc":
            continue
        groups = cudnn_groups(corpus / gt["source"])
        runs = [Task(gt_file, gt, gt_run, c, estimated_seconds(measured, gt_file.name, gt_run["phase"], c.name, groups)
                     + timed_seconds(c.time_iterations(gt_file.stem, gt_run["phase"])) if gt_run.get("ok") else 0.0)
                for gt_run in gt["runs"] for c in configs if gt_run["phase"] in c.phases and c.runs_on(gt_file.stem)]
        nets.append((sum(t.seconds for t in runs) / max(1, len(runs)), gt_file.name, runs))
    return [task for _, _, runs in sorted(nets, key=lambda n: (n[0], n[1])) for task in runs]


def _prepare(task: Task, corpus: Path, programs: Programs, out_dir: Path) -> Path:
    """The net the probe runs (CPU work only: upgrade, Input layer, the plan), with the
    model's figures for it beside it."""
    phase = task.gt_run["phase"]
    work = out_dir / task.config.name / "nets"
    net = prepare_net(corpus / task.gt["source"], phase, task.gt_run.get("inputs", {}), programs, work / f"{task.stem}.prototxt")
    if task.config.plan is None:
        caffemem(["analyze", str(net), "--phase", phase.lower()], work / f"{task.stem}.analyze.json")
        return net
    return optimize(net, phase, work / f"{task.stem}.optimized.prototxt", task.config.plan)


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)


def measure(configs: tuple[Config, ...], programs: dict[str, Programs], corpus: Path, names: list[str] | None, out_dir: Path,
            device: int, deadline: float | None = None, jobs: int = 1, caffe: str = "bvlc 9b89154, CUDA build") -> int:
    """Measures every BVLC run of `corpus`/groundtruth in every configuration; writes
    OUT/<config>/<ground-truth file name> (each rewritten after every run, so a run cut short
    keeps what it measured) and OUT/summary.json. The CPU work (upgrading, planning) runs on
    `jobs` threads ahead of the probes; the probes run one at a time, since the card's
    figures (cudaMemGetInfo) see every process on it. Past `deadline` (time.monotonic()), the
    runs left are recorded as not measured. Returns 0, or 1 if a run failed or was left."""
    todo = tasks(corpus, configs, names)
    log(f"{len(todo)} run(s), estimated {sum(t.seconds for t in todo):.0f} s (gpu/estimate.py), the slowest nets last")
    for c in configs:
        (out_dir / c.name / "nets").mkdir(parents=True, exist_ok=True)
    docs: dict[tuple[str, str], dict] = {}
    rows = []
    failures = 0
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        prepared = [None if not t.gt_run.get("ok") else pool.submit(_prepare, t, corpus, programs[t.config.variant], out_dir) for t in todo]
        for task, future in zip(todo, prepared):
            phase = task.gt_run["phase"]
            doc = docs.setdefault((task.config.name, task.gt_file.name), {
                "source": task.gt["source"], "caffe": f"{caffe} ({task.config.variant})", "plan": task.config.plan,
                "toolkit": REQUIREMENTS.read_text().split("\n# ")[0], "runs": []})
            row = {"config": task.config.name, "file": task.gt_file.name, "phase": phase, "ok": False, **asked(task.config), "estimated_seconds": round(task.seconds, 2)}
            started = time.monotonic()
            try:
                if future is None:
                    raise RuntimeError("the CPU ground truth has no run: " + task.gt_run.get("error", ""))
                if deadline is not None and time.monotonic() >= deadline:
                    future.cancel()
                    raise RuntimeError("not measured: the time budget ran out")
                net = future.result()
                left = None if deadline is None else max(1.0, deadline - time.monotonic())
                measured = probe_run(programs[task.config.variant], net, phase, out_dir / task.config.name / "nets" / f"{task.stem}.probe.json",
                                     device, timeout=left, env=probe_env(task))
            except (RuntimeError, subprocess.CalledProcessError, OSError, ValueError) as e:
                if future is not None:
                    failures += 1
                    log(f"{task.config.name} {task.stem}: {e}")
                doc["runs"].append({"phase": phase, "ok": False, "error": str(e)})
                row["error"] = str(e)
            else:
                doc.setdefault("device", measured["device"])
                doc.setdefault("process_constant", measured["process"])
                doc["runs"].append(merge(task.gt_run, measured))
                end = measured["end"]
                row.update(ok=True, device_peak=end["device_peak"], device_used=end["device_used"], process=measured["process"], **held(end))
                if "results" in measured:
                    row["results"] = measured["results"]
                if "timing" in measured:
                    row["timing"] = measured["timing"]
                log(f"{task.config.name} {task.stem}: device peak {end['device_peak']} B counted, {end['device_used']} B used on the card"
                    f" ({time.monotonic() - started:.1f} s)")
            row["seconds"] = round(time.monotonic() - started, 2)
            rows.append(row)
            _write_json(out_dir / task.config.name / task.gt_file.name, doc)
    measured_runs = sum(r["ok"] for r in rows)
    identical = bit_identical(rows)
    ratios = time_ratios(rows)
    _write_json(out_dir / "summary.json", {"seconds": round(time.monotonic() - t0, 1), "estimated_seconds": round(sum(t.seconds for t in todo), 1),
                                           "runtime_patch": PATCH_VERSION, "measured": measured_runs, "failed": failures,
                                           "bit_identical": identical, "time_ratios": ratios, "runs": rows})
    for config, (same, compared) in identical.items():
        log(f"{config}: what the net computed is bit-identical to stock Caffe's in {same} of {compared} run(s)")
    for file, by_config in ratios.items():
        log(f"{file} TRAIN, seconds per iteration against stock: " + ", ".join(f"{c} {r:.2f}x" for c, r in by_config.items()))
    log(f"wrote {out_dir}: {measured_runs} run(s) measured, {failures} failed or not measured, in {time.monotonic() - t0:.0f} s")
    return 1 if failures else 0


def probe_env(task: Task) -> dict[str, str]:
    """The variables set for the probe: the configuration's, and on a timed run
    (gpu/configs.py TIMED_NETS) how many iterations it times after measuring."""
    iterations = task.config.time_iterations(task.gt_file.stem, task.gt_run["phase"])
    return {**dict(task.config.env), **({"CAFFEMEM_PROBE_TIME_ITERS": str(iterations)} if iterations else {})}


def iteration_seconds(timing: dict) -> float:
    """A timed run's seconds per iteration: the median of its timed iterations (a shared
    card's stray slow iteration does not move it)."""
    return statistics.median(timing["seconds"])


def time_ratios(rows: list[dict]) -> dict[str, dict[str, float]]:
    """file -> config -> seconds per iteration against stock Caffe's (the faster of the
    `stock` and `stock-again` runs), for each timed TRAIN run (issue 33)."""
    timed = [r for r in rows if r.get("ok") and "timing" in r and r["timing"]["seconds"]]
    stock: dict[str, float] = {}
    for r in timed:
        if r["config"] in ("stock", "stock-again"):
            stock[r["file"]] = min(stock.get(r["file"], float("inf")), iteration_seconds(r["timing"]))
    ratios: dict[str, dict[str, float]] = {}
    for r in timed:
        if r["config"] not in ("stock", "stock-again") and r["file"] in stock:
            ratios.setdefault(r["file"], {})[r["config"]] = round(iteration_seconds(r["timing"]) / stock[r["file"]], 4)
    return ratios


def asked(config: Config) -> dict:
    """What a summary row says of the run's configuration: the variables set for the probe,
    the cuDNN handle pool (runtime patch v6: on unless CAFFEMEM_CUDNN_POOL=0; None for stock
    Caffe) and the CUDA stack limit the runtime was asked to set (None: the driver's)."""
    return {"env": dict(config.env), "pool": config.pool, "stack_bytes": config.stack_bytes}


def held(end: dict) -> dict:
    """What the probe counted of the process around the net at the end (probe.cpp): cuDNN
    handles and CUDA streams alive (made by Caffe: cudnnCreate less cudnnDestroy,
    cudaStreamCreate* less cudaStreamDestroy) and the stack limit the card reported
    (cudaDeviceGetLimit); absent from a probe older than these counters."""
    return {key: end[key] for key in ("cudnn_handles", "cuda_streams", "stack_limit_bytes") if key in end}


def bit_identical(rows: list[dict]) -> dict[str, tuple[int, int]]:
    """config -> (runs whose digest of outputs and gradients equals stock Caffe's, runs
    compared): the probe's `results` (probe.cpp Results)."""
    stock = {(r["file"], r["phase"]): r["results"]["all"] for r in rows if r["config"] == "stock" and "results" in r}
    counts: dict[str, tuple[int, int]] = {}
    for r in rows:
        key = (r["file"], r["phase"])
        if r["config"] == "stock" or "results" not in r or key not in stock:
            continue
        same, compared = counts.get(r["config"], (0, 0))
        counts[r["config"]] = (same + (r["results"]["all"] == stock[key]), compared + 1)
    return counts
