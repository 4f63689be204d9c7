"""--caffe-root DIR: a fork caffemem has no table for, read through its own source tree.

The fork is made here, in tmp_path: BVLC Caffe's caffe.proto (read from ../shared's BVLC
tarball, never copied into the project) plus what a typical fork adds — a parameter
message and its LayerParameter field (as hszhao/PSPNet adds ``interp_param`` for its
Interp layer), and a layer registered in its own .cpp with ``REGISTER_LAYER_CLASS``
(BVLC's convention, e.g. ``REGISTER_LAYER_CLASS(Concat);`` in concat_layer.cpp).
"""

from __future__ import annotations

import hashlib
import os
import json
import re
import tarfile
from pathlib import Path

import pytest
from conftest import SHARED, one_error_line, run_cli

from caffemem.api.analyze import Options, analyze
from caffemem.passes.load import load
from caffemem.schema import caffe_root as tree_module
from caffemem.schema.caffe_root import PROTO, CaffeRoot, compile_proto, registered_types

BVLC_TARBALL = SHARED / "caffe" / "bvlc-caffe-9b89154.tar.xz"
pytestmark = pytest.mark.skipif(not BVLC_TARBALL.is_file(), reason="../shared's BVLC Caffe tarball is not beside the repo")
needs_protoc = pytest.mark.skipif(not tree_module._compilers(), reason="neither grpcio-tools nor a protoc on PATH")

# What the fork adds to BVLC's caffe.proto: a field of LayerParameter (a number BVLC leaves
# free) and its message, with a nested enum as real parameter messages have.
FORK_FIELD = "  optional MyUpsampleParameter my_upsample_param = 150;\n"
FORK_MESSAGE = """
message MyUpsampleParameter {
  optional uint32 scale = 1 [default = 2];
  enum Mode {
    NEAREST = 0;
    BILINEAR = 1;
  }
  optional Mode mode = 2 [default = NEAREST];
}
"""
FORK_LAYER_CPP = """#include "caffe/layers/my_upsample_layer.hpp"

namespace caffe {

INSTANTIATE_CLASS(MyUpsampleLayer);
REGISTER_LAYER_CLASS(MyUpsample);

}  // namespace caffe
"""
NET = """name: "up"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } } }
layer { name: "up" type: "MyUpsample" bottom: "data" top: "up" my_upsample_param { scale: 4 mode: BILINEAR } }
"""
# A rule in the README's --layers language, reading the fork's field.
RULE = """[layer.MyUpsample]
bottoms = 1
tops = 1
top = ["like bottom 0 with axis 2 = b0[2] * my_upsample_param.scale, axis 3 = b0[3] * my_upsample_param.scale"]
"""


def bvlc_proto() -> str:
    with tarfile.open(BVLC_TARBALL) as tar:
        return tar.extractfile("./src/caffe/proto/caffe.proto").read().decode("utf-8")


def make_fork(root: Path, *, field: str = FORK_FIELD, extra: str = "") -> Path:
    """A fork's tree: BVLC's caffe.proto with the fork's additions, and its layer's .cpp."""
    anchor = "  optional WindowDataParameter window_data_param = 129;\n"
    proto = bvlc_proto()
    assert anchor in proto
    (root / PROTO).parent.mkdir(parents=True)
    (root / PROTO).write_text(proto.replace(anchor, anchor + field) + FORK_MESSAGE + extra)
    layers = root / "src" / "caffe" / "layers"
    layers.mkdir(parents=True)
    (layers / "my_upsample_layer.cpp").write_text(FORK_LAYER_CPP)
    return root


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("CAFFEMEM_CACHE_DIR", str(folder))
    monkeypatch.delenv("CAFFE_ROOT", raising=False)
    return folder


@pytest.fixture
def fork(tmp_path, cache) -> Path:
    return make_fork(tmp_path / "fork")


@pytest.fixture
def net(tmp_path) -> Path:
    path = tmp_path / "up.prototxt"
    path.write_text(NET)
    return path


@pytest.fixture
def rule(tmp_path) -> Path:
    path = tmp_path / "up.layers.toml"
    path.write_text(RULE)
    return path


run = run_cli


def blobs(result) -> dict:
    """name -> shape of `analyze --json`'s one net."""
    return {blob["name"]: blob["shape"] for blob in json.loads(result.stdout)["blobs"]}


