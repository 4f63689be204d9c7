// caffemem runtime patch v6: added by `caffemem patch` (caffemem/runtime/cpp).
// Binds the storages named in NetParameter.mem_param's slot table to shared
// buffers; see include/caffe/util/mem_slots.hpp.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "caffe/common.hpp"
#include "caffe/layer.hpp"
#include "caffe/net.hpp"
#include "caffe/util/math_functions.hpp"
#include "caffe/util/mem_slots.hpp"
#include "caffe/util/planned_workspace.hpp"

namespace caffe {

namespace {

const char kRerun[] = "; rerun `caffemem optimize` on this net (with the input "
    "shapes and phase you run it with) to write a new table";

string PhaseName(Phase phase) { return phase == TRAIN ? "TRAIN" : "TEST"; }

// SyncedMemory::set_gpu_data exists in BVLC master, not in the yjxiong fork:
// GPU binding is compiled only where it exists.
template <typename M>
struct HasSetGpuData {
  template <typename T> static char Test(decltype(&T::set_gpu_data));
  template <typename T> static int Test(...);
  static const bool value = sizeof(Test<M>(0)) == 1;
};
template <typename M>
auto SetGpuData(M* memory, void* data, int)
    -> decltype(memory->set_gpu_data(data), void()) {
  memory->set_gpu_data(data);
}
template <typename M>
void SetGpuData(M* memory, void* data, ...) {
  LOG(FATAL) << "mem_param: this Caffe cannot bind GPU memory";
}

#ifndef CPU_ONLY
// One cudaMalloc per slot on the current device; when it fails, say what the
// plan needs against what the card has, and what to do.
void* DeviceSlot(const MemorySlot& slot, size_t planned, size_t done,
    const string& where) {
  void* base = NULL;
  const cudaError_t error = cudaMalloc(&base, slot.bytes());
  if (error == cudaSuccess) { return base; }
  cudaGetLastError();  // clear it, so the next CUDA call does not report it
  int device = -1;
  size_t free_bytes = 0, total_bytes = 0;
  cudaGetDevice(&device);
  cudaMemGetInfo(&free_bytes, &total_bytes);
  LOG(FATAL) << "mem_param slot " << slot.id() << " of " << where
      << ": cudaMalloc of " << slot.bytes() << " bytes on GPU " << device
      << " failed (" << cudaGetErrorString(error) << "); the slot table "
      << "needs " << planned << " bytes in all (" << done << " allocated so "
      << "far), the card has " << free_bytes << " of " << total_bytes
      << " bytes free. Use a smaller batch or a card with more memory and "
      << "rerun `caffemem optimize` for it, or free the GPU of other "
      << "processes (nvidia-smi)";
  return NULL;
}
#endif

// Is `name` "<i>:<layer i's name>/cudnn_workspace", a cuDNN (de)convolution's
// workspace (util/planned_workspace.hpp), of a layer this net has?
template <typename Dtype>
bool IsWorkspaceOf(const string& name, const Net<Dtype>& net) {
  const string suffix = string("/") + PlannedWorkspace::Name();
  const size_t colon = name.find(':');
  if (colon == string::npos || colon == 0 ||
      name.find_first_not_of("0123456789") != colon ||
      name.size() <= suffix.size() + colon ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const int i = atoi(name.substr(0, colon).c_str());
  const string layer = name.substr(colon + 1,
      name.size() - suffix.size() - colon - 1);
  return i >= 0 && i < net.layer_names().size() && net.layer_names()[i] ==
      layer;
}

}  // namespace

std::set<string> PlannedBuffers(const NetParameter& param, Phase phase,
    int layer_id, const string& layer_name) {
  std::set<string> names;
  std::ostringstream prefix;
  prefix << layer_id << ":" << layer_name << "/";
  const string p = prefix.str();
  const MemoryOptimizationParameter& mem = param.mem_param();
  for (int s = 0; s < mem.slot_size(); ++s) {
    if (mem.slot(s).phase() != phase) { continue; }
    for (int m = 0; m < mem.slot(s).member_size(); ++m) {
      const string& blob = mem.slot(s).member(m).blob();
      if (blob.compare(0, p.size(), p) == 0) {
        names.insert(blob.substr(p.size()));
      }
    }
  }
  return names;
}

template <typename Dtype>
shared_ptr<MemorySlots<Dtype> > MemorySlots<Dtype>::Bind(
    const NetParameter& param, Net<Dtype>* net) {
  shared_ptr<MemorySlots<Dtype> > none;
  if (!param.has_mem_param()) { return none; }
  const MemoryOptimizationParameter& mem = param.mem_param();
  vector<const MemorySlot*> slots;
  for (int s = 0; s < mem.slot_size(); ++s) {
    if (mem.slot(s).phase() == net->phase()) { slots.push_back(&mem.slot(s)); }
  }
  if (slots.empty()) { return none; }
  const string where = "net " + net->name() + " (phase " +
      PhaseName(net->phase()) + ")";

  // Every storage the table may name: blobs, layers' buffers, parameters.
  std::map<string, LayerBuffers::Buffer> named;
  {
    LayerBuffers blobs("");
    for (int i = 0; i < net->blobs().size(); ++i) {
      blobs.Add(net->blob_names()[i], net->blobs()[i].get());
    }
    for (int i = 0; i < net->layers().size(); ++i) {
      std::ostringstream prefix;
      prefix << i << ":" << net->layer_names()[i];
      LayerBuffers buffers(prefix.str() + "/");
      net->layers()[i]->NamedBuffers(&buffers);
      named.insert(buffers.buffers().begin(), buffers.buffers().end());
      const vector<shared_ptr<Blob<Dtype> > >& params =
          net->layers()[i]->blobs();
      for (int j = 0; j < params.size(); ++j) {
        std::ostringstream name;
        name << prefix.str() << "#" << j;
        blobs.Add(name.str(), params[j].get());
      }
    }
    named.insert(blobs.buffers().begin(), blobs.buffers().end());
  }

  // 1. Check the whole table before changing anything.
  struct Place { const MemorySlot* slot; size_t offset; string name; };
  std::map<SyncedMemory*, Place> placed;
  std::set<string> seen;
  shared_ptr<MemorySlots<Dtype> > bound(new MemorySlots<Dtype>());
  int skipped = 0;
  for (int s = 0; s < slots.size(); ++s) {
    const MemorySlot& slot = *slots[s];
    size_t end = 0;
    bool partial = false;  // a workspace skipped: the slot may be larger
    for (int m = 0; m < slot.member_size(); ++m) {
      const MemorySlotMember& member = slot.member(m);
      const string name = member.blob() + " (" + member.kind() + ")";
      CHECK(member.kind() == "data" || member.kind() == "diff")
          << "mem_param slot " << slot.id() << ": member " << member.blob()
          << " has kind \"" << member.kind() << "\"; expected \"data\" or "
          << "\"diff\"" << kRerun;
      CHECK(seen.insert(name).second) << "mem_param slot " << slot.id()
          << ": " << name << " is listed twice in the slot table" << kRerun;
      typename std::map<string, LayerBuffers::Buffer>::const_iterator it =
          named.find(member.blob());
      if (it == named.end() && IsWorkspaceOf(member.blob(), *net)) {
        // Planned for cuDNN, run by Caffe's own convolution (a build without
        // cuDNN): it takes no workspace, so there is nothing to bind.
        ++skipped;
        partial = true;
        continue;
      }
      if (it == named.end()) {
        LOG(FATAL) << "blob " << member.blob() << " of mem_param slot "
            << slot.id() << " is not a blob" << (member.blob().find(':') ==
            string::npos ? "" : " or layer buffer this Caffe can bind")
            << " of " << where << ": the net does not match the slot table "
            << "(edited after `caffemem optimize`?)" << kRerun;
      }
      const bool diff = member.kind() == "diff";
      shared_ptr<SyncedMemory> memory = it->second.memory(diff);
      CHECK(memory) << "blob " << member.blob() << " of " << where
          << " is empty, but mem_param slot " << slot.id() << " plans its "
          << member.kind() << kRerun;
      const size_t size = memory->size();
      CHECK_LE(member.offset() + size, slot.bytes()) << "blob "
          << member.blob() << " of " << where << " does not match the slot "
          << "table: its " << member.kind() << " (" << size << " bytes at "
          << "offset " << member.offset() << ") does not fit in slot "
          << slot.id() << " (" << slot.bytes() << " bytes); the table was "
          << "planned for other shapes (another batch size?)" << kRerun;
      end = std::max(end, static_cast<size_t>(member.offset() + size));
      Place place = { &slot, static_cast<size_t>(member.offset()), name };
      std::pair<typename std::map<SyncedMemory*, Place>::iterator, bool> at =
          placed.insert(std::make_pair(memory.get(), place));
      if (!at.second) {
        CHECK(at.first->second.slot == &slot &&
              at.first->second.offset == member.offset())
            << name << " and " << at.first->second.name << " are one "
            << "storage in " << where << " but the slot table puts them in "
            << "different places" << kRerun;
      }
      Binding binding = { name, it->second, diff, memory.get(), s,
          static_cast<size_t>(member.offset()) };
      bound->bindings_.push_back(binding);
    }
    if (partial) { end = std::max(end, static_cast<size_t>(slot.bytes())); }
    CHECK_EQ(end, slot.bytes()) << "mem_param slot " << slot.id() << " has "
        << slot.bytes() << " bytes but the storages of " << where
        << " it holds need " << end << ": the table was planned for other "
        << "shapes (another batch size?) or another net" << kRerun;
  }

  // 2. Allocate the slots and bind their members.
  bound->gpu_ = Caffe::mode() == Caffe::GPU;
  size_t planned = 0;
  for (int s = 0; s < slots.size(); ++s) { planned += slots[s]->bytes(); }
  CHECK(!bound->gpu_ || HasSetGpuData<SyncedMemory>::value)
      << "mem_param slot tables run in CPU mode only in this Caffe (its "
      << "SyncedMemory has no set_gpu_data); run in CPU mode, or remove the "
      << "slot table (caffemem optimize --target fork) to use the fork's own "
      << "optimizer";
  std::set<SyncedMemory*> done;
  int b = 0;
  for (int s = 0; s < slots.size(); ++s) {
    const MemorySlot& slot = *slots[s];
    void* base = NULL;
    if (bound->gpu_) {
#ifndef CPU_ONLY
      base = DeviceSlot(slot, planned, bound->bytes_, where);
      caffe_gpu_memset(slot.bytes(), 0, base);
#else
      NO_GPU;
#endif
    } else {
      base = malloc(slot.bytes());
      CHECK(base || slot.bytes() == 0) << "mem_param slot " << slot.id()
          << ": cannot allocate " << slot.bytes() << " bytes";
      caffe_memset(slot.bytes(), 0, base);
    }
    bound->slots_.push_back(base);
    bound->bytes_ += slot.bytes();
    // Members that already hold values are copied in; two of them must not
    // overlap (their values would clobber each other).
    vector<std::pair<std::pair<size_t, size_t>, string> > held;
    for (; b < bound->bindings_.size() && bound->bindings_[b].slot == s;
         ++b) {
      SyncedMemory* memory = bound->bindings_[b].bound;
      if (!done.insert(memory).second) { continue; }
      const size_t offset = bound->bindings_[b].offset, size = memory->size();
      char* at = static_cast<char*>(base) + offset;
      if (memory->head() != SyncedMemory::UNINITIALIZED) {
        for (int h = 0; h < held.size(); ++h) {
          CHECK(offset + size <= held[h].first.first ||
                held[h].first.second <= offset)
              << bound->bindings_[b].name << " and " << held[h].second
              << " both hold values after SetUp of " << where << " and "
              << "overlap in mem_param slot " << slot.id() << kRerun;
        }
        held.push_back(std::make_pair(std::make_pair(offset, offset + size),
            bound->bindings_[b].name));
        if (bound->gpu_) {
#ifndef CPU_ONLY
          // From where the values are: a storage whose head is on the host
          // (parameters filled in SetUp, loss weights) is copied from there,
          // so no device copy of it is made just to be freed again.
          caffe_gpu_memcpy(size, memory->head() == SyncedMemory::HEAD_AT_CPU ?
              memory->cpu_data() : memory->gpu_data(), at);
#endif
        } else {
          memcpy(at, memory->cpu_data(), size);  // NOLINT(caffe/alt_fn): bytes
        }
      }
      if (bound->gpu_) {
        SetGpuData(memory, at, 0);
      } else {
        memory->set_cpu_data(at);
      }
    }
  }
  LOG(INFO) << "mem_param: " << bound->bindings_.size()
      << " storages of " << where << " bound to " << slots.size()
      << " slots, " << bound->bytes_ << " bytes";
  LOG_IF(INFO, skipped > 0) << "mem_param: " << skipped << " cuDNN "
      << "workspace(s) of the slot table are not in " << where << " (its "
      << "convolutions are Caffe's own, which take none); nothing to bind";
  return bound;
}

template <typename Dtype>
void MemorySlots<Dtype>::CheckBindings() {
  if (!mode_warned_ && (Caffe::mode() == Caffe::GPU) != gpu_) {
    mode_warned_ = true;
    LOG(WARNING) << "mem_param: the slot table was bound in "
        << (gpu_ ? "GPU" : "CPU") << " mode, but the net now runs in "
        << (gpu_ ? "CPU" : "GPU") << " mode: its " << (gpu_ ? "host" : "device")
        << " memory is not shared (each storage gets its own, as in stock "
        << "Caffe). Set the mode before constructing the net (C++: "
        << "Caffe::set_mode; pycaffe: caffe.set_mode_gpu() before caffe.Net)";
  }
  string left;
  int n = 0;
  for (int b = 0; b < bindings_.size(); ++b) {
    Binding& binding = bindings_[b];
    if (!binding.bound) { continue; }
    shared_ptr<SyncedMemory> now = binding.storage.memory(binding.diff);
    if (now.get() != binding.bound) {
      left += (n++ ? ", " : "") + binding.name;
      binding.bound = NULL;
    }
  }
  LOG_IF(WARNING, n > 0) << "mem_param: " << n << " storage(s) outgrew their "
      << "slots after a Reshape and now have memory of their own (as in stock "
      << "Caffe; more memory than planned): " << left << ". Rerun `caffemem "
      << "optimize` with the new input shapes to plan them again";
}

template <typename Dtype>
MemorySlots<Dtype>::~MemorySlots() { Free(); }

template <typename Dtype>
void MemorySlots<Dtype>::Free() {
  for (int s = 0; s < slots_.size(); ++s) {
    if (gpu_) {
#ifndef CPU_ONLY
      if (slots_[s]) { CUDA_CHECK(cudaFree(slots_[s])); }
#endif
    } else {
      free(slots_[s]);
    }
  }
  slots_.clear();
}

INSTANTIATE_CLASS(MemorySlots);

}  // namespace caffe
