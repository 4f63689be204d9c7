"""Every name a plan refers to is unique or refused (issue 31, item 5).  Caffe lets layers
share a name, but the patched Caffe finds a recompute entry's ``layer`` and ``before`` by
name (mem_recompute.cpp): a shared name would run another layer's Forward again.  So
`optimize --recompute` never chooses a layer whose name the phase's net gives twice, nor
places a recomputation before the Backward of one; `verify` (and the runtime's Net::Init)
refuse an entry that names one, in the same words."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from caffemem.api.analyze import Options
from caffemem.api.optimize import OptimizeSettings, optimize, read_back
from caffemem.cli import main
from caffemem.errors import UnsafePlan
from caffemem.layers.registry import SpecTable
from caffemem.passes.recompute import Recomputation
from caffemem.plan.recompute import units_of

NET = FIXTURES / "plan" / "recompute_resnet.prototxt"
RERUN = "; rerun `caffemem optimize` on this net (with the input shapes and phase you run it with) to write a new table"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def two_relus_named_dup(tmp_path):
    """The fixture with relu1 and relu2 both named "dup", an in-place Dropout after the second."""
    text = NET.read_text().replace('name: "relu1"', 'name: "dup"').replace('name: "relu2"', 'name: "dup"')
    text = text.replace('layer { name: "res1"', 'layer { name: "drop2" type: "Dropout" bottom: "conv2" top: "conv2" }\nlayer { name: "res1"')
    path = tmp_path / "dup.prototxt"
    path.write_text(text)
    return path


def two_batchnorms_named_bnd(tmp_path):
    path = tmp_path / "bnd.prototxt"
    path.write_text(NET.read_text().replace('name: "bn1"', 'name: "bnd"').replace('name: "bn2"', 'name: "bnd"'))
    return path


def entries(path) -> list[tuple[str, str]]:
    return re.findall(r'recompute \{\s+phase: TRAIN\s+layer: "([^"]*)"\s+before: "([^"]*)"', path.read_text())


def test_recompute_never_runs_again_a_layer_whose_name_is_shared(tmp_path):
    out = tmp_path / "out.prototxt"
    result = run("optimize", two_relus_named_dup(tmp_path), "--recompute", "sqrt", "--device", "cpu", "--phase", "TRAIN", "-o", out)
    assert result.exit_code == 0, result.output
    # The two chains ending in a "dup" ReLU stay (the fixture's own plan recomputes them).
    assert entries(out) == [("norm", "norm"), ("conv3", "res2"), ("bn3", "res2"), ("scale3", "res2"), ("relu3", "res2")]
    assert run("verify", out).exit_code == 0


def test_recompute_never_runs_again_a_batchnorm_whose_name_is_shared(tmp_path):
    out = tmp_path / "out.prototxt"
    result = run("optimize", two_batchnorms_named_bnd(tmp_path), "--recompute", "sqrt", "--device", "cpu", "--phase", "TRAIN", "-o", out)
    assert result.exit_code == 0, result.output
    assert all("bnd" not in entry for entry in entries(out))
    assert run("verify", out).exit_code == 0


def test_a_unit_with_a_shared_name_says_why_it_is_not_recomputed(tmp_path):
    phase = optimize(str(two_relus_named_dup(tmp_path)), Options(device="cpu", phase="TRAIN"), OptimizeSettings(recompute="sqrt")).phases[0]
    layers = phase.shaped.graph.layers
    why = {layers[unit.layers[0]].name: unit.why_not for unit in units_of(phase.schedule, SpecTable(), phase.liveness)}
    assert why["conv1"] == "dup (ReLU): the net gives 2 layers the name 'dup', and the patched Caffe finds a recomputed layer by name"


def test_no_recomputation_is_placed_before_the_backward_of_a_layer_whose_name_is_shared(tmp_path):
    # Both Eltwise layers named "res": the chains that ran again before res1's Backward now
    # run before the next uniquely named Backward on the way back (conv3's).
    path = tmp_path / "res.prototxt"
    path.write_text(NET.read_text().replace('name: "res1"', 'name: "res"').replace('name: "res2"', 'name: "res"'))
    phase = optimize(str(path), Options(device="cpu", phase="TRAIN"), OptimizeSettings(recompute="sqrt")).phases[0]
    assert {before for _, before, _ in phase.plan_data.recompute} <= {name for name in (layer.name for layer in phase.shaped.graph.layers) if name != "res"}
    assert phase.plan_data.recompute  # still recomputes


def _with_entry(tmp_path, layer: str, before: str):
    out = tmp_path / "out.prototxt"
    assert run("optimize", two_relus_named_dup(tmp_path), "--recompute", "sqrt", "--device", "cpu", "--phase", "TRAIN", "-o", out).exit_code == 0
    text = out.read_text()
    out.write_text(text.replace("  recompute {", f'  recompute {{\n    phase: TRAIN\n    layer: "{layer}"\n    before: "{before}"\n  }}\n  recompute {{', 1))
    return out


def test_verify_refuses_an_entry_naming_a_shared_layer_name_as_net_init_does(tmp_path):
    out = _with_entry(tmp_path, "dup", "res1")
    result = run("verify", out)
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == f"{out}: TRAIN, batch 4: the table is not safe: the patched Caffe would stop at Net::Init"
    said = "mem_param recompute: dup names 2 layers of net recompute_resnet (phase TRAIN): Caffe lets layers share a name, but a recompute entry must name one layer; give each its own name"
    assert f"{out}: TRAIN: the patched Caffe stops at Net::Init: {said}{RERUN}" in result.output.splitlines()


def test_verify_refuses_an_entry_before_a_shared_layer_name(tmp_path):
    out = _with_entry(tmp_path, "conv1", "dup")
    result = run("verify", out)
    said = "mem_param recompute: dup names 2 layers of net recompute_resnet (phase TRAIN): Caffe lets layers share a name, but a recompute entry must name one layer; give each its own name"
    assert result.exit_code == 1 and f"{out}: TRAIN: the patched Caffe stops at Net::Init: {said}{RERUN}" in result.output.splitlines()


# A blob may take the name the patched Caffe gives a layer's parameter ("<i>:<layer>#<j>")
# or buffer ("<i>:<layer>/<name>"): the slot table could not tell them apart.
CLASH = """name: "clash"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } } }
layer { name: "c" type: "Convolution" bottom: "data" top: "conv" convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "r" type: "ReLU" bottom: "conv" top: "NAME" }
layer { name: "s" type: "Sigmoid" bottom: "NAME" top: "sig" }
layer { name: "ip" type: "InnerProduct" bottom: "sig" top: "ip" inner_product_param { num_output: 2 } }
"""


def test_a_blob_named_like_a_parameter_or_buffer_keeps_its_own_storage(tmp_path):
    for name in ("1:c#0", "1:c/col_buffer"):
        path = tmp_path / "clash.prototxt"
        path.write_text(CLASH.replace("NAME", name))
        phase = optimize(str(path), Options(device="cpu", phase="TEST"), OptimizeSettings(share_buffers=True)).phases[0]
        kept = {phase.schedule.classes[c].label: why for c, why in phase.liveness.kept.items()}
        assert kept[f"{name}:data"] == "its name is both a net blob's and a layer buffer's or parameter's, and the slot table finds storage by name: rename the blob to plan it"
        assert all(blob != name for blob, *_ in phase.plan_data.assign)


def test_verify_refuses_a_slot_member_that_names_a_blob_and_a_parameter(tmp_path):
    path = tmp_path / "clash.prototxt"
    path.write_text(CLASH.replace("NAME", "1:c#0") + 'mem_param { slot { id: 0 bytes: 1536 phase: TEST member { blob: "1:c#0" kind: "data" offset: 0 } } }\n')
    result = run("verify", path, "--device", "cpu")
    said = "mem_param slot 0: 1:c#0 names both a blob and a layer buffer or parameter of net clash (phase TEST), so the slot table cannot tell which it means: rename the blob"
    assert result.exit_code == 1 and f"{path}: TEST: the patched Caffe stops at Net::Init: {said}{RERUN}" in result.output.splitlines()


def test_optimize_reads_its_recompute_table_back_before_writing_it(tmp_path):
    # Were a planner to choose the second "dup" ReLU, the written name would run the first.
    phase = optimize(str(two_relus_named_dup(tmp_path)), Options(device="cpu", phase="TRAIN"), OptimizeSettings(recompute="sqrt")).phases[0]
    index = {layer.name: layer.index for layer in reversed(phase.shaped.graph.layers)}  # the first of each name
    second_dup = max(layer.index for layer in phase.shaped.graph.layers if layer.name == "dup")
    choice = replace(phase.recompute, recomputed=(Recomputation(second_dup, index["res1"]),))
    with pytest.raises(UnsafePlan, match=r"the recompute table would not run what was planned \(mem_param recompute: dup names 2 layers of net recompute_resnet \(phase TRAIN\)"):
        read_back(phase.schedule, SpecTable(), choice)