def refusal(*args) -> str:
    """The one line of a command refused as bad input (exit 2)."""
    result = run(*args)
    assert result.exit_code == 2, result.output
    return one_error_line(result)


# ----------------------------------------------------------------------------- refused, then read


def test_a_fork_net_is_refused_without_caffe_root_and_the_message_names_the_flag(net, cache):
    assert refusal("analyze", net) == (
        f"caffemem: error: {net}:3:64: layer 'up': unknown field 'my_upsample_param' in LayerParameter "
        "(did you mean 'upsample_param'? if it is your fork's field, --caffe-root DIR reads the fork's caffe.proto; --lenient skips unknown fields)"
    )


def test_an_unknown_field_close_to_no_field_suggests_the_forks_schema(net, cache):
    net.write_text(NET.replace("my_upsample_param", "fancy_knob"))
    assert one_error_line(run("analyze", net)) == (
        f"caffemem: error: {net}:3:64: layer 'up': unknown field 'fancy_knob' in LayerParameter "
        "(a fork's field? --caffe-root DIR reads the fork's own caffe.proto; --lenient skips unknown fields)"
    )


@needs_protoc
def test_a_field_in_neither_schema_is_named_with_the_forks_file(net, fork):
    net.write_text(NET.replace("my_upsample_param", "fancy_knob"))
    assert one_error_line(run("analyze", net, "--caffe-root", fork)) == (
        f"caffemem: error: {net}:3:64: layer 'up': unknown field 'fancy_knob' in LayerParameter "
        f"(neither caffemem's schema nor {fork / PROTO} has it; --lenient skips unknown fields)"
    )


@needs_protoc
def test_a_fork_net_analyses_with_caffe_root_and_a_rule_reading_the_forks_field(net, fork, rule):
    result = run("analyze", net, "--caffe-root", fork, "--layers", rule, "--json", "--device", "cpu")
    assert result.exit_code == 0, result.output
    # scale: 4 in the net (the fork's default is 2): 8 x 8 -> 32 x 32
    assert blobs(result) == {"data": [1, 3, 8, 8], "up": [1, 3, 32, 32]}
    # the two blobs, float32: (1*3*8*8 + 1*3*32*32) * 4 = (192 + 3072) * 4
    assert json.loads(result.stdout)["memory_required_for_data"] == 13056


@needs_protoc
def test_caffe_root_defaults_to_the_CAFFE_ROOT_variable(net, fork, rule, monkeypatch):
    monkeypatch.setenv("CAFFE_ROOT", str(fork))
    result = run("analyze", net, "--layers", rule, "--json")
    assert result.exit_code == 0, result.output
    assert blobs(result)["up"] == [1, 3, 32, 32]


@needs_protoc
def test_the_api_takes_the_tree_as_an_option(net, fork, rule):
    analysis = analyze(str(net), Options(caffe_root=str(fork), layers_file=str(rule)))
    assert analysis.nets[0].blobs["up"] == (1, 3, 32, 32)


@needs_protoc
def test_check_reads_the_fork_too(net, fork, rule):
    result = run("check", net, "--caffe-root", fork, "--layers", rule, "--format", "json")
    assert result.exit_code == 0, result.output


@needs_protoc
def test_optimize_plans_a_fork_net_and_verify_reads_the_plan_with_the_tree(tmp_path, fork, rule):
    net = tmp_path / "deep.prototxt"
    net.write_text(
        NET.replace("dim: 1 dim: 3 dim: 8 dim: 8", "dim: 2 dim: 3 dim: 16 dim: 16")
        + 'layer { name: "conv" type: "Convolution" bottom: "up" top: "conv" convolution_param { num_output: 8 kernel_size: 3 pad: 1 } }\n'
        + 'layer { name: "relu" type: "ReLU" bottom: "conv" top: "relu" }\n'
        + 'layer { name: "score" type: "Convolution" bottom: "relu" top: "score" convolution_param { num_output: 4 kernel_size: 1 } }\n'
    )
    planned = tmp_path / "deep.opt.prototxt"
    assert run("optimize", net, "--caffe-root", fork, "--layers", rule, "-o", planned).exit_code == 0
    verified = run("verify", planned, "--caffe-root", fork, "--layers", rule)
    assert verified.exit_code == 0, verified.output
    assert "the table is safe" in verified.stdout


