"""The importable API: the pipeline of passes, run on a file.

load → upgrade → filter → splits → shapes (→ memory → schedule → liveness → plan →
verify → render).  The CLI is a thin layer over :func:`analyze`.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from caffemem.api.source import NetLike, as_source
from caffemem.api.timeline import Timeline, run_timeline
from caffemem.errors import CaffememError, Location, excerpt
from caffemem.graph import Shape, ShapedGraph
from caffemem.layers.registry import SpecTable
from caffemem.passes.device import CardConstants, DeviceReport, device_footprint
from caffemem.passes.device import LayerSides as LayerSides  # named for the views: see below
from caffemem.passes.filter import filter_net, make_state, phase_name
from caffemem.passes.liveness import lifetimes
from caffemem.passes.load import NetSource, SolverSource, load
from caffemem.passes.memory import CATEGORIES as CATEGORIES  # named for the views: see below
from caffemem.passes.memory import MemoryReport, Run, merged_run, prepare, simulate
from caffemem.passes.schedule import Schedule, build_schedule
from caffemem.passes.shapes import FROM_FILE, INT_MAX, infer_shapes
from caffemem.passes.sources import read_sources
from caffemem.passes.solver import ProcessFootprint, solver_footprint
from caffemem.passes.splits import insert_splits
from caffemem.passes.upgrade import upgrade_net, upgrade_solver
from caffemem.prototxt.read import MAX_TEXT_BYTES
from caffemem.schema import caffe_pb2
from caffemem.schema.caffe_root import CaffeRoot, caffe_root
from caffemem.units import DTYPE_BYTES

# The views (report/) name the reports a NetAnalysis carries (MemoryReport and its
# CATEGORIES, DeviceReport and its LayerSides) and FROM_FILE from here: they format what
# the API computed and import no pass (tests/architecture/test_layering.py).


PHASES = ("TRAIN", "TEST")
DEVICES = ("cpu", "gpu")  # Caffe::mode()
ENGINES = ("caffe", "cudnn")  # the build's default engine (layer_factory.cpp)
MAX_GPUS = 1 << 16  # far above any machine; a bound so that a figure times it stays sane


def _whole(name: str, value: object, low: int, high: int, optional: bool = False) -> None:
    """A whole number within [low, high] (None where ``optional``), else a CaffememError."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise CaffememError(f"{name} {excerpt(repr(value))}: expected a whole number from {low} to {high}" + (", or None" if optional else ""))


def _input_shapes(inputs: object) -> dict[str, Shape]:
    """``Options.inputs`` as shapes: a text value is read as ``--input`` reads it; a
    sequence must be whole numbers from 0 to INT_MAX, or FROM_FILE (``_``)."""
    if not isinstance(inputs, Mapping):
        raise CaffememError(f"inputs {excerpt(repr(inputs))}: expected a mapping of blob name to shape, e.g. {{'data': (64, 1, 28, 28)}}")
    shapes: dict[str, Shape] = {}
    for name, shape in inputs.items():
        if not isinstance(name, str) or not name:
            raise CaffememError(f"inputs: {excerpt(repr(name))} is not a blob name")
        if isinstance(shape, str):
            shapes.update(parse_inputs([f"{name}={shape}"]))
            continue
        if not isinstance(shape, Sequence) or not all(not isinstance(d, bool) and isinstance(d, int) and (d == FROM_FILE or 0 <= d <= INT_MAX) for d in shape):
            raise CaffememError(f"inputs: {excerpt(name)}'s shape {excerpt(repr(shape))}: expected whole numbers from 0 to {INT_MAX} (or {FROM_FILE}, the file's own value), e.g. (64, 1, 28, 28) or \"64,1,28,28\"")
        shapes[name] = tuple(shape)
    return shapes


