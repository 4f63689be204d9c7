"""caffemem's JSON documents: an analysis and an optimize result, with the field names of
``../shared/groundtruth`` so the two compare directly.  Pure functions from results to
plain dicts; the CLI prints them, ``--plan-json`` writes them, ``verify`` reads them."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from caffemem.api.analyze import Analysis, DeviceReport, LayerSides, MemoryReport, NetAnalysis
from caffemem.graph import Shape
from caffemem.report.schemas import schema_version
from caffemem.units import percent_of


def _shape(shape: Shape) -> list[int]:
    return [int(d) for d in shape]


def memory_json(memory: MemoryReport) -> dict[str, Any]:
    """The whole-net figures, with the ground truth's names."""
    return {
        "dtype": memory.dtype,
        "heap_init": memory.heap_init,
        "heap_forward": memory.heap_forward,
        "heap_backward": memory.heap_backward,
        "input_bytes": memory.input_bytes,
        "memory_required_for_data": memory.memory_required_for_data,
        "learnable_param_bytes": memory.learnable_param_bytes,
        "prefetch_bytes": memory.prefetch_bytes,
        "total_bytes": memory.total_bytes,
        "by_category": dict(memory.by_category, prefetch=memory.prefetch_bytes),
        "peak_layer": memory.peak_layer,
        "unverified_types": list(memory.unverified_types),
    }


def device_json(device: DeviceReport) -> dict[str, Any]:
    """GPU mode: what one card and the host hold, by cause (each cause named), with the
    constant and the handles kept apart from what Caffe's source sizes."""
    return {
        "device_bytes": device.device_bytes,
        "device_bytes_min": device.device_bytes_min,
        "host_bytes": device.host_bytes,
        "gpus": device.gpus,
        "all_gpus_device_bytes": device.device_bytes * device.gpus,
        "engine": device.engine,
        "by_cause": {cause: {"device": device.device_by_cause[cause], "host": device.host_by_cause[cause]} for cause in device.device_by_cause},
        "cudnn_workspace": {"min": 0, "max": device.workspace_bytes_max},
        "cuda_context": asdict(device.context),
        "handles": _handles_json(device.handles),
        "cudnn_pool": device.handles.pooled,  # the handles and workspace as a caffemem-patched Caffe (runtime v6) pools them
        # Each per-process constant counted, with where it came from (the cited card's, or --card's, --context-mib's).
        "constants": {c.name: {"bytes": c.bytes, "source": c.source} for c in (device.context, device.card.cudnn_handle, device.card.stream, device.card.cublas_handle)},
        "untouched_param_diff_bytes": device.untouched_param_diff_bytes,
        "notes": list(device.notes),
    }


def _handles_json(handles) -> dict[str, int]:
    """The handles and streams a run creates, as counts (whether pooled is said apart)."""
    return {name: count for name, count in asdict(handles).items() if name != "pooled"}


def _layer_sides(sides: LayerSides) -> dict[str, Any]:
    return {
        "runs_on": sides.runs_on,
        "device": dict(zip(("init", "fwd", "bwd"), sides.device)),
        "host": dict(zip(("init", "fwd", "bwd"), sides.host)),
    }


def net_json(net: NetAnalysis) -> dict[str, Any]:
    """One net: phase, blobs in Caffe's order, layers in execution order, memory."""
    shaped, memory = net.shaped, net.memory
    graph = shaped.graph
    layers = []
    for i, (layer, bytes_) in enumerate(zip(graph.layers, memory.layers)):
        layers.append(
            {
                "name": layer.name,
                "type": layer.type,
                "bottoms": list(layer.bottoms),
                "tops": list(layer.tops),
                "params": [_shape(p) for p in shaped.layer_shapes[layer.index].params],
                "need_backward": bytes_.need_backward,
                "propagate_down": list(bytes_.propagate_down),
                "init_alloc": bytes_.init,
                "fwd_alloc": bytes_.fwd_alloc,
                "bwd_alloc": bytes_.bwd_alloc,
                "buffers": bytes_.buffers,
                "by_category": bytes_.by_category,
                **({"gpu": _layer_sides(net.device.layers[i])} if net.device is not None else {}),
            }
        )
    device = {} if net.device is None else {"total_bytes": net.total_bytes, "cpu_total_bytes": memory.total_bytes, "gpu": device_json(net.device)}
    return {
        "mode": net.mode,
        "role": net.role,
        "index": net.index,
        "file": net.file,
        "name": graph.name,
        "phase": graph.phase,
        "batch": net.batch,
        "blobs": [{"name": name, "shape": _shape(shape)} for name, shape in shaped.blob_shapes.items()],
        "layers": layers,
        **memory_json(memory),
        **device,
        # A file carrying optimize -o's table: the figures above are the patched Caffe's run of it.
        "mem_param": None if net.mem_param is None else {"slots": net.mem_param.slots, "recomputed": net.mem_param.recomputed, "stock_bytes": net.mem_param.stock_bytes},
        "notes": list(net.notes + shaped.notes),
    }


