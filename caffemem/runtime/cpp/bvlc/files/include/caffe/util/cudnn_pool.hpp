// caffemem runtime patch v6: added by `caffemem patch` (caffemem/runtime/cpp).
#ifndef CAFFE_UTIL_CUDNN_POOL_HPP_
#define CAFFE_UTIL_CUDNN_POOL_HPP_

#include <cstddef>

#include "caffe/common.hpp"

namespace caffe {

/**
 * @brief CAFFEMEM_CUDNN_POOL: unset, empty or "1": the cuDNN layers share their
 *        device's CudnnPool; "0": each creates its own handles, streams and
 *        workspace, as stock Caffe (to measure stock in a patched build).
 *        Anything else stops the run with a message naming the variable.
 */
bool CudnnPoolEnabled(const char* value);

/**
 * @brief CAFFEMEM_CUDA_STACK_BYTES: unset or empty: 0 (the driver's default
 *        stack, as stock); else a positive decimal number of bytes, which
 *        CudnnPool gives cudaDeviceSetLimit(cudaLimitStackSize) when it is
 *        first created on a device. Anything else stops the run.
 */
size_t CudaStackBytes(const char* value);

}  // namespace caffe

#ifdef USE_CUDNN
#include <boost/thread/mutex.hpp>

#include "caffe/util/cudnn.hpp"

namespace caffe {

/**
 * @brief The cuDNN handles, streams and workspace that the cuDNN layers of
 *        every net of a thread share on one device (caffemem, issue 32).
 *
 * Stock BVLC gives each CuDNNConvolutionLayer and CuDNNDeconvolutionLayer
 * 3 * group handles and streams of its own (index i = role * group + g), and
 * each CuDNN ReLU, Sigmoid, TanH, Pooling, LRN, LCN and Softmax layer one
 * handle: on cuDNN 9 each handle holds ~9 MiB of the card, so a ResNet-152
 * held ~5.9 GiB in handles. As NVIDIA/caffe's Caffe::th_cudnn_handle(group)
 * (src/caffe/common.cpp: per-thread handles, one per stream index, created
 * lazily), the pool holds kPairs (handle, stream) pairs, each handle bound to
 * its stream with cudnnSetStream as stock binds its own, created when a
 * (de)convolution first leases them, and one handle on the legacy default
 * stream for the single-handle layers. A (de)convolution takes pair i % 3 for
 * its index i: the calls of each group are stock's calls, with the algorithms
 * stock chooses; indices sharing a stream run one after the other on it; and
 * every Forward_gpu and Backward_gpu still ends with sync_conv_groups<<<1, 1>>>
 * on the legacy default stream, which waits for all of them: no two layers
 * use the pool at once.
 *
 * The workspace: kPairs blocks of the largest need (per block) any layer's
 * chosen algorithms have, grown (freed and allocated again, as stock grows its
 * own) and never shrunk; a layer points workspace[i] at block i % 3 when its
 * Forward_gpu or Backward_gpu starts (another layer's Reshape may have moved
 * it). Two indices on one stream use one block in turn. So the net holds
 * 3 * max(need) bytes where stock holds the sum of 3 * group * need.
 *
 * One pool per thread and device, as Caffe's own singleton (Caffe::Get) is
 * per thread; layers hold it by shared_ptr (Lease) and the last one to go
 * destroys its handles, streams and workspace, as stock's destructors do.
 */
class CudnnPool {
 public:
  /// The pairs: CUDNN_STREAMS_PER_GROUP of cudnn_conv_layer.cpp.
  static const int kPairs = 3;

  /**
   * This thread's pool on the current device, created if none is alive;
   * NULL when CAFFEMEM_CUDNN_POOL=0 (the layer then runs as stock).
   */
  static shared_ptr<CudnnPool> Lease();

  /// Pair k's handle and stream (created on first use).
  cudnnHandle_t handle(int k);
  cudaStream_t stream(int k);
  /// The handle of the single-handle layers, on the legacy default stream.
  cudnnHandle_t default_handle();

  /**
   * Reshape of a (de)convolution: grow the blocks to `block` bytes each.
   * False when that cannot be allocated (the blocks are then as they were, and
   * the layer falls back to stock's own cudaMalloc and its zero-memory path).
   */
  bool Reserve(size_t block);
  /// workspace[0, n) at block i % kPairs (NULL while no block has bytes).
  void Point(void** workspace, int n) const;
  size_t block_bytes() const { return block_; }

  ~CudnnPool();

 private:
  explicit CudnnPool(int device);
  void MakePair(int k);

  int device_;
  cudnnHandle_t handles_[kPairs];
  cudaStream_t streams_[kPairs];
  bool made_[kPairs];
  cudnnHandle_t default_;
  bool made_default_;
  size_t block_;  // bytes per block
  void* workspace_;  // kPairs * block_ bytes
  boost::mutex mutex_;

  DISABLE_COPY_AND_ASSIGN(CudnnPool);
};

}  // namespace caffe
#endif  // USE_CUDNN

#endif  // CAFFE_UTIL_CUDNN_POOL_HPP_