@dataclass(frozen=True)
class Options:
    """What the user chose for a run (the CLI flags, as values).

    ``device`` defaults to "cpu" here, a CPU run's heap (checked byte for byte against real
    Caffe), while the command line's ``--device`` defaults to gpu, what one card holds:
    ``Options(device="gpu")`` gives the command's figures."""

    phase: str | None = None  # None: TRAIN for a net with a loss, else TEST
    stages: tuple[str, ...] = ()
    level: int | None = None
    inputs: Mapping[str, Shape] = field(default_factory=dict)  # --input and --override-input values
    overrides: frozenset[str] = frozenset()  # the keys of ``inputs`` given with --override-input
    layers_file: str | None = None
    lenient: bool = False
    dtype: str = "float32"
    batch: int | None = None  # rescale the batch axis of every data layer's tops
    engine: str | None = None  # the build's default engine; None: cuDNN on a GPU, Caffe's on the CPU
    max_input_bytes: int = MAX_TEXT_BYTES  # a text input larger than this is refused unread
    # Caffe::mode() of the run: "cpu" (the heap, checked byte for byte against real Caffe)
    # or "gpu" (device and host bytes).  The CLI's --device defaults to gpu.
    device: str = "cpu"
    gpus: int = 1  # GPUs training together (--gpus): every one holds the figure
    context_bytes: int | None = None  # the CUDA context per GPU; None: the cited constant (or ``card``'s)
    # The per-process constants of the user's card (--card FILE, --cudnn-handle-mib, ...);
    # None: the cited measurement's (passes/device.py CardConstants).
    card: CardConstants | None = None
    # A fork's source tree (--caffe-root, $CAFFE_ROOT): its caffe.proto merged with
    # caffemem's schema, and the layer types it registers (schema/caffe_root.py).
    caffe_root: str | None = None

    def __post_init__(self) -> None:
        """The API's values checked as the CLI's flags are (issue 31: ``dtype="bogus"``,
        ``phase="BOGUS"``, ``level=2**40`` or an input given as text raised KeyError,
        ValueError or TypeError deep in a pass): each wrong value is a CaffememError
        naming it and what it may be.  Text is read as the flags read it: a phase in any
        case, an input's shape as ``--input`` writes it ("64,1,28,28", "_,3,_,_")."""
        fix = functools.partial(object.__setattr__, self)
        if self.phase is not None:
            if not isinstance(self.phase, str) or self.phase.upper() not in PHASES:
                raise CaffememError(f"phase {excerpt(repr(self.phase))}: expected TRAIN, TEST or None (the net's own default)")
            fix("phase", self.phase.upper())
        stages = (self.stages,) if isinstance(self.stages, str) else self.stages
        if not isinstance(stages, Sequence) or not all(isinstance(stage, str) for stage in stages):
            raise CaffememError(f"stages {excerpt(repr(self.stages))}: expected a list of stage names")
        fix("stages", tuple(stages))
        _whole("level", self.level, -INT_MAX - 1, INT_MAX, optional=True)  # NetState.level: an int32
        if self.dtype not in DTYPE_BYTES:
            raise CaffememError(f"dtype {excerpt(repr(self.dtype))}: expected one of {', '.join(DTYPE_BYTES)}")
        if self.device not in DEVICES:
            raise CaffememError(f"device {excerpt(repr(self.device))}: expected one of {', '.join(DEVICES)}")
        if self.engine is not None and self.engine not in ENGINES:
            raise CaffememError(f"engine {excerpt(repr(self.engine))}: expected one of {', '.join(ENGINES)}, or None (the build's default)")
        _whole("batch", self.batch, 1, INT_MAX, optional=True)
        _whole("gpus", self.gpus, 1, MAX_GPUS)
        _whole("max_input_bytes", self.max_input_bytes, 1, 2**63 - 1)
        _whole("context_bytes", self.context_bytes, 0, 2**63 - 1, optional=True)
        if self.card is not None and not isinstance(self.card, CardConstants):
            raise CaffememError(f"card {excerpt(repr(self.card))}: expected a CardConstants, or None (the cited measurement's)")
        fix("inputs", _input_shapes(self.inputs))
        if not isinstance(self.overrides, (set, frozenset, Sequence)) or isinstance(self.overrides, str) or not all(isinstance(name, str) for name in self.overrides):
            raise CaffememError(f"overrides {excerpt(repr(self.overrides))}: expected a set of input names")
        fix("overrides", frozenset(self.overrides))
        for name in ("layers_file", "caffe_root"):  # paths, as --layers and --caffe-root give them
            value = getattr(self, name)
            if value is not None and not isinstance(value, (str, os.PathLike)):
                raise CaffememError(f"{name} {excerpt(repr(value))}: expected a path, or None")
            if value is not None:
                fix(name, os.fspath(value))
        if not isinstance(self.lenient, bool):
            raise CaffememError(f"lenient {excerpt(repr(self.lenient))}: expected True or False")

    @property
    def build_engine(self) -> str:
        """The engine Caffe's layer factory defaults to: cuDNN in a GPU build (the one a
        GPU run uses), Caffe's own in a CPU-only build."""
        if self.engine is not None:
            return self.engine
        return "cudnn" if self.device == "gpu" else "caffe"

    @property
    def heap_engine(self) -> str:
        """The engine of the CPU-mode heap figures: a CPU run builds Caffe's own layers
        unless the user named an engine."""
        return self.engine or "caffe"


