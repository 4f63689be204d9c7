"""--card FILE: the per-process constants of the user's own card, read from a result of the
GPU kit run on it (issue 32), each saying where it came from; a file that is not one is
refused with its file and line (exit 2)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import FIXTURES, REPO

from caffemem.api.analyze import Options, analyze
from caffemem.cli import main
from caffemem.errors import CaffememError
from caffemem.passes.card import read_card
from caffemem.passes.device import CUBLAS_HANDLE, CUDA_CONTEXT, CUDNN_HANDLE, CardConstants, gpu_caveat

H200 = str(REPO / "benchmarks" / "gpu-groundtruth" / "h200-2026-11-26.summary.json")
MIB = 1024 * 1024
DEPTHWISE_ON_CUDNN = (FIXTURES / "examples" / "depthwise_cudnn.prototxt").read_text()  # issue 32: 388 stock cuDNN handles


def test_a_kit_summary_gives_the_context_and_the_further_threads_handles_as_its_runs_measured():
    # The H200's 199 runs all measured 623,706,112 B before the net and 71,303,168 B of cuBLAS + cuRAND.
    card = read_card(H200)
    assert (card.context.bytes, card.cublas_handle.bytes) == (623_706_112, 71_303_168)
    assert card.context.source == f"the CUDA context with the main thread's cuBLAS handle and cuRAND generator: 594.8 MiB, the median of 199 run(s) of {H200}"
    # The cuDNN handle is a fit over the nets, not in a summary: the cited one stays.
    assert card.cudnn_handle == CUDNN_HANDLE and card.file == H200


def test_top_level_constants_set_the_cudnn_handle_and_the_stream(tmp_path):
    # As benchmarks/gpu_measured.py --json writes cudnn_handle_bytes; a stream measured alone.
    file = tmp_path / "card.json"
    file.write_text(json.dumps({"cudnn_handle_bytes": 9_185_526, "stream_bytes": 587_203}))
    device = analyze(DEPTHWISE_ON_CUDNN, Options(device="gpu", card=read_card(str(file)))).nets[0].device
    assert device.device_by_cause["library_handles"] == 388 * 9_185_526 + 387 * 587_203
    assert device.device_by_cause["cuda_context"] == CUDA_CONTEXT.bytes  # not in the file: the cited one
    assert "cudnn_handle, cuda_stream from " in gpu_caveat(device)


def test_the_card_flag_sets_the_figures_and_context_mib_still_overrides_the_context(tmp_path):
    file = tmp_path / "card.json"
    file.write_text(json.dumps({"runs": [{"ok": True, "process": {"device_used_before_net": 400 * MIB, "handles_bytes": 60 * MIB}}]}))
    net = tmp_path / "dw.prototxt"
    net.write_text(DEPTHWISE_ON_CUDNN)

    def card_bytes(*flags):
        result = CliRunner().invoke(main, ["analyze", str(net), "--device", "gpu", "--json", *flags])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)["gpu"]["by_cause"]["cuda_context"]["device"]

    assert card_bytes() == CUDA_CONTEXT.bytes
    assert card_bytes("--card", str(file)) == 400 * MIB
    assert card_bytes("--card", str(file), "--context-mib", "300") == 300 * MIB


@pytest.mark.parametrize(
    "text, message",
    [
        ('{\n "runs": [\n x]}', "{file}:3:2: cannot read the kit result as JSON: Expecting value"),
        ('{\n "stream_bytes": -1\n}', "{file}:2: not a kit result: stream_bytes must be a whole number of bytes from 0 to 2^40, not -1"),
        ('{\n "runs": [{"process": {"device_used_before_net": true}}]\n}', "{file}:2: not a kit result: device_used_before_net must be a whole number of bytes from 0 to 2^40, not true"),
        ('{"runs": 3}', "{file}:1: not a kit result: 'runs' must be a list of objects"),
        ("[]", "{file}: not a kit result: the JSON is list, not an object"),
        ("{}", "{file}: not a kit result: no constant in it (expected runs[].process.device_used_before_net and handles_bytes, or cudnn_handle_bytes, stream_bytes, context_bytes)"),
    ],
)
def test_a_file_that_is_not_a_kit_result_is_refused_with_its_file_and_line(tmp_path, text, message):
    file = tmp_path / "card.json"
    file.write_text(text)
    net = tmp_path / "dw.prototxt"
    net.write_text(DEPTHWISE_ON_CUDNN)
    result = CliRunner().invoke(main, ["analyze", str(net), "--card", str(file)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"caffemem: error: {message.format(file=file)}"]


def test_without_a_card_the_constants_are_the_cited_measurements():
    assert CardConstants() == CardConstants(CUDA_CONTEXT, CUDNN_HANDLE, CardConstants().stream, CUBLAS_HANDLE, None)
    assert CardConstants().stream.bytes == 0  # in the fitted handle figure (each convolution handle came with its stream)


def test_a_stack_limit_changes_the_patched_runtimes_context_not_stocks():
    # CAFFEMEM_CUDA_STACK_BYTES=128: the bare context measured at 295 MiB on an H200 (526.8 at
    # the driver's 1 KiB), plus the main thread's cuBLAS and cuRAND (68.0 MiB).
    from caffemem.api.optimize import OptimizeSettings, optimize

    options = Options(device="gpu", card=CardConstants(stack_bytes=128))
    devices = optimize(DEPTHWISE_ON_CUDNN, options, OptimizeSettings(share_buffers=True)).phases[0].devices
    assert devices.stock.device_by_cause["cuda_context"] == CUDA_CONTEXT.bytes == 552_402_944 + 71_303_168
    assert devices.planned.device_by_cause["cuda_context"] == 295 * MIB + 71_303_168
    assert devices.planned.context.source.startswith("measured on an H200 (CUDA 13) with cudaLimitStackSize 128 B (CAFFEMEM_CUDA_STACK_BYTES)")


def test_the_stack_flag_takes_only_the_measured_limits(tmp_path):
    net = tmp_path / "dw.prototxt"
    net.write_text(DEPTHWISE_ON_CUDNN)
    result = CliRunner().invoke(main, ["optimize", str(net), "--cuda-stack-bytes", "64"])
    assert result.exit_code == 2 and "'64' is not one of '1024', '512', '256', '128'" in result.output