def _caveats(devices) -> list[str]:
    """GPU mode: the one caveat line of the output (not one per net)."""
    devices = [device for device in devices if device is not None]
    return [devices[0].caveat] if devices else []


def to_json(analysis: Analysis) -> dict[str, Any]:
    """A net file gives one net's document; a solver gives {"solver": ..., "nets": [...]},
    with the training process first: its ``total_bytes`` is the terminal's headline."""
    caveats = _caveats(net.device for net in analysis.nets)
    if analysis.kind == "net":
        document = {"schema_version": schema_version("analyze"), **net_json(analysis.nets[0])}
        document["notes"] = list(analysis.notes) + document["notes"] + caveats
        return document
    document: dict[str, Any] = {"schema_version": schema_version("analyze"), "solver": analysis.path}
    if analysis.process is not None:
        document["total_bytes"] = analysis.process.total_bytes
        document["process"] = asdict(analysis.process)
    document.update({"nets": [net_json(net) for net in analysis.nets], "notes": list(analysis.notes) + caveats})
    return document


def phase_plan_json(phase) -> dict[str, Any]:
    """One planned phase: the whole-run figures (as analyze's total: prefetch included,
    and on its own line), the plan, and the peak."""
    totals, peak = phase.totals(), phase.peak
    return {
        "phase": phase.phase,
        "batch": phase.batch,
        "mode": "gpu" if phase.devices is not None else "cpu",  # gpu: "bytes" are what one card holds
        "strategy": phase.strategy,
        "bytes": phase.bytes,
        "savings": {"bytes": phase.savings, "percent": percent_of(phase.savings, totals["stock"])},
        "gap_to_lower_bound_percent": percent_of(totals["planned"] - totals["lower_bound"], totals["lower_bound"]),
        "fork_plan_safe": phase.fork_safe,
        # Each strategy's plan in the figure of bytes.planned (the card's in GPU mode), best first.
        "candidates": dict(phase.candidates),
        "rejected": phase.rejected,
        "peak": {"step": peak.step, "at": peak.at, "alive": list(peak.alive)},
        "plan": {
            "slots": [{"id": slot, "bytes": size} for slot, size in sorted(phase.plan_data.slot_bytes.items())],
            "assign": [{"blob": blob, "kind": kind, "slot": slot, "offset": offset} for blob, kind, slot, offset in phase.plan_data.assign],
        }
        | ({"recompute": [{"layer": layer, "before": before, "restore_params": restore} for layer, before, restore in phase.plan_data.recompute]} if phase.plan_data.recompute else {}),
        "kept_private": phase.kept_private,
    } | ({"recompute": recompute_json(phase)} if phase.recompute is not None else {}) | (_card_json(phase.devices) if phase.devices is not None else {})


def _card_json(devices) -> dict[str, Any]:
    """GPU mode: the library handles and the cuDNN workspace bound stock Caffe holds and the
    plan's runtime (a caffemem-patched Caffe, v6: one pool per card) holds."""
    return {
        "handles": {"stock": _handles_json(devices.stock.handles), "planned": _handles_json(devices.planned.handles)},
        "cudnn_workspace_max": {"stock": devices.stock.workspace_bytes_max, "planned": devices.planned.workspace_bytes_max},
    }


def recompute_json(phase) -> dict[str, Any]:
    """optimize --recompute: what the policy chose and what it costs."""
    choice = phase.recompute
    layers = phase.shaped.graph.layers
    return {
        "policy": choice.policy.describe(),
        "layers": len(choice.recomputed),
        "recomputed": [layers[entry.layer].name for entry in choice.recomputed],
        "extra_forward_flops": choice.extra_flops,
        "forward_flops": choice.forward_flops,
        "extra_forward_percent": percent_of(choice.extra_flops, choice.forward_flops),
        "lower_bound_without_recompute": choice.plain_figure,
        "restored_param_bytes": choice.saved_param_bytes,
        "time": {
            "ratio": round(choice.time_ratio, 4),
            "extra_seconds": choice.extra_seconds,
            "iteration_seconds": choice.iteration_seconds,
            "model": choice.time_model,
        },
    }


def optimize_json(result) -> dict[str, Any]:
    phases = [phase_plan_json(p) for p in result.phases]
    document: dict[str, Any] = {"schema_version": schema_version("optimize"), "file": result.path, "exclude_blob": list(result.exclude), "phases": phases}
    caveats = _caveats(phase.devices.stock for phase in result.phases if phase.devices is not None)
    if caveats:
        document["notes"] = caveats
    if len(phases) == 1:
        document.update({k: phases[0][k] for k in ("phase", "bytes", "plan")})
    if result.inplace is not None:
        document["inplace"] = [{"layer": r.layer, "type": r.type, "top_was": r.top_was, "now": r.now} for r in result.inplace.rewrites]
        document["inplace_kept"] = [{"layer": k.layer, "type": k.type, "reason": k.reason} for k in result.inplace.kept]
        document["inplace_notes"] = list(result.inplace.notes)
    return document
