"""`caffemem fit`: the batch reported fits the budget and the next one does not, by the
exact memory model (checked here with direct `analyze`/`optimize` calls), however memory
grows with the batch; iter_size and multi-GPU arithmetic; the reserve; exit codes."""

from __future__ import annotations

import json
import math
import sys

import pytest
from click.testing import CliRunner
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from caffemem.api.analyze import Options, analyze
from caffemem.api.fit import (
    Evaluations,
    FitRequest,
    Footprint,
    fit,
    format_size,
    largest_fitting_batch,
    parse_size,
    subject_of,
)
from caffemem.api.optimize import OptimizeSettings, optimize
from caffemem.cli import main
from caffemem.errors import CaffememError
from caffemem.plan.recompute import parse_policy

sys.path.insert(0, str(FIXTURES))
import generate  # noqa: E402  (fixtures/generate.py)

LENET = str(FIXTURES / "examples" / "lenet_train.prototxt")
GiB, MiB = 2**30, 2**20

# The batch axis is folded into a strided spatial axis before an InnerProduct, so the
# weight grows by a step every 5 samples: memory is a staircase, not a line.
STRIDED = """
name: "strided_batch"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 8 dim: 1 dim: 1 dim: 1 } } }
layer { name: "fold" type: "Reshape" bottom: "data" top: "folded" reshape_param { shape { dim: 1 dim: 1 dim: -1 dim: 1 } } }
layer { name: "stride" type: "Convolution" bottom: "folded" top: "strided"
        convolution_param { num_output: 1 kernel_h: 1 kernel_w: 1 stride_h: 5 stride_w: 1 } }
layer { name: "fc" type: "InnerProduct" bottom: "strided" top: "fc" inner_product_param { num_output: 1000 } }
"""

PYTHON_DATA = """
name: "python_data"
layer { name: "reader" type: "Python" top: "data" top: "im_info" python_param { module: "reader" layer: "Reader" } }
layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc" inner_product_param { num_output: 10 } }
"""


def total_bytes(path: str, batch: int, **options) -> int:
    """The memory model, asked directly: stock Caffe's footprint at one batch."""
    return analyze(path, Options(batch=batch, **options)).nets[0].memory.total_bytes


def run(*args: str):
    return CliRunner().invoke(main, ["fit", *args])


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fit")
    paths = {"resnet18": generate.resnet(18), "chain": generate.chain(50), "strided": STRIDED, "python": PYTHON_DATA}
    for name, text in paths.items():
        (folder / f"{name}.prototxt").write_text(text)
    solver = folder / "lenet_solver.prototxt"
    solver.write_text(f'net: "{LENET}"\ntest_iter: 10\ntest_interval: 100\nbase_lr: 0.01\nmomentum: 0.9\niter_size: 2\n')
    return {name: str(folder / f"{name}.prototxt") for name in paths} | {"solver": str(solver)}


@pytest.fixture(scope="module")
def lenet_1gib():
    return fit(LENET, Options(), FitRequest(gpu_memory=GiB))


# ---------------------------------------------------------------- the answer is exact


def test_lenet_batch_fits_and_the_next_does_not(lenet_1gib):
    batch, budget = lenet_1gib.search.batch, GiB - 500 * MiB
    assert total_bytes(LENET, batch) == lenet_1gib.bytes <= budget
    assert total_bytes(LENET, batch + 1) == lenet_1gib.following.bytes > budget


def test_lenet_is_linear_so_the_line_through_two_batches_gives_the_answer(lenet_1gib):
    one, two = total_bytes(LENET, 1), total_bytes(LENET, 2)
    per_sample = two - one
    assert lenet_1gib.search.batch == lenet_1gib.search.guess == (GiB - 500 * MiB - one) // per_sample + 1
    assert lenet_1gib.bytes_per_sample == per_sample
    assert lenet_1gib.fixed_bytes == one - per_sample


def test_lenet_takes_six_evaluations_four_probes_and_the_answer_with_its_successor(lenet_1gib):
    batch = lenet_1gib.search.batch
    assert [e.batch for e in lenet_1gib.evaluations] == [1, 2, 4, 8, batch, batch + 1]


