"""Shared test helpers: where the shared corpus lives, and a one-layer shape probe."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FIXTURES = REPO / "fixtures"

def pytest_configure(config):
    """The CLI's --device defaults to gpu; the command tests compare CPU figures (checked
    against real Caffe), so the session runs with CAFFEMEM_DEVICE=cpu (module-scoped
    fixtures run commands too), except the tests marked ``gpu_default``."""
    os.environ["CAFFEMEM_DEVICE"] = "cpu"
    os.environ.pop("CAFFE_ROOT", None)  # a developer's own Caffe tree is no input of these tests (--caffe-root)
    # pytest imports pdb, hence GNU readline, which exports the terminal's size (80x24 with
    # none) into the process's C environment behind os.environ's back (rl_change_environment):
    # every command a test starts would inherit a COLUMNS it never set and wrap its report
    # (tests/runtime parse verify's lines).  A child sees what os.environ says.
    for name in ("COLUMNS", "LINES"):
        if name not in os.environ:
            os.unsetenv(name)


@pytest.fixture(autouse=True)
def gpu_default_commands(monkeypatch, request):
    """Tests of the --device default itself (and of GPU mode through the CLI) run without it."""
    if request.node.get_closest_marker("gpu_default") is not None:
        monkeypatch.delenv("CAFFEMEM_DEVICE", raising=False)


def load_script(path: Path):
    """A script of benchmarks/ imported as a module under its file's stem (registered in
    sys.modules: its dataclasses look their module up)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared (models and ground truth) is not beside the repo")


def groundtruth_runs(folder: str = "groundtruth") -> list:
    """One pytest param (source, run) per run real Caffe accepted, in ../shared/<folder>."""
    import json

    path = SHARED / folder
    if not path.is_dir():
        return []
    return [
        pytest.param(document["source"], run, id=f"{file.stem}-{run['phase']}")
        for file in sorted(path.glob("*.json"))
        for document in [json.loads(file.read_text())]
        for run in document["runs"]
        if run["ok"]
    ]


def run_inputs(run: dict) -> dict:
    """A ground-truth run's data-layer shapes, as --input gives them."""
    return {name: tuple(shape) for name, shape in run["inputs"].items()}


def run_shape_rule(layer_text: str, *bottoms: tuple[int, ...], phase: str = "TRAIN", inputs=None, overrides=frozenset()):
    """Parse one LayerParameter in text form and run its registered shape rule."""
    from google.protobuf import text_format

    from caffemem.graph import Layer
    from caffemem.layers import ShapeQuery, SpecTable
    from caffemem.schema import caffe_pb2

    proto = text_format.Parse(layer_text, caffe_pb2.LayerParameter())
    layer = Layer(0, proto.name, proto.type, tuple(proto.bottom), tuple(proto.top), proto, line=1)
    spec = SpecTable().get(proto.type)
    assert spec is not None, f"no spec for {proto.type}"
    return spec.shape(ShapeQuery(layer, tuple(tuple(b) for b in bottoms), phase, dict(inputs or {}), overrides=frozenset(overrides)))


@pytest.fixture
def shape_of():
    """`shape_of('type: "ReLU" bottom: "x" top: "y"', (2, 3))` -> LayerShapes."""
    return run_shape_rule


def run_memory_report(tmp_path: Path, body: str, inputs: dict[str, tuple[int, ...]], phase: str = "TRAIN", force_backward: bool = True, engine: str = "caffe"):
    """Write a net of one Input layer per entry of ``inputs`` followed by ``body`` (layer
    text) and return its MemoryReport (the memory tests)."""
    from caffemem.api.analyze import Options, analyze

    lines = ["force_backward: true"] if force_backward else []
    for name, shape in inputs.items():
        dims = " ".join(f"dim: {d}" for d in shape)
        lines.append(f'layer {{ name: "{name}" type: "Input" top: "{name}" input_param {{ shape {{ {dims} }} }} }}')
    path = tmp_path / "net.prototxt"
    path.write_text("\n".join(lines) + "\n" + body)
    return analyze(str(path), Options(phase=phase, engine=engine)).nets[0].memory


@pytest.fixture
def memory_of(tmp_path):
    """`memory_of('layer {...}', {"x": (2, 3)})["relu"].bwd_alloc` -> bytes (layers by name)."""
    return lambda body, inputs, **options: {layer.name: layer for layer in run_memory_report(tmp_path, body, inputs, **options).layers}


@pytest.fixture
def memory_report(tmp_path):
    """`memory_report('layer {...}', {"x": (2, 3)})` -> the whole MemoryReport."""
    return lambda body, inputs, **options: run_memory_report(tmp_path, body, inputs, **options)


def check_plans(tmp_path, text: str, phase: str = "TRAIN", name: str = "net.prototxt", round_trip: bool = True, inputs=None):
    """optimize plans every phase of the net (``phase``: the one asked for; ``inputs``: the
    --input shapes), the verifier accepts each plan, it lies between the lower bound and
    stock Caffe, and (``round_trip``) the CLI's optimize --plan-json -> verify exits 0.
    Returns the optimize result."""
    from click.testing import CliRunner

    from caffemem.api.analyze import Options
    from caffemem.api.optimize import OptimizeSettings, optimize
    from caffemem.cli import main
    from caffemem.plan.verify import verify_plan

    path = tmp_path / name
    path.write_text(text)
    result = optimize(str(path), Options(phase=phase, inputs=dict(inputs or {})), OptimizeSettings())
    assert result.phases
    for planned in result.phases:
        assert verify_plan(planned.schedule, planned.plan_data) == []
        assert planned.lower_bound <= planned.planned.heap_total <= planned.stock.heap_total
    if round_trip:
        plan = tmp_path / "plan.json"
        runner = CliRunner()
        given = [arg for blob, shape in (inputs or {}).items() for arg in ("--input", f"{blob}={','.join(map(str, shape))}")]
        assert runner.invoke(main, ["optimize", str(path), "--phase", phase, "--plan-json", str(plan), *given]).exit_code == 0
        assert runner.invoke(main, ["verify", str(path), str(plan), *given]).exit_code == 0
    return result


def run_cli(*args):
    """A caffemem command through its click entry point, every argument as text."""
    from click.testing import CliRunner

    from caffemem.cli import main

    return CliRunner().invoke(main, [str(a) for a in args])


def one_error_line(result) -> str:
    """The one line a refused command prints on stderr (the contract: one line, no
    traceback)."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]
