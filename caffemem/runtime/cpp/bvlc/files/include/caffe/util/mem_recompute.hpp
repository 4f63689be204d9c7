// caffemem runtime patch v6: added by `caffemem patch` (caffemem/runtime/cpp).
#ifndef CAFFE_UTIL_MEM_RECOMPUTE_HPP_
#define CAFFE_UTIL_MEM_RECOMPUTE_HPP_

#include <vector>

#include "caffe/blob.hpp"
#include "caffe/common.hpp"
#include "caffe/proto/caffe.pb.h"

namespace caffe {

template <typename Dtype> class Net;

/**
 * @brief Runs again, inside Net::Backward, the Forwards that
 *        `caffemem optimize --recompute` planned (NetParameter.mem_param's
 *        MemoryRecompute entries), so that their tops need not be kept from
 *        the Forward pass to the Backward that reads them.
 *
 * At the end of Net::Init, Bind() reads the entries whose phase is the net's
 * (none: nothing happens) and checks each against the net before the first
 * run: `layer` and `before` name layers of this net, `layer` is not after
 * `before`, `restore_params` only on a layer with parameter blobs, no entry
 * twice. A mismatch is a LOG(FATAL) asking to rerun `caffemem optimize`.
 *
 * Net::BackwardFromTo calls Before(i) at loop index i, before layer i's
 * Backward (whether or not that layer needs one): it runs Layer::Forward of
 * every entry whose `before` is layer i, in the table's order, less the
 * Reshape that the same iteration's Forward pass already ran where skipping
 * it changes nothing (no buffer of the layer in a slot; a cuDNN convolution
 * on the card, whose Reshape queries cuDNN's algorithms). With
 * restore_params the layer's parameter data is saved before that Forward and
 * copied back after it (BatchNorm in TRAIN updates its running averages in
 * Forward: recomputed, it must not update them twice). The copies live in
 * Blobs allocated once here, one per parameter blob of each such layer (in
 * host memory in CPU mode, on the device in GPU mode, Caffe::mode() of the
 * thread that constructs the net): bytes() of them, which the plan counts.
 * Each is copied on the side where the parameter's data is current (a
 * host-headed one, BatchNorm's scale factor, on the host: a few bytes of host
 * memory at its first save), so that a restore moves no head and adds no
 * synchronous cudaMemcpy.
 *
 * With the environment variable CAFFEMEM_RECOMPUTE_TIMES=1 each entry logs
 * (LOG(INFO)) its time and whether its Reshape ran, as it runs.
 */
template <typename Dtype>
class MemoryRecomputes {
 public:
  /// NULL when param has no recompute entry for net's phase.
  static shared_ptr<MemoryRecomputes<Dtype> > Bind(const NetParameter& param,
      const Net<Dtype>* net);
  /// Runs the Forwards planned before layer i's Backward.
  void Before(int i);
  /// Bytes of the parameter copies (restore_params).
  size_t bytes() const { return bytes_; }

 private:
  struct Entry {
    int layer;  // whose Forward runs again
    int saved;  // index into saved_ (restore_params), or -1
    bool skip_reshape;  // Forward without Reshape (mem_recompute.cpp)
  };
  explicit MemoryRecomputes(const Net<Dtype>* net)
      : net_(net), bytes_(0), timed_(false) {}

  const Net<Dtype>* net_;
  vector<vector<Entry> > before_;  // per layer: the entries run before it
  vector<vector<shared_ptr<Blob<Dtype> > > > saved_;  // per restored layer
  size_t bytes_;
  bool timed_;  // CAFFEMEM_RECOMPUTE_TIMES: log each entry's time

  DISABLE_COPY_AND_ASSIGN(MemoryRecomputes);
};

}  // namespace caffe

#endif  // CAFFE_UTIL_MEM_RECOMPUTE_HPP_