def test_resnet_batch_fits_and_the_next_does_not(nets):
    result = fit(nets["resnet18"], Options(), FitRequest(gpu_memory=12 * GiB))
    batch, budget = result.search.batch, 12 * GiB - 500 * MiB
    assert total_bytes(nets["resnet18"], batch) == result.bytes <= budget < total_bytes(nets["resnet18"], batch + 1)


def test_phase_chooses_the_net_whose_batch_is_fitted():
    result = fit(LENET, Options(phase="TEST"), FitRequest(gpu_memory=GiB))
    batch, budget = result.search.batch, GiB - 500 * MiB
    assert result.subject.phase == "TEST"
    assert total_bytes(LENET, batch, phase="TEST") <= budget < total_bytes(LENET, batch + 1, phase="TEST")


def test_optimized_counts_the_plan_optimize_makes_at_each_batch(nets):
    result = fit(nets["chain"], Options(), FitRequest(gpu_memory=64 * MiB, reserve=0, optimized=True))
    batch = result.search.batch

    def planned(b: int) -> int:
        return optimize(nets["chain"], Options(batch=b, phase="TRAIN"), OptimizeSettings()).phases[0].planned.total_bytes

    assert planned(batch) == result.bytes <= 64 * MiB < planned(batch + 1)
    assert batch > fit(nets["chain"], Options(), FitRequest(gpu_memory=64 * MiB, reserve=0)).search.batch


RECOMPUTE_RESNET = str(FIXTURES / "plan" / "recompute_resnet.prototxt")


def _sqrt_plan_bytes(batch: int) -> int:
    """`optimize --recompute sqrt`'s figure on the card for RECOMPUTE_RESNET's TRAIN net at ``batch``."""
    at = Options(device="gpu", phase="TRAIN", batch=batch)
    return optimize(RECOMPUTE_RESNET, at, OptimizeSettings(recompute="sqrt")).phases[0].planned_figures.total_bytes


def test_fit_recompute_reports_the_whole_plan_at_its_batch_and_the_next_batch_s_plan_does_not_fit():
    """Issue 33: fit --recompute searches by the recompute choice's bound and plans only the
    answer; what it reports is still the whole plan's figure at that batch."""
    result = fit(RECOMPUTE_RESNET, Options(device="gpu", phase="TRAIN"), FitRequest(gpu_memory=GiB, reserve=0, recompute="sqrt"))
    assert (result.search.batch, result.bytes) == (2932, 1_073_650_660) == (2932, _sqrt_plan_bytes(2932))
    assert _sqrt_plan_bytes(2933) == 1_073_781_896 > GiB


def test_fit_recompute_steps_down_from_a_batch_whose_bound_fits_but_whose_plan_does_not():
    """At batch 2933 the choice's bound (1,073,688,008 B) is within 1 GiB, the packed plan
    (1,073,781,896 B) is not: the answer is the batch below, and batch 2933 is reported by its plan."""
    result = fit(RECOMPUTE_RESNET, Options(device="gpu", phase="TRAIN"), FitRequest(gpu_memory=GiB, reserve=0, recompute="sqrt"))
    assert result.search.batch == 2932
    assert result.following is not None and result.following.bytes == 1_073_781_896


def test_fit_recompute_aims_a_line_through_the_nearest_evaluations_where_batches_1_and_2_miss():
    """Issue 33: fit --recompute probes batches 1 and 2 only; on this net their line predicts
    312 for an answer of 222 (the small batches sit off the line), and the exponential
    search down from 312 took 12 more evaluations.  The line through batch 2 and 312 aims at
    222, and its successor confirms it."""
    result = fit(RECOMPUTE_RESNET, Options(device="cpu", phase="TRAIN"), FitRequest(gpu_memory=24 * MiB, reserve=0, recompute="sqrt"))
    assert (result.search.batch, result.search.guess, result.search.line) == (222, 312, (1, 2))
    assert [(e.batch, e.bound) for e in result.evaluations] == [(1, True), (2, True), (312, True), (222, False), (223, True)]


