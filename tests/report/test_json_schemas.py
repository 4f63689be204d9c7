"""Every JSON document caffemem prints carries ``schema_version`` and is valid against its
JSON Schema in ``caffemem/report/schemas/`` (package data): analyze (net and solver),
optimize (``--json`` and ``--plan-json``), check and fit, in both modes, run through the CLI
on the bundled nets."""

from __future__ import annotations

import json

import jsonschema
import pytest
from click.testing import CliRunner
from conftest import FIXTURES, REPO

from caffemem.cli import main
from caffemem.report.schemas import DOCUMENTS, schema, schema_version

DOCS = FIXTURES / "docs"
TRAIN_VAL = str(DOCS / "train_val.prototxt")
DEPLOY = str(DOCS / "deploy.prototxt")
SOLVER = str(DOCS / "solver.prototxt")
DATA = ["--input", "data=3,224,224"]  # the Data layer's C,H,W (the batch is the file's)
# A ReLU written with its own top, which `optimize --inplace` runs in place.
NOT_IN_PLACE = """name: "not_in_place"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "relu" }
layer { name: "fc" type: "InnerProduct" bottom: "relu" top: "fc" inner_product_param { num_output: 2 } }
"""


def document(*args: str, exit_code: int = 0) -> dict:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == exit_code, result.output
    return json.loads(result.stdout)


def assert_valid(name: str, value: dict) -> None:
    assert value["schema_version"] == schema_version(name) == 1
    jsonschema.Draft202012Validator(schema(name)).validate(value)


@pytest.mark.parametrize("name", DOCUMENTS)
def test_each_schema_is_a_valid_draft_2020_12_schema_with_a_version(name):
    jsonschema.Draft202012Validator.check_schema(schema(name))
    assert schema(name)["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert "schema_version" in schema(name)["required"]


def test_the_schemas_are_package_data():
    assert '"caffemem.report.schemas" = ["*.schema.json"]' in (REPO / "pyproject.toml").read_text()
    folder = REPO / "caffemem" / "report" / "schemas"
    assert sorted(p.name for p in folder.glob("*.schema.json")) == sorted(f"{name}.schema.json" for name in DOCUMENTS)


@pytest.mark.parametrize("device", ["cpu", "gpu"])
@pytest.mark.parametrize(
    "args",
    [
        pytest.param([DEPLOY], id="deploy"),
        pytest.param([TRAIN_VAL, *DATA, "--phase", "TRAIN"], id="train-with-prefetch"),
        pytest.param([SOLVER, *DATA], id="solver"),
    ],
)
def test_analyze_documents_match_the_schema(args, device):
    value = document("analyze", *args, "--device", device, "--json")
    assert_valid("analyze", value)
    nets = value["nets"] if "solver" in value else [value]
    assert all(net["mode"] == device for net in nets)


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_optimize_documents_of_both_phases_and_the_plan_file_match_the_schema(device, tmp_path):
    plan = tmp_path / "plan.json"
    value = document("optimize", TRAIN_VAL, *DATA, "--device", device, "--share-buffers", "--plan-json", str(plan), "--json")
    assert [p["phase"] for p in value["phases"]] == ["TRAIN", "TEST"]
    assert_valid("optimize", value)
    assert json.loads(plan.read_text()) == value  # --plan-json writes the --json document


def test_an_optimize_document_of_one_phase_has_its_plan_at_the_top_too():
    value = document("optimize", DEPLOY, "--json")
    assert_valid("optimize", value)
    assert (value["phase"], value["plan"]) == ("TEST", value["phases"][0]["plan"])


def test_an_inplace_optimize_document_matches_the_schema(tmp_path):
    net = tmp_path / "net.prototxt"
    net.write_text(NOT_IN_PLACE)
    value = document("optimize", str(net), "--inplace", "--json")
    assert value["inplace"] == [{"layer": "relu", "type": "ReLU", "top_was": "relu", "now": "conv"}]
    assert_valid("optimize", value)


def test_a_check_document_with_a_baseline_an_error_and_a_failure_matches_the_schema(tmp_path):
    models = [str(DOCS / "models"), str(FIXTURES / "check" / "bad" / "broken.prototxt")]
    baseline = str(tmp_path / "baseline.json")
    document("check", *models, "--baseline", baseline, "--update-baseline", "--format", "json", exit_code=2)
    value = document("check", *models, "--baseline", baseline, "--budget", "1MiB", "--format", "json", exit_code=2)
    assert {row["status"] for row in value["results"]} == {"over-budget", "error"}
    assert all(isinstance(row["delta"], int) for row in value["results"] if row["status"] != "error")
    assert_valid("check", value)


def test_fit_documents_that_fit_and_that_do_not_match_the_schema():
    fits = document("fit", SOLVER, *DATA, "--gpu-memory", "11GiB", "--effective-batch", "256", "--json")
    assert fits["fits"] and fits["schedule"]["effective_batch"] == 256
    assert_valid("fit", fits)
    nothing = document("fit", DEPLOY, "--gpu-memory", "100MiB", "--reserve", "0", "--json", exit_code=1)
    assert (nothing["fits"], nothing["batch"], nothing["bytes"], nothing["schedule"]) == (False, 0, None, None)
    assert_valid("fit", nothing)


@pytest.mark.parametrize(
    "name, change",
    [
        ("analyze", lambda d: d.pop("total_bytes")),
        ("analyze", lambda d: d.update(total_bytes="510 MiB")),
        ("analyze", lambda d: d["layers"][0].pop("fwd_alloc")),
        ("analyze", lambda d: d["gpu"].pop("by_cause")),
        ("analyze", lambda d: d.update(schema_version=2)),
        ("optimize", lambda d: d["phases"][0]["bytes"].pop("lower_bound")),
        ("optimize", lambda d: d["plan"]["assign"][0].update(kind="grad")),
        ("check", lambda d: d["results"][0].update(status="fine")),
        ("fit", lambda d: d.update(batch=None)),
        ("fit", lambda d: d["evaluations"][0].pop("error")),
    ],
)
def test_a_schema_refuses_a_document_without_a_documented_field_or_with_its_wrong_type(name, change):
    value = _documents()[name]
    change(value)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema(name)).validate(value)


@pytest.mark.parametrize("name", DOCUMENTS)
def test_a_schema_accepts_fields_it_does_not_name(name):
    value = _documents()[name]
    value["added_in_a_later_version"] = {"anything": [1, "two"]}
    jsonschema.Draft202012Validator(schema(name)).validate(value)


def _documents() -> dict[str, dict]:
    """A fresh document of each kind (GPU mode, the default's figures)."""
    return {
        "analyze": document("analyze", DEPLOY, "--device", "gpu", "--json"),
        "optimize": document("optimize", DEPLOY, "--json"),
        "check": document("check", str(DOCS / "models"), "--format", "json"),
        "fit": document("fit", DEPLOY, "--gpu-memory", "11GiB", "--json"),
    }