@dataclass(frozen=True)
class CarriedTable:
    """A net file that carries `optimize -o`'s slot table for this phase, measured as the
    patched Caffe runs it (the net's figures are that run's)."""

    slots: int
    recomputed: int  # Forwards the table runs again inside Backward
    stock_bytes: int  # what stock Caffe would allocate (the figure of the run's mode), were it to accept mem_param


@dataclass(frozen=True)
class NetAnalysis:
    """One net of a file, built for one NetState, with every shape known."""

    role: str  # "net", "train" or "test" (a solver's nets)
    index: int  # which test net, for a solver; 0 otherwise
    file: str
    shaped: ShapedGraph
    memory: MemoryReport  # CPU mode: the heap, as the ground truth measures it
    notes: tuple[str, ...] = ()
    device: DeviceReport | None = None  # GPU mode: device and host bytes
    batch: int | None = None  # images (sequences) per iteration: see net_batch
    mem_param: CarriedTable | None = None  # the file's mem_param table, applied (memory and device are then that run's)
    # What it was built with, for what a view computes only when it asks (``timeline``).
    specs: SpecTable = field(kw_only=True, repr=False, compare=False)
    options: Options = field(kw_only=True, repr=False, compare=False)

    @functools.cached_property
    def timeline(self) -> Timeline:
        """Its run step by step in the figures' mode (api/timeline.py), computed when a
        view first asks (``analyze --html``): no other command pays for it."""
        schedule = run_schedule(self.shaped, self.specs, self.options)
        return run_timeline(schedule, lifetimes(schedule), self.figures)

    @property
    def phase(self) -> str:
        return self.shaped.graph.phase

    # The JSON document's fields (report/document.py), under the same names.
    @property
    def name(self) -> str:
        return self.shaped.graph.name

    @property
    def blobs(self) -> Mapping[str, Shape]:
        """Every blob's shape, in Caffe's blob order."""
        return self.shaped.blob_shapes

    @property
    def dtype(self) -> str:
        return self.memory.dtype

    @property
    def heap_init(self) -> int:
        return self.memory.heap_init

    @property
    def heap_forward(self) -> int:
        return self.memory.heap_forward

    @property
    def heap_backward(self) -> int:
        return self.memory.heap_backward

    @property
    def input_bytes(self) -> int:
        return self.memory.input_bytes

    @property
    def memory_required_for_data(self) -> int:
        return self.memory.memory_required_for_data

    @property
    def learnable_param_bytes(self) -> int:
        return self.memory.learnable_param_bytes

    @property
    def prefetch_bytes(self) -> int:
        return self.memory.prefetch_bytes

    @property
    def mode(self) -> str:
        """Caffe::mode() of the figures: "gpu" or "cpu"."""
        return "gpu" if self.device is not None else "cpu"

    @property
    def cpu_total_bytes(self) -> int:
        """The heap a CPU run allocates (in GPU mode, for comparison)."""
        return self.memory.total_bytes

    @property
    def figures(self) -> "MemoryReport | DeviceReport":
        """The report of the run's mode: the device report in GPU mode, else the heap's."""
        return self.device if self.device is not None else self.memory

    @property
    def total_bytes(self) -> int:
        """What Caffe allocates for this net: the one stock figure of every command (in
        GPU mode what one card holds, cuDNN workspaces at their bound)."""
        return self.figures.total_bytes

    @property
    def peak_layer(self) -> str | None:
        return self.memory.peak_layer

    @property
    def unverified_types(self) -> tuple[str, ...]:
        return self.memory.unverified_types