def test_fit_recompute_chooses_once_per_batch_evaluated_and_measures_whole_only_the_plans(monkeypatch):
    """Issue 33: each batch evaluated costs one policy choice, whose figure is the search's
    (plan/figures.py); only a batch planned whole measures its choice's extended schedule
    whole (with_recomputation, then liveness), which each choice did before."""
    from caffemem.plan import recompute

    counted = {"choose": 0, "whole": 0}
    choose, extended = recompute.Search.choose, recompute.with_recomputation

    def counting_choose(*args, **kwargs):
        counted["choose"] += 1
        return choose(*args, **kwargs)

    def counting_whole(*args, **kwargs):
        counted["whole"] += 1
        return extended(*args, **kwargs)

    monkeypatch.setattr(recompute.Search, "choose", counting_choose)
    monkeypatch.setattr(recompute, "with_recomputation", counting_whole)
    result = fit(RECOMPUTE_RESNET, Options(device="gpu", phase="TRAIN"), FitRequest(gpu_memory=GiB, reserve=0, recompute="sqrt"))
    planned = [e.batch for e in result.evaluations if not e.bound]
    assert (result.search.batch, planned) == (2932, [2933, 2932])
    assert counted == {"choose": len(result.evaluations), "whole": len(planned)}


@pytest.mark.parametrize("net", ["layers/fork_misc.prototxt", "layers/forks.prototxt", "plan/force_backward_mfm.prototxt"])
@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_fit_recompute_says_around_a_planned_batch_what_analyze_says_there(net, device):
    """Issue 33: a net's notes at a batch fit --recompute plans come from the net and the
    runs its plan was made on (an analysis at the answer ran them again): the same notes
    (a layer rule's, a placeholder input's, the upgrade's)."""
    path = str(FIXTURES / net)
    options = Options(device=device, phase="TRAIN")
    subject = subject_of(path, options, True, parse_policy("sqrt"))
    analysis = analyze(path, Options(device=device, phase="TRAIN", batch=2), tables=False)
    said = analysis.nets[0].notes + analysis.nets[0].shaped.notes
    assert said and subject.confirm(2).notes == said
    assert subject.notes_at is None


def test_memory_that_is_a_staircase_in_the_batch_still_gets_the_exact_answer(nets):
    result = fit(nets["strided"], Options(), FitRequest(gpu_memory=MiB, reserve=0))
    batch = result.search.batch
    assert total_bytes(nets["strided"], batch) <= MiB < total_bytes(nets["strided"], batch + 1)
    assert result.search.guess != batch  # the line through batches 4 and 8 was wrong here
    assert any("not linear in the batch" in note for note in result.notes)


def test_a_batch_past_caffes_blob_limit_does_not_fit_and_says_why():
    result = fit(LENET, Options(), FitRequest(gpu_memory=2**40))
    batch = result.search.batch
    assert total_bytes(LENET, batch) <= result.request.budget
    # conv1's top is batch × 20 × 24 × 24 elements, at most 2^31 - 1 of them in Caffe.
    assert batch == (2**31 - 1) // (20 * 24 * 24)
    assert result.following.bytes is None and "exceeds INT_MAX elements" in result.following.error
    assert not any("not linear" in note for note in result.notes)  # memory is linear; the build stopped


PIECES = st.lists(st.tuples(st.integers(1, 300), st.integers(0, 50)), max_size=4)  # (length, slope) lines


