// caffemem runtime patch v6: added by `caffemem patch` (caffemem/runtime/cpp).
#ifndef CAFFE_UTIL_LAYER_BUFFERS_HPP_
#define CAFFE_UTIL_LAYER_BUFFERS_HPP_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "caffe/blob.hpp"
#include "caffe/common.hpp"
#include "caffe/syncedmem.hpp"

namespace caffe {

/**
 * @brief The scratch Blob%s a Layer owns (im2col's col_buffer_, Pooling's
 *        max_idx_, BatchNorm's mean_, ...), by the names `caffemem optimize
 *        --share-buffers` gives them in mem_param's slot table:
 *        "<layer index>:<layer name>/<buffer>", and
 *        "<layer index>:<layer name>/<inner layer>/<buffer>" for the layers a
 *        layer runs inside itself (SoftmaxWithLoss's "softmax"); and the
 *        memory a layer allocates itself that a plan may replace (a cuDNN
 *        convolution's "cudnn_workspace", util/planned_workspace.hpp).
 *
 * A Layer lists its buffers in Layer::NamedBuffers (see layer.hpp); the Net
 * binds the ones the table names (util/mem_slots.cpp).
 */
class LayerBuffers {
 public:
  /// The data (diff = false) or diff storage of a buffer; NULL if it has none.
  typedef shared_ptr<SyncedMemory> (*Getter)(void* blob, bool diff);
  struct Buffer {
    void* blob;
    Getter get;
    shared_ptr<SyncedMemory> memory(bool diff) const { return get(blob, diff); }
  };

  explicit LayerBuffers(const string& prefix) : prefix_(1, prefix) {}

  template <typename T>
  void Add(const string& name, Blob<T>* blob) {
    Buffer buffer = { blob, &LayerBuffers::Memory<T> };
    buffers_[prefix_.back() + name] = buffer;
  }
  /// Memory no Blob owns (a cuDNN workspace, util/planned_workspace.hpp):
  /// its data; none while `memory` is NULL.
  void AddMemory(const string& name, shared_ptr<SyncedMemory>* memory) {
    Buffer buffer = { memory, &LayerBuffers::Bare };
    buffers_[prefix_.back() + name] = buffer;
  }
  /// The buffers of a layer that `layer` runs inside itself, as "name/...".
  template <typename LayerType>
  void AddNested(const string& name, LayerType* layer) {
    if (!layer) { return; }
    prefix_.push_back(prefix_.back() + name + "/");
    layer->NamedBuffers(this);
    prefix_.pop_back();
  }
  const std::map<string, Buffer>& buffers() const { return buffers_; }

  template <typename T>
  static shared_ptr<SyncedMemory> Memory(void* blob, bool diff) {
    Blob<T>* b = static_cast<Blob<T>*>(blob);
    if (b->count() == 0) { return shared_ptr<SyncedMemory>(); }
    return diff ? b->diff() : b->data();
  }
  static shared_ptr<SyncedMemory> Bare(void* memory, bool diff) {
    shared_ptr<SyncedMemory>& m =
        *static_cast<shared_ptr<SyncedMemory>*>(memory);
    if (diff || !m || m->size() == 0) { return shared_ptr<SyncedMemory>(); }
    return m;
  }

 private:
  vector<string> prefix_;
  std::map<string, Buffer> buffers_;
};

}  // namespace caffe

#endif  // CAFFE_UTIL_LAYER_BUFFERS_HPP_
