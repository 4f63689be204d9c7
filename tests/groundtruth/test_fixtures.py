"""Our own nets (fixtures/): every layer family through the whole pipeline, the deep-net
generators, and the bundled example."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import FIXTURES, REPO

from caffemem.api.analyze import Options, analyze
from caffemem.layers import builtin_specs
from caffemem.report.document import to_json

sys.path.insert(0, str(FIXTURES))
import generate  # noqa: E402  (fixtures/generate.py)

LAYER_FIXTURES = sorted((FIXTURES / "layers").glob("*.prototxt"))
BVLC_FAMILIES = ("vision", "neuron", "common", "loss", "data", "recurrent")


@pytest.mark.parametrize("path", LAYER_FIXTURES, ids=lambda p: p.stem)
def test_fixture_net_has_the_hand_derived_shapes(path):
    expected = json.loads(path.with_suffix(".expected.json").read_text())
    inputs = {name: tuple(shape) for name, shape in expected.get("inputs", {}).items()}
    document = to_json(analyze(str(path), Options(phase=expected["phase"], inputs=inputs)))
    assert [(b["name"], b["shape"]) for b in document["blobs"]] == [(b["name"], b["shape"]) for b in expected["blobs"]]


def test_fixtures_cover_every_bvlc_layer_type():
    used = set()
    for path in LAYER_FIXTURES:
        document = to_json(analyze(str(path), Options(phase=json.loads(path.with_suffix(".expected.json").read_text())["phase"],
                                                     inputs={k: tuple(v) for k, v in json.loads(path.with_suffix(".expected.json").read_text()).get("inputs", {}).items()})))
        used |= {layer["type"] for layer in document["layers"]}
    bvlc = {name for name, spec in builtin_specs().items() if spec.family in BVLC_FAMILIES}
    assert bvlc - used == set()


@pytest.mark.parametrize(
    "kind, size, layers, output",
    [
        # input 1, conv1+BN+Scale+ReLU 4, pool1 1; a bottleneck: two conv-BN-Scale-ReLU (4 each),
        # one conv-BN-Scale (3), Eltwise, ReLU = 13; 4 projection shortcuts of 3; head 3.
        # 224 -> conv1 112 -> pool1 ceil(109/2)+1 = 56 -> 28 -> 14 -> 7.
        ("resnet", 50, 6 + 16 * 13 + 4 * 3 + 3, [1, 2048, 7, 7]),
        ("resnet", 152, 6 + 50 * 13 + 4 * 3 + 3, [1, 2048, 7, 7]),
        # a dense layer: two conv-BN-Scale-ReLU + Concat = 9; a transition: conv-BN-Scale-ReLU + pool = 5.
        # pool1 (3/2, pad 1, Caffe rounds up): ceil(111/2)+1 = 57; AVE 2/2: 29, 15, 8.
        ("densenet", 121, 6 + 58 * 9 + 3 * 5 + 3, [1, 1024, 8, 8]),
    ],
)
def test_generated_deep_nets_build_with_the_expected_shape(tmp_path, kind, size, layers, output):
    path = tmp_path / f"{kind}{size}.prototxt"
    path.write_text(generate.GENERATORS[kind](size))
    document = to_json(analyze(str(path), Options(phase="TEST")))
    assert len([l for l in document["layers"] if l["type"] != "Split"]) == layers
    before_head = next(l for l in document["layers"] if l["name"] == "pool_final")["bottoms"][0]
    assert next(b["shape"] for b in document["blobs"] if b["name"] == before_head) == output


def test_bundled_example_analyses():
    analysis = analyze(str(REPO / "fixtures" / "examples" / "lenet_train.prototxt"))
    assert analysis.nets[0].phase == "TRAIN"
    assert to_json(analysis)["blobs"][-1] == {"name": "loss", "shape": []}
