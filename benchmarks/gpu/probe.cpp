// caffemem GPU ground truth: runs one net in BVLC Caffe's GPU mode and counts what it takes
// on the card and in pinned host memory, per layer and phase (benchmarks/gpu_groundtruth.py
// builds and drives it; docs/gpu.md).
//
//   probe --devices                   prints "devices N" (exit 3 and a reason when none)
//   probe NET PHASE OUT.json [DEVICE]  PHASE: train|test
//
// How it counts (../shared/caffe/GPU-MEMORY.md section 9, options a and b together):
// - Counting wrapper: this program defines cudaMalloc, cudaFree, cudaMallocHost,
//   cudaHostAlloc and cudaFreeHost; libcaffe.so's calls resolve to them (the executable comes
//   first in symbol lookup) and they call libcudart's through dlsym(RTLD_NEXT). That sees
//   every explicit allocation site of BVLC (SyncedMemory::to_gpu / async_gpu_push / to_cpu's
//   CaffeMallocHost, the cuDNN convolution, deconvolution and LCN workspaces, the caffemem
//   runtime's slots), each attributed to the calling function (dladdr on the return address),
//   but not what cuBLAS, cuDNN or cuRAND allocate inside themselves.
// - cudaMemGetInfo after cudaDeviceSynchronize around every step: the card's view, which also
//   holds library-internal memory, the lazily loaded kernels of the CUDA context, and the
//   driver's allocation granularity.
// The step: constructing the net (split per layer: Net::Init logs "Creating Layer X" and
// "Setting up X" before it constructs and sets up layer X; a glog LogSink follows those lines),
// filling the Input layers' tops on the host, then each layer's Forward in order and (TRAIN)
// each layer's Backward in reverse order, as ../shared/groundtruth was made on the CPU.
// - Handles and streams (issue 32, runtime patch v6's pool): this program also defines
//   cudnnCreate/cudnnDestroy and cudaStreamCreate(WithFlags)/cudaStreamDestroy, counting the
//   objects Caffe's code makes and destroys (cuDNN and cuBLAS link the CUDA runtime
//   statically: their own streams never come here); `end` gives those alive after the run, and
//   the CUDA stack limit the card then reports (cudaDeviceGetLimit: the patched runtime sets it
//   from CAFFEMEM_CUDA_STACK_BYTES), `process` the limit before the net.
// - Time (issue 33): with CAFFEMEM_PROBE_TIME_ITERS=N, after every figure and digest is
//   taken, the probe runs what an SGD iteration runs of the net, as the solver calls it
//   (src/caffe/solver.cpp Solver::Step: ClearParamDiffs, then Net::ForwardBackward, whose
//   Backward runs the patched runtime's recompute entries; not ApplyUpdate, which a plan does
//   not change), TIME_WARMUP times unmeasured, then N times, each timed between
//   cudaDeviceSynchronize calls: `timing` gives every iteration's seconds.
// The per-process constant is measured before the net exists: the CUDA context (cudaFree(0)),
// then Caffe's cuBLAS handle and cuRAND generator (the thread's Caffe object creates them on
// first use, src/caffe/common.cpp 107-123; cuBLAS may take more at its first GEMM, which then
// shows in that layer's meminfo_delta). Call sites are named by the nearest exported symbol:
// a function local to its file shows as the exported one before it.
#include <cuda_runtime.h>
#include <cxxabi.h>
#include <dlfcn.h>
#include <glog/logging.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "caffe/caffe.hpp"

