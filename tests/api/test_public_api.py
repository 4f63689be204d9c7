"""`import caffemem` is the library: the README's notebook example runs as written."""

from __future__ import annotations

from conftest import FIXTURES

import pytest

import caffemem

LENET = str(FIXTURES / "examples" / "lenet_train.prototxt")


def test_the_package_exports_its_api():
    assert {"analyze", "optimize", "verify", "fit", "load", "Options", "OptimizeSettings", "CaffememError", "__version__"} <= set(caffemem.__all__)
    assert all(hasattr(caffemem, name) for name in caffemem.__all__)


def test_analyze_with_inputs_as_in_the_readme():
    # lenet_train's Input layer states a batch of 64: 32 is an override.
    analysis = caffemem.analyze(LENET, caffemem.Options(phase="TRAIN", inputs={"data": (32, 1, 28, 28), "label": (32,)}, overrides=frozenset({"data", "label"})))
    assert analysis.nets[0].shaped.blob_shapes["data"] == (32, 1, 28, 28)
    assert analysis.nets[0].memory.total_bytes > 0


def test_optimize_with_shared_buffers_saves_in_every_phase():
    result = caffemem.optimize(LENET, caffemem.Options(), caffemem.OptimizeSettings(share_buffers=True))
    assert [p.phase for p in result.phases] == ["TRAIN", "TEST"]
    assert all(p.savings > 0 for p in result.phases)


def test_a_net_may_be_a_path_its_text_or_a_netparameter():
    from google.protobuf import text_format

    from caffemem.schema import caffe_pb2

    text = open(LENET, encoding="utf-8").read()
    message = text_format.Parse(text, caffe_pb2.NetParameter())
    figures = {kind: caffemem.analyze(net, phase="TEST").nets[0].memory.total_bytes for kind, net in (("path", LENET), ("text", text), ("message", message))}
    assert len(set(figures.values())) == 1, figures


def test_keyword_arguments_override_the_options():
    # data 32x1x28x28 float: 100,352 bytes instead of the file's 64x1x28x28 (200,704).
    analysis = caffemem.analyze(LENET, caffemem.Options(phase="TRAIN", overrides=frozenset({"data", "label"})), phase="test", inputs={"data": [32, 1, 28, 28], "label": [32]})
    net = analysis.nets[0]
    assert net.phase == "TEST" and net.shaped.blob_shapes["data"] == (32, 1, 28, 28)
    assert caffemem.analyze(LENET, phase="TEST", batch=8).nets[0].shaped.blob_shapes["label"] == (8,)


def test_the_library_gives_the_clis_figures():
    import json

    from click.testing import CliRunner

    from caffemem.cli import main

    printed = json.loads(CliRunner().invoke(main, ["optimize", LENET, "--json"]).output)
    result = caffemem.optimize(LENET)
    assert [p["bytes"]["planned"] for p in printed["phases"]] == [p.planned.total_bytes for p in result.phases]


def test_text_that_is_no_net_is_refused_as_bad_input():
    try:
        caffemem.analyze("layer { name: 'a' type: 'Nope' }")
    except caffemem.CaffememError as error:
        assert str(error).startswith("<text>:1") and "Nope" in str(error)
    else:
        raise AssertionError("an unknown layer type must be refused")


def test_results_carry_the_json_documents_field_names():
    import json

    from click.testing import CliRunner

    from caffemem.cli import main

    printed = json.loads(CliRunner().invoke(main, ["analyze", LENET, "--json"]).output)
    net = caffemem.analyze(LENET).nets[0]
    # schema_version is the document's own (caffemem/report/schemas), not a figure of the net
    scalars = [key for key, value in printed.items() if not isinstance(value, (list, dict)) and key != "schema_version"]
    assert {key: getattr(net, key) for key in scalars} == {key: printed[key] for key in scalars}
    assert list(net.blobs) == [blob["name"] for blob in printed["blobs"]]
    planned = json.loads(CliRunner().invoke(main, ["optimize", LENET, "--json"]).output)["phases"]
    phases = caffemem.optimize(LENET).phases
    assert [(p.phase, p.strategy, p.bytes, p.fork_plan_safe) for p in phases] == [(d["phase"], d["strategy"], d["bytes"], d["fork_plan_safe"]) for d in planned]


@pytest.mark.gpu_default
def test_the_library_measures_a_cpu_run_unless_told_the_card_as_the_command_does():
    # Issue 34: the README's API snippet printed the CPU heap where `caffemem analyze` gave
    # the card's figure, and nothing said the defaults differ.
    import json

    from click.testing import CliRunner

    from caffemem.cli import main

    printed = json.loads(CliRunner().invoke(main, ["analyze", LENET, "--json"]).output)["total_bytes"]
    assert caffemem.analyze(LENET, caffemem.Options(device="gpu")).nets[0].total_bytes == printed != caffemem.analyze(LENET).nets[0].total_bytes
    for documented in (caffemem.Options, caffemem.analyze, caffemem.optimize, caffemem.fit, caffemem.verify, caffemem):
        assert 'device="gpu"' in " ".join(documented.__doc__.split()), documented
