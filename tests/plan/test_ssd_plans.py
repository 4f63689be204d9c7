"""SSD's train net (weiliu89/caffe) plans: its Permute layers take the bottom data and the
top diff through mutable_cpu_data/mutable_cpu_diff (permute_layer.cpp: Permute() wants
non-const pointers) but only read them, so the values stay alive across those steps."""

from __future__ import annotations

from click.testing import CliRunner
from conftest import SHARED, needs_shared

import caffemem
from caffemem.cli import main
from caffemem.plan.verify import verify_plan

SSD = SHARED / "models" / "ssd_vgg16_voc0712_300x300" / "train.prototxt"


@needs_shared
def test_ssd_train_plans_safely_at_the_lower_bound(tmp_path):
    result = CliRunner().invoke(main, ["optimize", str(SSD), "--override-input", "data=32,3,300,300", "--input", "label=1,1,8,8", "-o", str(tmp_path / "ssd.prototxt")])
    assert result.exit_code == 0, result.output
    (phase,) = caffemem.optimize(str(SSD), caffemem.Options(overrides=frozenset({"data"})), phase="TRAIN", inputs={"data": (32, 3, 300, 300), "label": (1, 1, 8, 8)}).phases
    assert verify_plan(phase.schedule, phase.plan_data) == []
    assert phase.planned.heap_total == phase.lower_bound < phase.fork.heap_total


def test_permute_reads_the_bottom_and_the_top_diff():
    from caffemem.layers.access import Touch

    net = caffemem.analyze(
        'layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 dim: 4 dim: 5 } } }\n'
        'layer { name: "p" type: "Permute" bottom: "x" top: "y" permute_param { order: 0 order: 2 order: 3 order: 1 } }\n'
        'layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "y" top: "l" }\n',
        phase="TRAIN",
    ).nets[0]
    rule = net.memory.rules[1]
    touches = [(a.blob.name, a.part, a.write) for a in rule.forward + rule.backward if isinstance(a, Touch) and a.blob.kind == "blob"]
    assert touches == [("x", "data", False), ("y", "data", True), ("y", "diff", False), ("x", "diff", True)]