namespace {

const int kNoGpu = 3;
// The kit's builds carry SASS for sm_90 and compute_90 PTX only (benchmarks/gpu/builds.py
// KIT_ARCH): an older card would fail at its first kernel, so it counts as no GPU.
const int kMinMajor = 9;

struct Stats {
  long long device_alloc = 0, device_freed = 0, device_calls = 0;
  long long host_alloc = 0, host_freed = 0, host_calls = 0;
  std::map<std::string, long long> device_sites, host_sites;
  long long meminfo_delta = 0;  // free before - free after (cudaMemGetInfo)
  long long device_in_use_after = 0, host_in_use_after = 0, device_used_after = 0;
  bool measured = false;
};

std::mutex g_mutex;
Stats* g_stats = NULL;     // the step running now (NULL: not counted per step)
long long g_cudnn_handles = 0, g_cuda_streams = 0;  // alive: made less destroyed

// One object made (+1) or destroyed (-1), when the call succeeded.
void Count(bool ok, long long* alive, int change) {
  if (!ok) { return; }
  std::lock_guard<std::mutex> lock(g_mutex);
  *alive += change;
}
long long g_device_in_use = 0, g_host_in_use = 0, g_device_peak = 0, g_host_peak = 0;
std::unordered_map<void*, std::pair<size_t, bool> > g_sizes;  // ptr -> (bytes, host?)

std::string Site(void* return_address) {
  Dl_info info;
  if (!dladdr(return_address, &info) || !info.dli_sname) { return "unknown"; }
  int status = 0;
  char* demangled = abi::__cxa_demangle(info.dli_sname, NULL, NULL, &status);
  std::string name = status == 0 && demangled ? demangled : info.dli_sname;
  free(demangled);
  const size_t paren = name.find('(');  // drop the argument list
  return paren == std::string::npos ? name : name.substr(0, paren);
}

void Allocated(void* ptr, size_t bytes, bool host, void* caller) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_sizes[ptr] = std::make_pair(bytes, host);
  long long& in_use = host ? g_host_in_use : g_device_in_use;
  long long& peak = host ? g_host_peak : g_device_peak;
  in_use += bytes;
  if (in_use > peak) { peak = in_use; }
  if (!g_stats) { return; }
  if (host) {
    g_stats->host_alloc += bytes;
    ++g_stats->host_calls;
    g_stats->host_sites[Site(caller)] += bytes;
  } else {
    g_stats->device_alloc += bytes;
    ++g_stats->device_calls;
    g_stats->device_sites[Site(caller)] += bytes;
  }
}

void Freed(void* ptr) {
  if (!ptr) { return; }
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_sizes.find(ptr);
  if (it == g_sizes.end()) { return; }
  const long long bytes = it->second.first;
  const bool host = it->second.second;
  (host ? g_host_in_use : g_device_in_use) -= bytes;
  if (g_stats) { (host ? g_stats->host_freed : g_stats->device_freed) += bytes; }
  g_sizes.erase(it);
}

template <typename F>
F Real(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (!f) {
    fprintf(stderr, "probe: %s not found in the libraries after the probe (%s)\n", name, dlerror());
    abort();
  }
  return reinterpret_cast<F>(f);
}

}  // namespace

// The counting wrapper (see the head of this file).
extern "C" {
cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  static auto real = Real<cudaError_t (*)(void**, size_t)>("cudaMalloc");
  cudaError_t e = real(ptr, bytes);
  if (e == cudaSuccess) { Allocated(*ptr, bytes, false, __builtin_return_address(0)); }
  return e;
}
cudaError_t cudaFree(void* ptr) {
  static auto real = Real<cudaError_t (*)(void*)>("cudaFree");
  Freed(ptr);
  return real(ptr);
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  static auto real = Real<cudaError_t (*)(void**, size_t)>("cudaMallocHost");
  cudaError_t e = real(ptr, bytes);
  if (e == cudaSuccess) { Allocated(*ptr, bytes, true, __builtin_return_address(0)); }
  return e;
}
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int flags) {
  static auto real =
      Real<cudaError_t (*)(void**, size_t, unsigned int)>("cudaHostAlloc");
  cudaError_t e = real(ptr, bytes, flags);
  if (e == cudaSuccess) { Allocated(*ptr, bytes, true, __builtin_return_address(0)); }
  return e;
}
cudaError_t cudaFreeHost(void* ptr) {
  static auto real = Real<cudaError_t (*)(void*)>("cudaFreeHost");
  Freed(ptr);
  return real(ptr);
}
cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  static auto real = Real<cudnnStatus_t (*)(cudnnHandle_t*)>("cudnnCreate");
  cudnnStatus_t s = real(handle);
  Count(s == CUDNN_STATUS_SUCCESS, &g_cudnn_handles, 1);
  return s;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  static auto real = Real<cudnnStatus_t (*)(cudnnHandle_t)>("cudnnDestroy");
  cudnnStatus_t s = real(handle);
  Count(s == CUDNN_STATUS_SUCCESS, &g_cudnn_handles, -1);
  return s;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  static auto real = Real<cudaError_t (*)(cudaStream_t*)>("cudaStreamCreate");
  cudaError_t e = real(stream);
  Count(e == cudaSuccess, &g_cuda_streams, 1);
  return e;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  static auto real = Real<cudaError_t (*)(cudaStream_t*, unsigned int)>("cudaStreamCreateWithFlags");
  cudaError_t e = real(stream, flags);
  Count(e == cudaSuccess, &g_cuda_streams, 1);
  return e;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  static auto real = Real<cudaError_t (*)(cudaStream_t)>("cudaStreamDestroy");
  cudaError_t e = real(stream);
  Count(e == cudaSuccess, &g_cuda_streams, -1);
  return e;
}
}  // extern "C"

