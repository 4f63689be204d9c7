"""What `optimize -o` writes is still read by the patched Caffe: the plan's record is a
comment inside mem_param, which protobuf's C++ TextFormat — Caffe's ReadProtoFromTextFile
— skips.  Checked with the patched tree's own caffe.proto (the tarball's, with the
runtime patch's edits applied), compiled by protoc, parsing a file at a rewritten batch
with CRLF line ends: no parse error and no unknown field."""

from __future__ import annotations

import shutil
import subprocess
import tarfile

import pytest
from click.testing import CliRunner
from conftest import SHARED

from caffemem.cli import main
from caffemem.runtime import Flavour, _read_edits

TARBALLS = {Flavour.BVLC: "bvlc-caffe-9b89154.tar.xz", Flavour.FORK: "yjxiong-caffe-action_recog-9831a2b.tar.xz"}

PARSE = r"""
#include <fstream>
#include <iostream>
#include <sstream>
#include <google/protobuf/text_format.h>
#include "caffe.pb.h"
int main(int argc, char** argv) {
  std::ifstream in(argv[1]);
  std::stringstream text;
  text << in.rdbuf();
  caffe::NetParameter net;
  if (!google::protobuf::TextFormat::ParseFromString(text.str(), &net)) return 1;
  const caffe::MemoryOptimizationParameter& mem = net.mem_param();
  std::cout << net.layer_size() << " " << mem.slot_size() << " "
            << mem.GetReflection()->GetUnknownFields(mem).field_count() << std::endl;
  return 0;
}
"""

NET = (  # top-level inputs: the fork (older than the Input layer) reads them too
    'name: "tiny"\r\ninput: "data"\r\ninput_dim: 4\r\ninput_dim: 3\r\ninput_dim: 1\r\ninput_dim: 1\r\n'
    'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { num_output: 5 } }\r\n'
    'layer { name: "relu" type: "ReLU" bottom: "ip" top: "relu" }\r\n'
)


@pytest.mark.parametrize("flavour", list(Flavour), ids=lambda f: f.value)
def test_the_plans_record_is_a_comment_the_patched_caffes_parser_skips(flavour, tmp_path):
    tarball = SHARED / "caffe" / TARBALLS[flavour]
    if not tarball.is_file() or not shutil.which("protoc") or not shutil.which("g++"):
        pytest.skip("needs ../shared/caffe, protoc and g++ (libprotobuf-dev)")
    with tarfile.open(tarball) as archive:
        member = next(m for m in archive.getmembers() if m.name.endswith("src/caffe/proto/caffe.proto"))
        proto = archive.extractfile(member).read().decode()
    for edit in _read_edits(flavour):
        if edit.path == "src/caffe/proto/caffe.proto":
            assert proto.count(edit.find) == 1
            proto = proto.replace(edit.find, edit.replace)
    (tmp_path / "caffe.proto").write_text(proto)
    (tmp_path / "parse.cc").write_text(PARSE)
    subprocess.run(["protoc", "--cpp_out=.", "caffe.proto"], cwd=tmp_path, check=True)
    subprocess.run(["g++", "-std=gnu++17", "parse.cc", "caffe.pb.cc", "-lprotobuf", "-o", "parse"], cwd=tmp_path, check=True)

    (tmp_path / "net.prototxt").write_bytes(NET.encode())
    result = CliRunner().invoke(main, ["optimize", str(tmp_path / "net.prototxt"), "--batch", "2", "-o", str(tmp_path / "out.prototxt")])
    assert result.exit_code == 0, result.output
    assert "# caffemem made-for TEST" in (tmp_path / "out.prototxt").read_text()
    parsed = subprocess.run([str(tmp_path / "parse"), str(tmp_path / "out.prototxt")], capture_output=True, text=True)
    assert parsed.returncode == 0 and parsed.stdout.split() == ["2", "1", "0"]  # 2 layers, 1 slot, no unknown field
