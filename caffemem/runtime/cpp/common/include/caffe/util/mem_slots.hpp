// caffemem runtime patch v6: added by `caffemem patch` (caffemem/runtime/cpp).
#ifndef CAFFE_UTIL_MEM_SLOTS_HPP_
#define CAFFE_UTIL_MEM_SLOTS_HPP_

#include <set>
#include <string>
#include <vector>

#include "caffe/common.hpp"
#include "caffe/proto/caffe.pb.h"
#include "caffe/syncedmem.hpp"
#include "caffe/util/layer_buffers.hpp"

namespace caffe {

template <typename Dtype> class Net;

/**
 * @brief The buffers of layer `layer_id` (named `layer_name`) that the slot
 *        table of `param` for `phase` binds, by their NamedBuffers names
 *        ("cudnn_workspace"). Net::Init gives them to each layer before its
 *        SetUp (Layer::set_planned_buffers), so that a layer that allocates a
 *        buffer itself (a cuDNN workspace) leaves it to the slot instead.
 */
std::set<string> PlannedBuffers(const NetParameter& param, Phase phase,
    int layer_id, const string& layer_name);

/**
 * @brief Runs a net in the memory `caffemem optimize` planned for it: the slot
 *        table of NetParameter.mem_param (messages MemorySlot, MemorySlotMember
 *        in caffe.proto).
 *
 * At the end of Net::Init, Bind() looks at the slots whose phase is the net's.
 * None: nothing happens, the net runs exactly as stock Caffe. Otherwise it
 *   1. checks the whole table against the net before touching anything: every
 *      member names a blob ("conv1"), a layer's buffer ("3:conv2/col_buffer")
 *      or a parameter ("1:conv1#0") of this net, its storage ("data"/"diff")
 *      (a cuDNN workspace the net has not, its convolution being Caffe's own
 *      in a build without cuDNN, needs nothing and is skipped)
 *      exists and fits in its slot at its offset, and each slot is exactly as
 *      large as its members need (a table planned for other shapes, e.g.
 *      another batch size, fails here). Any mismatch is a LOG(FATAL) naming the
 *      member and asking to rerun `caffemem optimize`;
 *   2. allocates one buffer per slot (zero-filled, like SyncedMemory does) and
 *      points each member's SyncedMemory at slot base + offset
 *      (SyncedMemory::set_cpu_data, or set_gpu_data in GPU mode). Storages that
 *      already hold values (parameters, loss weights, multipliers written in
 *      SetUp) are copied into the slot first; their old memory is freed.
 *
 * GPU mode is Caffe::mode() of the thread that constructs the net: then each
 * slot is one cudaMalloc on the current device (a failure names the slot, the
 * bytes the table needs and the card's free memory), and the members' device
 * copies live in it. Host copies that CPU code makes of a member later (layers
 * without GPU code, loss outputs) stay private, as in stock Caffe. A net bound
 * in one mode and run in the other works, unshared; CheckBindings says so once.
 *
 * A later Reshape that outgrows a member's storage never writes past the slot:
 * Blob::Reshape then gives the blob a fresh SyncedMemory of its own, exactly as
 * stock Caffe does. CheckBindings() (after every Forward) notices it and logs
 * one LOG(WARNING) naming those storages; the other members keep their slots.
 * (Chosen over LOG(FATAL): a net may legitimately be reshaped, e.g. pycaffe's
 * net.blobs['data'].reshape(); the run stays correct, only the saving shrinks.)
 */
template <typename Dtype>
class MemorySlots {
 public:
  /// NULL when param has no slot for net's phase.
  static shared_ptr<MemorySlots<Dtype> > Bind(const NetParameter& param,
      Net<Dtype>* net);
  ~MemorySlots();
  /// One LOG(WARNING) naming the bound storages that left their slots since
  /// (and one, once, if the net runs in the other mode than it was bound in).
  void CheckBindings();
  /// Bytes of all slots.
  size_t bytes() const { return bytes_; }

 private:
  struct Binding {
    string name;        // "conv1 (data)"
    LayerBuffers::Buffer storage;
    bool diff;
    SyncedMemory* bound;
    int slot;           // index into the phase's slots
    size_t offset;      // in the slot, bytes
  };
  MemorySlots() : bytes_(0), gpu_(false), mode_warned_(false) {}
  void Free();

  vector<void*> slots_;
  vector<Binding> bindings_;
  size_t bytes_;
  bool gpu_;          // bound with set_gpu_data (one cudaMalloc per slot)
  bool mode_warned_;  // CheckBindings saw the net run in the other mode

  DISABLE_COPY_AND_ASSIGN(MemorySlots);
};

}  // namespace caffe

#endif  // CAFFE_UTIL_MEM_SLOTS_HPP_