namespace {

// The CUDA stack limit (bytes a thread) the card reports now.
long long StackLimit() {
  size_t bytes = 0;
  CUDA_CHECK(cudaDeviceGetLimit(&bytes, cudaLimitStackSize));
  return bytes;
}

// The value of an environment variable as JSON (null when unset).
std::string EnvJson(const char* name) {
  const char* value = getenv(name);
  if (!value) { return "null"; }
  std::string out = "\"";
  for (const char* c = value; *c; ++c) {
    if (*c == '"' || *c == '\\') { out += '\\'; }
    if (static_cast<unsigned char>(*c) >= 0x20) { out += *c; }
  }
  return out + "\"";
}

}  // namespace

namespace {

long long FreeBytes(long long* total = NULL) {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (total) { *total = total_bytes; }
  return free_bytes;
}

// One measured step: counters and cudaMemGetInfo around f().
template <typename F>
void Step(Stats* stats, F f) {
  const long long before = FreeBytes();
  { std::lock_guard<std::mutex> lock(g_mutex); g_stats = stats; }
  f();
  const long long total_free = FreeBytes();
  std::lock_guard<std::mutex> lock(g_mutex);
  g_stats = NULL;
  stats->meminfo_delta += before - total_free;
  stats->device_in_use_after = g_device_in_use;
  stats->host_in_use_after = g_host_in_use;
  stats->measured = true;
}

// Net::Init's "Creating Layer X" / "Setting up X" lines (net.cpp 88, 126) switch the
// construction step to layer X; the lines Net::Init logs after its layer loop (backward
// analysis, outputs; net.cpp 201-246) switch it back to `rest`, which thus also gets what the
// caffemem runtime binds at the end of Net::Init (its slots).
class SetupSink : public google::LogSink {
 public:
  explicit SetupSink(Stats* rest) : rest_(rest) {}
  std::map<std::string, Stats> setup;
  void send(google::LogSeverity, const char*, const char*, int,
            const google::LogMessageTime&, const char* message, size_t size) override {
    const std::string text(message, size);
    for (const char* prefix : {"Creating Layer ", "Setting up "}) {
      if (text.compare(0, strlen(prefix), prefix) == 0) {
        std::lock_guard<std::mutex> lock(g_mutex);
        g_stats = &setup[text.substr(strlen(prefix))];
        return;
      }
    }
    for (const char* part : {"need backward computation", "needs backward computation",
                             "This network produces output", "Network initialization done",
                             "Collecting Learning Rate"}) {
      if (text.find(part) != std::string::npos) {
        std::lock_guard<std::mutex> lock(g_mutex);
        if (g_stats) { g_stats = rest_; }
        return;
      }
    }
  }

 private:
  Stats* rest_;
};

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') { out += '\\'; }
    if (static_cast<unsigned char>(c) < 0x20) { out += ' '; continue; }
    out += c;
  }
  return out + "\"";
}

std::string Json(const Stats& s) {
  std::ostringstream o;
  o << "{\"device_alloc\": " << s.device_alloc << ", \"device_freed\": " << s.device_freed
    << ", \"device_calls\": " << s.device_calls << ", \"host_alloc\": " << s.host_alloc
    << ", \"host_freed\": " << s.host_freed << ", \"host_calls\": " << s.host_calls
    << ", \"meminfo_delta\": " << s.meminfo_delta
    << ", \"device_in_use_after\": " << s.device_in_use_after
    << ", \"host_in_use_after\": " << s.host_in_use_after;
  for (int host = 0; host < 2; ++host) {
    o << (host ? ", \"host_sites\": {" : ", \"device_sites\": {");
    const std::map<std::string, long long>& sites = host ? s.host_sites : s.device_sites;
    int n = 0;
    for (const auto& site : sites) {
      o << (n++ ? ", " : "") << Quote(site.first) << ": " << site.second;
    }
    o << "}";
  }
  o << "}";
  return o.str();
}

// Deterministic inputs: tops named like labels get 0, the rest small values.
void FillInputs(caffe::Net<float>* net) {
  for (int i = 0; i < net->layers().size(); ++i) {
    if (std::string(net->layers()[i]->type()) != "Input") { continue; }
    for (int t = 0; t < net->top_vecs()[i].size(); ++t) {
      const std::string& name = net->blob_names()[net->top_ids(i)[t]];
      const bool label = name.find("label") != std::string::npos;
      caffe::Blob<float>* top = net->top_vecs()[i][t];
      float* data = top->mutable_cpu_data();
      for (int k = 0; k < top->count(); ++k) {
        data[k] = label ? 0.f : 0.01f * ((k * 7919) % 101 - 50);
      }
    }
  }
}

