// caffemem runtime tests: runs a Caffe net deterministically and dumps what a run
// produced, so that stock Caffe on a net and caffemem-patched Caffe on the
// `caffemem optimize -o` file can be compared byte for byte.
//
//   harness NET PHASE ITERS DUMP [WEIGHTS]
//
// Built against BVLC master; -DCAFFEMEM_FORK builds it against the yjxiong fork (whose
// Net has no Input layer, ClearParamDiffs or learnable_params: its nets declare inputs).
//
// PHASE is train or test. Every iteration fills the tops of the net's Input layers
// deterministically (tops named *label* or sim get 0/1 labels), then
// TRAIN: ClearParamDiffs, ForwardBackward, a fixed SGD step (diff *= 0.01,
// Blob::Update); TEST: Forward. DUMP gets one line per output blob per iteration
// and, at the end, one line per learnable parameter's data and diff: name, count,
// FNV-1a hash of the bytes and the first values.
//
// The heap is counted by this program's own malloc/free (they wrap glibc's
// __libc_malloc & co.; libcaffe's allocations resolve to them): stdout gets
// "heap_peak N" and "heap_final N", bytes in use at the peak and at the end of
// the run above what was in use before the Net was constructed (and heap_init_peak,
// heap_init: the same once the Net is constructed).
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include <atomic>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "caffe/caffe.hpp"

extern "C" {
void* __libc_malloc(size_t);
void __libc_free(void*);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
}

static std::atomic<long long> g_in_use(0);
static std::atomic<long long> g_peak(0);

static inline void Count(void* p, long long sign) {
  if (!p) { return; }
  long long now = g_in_use.fetch_add(sign * (long long)malloc_usable_size(p)) +
      sign * (long long)malloc_usable_size(p);
  long long peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {}
}

extern "C" {
void* malloc(size_t n) { void* p = __libc_malloc(n); Count(p, 1); return p; }
void free(void* p) { Count(p, -1); __libc_free(p); }
void* calloc(size_t a, size_t b) { void* p = __libc_calloc(a, b); Count(p, 1); return p; }
void* realloc(void* old, size_t n) {
  Count(old, -1);
  void* p = __libc_realloc(old, n);
  if (p) { Count(p, 1); } else if (old && n) { Count(old, 1); }
  return p;
}
void* memalign(size_t a, size_t n) { void* p = __libc_memalign(a, n); Count(p, 1); return p; }
void* aligned_alloc(size_t a, size_t n) { return memalign(a, n); }
int posix_memalign(void** out, size_t a, size_t n) {
  void* p = memalign(a, n);
  if (!p) { return 12; }
  *out = p;
  return 0;
}
void* valloc(size_t n) { return memalign(4096, n); }
}

using caffe::Blob;
using caffe::Caffe;
using caffe::Net;

static uint64_t Fnv(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; ++i) { h = (h ^ p[i]) * 1099511628211ULL; }
  return h;
}

static void Dump(std::ostream& out, const std::string& what, const float* v,
    int count) {
  out << what << " " << count << " " << std::hex << Fnv(v, count * sizeof(float))
      << std::dec << std::setprecision(9);
  for (int i = 0; i < count && i < 4; ++i) { out << " " << v[i]; }
  out << "\n";
}