@needs_protoc
def test_without_the_tree_a_rule_naming_the_forks_field_says_where_such_a_field_comes_from(net, rule):
    assert refusal("analyze", net, "--layers", rule, "--lenient").endswith("the layer has no field 'my_upsample_param.scale' (a fork's field? --caffe-root DIR reads the fork's caffe.proto)")


# ----------------------------------------------------------------------------- types: the fork's, or a typo


@needs_protoc
def test_a_type_the_fork_registers_without_a_rule_gets_a_ready_skeleton_on_standard_output(net, fork):
    result = run("analyze", net, "--caffe-root", fork)
    assert result.exit_code == 2
    assert one_error_line(result) == (
        f"caffemem: error: {net}:3: TEST net: layer 'up' (MyUpsample): type 'MyUpsample' is registered by the fork in "
        f"{fork}/src/caffe/layers/my_upsample_layer.cpp:6 but caffemem has no shape rule for it; describe it in a file passed "
        "with --layers: a skeleton for it is on standard output (see docs/forks.md)"
    )
    proto = (fork / PROTO).read_text()
    scale, mode = (proto[: proto.index(field)].count("\n") + 1 for field in ("optional uint32 scale", "optional Mode mode"))
    assert result.stdout == (
        f"# MyUpsample: registered by the fork in {fork}/src/caffe/layers/my_upsample_layer.cpp:6; caffemem has no shape rule for it.\n"
        "# Write each top's shape as the layer's Reshape computes it (docs/forks.md), then pass this file with --layers.\n"
        "# my_upsample_param (MyUpsampleParameter), fields the expressions may read:\n"
        f"#   my_upsample_param.scale: uint32 = 2, caffe.proto:{scale}; this net: 4\n"
        f"#   my_upsample_param.mode: MyUpsampleParameter.Mode = NEAREST, caffe.proto:{mode}; this net: BILINEAR\n"
        "[layer.MyUpsample]\n"
        "bottoms = 1\n"
        "tops = 1\n"
        'top = ["like bottom 0"]  # a placeholder: replace with each top\'s real shape\n'
    )


@needs_protoc
def test_the_skeleton_is_a_loadable_layers_file(net, fork, tmp_path):
    skeleton = tmp_path / "skeleton.toml"
    skeleton.write_text(run("analyze", net, "--caffe-root", fork).stdout)
    result = run("analyze", net, "--caffe-root", fork, "--layers", skeleton, "--json")
    assert result.exit_code == 0, result.output
    assert blobs(result)["up"] == [1, 3, 8, 8]  # the placeholder: like bottom 0


@needs_protoc
def test_a_typo_in_a_type_is_told_apart_from_the_forks_type(net, fork):
    net.write_text(NET.replace('type: "MyUpsample"', 'type: "MyUpsampel"'))
    result = run("analyze", net, "--caffe-root", fork)
    assert result.exit_code == 2 and result.stdout == ""
    assert one_error_line(result) == (
        f"caffemem: error: {net}:3: TEST net: layer 'up' (MyUpsampel): no layer type 'MyUpsampel' in caffemem or in {fork}; did you mean 'MyUpsample', 'Upsample'?"
    )


def test_registered_types_are_read_from_both_of_caffes_macros(tmp_path):
    layers = tmp_path / "src" / "caffe" / "layers"
    layers.mkdir(parents=True)
    (layers / "a_layer.cu").write_text("namespace caffe {\nINSTANTIATE_LAYER_GPU_FUNCS(ALayer);\n}\n")
    (layers / "a_layer.cpp").write_text("namespace caffe {\n// REGISTER_LAYER_CLASS(Commented);\nREGISTER_LAYER_CLASS(A);\n}\n")
    (tmp_path / "src" / "caffe" / "layer_factory.cpp").write_text("REGISTER_LAYER_CREATOR(Convolution, GetConvolutionLayer);\n")
    include = tmp_path / "include" / "caffe"
    include.mkdir(parents=True)
    # layer_factory.hpp's macro: its body's REGISTER_LAYER_CREATOR(type, ...) registers nothing
    (include / "layer_factory.hpp").write_text(
        "#define REGISTER_LAYER_CLASS(type)                          \\\n"
        "  template <typename Dtype>                                 \\\n"
        "  shared_ptr<Layer<Dtype> > Creator_##type##Layer(const LayerParameter& param) \\\n"
        "  {                                                         \\\n"
        "    return shared_ptr<Layer<Dtype> >(new type##Layer<Dtype>(param)); \\\n"
        "  }                                                         \\\n"
        "  REGISTER_LAYER_CREATOR(type, Creator_##type##Layer)\n"
    )
    (tmp_path / "src" / "caffe" / "test").mkdir()
    (tmp_path / "src" / "caffe" / "test" / "test_x.cpp").write_text("REGISTER_LAYER_CLASS(OnlyInATest);\n")
    found = registered_types(tmp_path)
    assert {name: (r.file.name, r.line) for name, r in found.items()} == {"A": ("a_layer.cpp", 3), "Convolution": ("layer_factory.cpp", 1)}