@dataclass(frozen=True)
class Analysis:
    """Everything caffemem learned from one input file."""

    path: str
    kind: str  # "net" or "solver"
    nets: tuple[NetAnalysis, ...]
    notes: tuple[str, ...] = ()
    process: ProcessFootprint | None = None  # a solver's train + test nets, while all are alive


def fork_tree(options: Options) -> CaffeRoot | None:
    """The --caffe-root tree of the run, read once per process."""
    return None if options.caffe_root is None else caffe_root(options.caffe_root)


def load_source(path, options: Options) -> NetSource | SolverSource:
    """Pass 1 with the run's options: the net or solver as read (with the fork's schema)."""
    tree = fork_tree(options)
    return load(path, lenient=options.lenient, max_text_bytes=options.max_input_bytes, schema=tree.schema if tree else None)


def spec_table(options: Options) -> SpecTable:
    """Built-in layer specs plus the user's declared ones, and what the fork's tree registers."""
    tree = fork_tree(options)
    if options.layers_file is None:
        return SpecTable(root=tree)
    from caffemem.layers.declarative import load_declarations

    return SpecTable(load_declarations(options.layers_file, tree.schema if tree else None), root=tree)


def analyze(
    net: NetLike,
    options: Options = Options(),
    *,
    phase: str | None = None,
    inputs: Mapping[str, Sequence[int]] | None = None,
    batch: int | None = None,
    tables: bool = True,
) -> Analysis:
    """Load a net or solver (a path, prototxt text or a NetParameter) and infer the shapes
    and bytes of every net it defines.  ``phase``, ``inputs`` and ``batch`` override
    ``options``' own.  The figures are a CPU run's unless ``Options(device="gpu")`` (the
    command line's default).  A file carrying `optimize -o`'s slot table is measured as
    the patched Caffe runs it (NetAnalysis.mem_param), unless ``tables`` is False (stock
    Caffe's figures: what fit varies and optimize plans from)."""
    options = with_overrides(options, phase, inputs, batch)
    path = as_source(net)
    specs = spec_table(options)
    source = load_source(path, options)
    if isinstance(source, SolverSource):
        return _analyze_solver(source, options, specs, tables)
    upgraded, notes = upgrade_net(source.proto, source.file)
    phase = options.phase or default_phase(upgraded, specs, options.stages, options.level)
    state = make_state(phase, options.stages, options.level, base=upgraded.state)
    net = build_net(source, upgraded, state, options, specs)
    try:
        memory, device = measure(net, specs, options)
        (memory, device), carried, said = as_run(source, path, net, specs, options, memory, device) if tables else ((memory, device), None, ())
    except CaffememError as error:
        raise error.at(phase=phase) from None
    notes = net_notes(source, notes, net, options, memory.notes) + said
    return Analysis(str(path), "net", (NetAnalysis("net", 0, source.file, net, memory, notes, device, net_batch(net, specs), carried, specs=specs, options=options),))


