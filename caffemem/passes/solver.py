"""Memory pass, process level: what a training process holds besides the nets' runs.

Entry point: :func:`solver_footprint`.  A Solver adds, per learnable parameter, the
history/update/temp blobs of SGDSolver::PreSolve (how many get data depends on the
solver type: sgd_solver.cpp and its subclasses), makes Net::ClearParamDiffs allocate
every owner's gradient before the first Forward, and builds test nets whose parameters
are shared with the train net by layer name (Net::ShareTrainedLayersWith: data only).
"""

from __future__ import annotations

from dataclasses import dataclass

from caffemem.graph import ShapedGraph, count
from caffemem.passes.device import DeviceReport, shared_pool_bytes
from caffemem.passes.memory import MemoryReport, owned_params
from caffemem.units import INT_BYTES

# solver type -> (history blobs per parameter, update_ data touched, temp_ data touched)
SOLVER_BUFFERS = {
    "SGD": (1, False, False),
    "Nesterov": (1, True, False),
    "AdaGrad": (1, True, False),
    "RMSProp": (1, True, False),
    "AdaDelta": (2, True, True),
    "Adam": (2, False, True),
}


@dataclass(frozen=True)
class NetShare:
    """One net's part of the process footprint."""

    role: str
    index: int
    bytes: int
    note: str


@dataclass(frozen=True)
class ProcessFootprint:
    """Train net, solver state and test nets while all are alive."""

    solver_type: str
    iter_size: int
    train_bytes: int  # the train net's footprint, with ClearParamDiffs' gradients
    history_bytes: int
    tests: tuple[NetShare, ...]
    total_bytes: int
    notes: tuple[str, ...]
    device: str = "cpu"  # "gpu": every figure is what one card holds (one CUDA context)


def history_bytes(params: list[tuple[int, ...]], solver_type: str, dtype_bytes: int, l1: bool) -> int:
    """SGDSolver::PreSolve's blobs (shape buffers) and what ComputeUpdateValue touches."""
    histories, update_touched, temp_touched = SOLVER_BUFFERS[solver_type]
    temp_touched = temp_touched or l1
    total = 0
    for shape in params:
        shape_bytes = INT_BYTES * len(shape)
        data = count(shape) * dtype_bytes
        total += (histories + 2) * shape_bytes  # history_ (x1 or x2), update_, temp_
        total += histories * data + (data if update_touched else 0) + (data if temp_touched else 0)
    return total


def device_history_bytes(params: list[tuple[int, ...]], solver_type: str, dtype_bytes: int, l1: bool) -> int:
    """The same blobs in a GPU run: every solver's ComputeUpdateValue is one fused kernel
    on the history (two sets for Adam and AdaDelta), update_ is never touched and temp_
    only by L1 regularization (sgd_solver.cpp 186-202, adam_solver.cpp, adadelta_solver.cpp;
    ../shared/caffe/GPU-MEMORY.md section 5).  Device bytes; the shape buffers stay on the host."""
    histories = SOLVER_BUFFERS[solver_type][0]
    return sum((histories + (1 if l1 else 0)) * count(shape) * dtype_bytes for shape in params)


def shared_test_param_bytes(test: ShapedGraph, train: ShapedGraph, dtype_bytes: int) -> int:
    """Parameter data of a test net that ShareTrainedLayersWith replaces by the train net's
    (it matches layers by name; their parameter shapes must agree)."""
    train_params = {layer.name: train.layer_shapes[layer.index].params for layer in train.graph.layers}
    return sum(
        count(shape) * dtype_bytes
        for layer, shape in owned_params(test).values()
        if train_params.get(layer.name) == test.layer_shapes[layer.index].params
    )


def solver_footprint(
    solver,  # caffe_pb2.SolverParameter, already upgraded
    train: tuple[ShapedGraph, MemoryReport],
    tests: list[tuple[ShapedGraph, MemoryReport]],
    dtype_bytes: int,
) -> ProcessFootprint:
    """The process while training: train net, solver history and every test net."""
    train_shaped, train_memory = train
    if isinstance(train_memory, DeviceReport):
        return _device_footprint(solver, train_shaped, train_memory, tests, dtype_bytes)
    solver_type = solver.type or "SGD"
    solver_type_counted, notes = _counted_type(solver)
    l1 = solver.regularization_type == "L1" and solver.weight_decay != 0
    train_bytes = train_memory.total_bytes + train_memory.untouched_param_diff_bytes
    history = history_bytes([shape for _, shape in owned_params(train_shaped).values()], solver_type_counted, dtype_bytes, l1)
    shares = []
    for index, (shaped, memory) in enumerate(tests):
        shared = shared_test_param_bytes(shaped, train_shaped, dtype_bytes)
        shares.append(
            NetShare(
                "test",
                index,
                memory.heap_init + memory.heap_forward + memory.prefetch_bytes - memory.prefetched_input_bytes - shared,
                f"its parameters ({shared} bytes) are the train net's once the first test shares them",
            )
        )
    total = train_bytes + history + sum(s.bytes for s in shares)
    return ProcessFootprint(solver_type, solver.iter_size, train_bytes, history, tuple(shares), total, tuple(notes + _iter_size_notes(solver)))


def _iter_size_notes(solver) -> list[str]:
    if solver.iter_size > 1:
        return [f"iter_size {solver.iter_size}: gradients accumulate over {solver.iter_size} passes of the same batch; memory is that of one pass"]
    return []


def _counted_type(solver) -> tuple[str, list[str]]:
    """The solver type whose buffers are counted, and a note when Caffe has no such type."""
    solver_type = solver.type or "SGD"
    if solver_type not in SOLVER_BUFFERS:
        return "SGD", [f"solver type '{solver_type}' is not Caffe's; its history is counted as SGD's"]
    return solver_type, []


def _device_footprint(solver, train_shaped: ShapedGraph, train: DeviceReport, tests, dtype_bytes: int) -> ProcessFootprint:
    """The training process on one card: the train net with every owner's gradient
    (Net::ClearParamDiffs writes them on the device), the history on the device, each test
    net without a second CUDA context and without the parameters it shares."""
    solver_type, notes = _counted_type(solver)
    l1 = solver.regularization_type == "L1" and solver.weight_decay != 0
    train_bytes = train.device_bytes + train.untouched_param_diff_bytes
    history = device_history_bytes([shape for _, shape in owned_params(train_shaped).values()], solver_type, dtype_bytes, l1)
    shares = []
    for index, (shaped, report) in enumerate(tests):
        shared = shared_test_param_bytes(shaped, train_shaped, dtype_bytes)
        pool = shared_pool_bytes(report, train)
        note = f"its parameters ({shared} bytes) are the train net's once the first test shares them; one CUDA context for the process"
        note += "; one pool of cuDNN handles and workspace per card (a caffemem-patched Caffe)" if pool else ""
        shares.append(NetShare("test", index, report.device_bytes - report.context.bytes - shared - pool, note))
    total = train_bytes + history + sum(s.bytes for s in shares)
    return ProcessFootprint(solver.type or "SGD", solver.iter_size, train_bytes, history, tuple(shares), total, tuple(notes + _iter_size_notes(solver)), device="gpu")