# ----------------------------------------------------------------------------- the merge


def fork_retyping(root: Path, old: str, new: str) -> Path:
    """The fork, with one of BVLC's field declarations typed otherwise."""
    make_fork(root)
    proto = (root / PROTO).read_text()
    assert old in proto
    (root / PROTO).write_text(proto.replace(old, new, 1))
    return root


@needs_protoc
def test_a_field_the_fork_types_otherwise_refuses_a_net_that_sets_it_naming_file_line_message_and_field(tmp_path, cache, rule):
    root = fork_retyping(tmp_path / "fork", "optional uint32 num_output = 1; // The number of outputs for the layer", "optional float num_output = 1;")
    net = tmp_path / "conv.prototxt"
    net.write_text(NET + 'layer { name: "conv" type: "Convolution" bottom: "up" top: "conv" convolution_param { num_output: 2.5 kernel_size: 1 } }\n')
    assert refusal("analyze", net, "--caffe-root", root, "--layers", rule) == (
        f"caffemem: error: {net}: sets ConvolutionParameter.num_output, which the fork's caffe.proto declares otherwise than caffemem's "
        f"({root / PROTO}:{line_in(root, 'optional float num_output')}: ConvolutionParameter.num_output: the fork declares it float = 1, "
        "caffemem uint32 = 1: caffemem's rules cannot read the fork's meaning)"
    )


PLAIN_NET = """name: "plain"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" convolution_param { num_output: 2 kernel_size: 1 } }
"""


@needs_protoc
@pytest.mark.parametrize(
    ("old", "new", "refused"),
    [
        ("optional uint32 num_output = 1; // The number of outputs for the layer", "optional float num_output = 1;", ": sets ConvolutionParameter.num_output, which the fork's caffe.proto declares otherwise than caffemem's ("),
        ("optional string name = 1; // the layer name", "optional int32 name = 1;", ":2:15: name: Couldn't parse integer: \"data\""),  # the fork's own parse refuses it
    ],
)
def test_a_field_the_fork_retypes_is_refused_in_a_net_of_caffemems_fields_only(tmp_path, cache, old, new, refused):
    # Issue 31, item 18: a net using none of the fork's own fields took the fast reader,
    # which reads caffemem's schema only: `num_output: 2` under a fork that makes it a
    # float, or a layer name under a fork that makes it an int32, went through unrefused.
    root = fork_retyping(tmp_path / "fork", old, new)
    net = tmp_path / "plain.prototxt"
    net.write_text(PLAIN_NET)
    assert refusal("analyze", net, "--caffe-root", root).startswith(f"caffemem: error: {net}{refused}")


@needs_protoc
def test_a_field_the_fork_types_otherwise_is_no_matter_to_a_net_that_does_not_set_it(tmp_path, cache, net, rule):
    # senlinuc/caffe_ocr (src/caffe/proto/caffe.proto) makes Datum.label repeated, for its
    # multi-label text lines; no net file holds a Datum.
    root = fork_retyping(tmp_path / "fork", "optional int32 label = 5;", "repeated int32 label = 5;")
    result = run("analyze", net, "--caffe-root", root, "--layers", rule, "--json")
    assert result.exit_code == 0, result.output
    assert blobs(result)["up"] == [1, 3, 32, 32]