static void Fill(Blob<float>* blob, const std::string& name, int iter) {
  float* x = blob->mutable_cpu_data();
  const bool label = name.find("label") != std::string::npos || name == "sim";
  uint32_t s = 2166136261u ^ (uint32_t)iter * 16777619u;
  for (size_t i = 0; i < name.size(); ++i) { s = (s ^ name[i]) * 16777619u; }
  for (int i = 0; i < blob->count(); ++i) {
    s = s * 1664525u + 1013904223u;
    x[i] = label ? (float)((i + iter) % 2) : ((s >> 8) / 16777216.0f) * 2 - 1;
  }
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s NET train|test ITERS DUMP [WEIGHTS]\n", argv[0]);
    return 2;
  }
  // warnings and worse, unless GLOG_minloglevel asks (0: the runtime's INFO
  // lines, CAFFEMEM_RECOMPUTE_TIMES's among them)
  const char* level = getenv("GLOG_minloglevel");
  FLAGS_minloglevel = level != NULL ? atoi(level) : 1;
  FLAGS_logtostderr = 1;
  google::InitGoogleLogging(argv[0]);
  Caffe::set_mode(Caffe::CPU);
  Caffe::set_random_seed(1701);
  const caffe::Phase phase = std::string(argv[2]) == "train" ? caffe::TRAIN
                                                             : caffe::TEST;
  const int iters = atoi(argv[3]);
  std::ostringstream out;
  const long long base = g_in_use.load();
  g_peak.store(base);
  {
    Net<float> net(argv[1], phase);
    if (argc > 5) { net.CopyTrainedLayersFrom(argv[5]); }
    printf("heap_init_peak %lld\nheap_init %lld\n", g_peak.load() - base,
           g_in_use.load() - base);
    caffe::Timer timer;  // for benchmarks/runtime.py; no test asserts on time
    timer.Start();
    for (int it = 0; it < iters; ++it) {
#ifndef CAFFEMEM_FORK
      for (int l = 0; l < net.layers().size(); ++l) {
        if (std::string(net.layers()[l]->type()) != "Input") { continue; }
        const std::vector<int>& tops = net.top_ids(l);
        for (int t = 0; t < tops.size(); ++t) {
          Fill(net.blobs()[tops[t]].get(), net.blob_names()[tops[t]], it);
        }
      }
#else  // the fork has no Input layer: nets declare `input:` fields
      for (int i = 0; i < net.input_blobs().size(); ++i) {
        Fill(net.input_blobs()[i], net.blob_names()[net.input_blob_indices()[i]], it);
      }
#endif
      float loss = 0;
      if (phase == caffe::TRAIN) {
#ifndef CAFFEMEM_FORK
        net.ClearParamDiffs();
        loss = net.ForwardBackward();
        const std::vector<Blob<float>*>& params = net.learnable_params();
#else  // the fork's Net has neither ClearParamDiffs nor learnable_params
        std::vector<Blob<float>*> params;
        for (int p = 0; p < net.params().size(); ++p) {
          if (net.param_owners()[p] < 0) { params.push_back(net.params()[p].get()); }
        }
        for (int p = 0; p < params.size(); ++p) {
          caffe::caffe_set(params[p]->count(), 0.f, params[p]->mutable_cpu_diff());
        }
        loss = net.ForwardBackward(std::vector<Blob<float>*>());
#endif
        for (int p = 0; p < params.size(); ++p) {
          caffe::caffe_scal(params[p]->count(), 0.01f,
              params[p]->mutable_cpu_diff());
          params[p]->Update();
        }
      } else {
#ifndef CAFFEMEM_FORK
        net.Forward(&loss);
#else
        net.ForwardPrefilled(&loss);
#endif
      }
      out << "iter " << it << " loss " << std::setprecision(9) << loss << "\n";
      for (int o = 0; o < net.num_outputs(); ++o) {
        const int id = net.output_blob_indices()[o];
        Dump(out, "output " + net.blob_names()[id], net.blobs()[id]->cpu_data(),
             net.blobs()[id]->count());
      }
    }
    const double seconds = timer.Seconds();
    printf("heap_peak %lld\nheap_final %lld\nseconds_per_iter %.6f\n",
           g_peak.load() - base, g_in_use.load() - base,
           iters > 0 ? seconds / iters : 0.0);
    // CAFFEMEM_HARNESS_RESHAPE=N: then reshape the Input tops to batch N and run
    // one more Forward (a reshape that outgrows the planned slots).
    const char* reshape = getenv("CAFFEMEM_HARNESS_RESHAPE");
#ifdef CAFFEMEM_FORK
    reshape = NULL;
#endif
#ifndef CAFFEMEM_FORK
    if (reshape && atoi(reshape) > 0) {
      for (int l = 0; l < net.layers().size(); ++l) {
        if (std::string(net.layers()[l]->type()) != "Input") { continue; }
        const std::vector<int>& tops = net.top_ids(l);
        for (int t = 0; t < tops.size(); ++t) {
          std::vector<int> shape = net.blobs()[tops[t]]->shape();
          shape[0] = atoi(reshape);
          net.blobs()[tops[t]]->Reshape(shape);
          Fill(net.blobs()[tops[t]].get(), net.blob_names()[tops[t]], iters);
        }
      }
      net.Reshape();
      float loss = 0;
      net.Forward(&loss);
      out << "reshaped " << reshape << " loss " << std::setprecision(9) << loss << "\n";
      for (int o = 0; o < net.num_outputs(); ++o) {
        const int id = net.output_blob_indices()[o];
        Dump(out, "output " + net.blob_names()[id], net.blobs()[id]->cpu_data(),
             net.blobs()[id]->count());
      }
    }
#endif
    const std::vector<std::string>& names = net.layer_names();
    for (int l = 0; l < net.layers().size(); ++l) {
      for (int j = 0; j < net.layers()[l]->blobs().size(); ++j) {
        Blob<float>* b = net.layers()[l]->blobs()[j].get();
        std::ostringstream name;
        name << names[l] << "#" << j;
        Dump(out, "param_data " + name.str(), b->cpu_data(), b->count());
        Dump(out, "param_diff " + name.str(), b->cpu_diff(), b->count());
      }
    }
  }
  std::ofstream(argv[4]) << out.str();
  return 0;
}
