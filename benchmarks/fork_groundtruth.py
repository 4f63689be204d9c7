"""Measure what the memory-multiloading fork (yjxiong/caffe, branch action_recog, 9831a2b)
allocates on a net with its own optimizer on, in the format of ../shared/groundtruth-fork.

    python benchmarks/fork_groundtruth.py NET [--phase TRAIN|TEST]... [--input NAME=d0,d1,...]...
                                          [--source LABEL] [-o OUT.json]

As ../shared/groundtruth/README.md and ../shared/groundtruth-fork/README.md describe: the
net is upgraded and filtered for the phase (caffemem's own passes, as Caffe's upgrade and
FilterNet), its Input layers (and the data layers whose tops ``--input`` gives) become
net-level ``input``/``input_shape`` fields, since the fork has no Input layer, and
``mem_param { optimize_train: true optimize_test: true }`` switches MemoryOptimize_v2 on.
Then benchmarks/fork_groundtruth.cpp, built against the fork with a counter on every byte
SyncedMemory allocates (``.ci/build_caffe.sh fork-probe``, cached outside the checkout),
constructs the net, fills the inputs, runs each layer's Forward one at a time, then (TRAIN)
each Backward in reverse, and reports the bytes each step allocated.

Phases default to those caffemem plans (TRAIN and TEST for a net with a loss, else TEST).
A net the fork refuses gets ``"ok": false`` and Caffe's message in ``error``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "runtime"))
from runtime_caffe import build

from caffemem.api.analyze import Options, net_phases, parse_inputs, spec_table
from caffemem.passes.filter import filter_net, make_state
from caffemem.passes.load import NetSource, load
from caffemem.passes.upgrade import upgrade_net
from caffemem.schema import caffe_pb2

PROGRAM = Path(__file__).resolve().with_suffix(".cpp")


def probe_program(tree: Path) -> Path:
    """fork_groundtruth.cpp compiled against the probed fork in ``tree``, kept beside it
    (keyed on the source, so an edit recompiles)."""
    key = hashlib.sha256(PROGRAM.read_bytes()).hexdigest()[:16]
    out = tree / f"fork_groundtruth-{key}"
    if out.is_file():
        return out
    lib = tree / "build" / "lib"
    cmd = ["g++", "-std=gnu++17", "-O2", "-DCPU_ONLY", str(PROGRAM), "-o", str(out) + ".tmp"]
    cmd += [f"-I{tree / 'include'}", f"-I{tree / 'build' / 'src'}", "-I/usr/include/hdf5/serial", f"-L{lib}", f"-Wl,-rpath,{lib}"]
    cmd += ["-lcaffe", "-lglog", "-lgflags", "-lprotobuf", "-lboost_system", "-lopenblas", "-lpthread"]
    cmd += ["-lopencv_imgcodecs", "-lopencv_imgproc", "-lopencv_core"]  # the fork's libcaffe leaves OpenCV to the program
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling {PROGRAM.name} failed:\n{proc.stderr[-4000:]}")
    os.replace(str(out) + ".tmp", out)
    return out


def fork_net(upgraded: caffe_pb2.NetParameter, phase: str, given: dict[str, tuple[int, ...]]) -> tuple[caffe_pb2.NetParameter, dict[str, list[int]]]:
    """The phase's net as the fork reads it: filtered, Input layers (and data layers whose
    tops are all given) turned into net-level inputs, the optimizer on for both phases.
    Returns it and its net-level inputs {name: shape}."""
    filtered = filter_net(upgraded, make_state(phase, base=upgraded.state))
    net = caffe_pb2.NetParameter()
    net.CopyFrom(filtered)
    del net.layer[:]
    inputs: dict[str, list[int]] = {}
    for layer in filtered.layer:
        if layer.type == "Input":
            shapes = [list(shape.dim) for shape in layer.input_param.shape]
            for k, top in enumerate(layer.top):
                inputs[top] = shapes[k] if len(shapes) > 1 else shapes[0]  # InputLayer: one shape serves every top
        elif not layer.bottom and layer.top and all(top in given for top in layer.top):
            inputs.update((top, list(given[top])) for top in layer.top)
        else:
            net.layer.add().CopyFrom(layer)
    for name, shape in inputs.items():
        net.input.append(name)
        net.input_shape.add().dim.extend(shape)
    net.mem_param.optimize_train = True
    net.mem_param.optimize_test = True
    return net, inputs


def parse_records(stdout: str) -> dict:
    """The program's tab-separated records as one ground-truth run (without phase/inputs)."""
    run: dict = {"blobs": [], "outputs": [], "layers": []}
    fwd: dict[int, int] = {}
    bwd: dict[int, int] = {}
    input_bytes = 0
    for line in stdout.splitlines():
        tag, *fields = line.split("\t")
        if tag in ("heap_init", "learnable_param_bytes", "memory_required_for_data"):
            run[tag] = int(fields[0])
        elif tag == "input_bytes":
            input_bytes = int(fields[0])
        elif tag == "blob":
            run["blobs"].append({"name": fields[0], "shape": [int(d) for d in fields[1:]]})
        elif tag == "output":
            run["outputs"].append(fields[0])
        elif tag == "layer":
            run["layers"].append({"name": fields[0], "type": fields[1], "need_backward": fields[2] == "1", "bottoms": [], "propagate_down": [], "tops": [], "params": []})
        elif tag == "bottom":
            run["layers"][-1]["bottoms"].append(fields[0])
            run["layers"][-1]["propagate_down"].append(fields[1] == "1")
        elif tag == "top":
            run["layers"][-1]["tops"].append(fields[0])
        elif tag == "param":
            run["layers"][-1]["params"].append([int(d) for d in fields])
        elif tag == "fwd":
            fwd[int(fields[0])] = int(fields[1])
        elif tag == "bwd":
            bwd[int(fields[0])] = int(fields[1])
    layers = []
    for i, layer in enumerate(run.pop("layers")):
        layers.append({
            "name": layer["name"], "type": layer["type"], "need_backward": layer["need_backward"],
            "fwd_alloc": fwd[i], "bwd_alloc": bwd.get(i, 0),
            "bottoms": layer["bottoms"], "propagate_down": layer["propagate_down"], "tops": layer["tops"], "params": layer["params"],
        })  # fmt: skip
    run["heap_forward"] = input_bytes + sum(fwd.values())
    run["heap_backward"] = sum(bwd.values())
    run["heap_total_run"] = run["heap_forward"] + run["heap_backward"]
    run["layers"] = layers
    return run