def increasing(pieces: list[tuple[int, int]], final_slope: int, steps: tuple[int, int], fixed: int):
    """Lines of several slopes one after the other (``pieces``: length, slope), then
    ``final_slope``, plus a step every few samples (``steps``: every, step) over ``fixed``."""
    every, step = steps

    def memory(batch: int) -> int:
        total, start = fixed + step * (batch // every), 0
        for length, slope in pieces:
            total += slope * min(max(batch - start, 0), length)
            start += length
        return total + final_slope * max(batch - start, 0)

    return memory


# Any increasing memory of that shape.
INCREASING = st.builds(increasing, PIECES, st.integers(1, 50), st.tuples(st.integers(1, 40), st.integers(0, 500)), st.integers(0, 1000))


@settings(max_examples=60, deadline=None)
@given(memory=INCREASING, budget=st.integers(0, 20_000))
def test_search_finds_the_largest_fitting_batch_of_any_increasing_memory(memory, budget):
    """Lines of several slopes one after the other, plus a step every few samples."""
    expected = 0
    while memory(expected + 1) <= budget:
        expected += 1
    assert largest_fitting_batch(Evaluations(lambda batch: Footprint(memory(batch)), budget)).batch == expected


@settings(max_examples=60, deadline=None)
@given(bound=INCREASING, gap=st.tuples(st.integers(0, 300), st.integers(1, 40), st.integers(0, 50)), budget=st.integers(0, 20_000))
def test_search_by_a_bound_finds_the_largest_batch_whose_plan_fits(bound, gap, budget):
    """fit --recompute's search (probes 1 and 2, lines aimed at the nearest evaluations) on
    any increasing bound, with a plan above it by a gap that grows in steps: the largest
    batch whose plan fits, every evaluation of it exact."""
    base, gap_every, gap_step = gap

    def plan(batch: int) -> int:
        return bound(batch) + base + gap_step * (batch // gap_every)

    expected = 0
    while plan(expected + 1) <= budget:
        expected += 1
    evaluations = Evaluations(lambda batch: Footprint(bound(batch)), budget, lambda batch: Footprint(plan(batch)))
    assert largest_fitting_batch(evaluations).batch == expected


# ---------------------------------------------------------------- the training process


def test_solver_fits_its_training_process_with_the_test_net_at_its_own_batch(nets):
    result = fit(nets["solver"], Options(), FitRequest(gpu_memory=GiB))
    batch, budget = result.search.batch, GiB - 500 * MiB
    tests = sum(share.bytes for share in analyze(nets["solver"]).process.tests)

    def process(b: int) -> int:
        return analyze(nets["solver"], Options(phase="TRAIN", batch=b)).process.total_bytes + tests

    assert result.subject.kind == "solver" and result.subject.test_nets == 1
    assert process(batch) == result.bytes <= budget < process(batch + 1)


def test_solver_at_the_batch_its_file_gives_is_analyze_s_training_process(nets):
    measure = subject_of(nets["solver"], Options(), optimized=False).measure
    assert measure(64).bytes == analyze(nets["solver"]).process.total_bytes  # lenet's batch is 64


def test_solver_is_refused_a_test_phase(nets):
    with pytest.raises(CaffememError, match="training process"):
        fit(nets["solver"], Options(phase="TEST"), FitRequest(gpu_memory=GiB))


# ---------------------------------------------------------------- iter_size and GPUs


def largest_divisor_up_to(n: int, limit: int) -> int:
    return max(d for d in range(1, limit + 1) if n % d == 0)


def test_effective_batch_takes_the_largest_fitting_batch_that_divides_it():
    result = fit(LENET, Options(), FitRequest(gpu_memory=GiB, effective_batch=10_000))
    batch = largest_divisor_up_to(10_000, result.search.batch)
    assert (result.schedule.batch, result.schedule.iter_size, result.schedule.effective_batch) == (batch, 10_000 // batch, 10_000)
    assert result.schedule.bytes == total_bytes(LENET, batch)


def test_effective_batch_is_split_over_the_gpus_first():
    result = fit(LENET, Options(), FitRequest(gpu_memory=GiB, gpus=2, effective_batch=10_000))
    batch = largest_divisor_up_to(5_000, result.search.batch)
    assert (result.schedule.batch, result.schedule.iter_size, result.schedule.gpus) == (batch, 5_000 // batch, 2)
    assert result.schedule.effective_batch == 10_000


def test_effective_batch_that_fits_whole_needs_no_iter_size(lenet_1gib):
    result = fit(LENET, Options(), FitRequest(gpu_memory=GiB, effective_batch=lenet_1gib.search.batch))
    assert (result.schedule.batch, result.schedule.iter_size) == (lenet_1gib.search.batch, 1)


def test_prime_effective_batch_falls_to_batch_one_and_names_the_nearest_larger_schedule(lenet_1gib):
    largest = lenet_1gib.search.batch
    prime = next(n for n in range(largest + 1, 3 * largest) if all(n % d for d in range(2, math.isqrt(n) + 1)))
    result = fit(LENET, Options(), FitRequest(gpu_memory=GiB, effective_batch=prime))
    assert (result.schedule.batch, result.schedule.iter_size) == (1, prime)
    near = math.ceil(prime / 2)  # two passes of a batch that fits
    assert f"batch {near} × iter_size 2 would give effective batch {2 * near}" in " ".join(result.notes)


def test_effective_batch_must_split_evenly_over_the_gpus():
    with pytest.raises(CaffememError, match="not a multiple of --gpus 3"):
        fit(LENET, Options(), FitRequest(gpu_memory=GiB, gpus=3, effective_batch=256))


def test_gpus_multiply_the_effective_batch_and_not_the_batch_per_gpu(lenet_1gib):
    result = fit(LENET, Options(), FitRequest(gpu_memory=GiB, gpus=4))
    assert result.search.batch == lenet_1gib.search.batch
    assert result.schedule.effective_batch == 4 * lenet_1gib.search.batch


def test_solver_iter_size_multiplies_the_effective_batch(nets):
    result = fit(nets["solver"], Options(), FitRequest(gpu_memory=GiB, gpus=2))
    assert result.schedule.effective_batch == result.search.batch * 2 * 2  # iter_size 2, 2 GPUs
    assert any("only the root solver" in note for note in result.notes)


# ---------------------------------------------------------------- the reserve


def test_reserve_is_taken_off_the_card_before_fitting(lenet_1gib):
    reserved = fit(LENET, Options(), FitRequest(gpu_memory=GiB, reserve=100 * MiB))
    assert reserved.search.batch == fit(LENET, Options(), FitRequest(gpu_memory=GiB - 100 * MiB, reserve=0)).search.batch
    assert lenet_1gib.search.batch < reserved.search.batch  # the default reserve is 500 MiB


def test_reserve_that_leaves_nothing_is_bad_input():
    assert run(LENET, "--gpu-memory", "1GiB", "--reserve", "1GiB").exit_code == 2


# ---------------------------------------------------------------- command line


def test_cli_json_is_one_document_with_the_answer_and_its_neighbour(lenet_1gib):
    result = run(LENET, "--gpu-memory", "1GiB", "--effective-batch", "256", "--json")
    document = json.loads(result.output)
    assert result.exit_code == 0
    assert (document["batch"], document["bytes"]) == (lenet_1gib.search.batch, lenet_1gib.bytes)
    assert (document["next_batch"], document["next_bytes"]) == (lenet_1gib.search.batch + 1, lenet_1gib.following.bytes)
    assert document["schedule"] == {"effective_batch": 256, "batch": 256, "iter_size": 1, "gpus": 1, "bytes": total_bytes(LENET, 256)}
    assert document["budget"] == GiB - 500 * MiB


def test_the_first_line_is_the_answer_with_its_batch_in_mib_and_gib():
    # LeNet at 1 GiB - 500 MiB: 3,637,232 B fixed + 172,368 B per sample (CPU mode).
    lines = run(LENET, "--gpu-memory", "1GiB").output.splitlines()
    assert lines[0] == f"{LENET}: TRAIN net, stock Caffe: largest batch per GPU 3166, needs 523.91 MiB (0.51 GiB), 549,354,320 B"
    assert lines[1] == "  budget: 524.00 MiB (0.51 GiB), 549,453,824 B = GPU 1.00 GiB - reserve 500.00 MiB"
    assert lines[2] == "  batch 3167 needs 524.07 MiB (0.51 GiB), 549,526,688 B: over the budget"


def test_the_json_carries_the_figures_the_first_lines_state():
    document = json.loads(run(LENET, "--gpu-memory", "1GiB", "--effective-batch", "256", "--json").output)
    assert (document["batch"], document["bytes"], document["schedule"]["bytes"]) == (3166, 549_354_320, 47_763_440)


def test_the_effective_batch_asked_for_is_the_second_line():
    lines = run(LENET, "--gpu-memory", "1GiB", "--effective-batch", "256").output.splitlines()
    assert lines[1] == f"{LENET}: TRAIN net, stock Caffe: effective batch 256 = batch 256 × iter_size 1 × 1 GPU, needs 45.55 MiB (0.04 GiB), 47,763,440 B per GPU"


def test_without_effective_batch_or_gpus_no_schedule_line_repeats_the_batch():
    assert "effective batch" not in run(LENET, "--gpu-memory", "1GiB").output
    assert f"{LENET}: TRAIN net, stock Caffe: effective batch 6332 = batch 3166 × iter_size 1 × 2 GPUs" in run(LENET, "--gpu-memory", "1GiB", "--gpus", "2").output


def test_nothing_fits_is_the_first_line():
    lines = run(LENET, "--gpu-memory", "1MiB", "--reserve", "0").output.splitlines()
    assert lines[0] == f"{LENET}: TRAIN net, stock Caffe: nothing fits: batch 1 needs 3.63 MiB (0.00 GiB), 3,809,600 B, 2.63 MiB more than the budget"


def test_nothing_fits_exits_1_saying_what_batch_1_needs(nets):
    needed = total_bytes(nets["resnet18"], 1)
    result = run(nets["resnet18"], "--gpu-memory", str(needed - 1), "--reserve", "0", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["fits"] is False
    assert f"nothing fits: batch 1 needs {format_size(needed)} ({needed:,} B), 1 B more than the budget" in result.stderr


def test_fit_has_no_batch_flag_since_the_batch_is_what_it_finds():
    assert run(LENET, "--gpu-memory", "1GiB", "--batch", "3").exit_code == 2


@pytest.mark.parametrize(
    "args",
    [
        ["--gpu-memory", "12G"],  # binary or decimal? refused rather than guessed
        ["--gpu-memory", "twelve"],
        ["--gpu-memory", "1GiB", "--gpus", "0"],
        ["--gpu-memory", "1GiB", "--phase", "TEST", "--input", "nosuch=1,2"],
    ],
)
def test_bad_input_exits_2(args):
    assert run(LENET, *args).exit_code == 2


@pytest.mark.parametrize(
    "text, size",
    [("12GiB", 12 * 2**30), ("11.5 GiB", 23 * 2**29), ("500MiB", 500 * 2**20), ("16GB", 16 * 10**9), ("4096", 4096), ("1.5kb", 1500)],
)
def test_sizes_are_binary_with_i_and_decimal_without(text, size):
    assert parse_size(text, "--gpu-memory") == size


def test_tops_of_python_layers_are_rescaled_like_any_data_top_and_a_note_says_so(nets):
    options = Options(inputs={"data": (1, 3, 8, 8), "im_info": (1, 3)})
    result = fit(nets["python"], options, FitRequest(gpu_memory=MiB, reserve=0))
    assert any("Python or declared layers give (data, im_info)" in note for note in result.notes)
    assert analyze(nets["python"], Options(inputs=options.inputs, batch=result.search.batch)).nets[0].shaped.blob_shapes["im_info"] == (result.search.batch, 3)


# ---------------------------------------------------------------- what fit says to do next


def test_optimized_prints_an_optimize_command_that_runs_and_verifies(tmp_path, monkeypatch):
    import shlex

    monkeypatch.chdir(tmp_path)
    result = run(LENET, "--gpu-memory", "64MiB", "--reserve", "0", "--optimized")
    lines = result.output.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("to run the plan counted here"))
    batch = int(lines[head].split("write it for batch ")[1].rstrip(":"))
    command = shlex.split(lines[head + 1])
    assert command[:5] == ["caffemem", "optimize", LENET, "--phase", "TRAIN"] and command[-4:] == ["--batch", str(batch), "-o", f"lenet_train.b{batch}.prototxt"]
    written = CliRunner().invoke(main, command[1:])
    assert written.exit_code == 0, written.output
    checked = CliRunner().invoke(main, ["verify", f"lenet_train.b{batch}.prototxt"])
    assert checked.exit_code == 0 and f"TRAIN: planned for batch {batch}" in checked.output


def test_gpu_mode_keeps_room_for_the_kernels_loaded_lazily_and_says_so():
    # The figure holds the context and the library handles as measured on an H100; what the
    # card held beyond it there (the kernels CUDA loads lazily) was at most 176,944,377 B
    # (197.29 MiB before SoftmaxWithLoss's inner cuDNN handle was counted: issue 32).
    result = run(LENET, "--gpu-memory", "2GiB", "--device", "gpu", "--json")
    document = json.loads(result.output)
    assert (document["reserve"], document["reserve_is_estimate"], document["budget"]) == (176_944_377, True, 2 * GiB - 176_944_377)
    text = run(LENET, "--gpu-memory", "2GiB", "--device", "gpu").output
    assert "- reserve 168.75 MiB (room for the kernels CUDA loads lazily, see the note; --reserve overrides)" in text
    assert "note: the reserve keeps room for the kernels CUDA loads lazily, which no figure counts: what the card held beyond the figure on an H100" in text


def test_the_margin_names_the_measurement_not_files_of_this_repository():
    text = run(LENET, "--gpu-memory", "2GiB", "--device", "gpu").output
    assert "-111.4 to +168.7 MiB over 136 runs" in text
    assert not any(path in text for path in ("../shared", "GPU-MEMORY.md", "benchmarks/"))


def test_reserve_overrides_the_gpu_margin():
    document = json.loads(run(LENET, "--gpu-memory", "1GiB", "--device", "gpu", "--reserve", "0", "--json").output)
    assert (document["reserve"], document["reserve_is_estimate"], document["budget"]) == (0, False, GiB)
    assert "room for the kernels" not in run(LENET, "--gpu-memory", "1GiB", "--device", "gpu", "--reserve", "0").output


DEPTHWISE_ON_CUDNN = (FIXTURES / "examples" / "depthwise_cudnn.prototxt").read_text()  # issue 32: 388 stock cuDNN handles


def test_fit_says_what_dominates_a_net_that_does_not_fit_and_what_changes_it():
    result = fit(DEPTHWISE_ON_CUDNN, Options(device="gpu"), FitRequest(gpu_memory=4 * GiB))
    assert not result.fits
    assert result.notes[-1] == (
        "not even batch 1 fits: on the card 7.21 GiB, library handles 3.61 GiB (stock BVLC's 388 cuDNN handles), cuDNN workspaces up to 3.02 GiB, "
        "the CUDA context 594.81 MiB, Caffe's allocations 4.66 MiB; "
        "`caffemem patch CAFFE_DIR` builds a Caffe that pools the cuDNN handles and the workspace per card, counted by `fit --optimized`; "
        "'engine: CAFFE' in the convolution_param of the grouped convolutions ('conv_dw') creates none of their handles; "
        "`fit --optimized` (or --recompute sqrt) counts a plan of Caffe's allocations"
    )


def test_fit_optimized_counts_the_pool_so_the_same_net_fits_the_same_card():
    # The plan's 661.54 MiB at batch 1 (4 pooled handles, one 24 MiB workspace): hundreds of
    # images fit (705 with the reserve of before SoftmaxWithLoss's handle was counted).
    result = fit(DEPTHWISE_ON_CUDNN, Options(device="gpu"), FitRequest(gpu_memory=4 * GiB, optimized=True))
    assert result.search.batch == 711


def test_fit_of_a_net_the_context_fills_names_the_context_as_measured():
    result = fit(DEPTHWISE_ON_CUDNN, Options(device="gpu"), FitRequest(gpu_memory=700 * MiB, optimized=True))
    assert result.notes[-1] == (
        "not even batch 1 fits: on the card 661.54 MiB, the CUDA context 594.81 MiB, library handles 38.06 MiB (the pool's 4 cuDNN handles), "
        "cuDNN workspaces up to 24.00 MiB, Caffe's allocations 4.66 MiB; "
        "the context is as measured on an H100 80GB (driver 580, CUDA 13.0, cuDNN 9): --context-mib or --card FILE gives your card's"
    )