def as_run(source: NetSource, path, shaped: ShapedGraph, specs: SpecTable, options: Options, memory: MemoryReport, device: DeviceReport | None):
    """The net's figures as Caffe will run the file: with the slot table its mem_param
    carries for this phase, as the patched Caffe binds it at the end of Net::Init (the
    figures `optimize` stated for it: planned storage in its slots, the recompute entries'
    parameter copies), else stock Caffe's ``memory`` and ``device``.  A table that would
    stop the patched Caffe (another batch, another net) leaves stock figures, saying why.
    Returns ((memory, device), CarriedTable or None, notes)."""
    from caffemem.plan.carried import assignment_of, tables_in, taken_by_init, with_copies
    from caffemem.plan.recompute import restored_bytes
    from caffemem.units import mib

    phase = shaped.graph.phase
    if not source.proto.HasField("mem_param"):
        return (memory, device), None, ()
    try:
        found = [table for table in tables_in(source, path, None) if table.phase == phase and not table.fork]
    except CaffememError:  # a block that plans no phase: stock Caffe's figures (verify says more)
        return (memory, device), None, ()
    if not found:
        return (memory, device), None, ()
    plan = found[0].plan
    run, _ = planning_runs(shaped, specs, options)
    (schedule,), recomputed, stops = taken_by_init([build_schedule(shaped, specs, options.dtype, run=run)], plan, specs, shaped.graph.name)
    stock = (device or memory).total_bytes
    if stops:
        return (memory, device), None, (
            f"the file's mem_param table for {phase} does not fit this net as built ({stops[0].message}): the patched Caffe would stop at Net::Init, "
            f"and these are stock Caffe's figures; `caffemem verify` says more",
        )
    slots = assignment_of(plan, schedule)
    copies = restored_bytes(schedule, recomputed)
    memory = with_copies(simulate(shaped, specs, options.dtype, options.heap_engine, slots), copies)
    if device is not None:
        device = with_copies(device_footprint(prepare_run(shaped, specs, options), specs, options.build_engine, slots=slots, context_bytes=options.context_bytes, gpus=options.gpus, pooled=True, card=options.card), copies)
    again = f", {len(recomputed)} Forward(s) run again in Backward" if recomputed else ""
    note = (
        f"as the patched Caffe runs the file's mem_param table for {phase} ({len(plan.slot_bytes)} slot(s){again}): stock Caffe would allocate {mib(stock)}, "
        "but refuses the file (mem_param); `caffemem patch CAFFE_DIR` builds the Caffe that runs it"
    )
    return (memory, device), CarriedTable(len(plan.slot_bytes), len(recomputed), stock), (note,)


def prepare_run(shaped: ShapedGraph, specs: SpecTable, options: Options) -> Run:
    """The run in the mode asked for: in GPU mode each layer's rule as its GPU code
    touches memory, with the build's engine (what the device figures replay)."""
    if options.device == "gpu":
        return prepare(shaped, specs, options.dtype, options.build_engine, "gpu")
    return prepare(shaped, specs, options.dtype, options.heap_engine)


def run_schedule(shaped: ShapedGraph, specs: SpecTable, options: Options) -> Schedule:
    """The steps and storage of the run in the mode asked for: in GPU mode the card's run
    alone (not the merged run a plan must also be right in, whose CPU-only storage, such
    as im2col buffers a cuDNN build never allocates, the card does not hold)."""
    return build_schedule(shaped, specs, options.dtype, run=prepare_run(shaped, specs, options))


def planning_runs(shaped: ShapedGraph, specs: SpecTable, options: Options, run: Run | None = None) -> tuple[Run, Run | None]:
    """The run that plans and verifies storage, and (GPU mode) the CPU run a plan must be
    right in as well.  In GPU mode each step of the first touches what it touches on the
    GPU (with the build's engine) or in a CPU run with Caffe's engine, so a table planned
    for a card stays right when the same file runs on the CPU; what the CPU run keeps
    private (a diff it reads as fresh zeros, where the GPU run's Accuracy wrote scratch)
    the planner keeps private too.  ``run``: :func:`prepare_run`'s, when the caller has it."""
    run = run or prepare_run(shaped, specs, options)
    if options.device != "gpu":
        return run, None
    on_cpu = prepare(shaped, specs, options.dtype, options.heap_engine)
    return merged_run(run, on_cpu, specs), on_cpu


def measure(shaped: ShapedGraph, specs: SpecTable, options: Options) -> tuple[MemoryReport, DeviceReport | None]:
    """The CPU heap of a net's run and, in GPU mode, what the card and the host hold."""
    memory = simulate(shaped, specs, options.dtype, options.heap_engine)
    if options.device != "gpu":
        return memory, None
    run = prepare_run(shaped, specs, options)
    return memory, device_footprint(run, specs, options.build_engine, context_bytes=options.context_bytes, gpus=options.gpus, card=options.card)


def net_batch(shaped: ShapedGraph, specs: SpecTable) -> int | None:
    """The batch a net runs, as the headlines state it: N of the blobs a recurrent layer
    reads T x N x ... (recurrent_layer.cpp), else the first axis of the first data layer's
    first top; None for a net without data layers (or whose data top is a scalar)."""
    for layer in shaped.graph.layers:
        spec = specs.get(layer.type)
        if spec is not None and spec.time_major_bottoms is not None:
            for i in spec.time_major_bottoms(layer.proto, len(layer.bottoms)):
                shape = shaped.blob_shapes.get(layer.bottoms[i], ())
                if len(shape) >= 2:
                    return shape[1]
    for layer in shaped.graph.layers:
        spec = specs.get(layer.type)
        if spec is not None and spec.is_data and layer.tops and shaped.blob_shapes.get(layer.tops[0]):
            return shaped.blob_shapes[layer.tops[0]][0]
    return None