@needs_protoc
def test_a_fork_field_on_a_number_caffemem_uses_is_renumbered_and_named_where_the_net_uses_it(tmp_path, cache, net):
    # LayerParameter 152 is free in BVLC and caffemem's bn_param (another fork's, see
    # schema/forks.py): the fork's field keeps its name, not its number.
    root = make_fork(tmp_path / "fork", field=FORK_FIELD + "  optional uint32 my_flag = 152;\n")
    schema = CaffeRoot(root).schema
    line = bvlc_proto()[: bvlc_proto().index("optional WindowDataParameter window_data_param = 129;")].count("\n") + 3
    assert [c.describe() for c in schema.renumbered] == [
        f"{root / PROTO}:{line}: LayerParameter.my_flag: the fork numbers it 152, which caffemem gives LayerParameter.bn_param: a text net reads the same; a binary file the fork wrote would not"
    ]
    net.write_text(NET.replace('top: "up" my', 'top: "up" my_flag: 1 my'))
    source = load(str(net), schema=schema)
    assert source.notes == (f"note: {schema.renumbered[0].describe()}",)
    assert schema.view(source.proto.layer[1]).my_flag == 1
    assert not source.proto.layer[1].HasField("bn_param")  # the fork's flag is not read as caffemem's field 152


@needs_protoc
def test_a_broken_fork_proto_is_protocs_message_at_its_line(tmp_path, cache, net):
    root = make_fork(tmp_path / "fork", extra="message Broken {\n  optional NoSuchType x = 1;\n}\n")
    line = (root / PROTO).read_text().count("\n") - 1
    assert re.fullmatch(rf"caffemem: error: {re.escape(str(root / PROTO))}:{line}:\d+: protoc cannot read the fork's schema: .*NoSuchType.*", refusal("analyze", net, "--caffe-root", root))


def test_a_folder_without_caffe_proto_is_refused(tmp_path, cache, net):
    assert refusal("analyze", net, "--caffe-root", tmp_path) == (
        f"caffemem: error: {tmp_path / PROTO}: no caffe.proto here: --caffe-root (or $CAFFE_ROOT) must be the root of a Caffe source tree, the folder holding src/caffe/proto/caffe.proto"
    )


# ----------------------------------------------------------------------------- the compiled schema's cache


@needs_protoc
def test_the_compiled_schema_is_cached_by_the_files_hash_and_then_needs_no_compiler(fork, cache, monkeypatch):
    proto = fork / PROTO
    first = compile_proto(proto)
    assert [p.name for p in (cache / "schemas").iterdir()] == [f"{hashlib.sha256(proto.read_bytes()).hexdigest()}.fdset1.pb"]
    monkeypatch.setattr(tree_module, "_compilers", lambda: [])
    assert compile_proto(proto) == first


def test_without_a_compiler_or_a_cached_schema_the_message_names_the_extra(fork, monkeypatch, net):
    monkeypatch.setattr(tree_module, "_compilers", lambda: [])
    result = run("analyze", net, "--caffe-root", fork)
    assert result.exit_code == 2
    assert "pip install 'caffemem[fork]'" in one_error_line(result)


# ----------------------------------------------------------------------------- the fork's enum values


def fork_with_enum_values(root: Path) -> Path:
    """A fork that adds a pooling method and a V1 layer type to BVLC's enums (as
    facebook/C3D adds its V1 types, see schema/forks.py)."""
    make_fork(root)
    proto = (root / PROTO).read_text()
    for anchor, added in (("    STOCHASTIC = 2;\n", "    DEF = 3;\n"), ("    WINDOW_DATA = 24;\n", "    MY_UPSAMPLE = 60;\n")):
        assert anchor in proto
        proto = proto.replace(anchor, anchor + added, 1)
    (root / PROTO).write_text(proto)
    return root


def line_in(root: Path, text: str) -> int:
    proto = (root / PROTO).read_text()
    return proto[: proto.index(text)].count("\n") + 1


V1_NET = """name: "v1"
input: "data"
input_dim: 1 input_dim: 3 input_dim: 8 input_dim: 8
layers { name: "pool" type: POOLING bottom: "data" top: "pool" pooling_param { pool: DEF kernel_size: 2 stride: 2 } }
layers { name: "up" type: MY_UPSAMPLE bottom: "pool" top: "up" }
"""


