// The measuring program of benchmarks/fork_groundtruth.py: runs one net in the yjxiong/caffe
// fork (action_recog 9831a2b) built by `.ci/build_caffe.sh fork-probe`, whose SyncedMemory
// keeps the bytes it holds (allocated less freed) in caffe::caffemem_probe_allocated, and
// prints what each step allocated, as ../shared/groundtruth/README.md describes the ground
// truth:
//
//   fork_groundtruth NET train|test
//
// The net is constructed (its mem_param switches the fork's MemoryOptimize_v2 on), the
// net-level inputs are filled, each layer's Forward runs one at a time in order, then (TRAIN)
// each layer that needs it runs Backward, in reverse order. One record per line, fields
// separated by tabs (the Python side assembles the JSON):
//   heap_init N | input_bytes N | learnable_param_bytes N | memory_required_for_data N
//   blob NAME D0 D1 ... | input NAME | output NAME
//   layer NAME TYPE NEED_BACKWARD | bottom NAME PROPAGATE_DOWN | top NAME | param D0 D1 ...
//   fwd I BYTES | bwd I BYTES
#include <stdio.h>

#include <map>
#include <string>
#include <vector>

#include "caffe/caffe.hpp"

namespace caffe {
extern long long caffemem_probe_allocated;  // the probe (.ci/build_caffe.sh apply_probe)
}

using caffe::Blob;
using caffe::Net;
using caffe::caffemem_probe_allocated;

static void PrintShape(const char* tag, const std::string& name, const std::vector<int>& shape) {
  printf("%s", tag);
  if (!name.empty()) { printf("\t%s", name.c_str()); }
  for (size_t i = 0; i < shape.size(); ++i) { printf("\t%d", shape[i]); }
  printf("\n");
}

// Deterministic values; a blob named like a label (or ContrastiveLoss's `sim`) gets 0/1.
static void Fill(Blob<float>* blob, const std::string& name) {
  float* x = blob->mutable_cpu_data();
  const bool label = name.find("label") != std::string::npos || name == "sim";
  unsigned int s = 2166136261u;
  for (size_t i = 0; i < name.size(); ++i) { s = (s ^ name[i]) * 16777619u; }
  for (int i = 0; i < blob->count(); ++i) {
    s = s * 1664525u + 1013904223u;
    x[i] = label ? (float)(i % 2) : ((s >> 8) / 16777216.0f) * 2 - 1;
  }
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s NET train|test\n", argv[0]);
    return 2;
  }
  FLAGS_minloglevel = 2;
  FLAGS_logtostderr = 1;
  google::InitGoogleLogging(argv[0]);
  caffe::Caffe::set_mode(caffe::Caffe::CPU);
  caffe::Caffe::set_random_seed(1701);
  const bool train = std::string(argv[2]) == "train";
  Net<float> net(argv[1], train ? caffe::TRAIN : caffe::TEST);
  printf("heap_init\t%lld\n", caffemem_probe_allocated);

  const std::vector<std::string>& blob_names = net.blob_names();
  for (size_t b = 0; b < blob_names.size(); ++b) {
    PrintShape("blob", blob_names[b], net.blobs()[b]->shape());
  }
  for (size_t i = 0; i < net.input_blob_indices().size(); ++i) {
    printf("input\t%s\n", blob_names[net.input_blob_indices()[i]].c_str());
  }
  for (size_t i = 0; i < net.output_blob_indices().size(); ++i) {
    printf("output\t%s\n", blob_names[net.output_blob_indices()[i]].c_str());
  }
  long long param_bytes = 0;
  for (size_t p = 0; p < net.params().size(); ++p) {
    if (net.param_owners()[p] < 0) { param_bytes += net.params()[p]->count() * sizeof(float); }
  }
  printf("learnable_param_bytes\t%lld\n", param_bytes);
  long long data_bytes = 0;  // Net::Init's memory_used_ (the log's "Memory required for data")
  for (size_t l = 0; l < net.layers().size(); ++l) {
    for (size_t t = 0; t < net.top_vecs()[l].size(); ++t) {
      data_bytes += net.top_vecs()[l][t]->count() * sizeof(float);
    }
  }
  printf("memory_required_for_data\t%lld\n", data_bytes);
  std::map<const Blob<float>*, std::string> name_of;  // the fork's Net has no bottom_ids/top_ids
  for (size_t b = 0; b < blob_names.size(); ++b) { name_of[net.blobs()[b].get()] = blob_names[b]; }
  for (size_t l = 0; l < net.layers().size(); ++l) {
    printf("layer\t%s\t%s\t%d\n", net.layer_names()[l].c_str(), net.layers()[l]->type(),
           (int)net.layer_need_backward()[l]);
    for (size_t b = 0; b < net.bottom_vecs()[l].size(); ++b) {
      printf("bottom\t%s\t%d\n", name_of[net.bottom_vecs()[l][b]].c_str(),
             (int)net.bottom_need_backward()[l][b]);
    }
    for (size_t t = 0; t < net.top_vecs()[l].size(); ++t) {
      printf("top\t%s\n", name_of[net.top_vecs()[l][t]].c_str());
    }
    for (size_t p = 0; p < net.layers()[l]->blobs().size(); ++p) {
      PrintShape("param", "", net.layers()[l]->blobs()[p]->shape());
    }
  }

  long long before = caffemem_probe_allocated;
  for (size_t i = 0; i < net.input_blob_indices().size(); ++i) {
    Fill(net.input_blobs()[i], blob_names[net.input_blob_indices()[i]]);
  }
  printf("input_bytes\t%lld\n", caffemem_probe_allocated - before);
  const int layers = net.layers().size();
  for (int l = 0; l < layers; ++l) {
    before = caffemem_probe_allocated;
    net.ForwardFromTo(l, l);
    printf("fwd\t%d\t%lld\n", l, caffemem_probe_allocated - before);
  }
  if (train) {
    for (int l = layers - 1; l >= 0; --l) {
      if (!net.layer_need_backward()[l]) { continue; }
      before = caffemem_probe_allocated;
      net.BackwardFromTo(l, l);
      printf("bwd\t%d\t%lld\n", l, caffemem_probe_allocated - before);
    }
  }
  return 0;
}