def net_notes(source: NetSource, upgraded: Sequence[str], shaped: ShapedGraph, options: Options, memory: tuple[str, ...]) -> tuple[str, ...]:
    """What :func:`analyze` says around one net of a net file (NetAnalysis.notes, less a
    carried table's): the file's notes, the upgrade's (``upgraded``), a placeholder input's
    and the CPU heap run's layer rules' (``memory``: passes/memory.py ``rule_notes``)."""
    return tuple(source.notes) + tuple(upgraded) + placeholder_notes(shaped, options) + memory


def placeholder_notes(shaped: ShapedGraph, options: Options) -> tuple[str, ...]:
    """A warning for an Input top the file sizes 1x1 (``input_dim: 1 3 1 1``, as OpenPose
    deploy files ship and resize at run time): the figures are for that size."""
    notes = []
    for layer in shaped.graph.layers:
        if layer.type != "Input":
            continue
        for top in layer.tops:
            shape = shaped.blob_shapes.get(top, ())
            if len(shape) == 4 and shape[2:] == (1, 1) and not any(key.rpartition(":")[2] == top for key in options.inputs):
                notes.append(
                    f"warning: input '{top}' is {'x'.join(map(str, shape))} as the file gives it, a placeholder the program resizes at run time; "
                    f"these figures are for that size: pass the real one, e.g. --input {top}={shape[0]},{shape[1]},368,368"
                )
    return tuple(notes)


def with_overrides(options: Options, phase: str | None, inputs: Mapping[str, Sequence[int]] | None, batch: int | None) -> Options:
    """``options`` with the keyword arguments of the library calls applied."""
    changes: dict = {}
    if phase is not None:
        changes["phase"] = phase.upper()
    if inputs is not None:  # read as Options reads its own (text as --input writes it)
        changes["inputs"] = inputs
    if batch is not None:
        changes["batch"] = batch
    return replace(options, **changes) if changes else options


def build_net(
    source: NetSource,
    upgraded: caffe_pb2.NetParameter,
    state: caffe_pb2.NetState,
    options: Options,
    specs: SpecTable,
    role: str | None = None,
) -> ShapedGraph:
    """filter → splits → shapes for one upgraded net and one NetState (`role`: a solver's
    "train" or "testK")."""
    try:
        return _build_net(source, upgraded, state, options, specs, role)
    except CaffememError as error:
        raise error.at(phase=phase_name(state)) from None  # which of a train_val file's nets


def _build_net(source: NetSource, upgraded: caffe_pb2.NetParameter, state: caffe_pb2.NetState, options: Options, specs: SpecTable, role: str | None) -> ShapedGraph:
    file = source.file
    if not len(upgraded.layer):
        raise CaffememError("the file defines no layers (is it empty or cut short?)", Location(file=file))
    filtered = filter_net(upgraded, state, file, line_of=source.line_of)
    if not len(filtered.layer):
        raise CaffememError(f"no layer is left in phase {phase_name(state)} (check include/exclude rules and --stage)", Location(file=file))
    graph = insert_splits(
        filtered,
        file=file,
        phase=phase_name(state),
        line_of=source.line_of,
        auto_tops=lambda layer_type: _auto_top_count(specs, layer_type),
    )
    produced = {top for layer in graph.layers for top in layer.tops}
    overrides = inputs_for({key: options.inputs[key] for key in options.overrides if key in options.inputs}, role, file, graph.phase, produced)
    inputs = inputs_for(options.inputs, role, file, graph.phase, produced)
    sources = read_sources(graph, specs)
    return infer_shapes(graph, specs, inputs, source.stored_params, batch=options.batch, overrides=frozenset(name for name in overrides if inputs[name] == overrides[name]), sources=sources)