// FNV-1a over the bytes of `count` floats: equal digests mean bit-identical values.
void Digest(const float* values, int count, unsigned long long* hash) {
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(values);
  for (size_t k = 0; k < sizeof(float) * count; ++k) {
    *hash = (*hash ^ bytes[k]) * 1099511628211ULL;
  }
}

// What the run computed, for comparing stock with a plan (after every figure is taken: the
// host copies this makes are not counted): each net output's data, and in TRAIN every
// learnable parameter's gradient, as one digest each and one over all.
std::string Results(caffe::Net<float>* net, bool train) {
  std::ostringstream o;
  unsigned long long all = 1469598103934665603ULL;
  o << "{\"outputs\": {";
  for (int i = 0; i < net->output_blobs().size(); ++i) {
    caffe::Blob<float>* blob = net->output_blobs()[i];
    unsigned long long hash = 1469598103934665603ULL;
    Digest(blob->cpu_data(), blob->count(), &hash);
    Digest(blob->cpu_data(), blob->count(), &all);
    o << (i ? ", " : "") << Quote(net->blob_names()[net->output_blob_indices()[i]]) << ": \""
      << std::hex << hash << std::dec << "\"";
  }
  o << "}";
  if (train) {
    unsigned long long grads = 1469598103934665603ULL;
    for (int j = 0; j < net->learnable_params().size(); ++j) {
      caffe::Blob<float>* param = net->learnable_params()[j];
      Digest(param->cpu_diff(), param->count(), &grads);
    }
    Digest(reinterpret_cast<const float*>(&grads), 2, &all);
    o << ", \"param_diffs\": \"" << std::hex << grads << std::dec << "\"";
  }
  o << ", \"all\": \"" << std::hex << all << std::dec << "\"}";
  return o.str();
}

const int kTimeWarmup = 3;  // iterations run before the timed ones (cuDNN's and cuBLAS's first calls)

// Seconds of each of `iterations` SGD iterations of the net, less the update (see above).
std::vector<double> TimeIterations(caffe::Net<float>* net, int iterations) {
  std::vector<double> seconds;
  for (int i = 0; i < kTimeWarmup + iterations; ++i) {
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    net->ClearParamDiffs();
    net->ForwardBackward();
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (i >= kTimeWarmup) { seconds.push_back(took.count()); }
  }
  return seconds;
}