@needs_protoc
def test_a_v1_layer_of_the_forks_own_v1_type_is_refused_saying_how_to_write_it(tmp_path, cache):
    root = fork_with_enum_values(tmp_path / "fork")
    net = tmp_path / "v1.prototxt"
    net.write_text(V1_NET)
    assert refusal("analyze", net, "--caffe-root", root) == (
        f"caffemem: error: {net}:5: layer 'up': V1 layer type MY_UPSAMPLE is the fork's ({root / PROTO}:{line_in(root, 'MY_UPSAMPLE')}): "
        "which layer class it makes is in the fork's upgrade_proto.cpp, not its schema; "
        'write the layer in the current format (layer { type: "..." }, the string the fork registers)'
    )


@needs_protoc
def test_the_forks_value_of_an_enum_caffemem_knows_is_noted_where_used(tmp_path, cache):
    root = fork_with_enum_values(tmp_path / "fork")
    net = tmp_path / "v1.prototxt"
    net.write_text(V1_NET.replace("MY_UPSAMPLE", "RELU"))
    source = load(str(net), schema=CaffeRoot(root).schema)
    assert source.notes == (
        f"note: {root / PROTO}:{line_in(root, 'DEF = 3')}: PoolingParameter.PoolMethod.DEF: the fork's value of an enum caffemem knows: "
        "caffemem's own layer rules read the field as unset (its default); a --layers rule reads the value",
    )


def test_a_caffe_proto_that_is_no_regular_file_is_refused_unread(tmp_path, cache, net):
    (tmp_path / PROTO).parent.mkdir(parents=True)
    os.mkfifo(tmp_path / PROTO)  # reading it would wait forever
    assert refusal("analyze", net, "--caffe-root", tmp_path) == (
        f"caffemem: error: {tmp_path / PROTO}: is a FIFO (named pipe), not a caffe.proto: save it to a regular file first"
    )


@needs_protoc
def test_a_forks_rule_that_refuses_a_type_the_tree_registers_itself_says_a_declaration_replaces_it(net, fork, rule):
    # The tree has its own Permute (caffemem's follows weiliu89/caffe's SSD), which the
    # net uses in a way SSD's refuses.
    (fork / "src" / "caffe" / "layers" / "permute_layer.cpp").write_text("namespace caffe {\nREGISTER_LAYER_CLASS(Permute);\n}\n")
    net.write_text(NET + 'layer { name: "p" type: "Permute" bottom: "up" top: "p" permute_param { order: 5 } }\n')
    message = refusal("analyze", net, "--caffe-root", fork, "--layers", rule)
    assert message.startswith(f"caffemem: error: {net}:4: TEST net: layer 'p' (Permute): order 5 should be less than the input dimension 4 (caffemem's rule follows weiliu89/caffe")
    assert message.endswith(f"; your tree registers its own Permute in {fork}/src/caffe/layers/permute_layer.cpp:2: if it is another layer, a --layers declaration replaces caffemem's rule)")
    replacing = rule.parent / "replacing.layers.toml"
    replacing.write_text(RULE + '\n[layer.Permute]\ntop = ["like bottom 0"]\n')
    result = run("analyze", net, "--caffe-root", fork, "--layers", replacing, "--json")
    assert result.exit_code == 0, result.output
    assert blobs(result)["p"] == [1, 3, 32, 32]


@needs_protoc
def test_the_skeleton_of_a_registered_type_without_bottoms_declares_a_data_layer(tmp_path, fork):
    (fork / "src" / "caffe" / "layers" / "my_reader_layer.cpp").write_text("namespace caffe {\nREGISTER_LAYER_CLASS(MyReader);\n}\n")
    net = tmp_path / "reader.prototxt"
    net.write_text('name: "r"\nlayer { name: "read" type: "MyReader" top: "data" top: "label" }\n')
    result = run("analyze", net, "--caffe-root", fork)
    assert result.exit_code == 2
    assert result.stdout.endswith("[layer.MyReader]\nbottoms = 0\ntops = 2\ndata = true  # its tops' shapes come from --input NAME=d0,d1,...\n")
    skeleton = tmp_path / "reader.layers.toml"
    skeleton.write_text(result.stdout)
    done = run("analyze", net, "--caffe-root", fork, "--layers", skeleton, "--input", "data=4,3,8,8", "--input", "label=4", "--json")
    assert done.exit_code == 0, done.output
    assert blobs(done) == {"data": [4, 3, 8, 8], "label": [4]}
