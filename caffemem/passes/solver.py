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
    solver_type = solver.type or "SGD"
    notes: list[str] = []
    if solver_type not in SOLVER_BUFFERS:
        notes.append(f"solver type '{solver_type}' is not Caffe's; its history is counted as SGD's")
        solver_type_counted = "SGD"
    else:
        solver_type_counted = solver_type
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
    if solver.iter_size > 1:
        notes.append(f"iter_size {solver.iter_size}: gradients accumulate over {solver.iter_size} passes of the same batch; memory is that of one pass")
    total = train_bytes + history + sum(s.bytes for s in shares)
    return ProcessFootprint(solver_type, solver.iter_size, train_bytes, history, tuple(shares), total, tuple(notes))