std::string TimingJson(int iterations, const std::vector<double>& seconds) {
  std::ostringstream o;
  o.precision(9);
  o << "{\"iterations\": " << iterations << ", \"warmup\": " << kTimeWarmup
    << ", \"call\": \"ClearParamDiffs + Net::ForwardBackward\", \"seconds\": [";
  for (size_t i = 0; i < seconds.size(); ++i) { o << (i ? ", " : "") << seconds[i]; }
  o << "]}";
  return o.str();
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    printf("devices 0\n");
    fprintf(stderr, "probe: no CUDA device (%s); run on a machine with an NVIDIA GPU and a "
        "driver for CUDA 13 (>= 580)\n", e == cudaSuccess ? "none found" :
        cudaGetErrorString(e));
    return kNoGpu;
  }
  int usable = 0;
  std::ostringstream older;
  for (int d = 0; d < devices; ++d) {
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, d));
    if (prop.major >= kMinMajor) {
      ++usable;
    } else {
      older << (older.tellp() > 0 ? ", " : "") << d << ": " << prop.name << " " << prop.major << "." << prop.minor;
    }
  }
  if (usable == 0) {
    printf("devices 0\n");
    fprintf(stderr, "probe: no CUDA device of compute capability %d.0 or newer (%s); the kit's "
        "Caffe is built for sm_90 (benchmarks/gpu/builds.py KIT_ARCH): build it with "
        "CUDA_ARCH for this card\n", kMinMajor, older.str().c_str());
    return kNoGpu;
  }
  if (argc == 2 && std::string(argv[1]) == "--devices") {
    printf("devices %d\n", usable);
    return 0;
  }
  if (argc < 4 || argc > 5) {
    fprintf(stderr, "usage: probe --devices | probe NET train|test OUT.json [DEVICE]\n");
    return 2;
  }
  const std::string net_path = argv[1], phase_name = argv[2], out_path = argv[3];
  const int device = argc == 5 ? atoi(argv[4]) : 0;
  const caffe::Phase phase = phase_name == "train" ? caffe::TRAIN : caffe::TEST;

  // The per-process constant: context, then Caffe's handles.
  long long total = 0;
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaFree(0));
  const long long free_context = FreeBytes(&total);
  caffe::Caffe::SetDevice(device);
  caffe::Caffe::set_mode(caffe::Caffe::GPU);
  // Fixed fillers and Dropout masks, so that stock Caffe and a plan compute the same values.
  caffe::Caffe::set_random_seed(1701);
  const long long free_handles = FreeBytes();
  const long long stack_before_net = StackLimit();
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);

  Stats construct;  // counters: outside the layers; meminfo_delta: the whole construction
  SetupSink sink(&construct);
  google::AddLogSink(&sink);
  caffe::shared_ptr<caffe::Net<float> > net;
  Step(&construct, [&] { net.reset(new caffe::Net<float>(net_path, phase)); });
  google::RemoveLogSink(&sink);
  Stats fill;
  Step(&fill, [&] { FillInputs(net.get()); });

  const int n = net->layers().size();
  std::vector<Stats> forward(n), backward(n);
  for (int i = 0; i < n; ++i) {
    Step(&forward[i], [&] { net->ForwardFromTo(i, i); });
  }
  if (phase == caffe::TRAIN) {
    for (int i = n - 1; i >= 0; --i) {
      if (!net->layer_need_backward()[i]) { continue; }
      Step(&backward[i], [&] { net->BackwardFromTo(i, i); });
    }
  }
  const long long free_end = FreeBytes();
  long long cudnn_handles = 0, cuda_streams = 0;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    cudnn_handles = g_cudnn_handles;
    cuda_streams = g_cuda_streams;
  }

  std::ofstream out(out_path.c_str());
  out << "{\"device\": {\"name\": " << Quote(prop.name) << ", \"index\": " << device
      << ", \"compute_capability\": \"" << prop.major << "." << prop.minor << "\""
      << ", \"total_bytes\": " << total << ", \"cuda_runtime\": " << runtime
      << ", \"cuda_driver\": " << driver << "},\n"
      << " \"process\": {\"device_used_after_context\": " << total - free_context
      << ", \"handles_bytes\": " << free_context - free_handles
      << ", \"device_used_before_net\": " << total - free_handles
      << ", \"stack_limit_bytes\": " << stack_before_net
      << ", \"env\": {\"CAFFEMEM_CUDNN_POOL\": " << EnvJson("CAFFEMEM_CUDNN_POOL")
      << ", \"CAFFEMEM_CUDA_STACK_BYTES\": " << EnvJson("CAFFEMEM_CUDA_STACK_BYTES") << "}},\n"
      << " \"phase\": \"" << (phase == caffe::TRAIN ? "TRAIN" : "TEST") << "\",\n"
      << " \"construct\": " << Json(construct) << ",\n"
      << " \"fill_inputs\": " << Json(fill) << ",\n"
      << " \"layers\": [\n";
  for (int i = 0; i < n; ++i) {
    const std::string& name = net->layer_names()[i];
    out << "  {\"name\": " << Quote(name) << ", \"type\": " << Quote(net->layers()[i]->type())
        << ",\n   \"setup\": " << Json(sink.setup[name])
        << ",\n   \"forward\": " << Json(forward[i]);
    if (backward[i].measured) { out << ",\n   \"backward\": " << Json(backward[i]); }
    out << "}" << (i + 1 < n ? "," : "") << "\n";
  }
  const long long device_in_use = g_device_in_use, host_in_use = g_host_in_use;
  const long long device_peak = g_device_peak, host_peak = g_host_peak;
  const long long stack_limit_end = StackLimit();
  const std::string results = Results(net.get(), phase == caffe::TRAIN);
  // Timed last: the iterations change the gradients and may allocate (none of it counted).
  const char* time_iters = getenv("CAFFEMEM_PROBE_TIME_ITERS");
  const int iterations = time_iters ? atoi(time_iters) : 0;
  std::string timing;
  if (iterations > 0 && phase == caffe::TRAIN) {
    timing = TimingJson(iterations, TimeIterations(net.get(), iterations));
  }
  out << " ],\n \"end\": {\"device_in_use\": " << device_in_use << ", \"host_in_use\": "
      << host_in_use << ", \"device_peak\": " << device_peak << ", \"host_peak\": "
      << host_peak << ", \"device_used\": " << total - free_end
      << ", \"cudnn_handles\": " << cudnn_handles << ", \"cuda_streams\": " << cuda_streams
      << ", \"stack_limit_bytes\": " << stack_limit_end << "},\n";
  if (!timing.empty()) { out << " \"timing\": " << timing << ",\n"; }
  out << " \"results\": " << results << "}\n";
  out.close();
  if (!out) {
    fprintf(stderr, "probe: cannot write %s\n", out_path.c_str());
    return 1;
  }
  return 0;
}