def inputs_for(inputs: Mapping[str, Shape], role: str | None, file: str, phase: str | None = None, produced: set[str] | None = None) -> dict[str, Shape]:
    """The --input shapes one net gets.  Plain names go to every net (of a solver: to the
    nets that have that blob); `TRAIN:NAME` and `TEST:NAME` to the net of that phase (a
    train_val file's two batches); a solver's nets also take `train:NAME`, `test:NAME`
    and `testK:NAME` (K = the test net's index).  A qualified name wins over a plain one."""
    chosen: dict[str, Shape] = {}
    for key, shape in sorted(inputs.items(), key=lambda item: ":" in item[0]):
        prefix, sep, name = key.rpartition(":")
        if not sep:
            if role is None or produced is None or key in produced:
                chosen[key] = shape
        elif prefix in ("TRAIN", "TEST") or (role is None and prefix.upper() in ("TRAIN", "TEST")):
            if prefix.upper() == phase:
                chosen[name] = shape
        elif role is None:
            raise CaffememError(f"--input {key}: the prefix must be TRAIN: or TEST: (the phase whose net takes it)", Location(file=file))
        elif prefix in (role.rstrip("0123456789"), role):
            chosen[name] = shape
        elif not re.fullmatch(r"train|test[0-9]*", prefix):
            raise CaffememError(f"--input {key}: the prefix must be TRAIN:, TEST: (a phase), train:, test: or testK: (a solver's net)", Location(file=file))
    return chosen


def _auto_top_count(specs: SpecTable, layer_type: str) -> int:
    spec = specs.get(layer_type)
    if spec is None or not spec.auto_top:
        return 0
    return max(spec.tops.min, spec.tops.max or 0) if spec.tops.max == spec.tops.min else spec.tops.min


def net_phases(net: caffe_pb2.NetParameter, specs: SpecTable, options: Options) -> list[str]:
    """The phases a net file defines: TRAIN and TEST for a net that trains, TEST for a
    deploy net — but not TEST when no data layer is left in it (SSD's train.prototxt
    feeds TRAIN only: Caffe could not build a TEST net from it)."""
    if default_phase(net, specs, options.stages, options.level) != "TRAIN":
        return ["TEST"]
    return ["TRAIN", "TEST"] if _feeds(net, specs, "TEST", options.stages, options.level) else ["TRAIN"]


def _feeds(net: caffe_pb2.NetParameter, specs: SpecTable, phase: str, stages: Sequence[str] = (), level: int | None = None) -> bool:
    """Whether a data layer is left in the net of that phase."""
    kept = filter_net(net, make_state(phase, stages, level, base=net.state))
    return any((spec := specs.get(layer.type)) is not None and spec.is_data for layer in kept.layer)


def default_phase(net: caffe_pb2.NetParameter, specs: SpecTable, stages: Sequence[str] = (), level: int | None = None) -> str:
    """TRAIN for a net that can train (a loss layer or a TRAIN rule), else TEST -- and TEST
    when only TEST keeps a data layer and the net has no inputs of its own: DeepLab v1's
    voc12/vgg128_noup/test.prototxt (TheLegendAli/DeepLab-Context) keeps its loss for TRAIN
    but its IMAGE_SEG_DATA for TEST, so Caffe could not build a TRAIN net from it."""
    for layer in net.layer:
        spec = specs.get(layer.type)
        trains = (spec is not None and spec.auto_top) or any(w for w in layer.loss_weight)
        if trains or any(rule.HasField("phase") and rule.phase == caffe_pb2.TRAIN for rule in list(layer.include) + list(layer.exclude)):
            test_only = not net.input and _feeds(net, specs, "TEST", stages, level) and not _feeds(net, specs, "TRAIN", stages, level)
            return "TEST" if test_only else "TRAIN"
    return "TEST"


