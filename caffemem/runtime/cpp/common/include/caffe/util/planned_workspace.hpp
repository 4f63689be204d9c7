// caffemem runtime patch v6: added by `caffemem patch` (caffemem/runtime/cpp).
#ifndef CAFFE_UTIL_PLANNED_WORKSPACE_HPP_
#define CAFFE_UTIL_PLANNED_WORKSPACE_HPP_

#include <set>
#include <string>

#include "caffe/common.hpp"
#include "caffe/syncedmem.hpp"
#include "caffe/util/layer_buffers.hpp"

namespace caffe {

/**
 * @brief The workspace of a cuDNN (de)convolution (CuDNNConvolutionLayer,
 *        CuDNNDeconvolutionLayer) as a layer buffer that mem_param's slot
 *        table can plan: "<layer index>:<layer name>/cudnn_workspace".
 *
 * Stock Caffe cudaMallocs one workspace per layer in Reshape: a block of the
 * largest need of the layer's algorithms (each chosen within 8 MiB) for each
 * group and stream (CUDNN_STREAMS_PER_GROUP = 3), so a net holds their sum.
 * Only the layer's Forward_gpu or Backward_gpu uses it, and each of those
 * ends with an empty kernel on the legacy default stream
 * (sync_conv_groups<<<1, 1>>>), which waits for the layer's blocking streams
 * and which all later work waits for: two layers' workspaces are never in use
 * at once, so one slot can hold them all (`caffemem optimize
 * --share-buffers`), as NVIDIA/caffe's one per-device workspace does.
 *
 * Planned (the table for the net's phase names it: Net::Init says so before
 * SetUp, Layer::set_planned_buffers), the workspace is a SyncedMemory of the
 * bytes the plan reserved, BVLC's bound: kLimitPerBlock per group and stream.
 * Nothing is allocated in SetUp; MemorySlots binds the slot to it at the end
 * of Net::Init, and every Reshape (Layer::Forward runs one first) asks cuDNN
 * only for algorithms whose workspace fits one block of it and points the
 * layer's per-stream workspaces into the slot. The bytes the plan shows are
 * the bytes the card holds.
 *
 * Not planned (no mem_param, a table without it, another phase), the layer
 * runs exactly as stock Caffe: its own cudaMalloc within BVLC's limit.
 */
class PlannedWorkspace {
 public:
  /// BVLC's workspace_limit_bytes: what one algorithm may take per block.
  static const size_t kLimitPerBlock = 8 * 1024 * 1024;

  PlannedWorkspace() : blocks_(1) {}

  /// LayerSetUp: `blocks` is group * CUDNN_STREAMS_PER_GROUP.
  void SetUp(const std::set<string>& planned, int blocks,
      const string& layer) {
    blocks_ = blocks;
    layer_ = layer;
    if (planned.count(Name())) {
      memory_.reset(new SyncedMemory(kLimitPerBlock * blocks));
    }
  }
  bool planned() const { return memory_.get() != NULL; }
  /// Reshape: the limit of each algorithm query (`stock` when not planned).
  size_t limit(size_t stock) const {
    return planned() ? memory_->size() / blocks_ : stock;
  }
  /**
   * Reshape, once the algorithms are chosen: points workspace[0, blocks) at
   * the slot, `block` bytes apart. Before the slot is bound (the Reshape of
   * SetUp, in Net::Init) and in CPU mode (the CPU code takes no workspace)
   * there is nothing to point at.
   */
  void Point(size_t block, void** workspace) {
    const size_t reserved = memory_->size() / blocks_;
    CHECK(block <= reserved) << "layer " << layer_ << ": cuDNN chose "
        << "algorithms needing " << block << " bytes of workspace per group "
        << "and stream, more than the " << reserved << " bytes mem_param's "
        << "slot table reserved (it was asked for algorithms within them); "
        << "plan the net without --share-buffers (its cuDNN workspaces then "
        << "stay the layers' own) and report this cuDNN version";
    if (memory_->head() == SyncedMemory::UNINITIALIZED ||
        Caffe::mode() != Caffe::GPU) {
      return;
    }
    char* base = static_cast<char*>(memory_->mutable_gpu_data());
    for (int b = 0; b < blocks_; ++b) { workspace[b] = base + b * block; }
  }
  /// Layer::NamedBuffers: the storage the slot table binds (none unplanned).
  void Add(LayerBuffers* buffers) { buffers->AddMemory(Name(), &memory_); }
  static const char* Name() { return "cudnn_workspace"; }

 private:
  shared_ptr<SyncedMemory> memory_;  // NULL unless planned
  int blocks_;
  string layer_;
};

}  // namespace caffe

#endif  // CAFFE_UTIL_PLANNED_WORKSPACE_HPP_