def measure(net_path: str, phases: list[str] | None = None, given: dict[str, tuple[int, ...]] | None = None, source: str | None = None) -> dict:
    """The ground-truth document of one net: one run per phase."""
    given = dict(given or {})
    loaded = load(net_path)
    if not isinstance(loaded, NetSource):
        raise SystemExit(f"{net_path}: a net definition, please (not a solver)")
    upgraded, _ = upgrade_net(loaded.proto, loaded.file)
    phases = phases or net_phases(upgraded, spec_table(Options()), Options(inputs=given))
    program = probe_program(build("fork-probe"))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for phase in phases:
            net, inputs = fork_net(upgraded, phase, given)
            inputs = {name: shape for name, shape in inputs.items() if name in given}  # as the ground truth: the data layers replaced
            path = Path(tmp) / f"{phase.lower()}.prototxt"
            path.write_text(_text(net))
            proc = subprocess.run([str(program), str(path), phase.lower()], check=False, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                lines = proc.stderr.splitlines()
                fatal = next((k for k, line in enumerate(lines) if line.startswith("F")), 0)  # glog's fatal line, then the stack
                message = "\n".join(lines[fatal:]).strip()
                runs.append({"phase": phase, "ok": False, "error": message, "inputs": inputs})
                continue
            records = parse_records(proc.stdout)
            runs.append({"phase": phase, "heap_init": records.pop("heap_init"), "blobs": records.pop("blobs"), **records, "inputs": inputs, "ok": True})
    order = ["phase", "heap_init", "blobs", "learnable_param_bytes", "memory_required_for_data", "inputs", "outputs", "heap_forward", "heap_backward", "heap_total_run", "layers", "ok", "error"]
    runs = [{key: run[key] for key in order if key in run} for run in runs]
    return {"source": source or net_path, "caffe": "yjx", "runs": runs}


def _text(net: caffe_pb2.NetParameter) -> str:
    from google.protobuf import text_format

    return text_format.MessageToString(net)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("net")
    ap.add_argument("--phase", action="append", choices=("TRAIN", "TEST"), help="default: the phases caffemem plans")
    ap.add_argument("--input", action="append", default=[], metavar="NAME=d0,d1,...", help="the shape of a data layer's top (the layer becomes a net-level input)")
    ap.add_argument("--source", help='the "source" field (default: NET as given)')
    ap.add_argument("-o", "--output", help="write the JSON here (default: stdout)")
    args = ap.parse_args()
    document = measure(args.net, args.phase, parse_inputs(args.input), args.source)
    text = json.dumps(document, indent=1) + "\n"
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