def _analyze_solver(source: SolverSource, options: Options, specs: SpecTable, tables: bool = True) -> Analysis:
    """The train net (TRAIN + train_state) and each test net (TEST + its test_state)."""
    solver, solver_notes = upgrade_solver(source.proto, source.file)
    nets: list[NetAnalysis] = []
    wanted = {options.phase} if options.phase else {"TRAIN", "TEST"}
    if "TRAIN" in wanted:
        nets.append(_solver_net("train", 0, source.train, source.train_state, options, specs, tables))
    if "TEST" in wanted:
        nets.extend(_solver_net("test", i, test.net, test.state, options, specs, tables) for i, test in enumerate(source.tests))
    process = None
    if "TRAIN" in wanted:
        train, tests = nets[0], [n for n in nets if n.role == "test"]
        process = solver_footprint(solver, (train.shaped, train.figures), [(t.shaped, t.figures) for t in tests], DTYPE_BYTES[options.dtype])
    return Analysis(source.file, "solver", tuple(nets), tuple(source.notes) + tuple(solver_notes), process)


def _solver_net(role: str, index: int, net: NetSource, state: caffe_pb2.NetState, options: Options, specs: SpecTable, tables: bool = True) -> NetAnalysis:
    shaped, notes = _solver_shaped(role, index, net, state, options, specs)
    memory, device = measure(shaped, specs, options)
    (memory, device), carried, said = as_run(net, net.file, shaped, specs, options, memory, device) if tables else ((memory, device), None, ())
    notes = tuple(net.notes) + tuple(notes) + placeholder_notes(shaped, options) + memory.notes + said
    return NetAnalysis(role, index, net.file, shaped, memory, notes, device, net_batch(shaped, specs), carried, specs=specs, options=options)


def _solver_shaped(role: str, index: int, net: NetSource, state: caffe_pb2.NetState, options: Options, specs: SpecTable) -> tuple[ShapedGraph, list[str]]:
    """A solver's net built as Solver builds it (its state, the run's stages and level),
    and the upgrade's notes."""
    upgraded, notes = upgrade_net(net.proto, net.file)
    if role == "test":
        # Solver::Test runs a test net's Forward only (solver.cpp): force_backward gives it
        # a Backward that never runs (a TEST net analysed alone keeps it: pycaffe's backward).
        upgraded.force_backward = False
    run_state = caffe_pb2.NetState()
    run_state.CopyFrom(state)
    run_state.stage.extend(options.stages)
    if options.level is not None:
        run_state.level = options.level
    return build_net(net, upgraded, run_state, options, specs, role if role == "train" else f"test{index}"), notes


def shaped_net(source: "NetSource | SolverSource", options: Options, specs: SpecTable) -> ShapedGraph:
    """The net :func:`analyze` measures at ``options.phase`` (a solver: its train net),
    built and shaped only, from a source loaded once: fit --recompute's search plans from
    it at every batch and needs no stock figures (issue 33)."""
    if isinstance(source, SolverSource):
        return _solver_shaped("train", 0, source.train, source.train_state, options, specs)[0]
    upgraded, _ = upgrade_net(source.proto, source.file)
    phase = options.phase or default_phase(upgraded, specs, options.stages, options.level)
    return build_net(source, upgraded, make_state(phase, options.stages, options.level, base=upgraded.state), options, specs)


def parse_inputs(values: Sequence[str], overrides: Sequence[str] = ()) -> dict[str, Shape]:
    """`NAME=d0,d1,...` strings (the --input flag, then --override-input) as a name →
    shape mapping.  An axis written `_` keeps the file's value (FROM_FILE)."""
    inputs: dict[str, Shape] = {}
    flags: dict[str, str] = {}
    for flag, value in [("--input", v) for v in values] + [("--override-input", v) for v in overrides]:
        name, sep, dims = value.partition("=")
        name = name.strip()
        parts = [d.strip() for d in dims.split(",")]
        # Each dim is one of Caffe's ints: digits only (no sign, no "1e3"), at most INT_MAX.
        if not name or not sep or not all(d == "_" or (re.fullmatch(r"[0-9]{1,10}", d) and int(d) <= INT_MAX) for d in parts):
            raise CaffememError(
                f"{flag} '{excerpt(value)}': expected NAME=d0,d1,... with whole numbers from 0 to {INT_MAX} or _ (the file's own value), e.g. data=1,3,224,224 or data=_,3,_,_"
            )
        if name in inputs:
            raise CaffememError(f"{flag} {name} is given twice" if flags[name] == flag else f"{name} is given with both --input and --override-input")
        flags[name] = flag
        inputs[name] = tuple(FROM_FILE if d == "_" else int(d) for d in parts)
    return inputs
