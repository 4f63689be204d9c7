// caffemem runtime patch v6: added by `caffemem patch` (caffemem/runtime/cpp).
// The cuDNN handles, streams and workspace the cuDNN layers share per device;
// see include/caffe/util/cudnn_pool.hpp.
#include <cstdlib>
#include <map>
#include <string>

#include "caffe/util/cudnn_pool.hpp"

#ifdef USE_CUDNN
#include <boost/thread/tss.hpp>
#include <boost/weak_ptr.hpp>
#endif

namespace caffe {

bool CudnnPoolEnabled(const char* value) {
  const string v = value == NULL ? "" : value;
  if (v == "0") { return false; }
  CHECK(v.empty() || v == "1") << "CAFFEMEM_CUDNN_POOL=" << v
      << ": expected 1 (the default: the cuDNN layers share one pool of "
      << "handles, streams and workspace per device) or 0 (each layer its "
      << "own, as stock Caffe); set it to 0 or 1, or unset it";
  return true;
}

size_t CudaStackBytes(const char* value) {
  const string v = value == NULL ? "" : value;
  if (v.empty()) { return 0; }
  const bool digits = v.size() <= 9 &&
      v.find_first_not_of("0123456789") == string::npos;
  const size_t bytes = digits ? strtoul(v.c_str(), NULL, 10) : 0;
  CHECK(bytes > 0) << "CAFFEMEM_CUDA_STACK_BYTES=" << v << ": expected a "
      << "positive number of bytes (e.g. 512), the CUDA stack size per "
      << "thread; unset it for the driver's default (1024)";
  return bytes;
}

#ifdef USE_CUDNN
namespace {
/// This thread's pools, by device (Caffe::Get is per thread too).
typedef std::map<int, boost::weak_ptr<CudnnPool> > Pools;
boost::thread_specific_ptr<Pools> thread_pools_;
}  // namespace

shared_ptr<CudnnPool> CudnnPool::Lease() {
  if (!CudnnPoolEnabled(getenv("CAFFEMEM_CUDNN_POOL"))) {
    return shared_ptr<CudnnPool>();
  }
  int device;
  CUDA_CHECK(cudaGetDevice(&device));
  if (!thread_pools_.get()) { thread_pools_.reset(new Pools()); }
  shared_ptr<CudnnPool> pool = (*thread_pools_)[device].lock();
  if (!pool) {
    pool.reset(new CudnnPool(device));
    (*thread_pools_)[device] = pool;
  }
  return pool;
}

CudnnPool::CudnnPool(int device)
    : device_(device), default_(NULL), made_default_(false), block_(0),
      workspace_(NULL) {
  for (int k = 0; k < kPairs; ++k) { made_[k] = false; }
  // Before any kernel of the net runs on the device: the local memory the
  // context reserves is SMs x threads x stack size.
  const size_t stack = CudaStackBytes(getenv("CAFFEMEM_CUDA_STACK_BYTES"));
  if (stack > 0) {
    const cudaError_t err = cudaDeviceSetLimit(cudaLimitStackSize, stack);
    CHECK_EQ(err, cudaSuccess) << "CAFFEMEM_CUDA_STACK_BYTES=" << stack
        << ": CUDA refused it as the stack size of device " << device << " ("
        << cudaGetErrorString(err) << "); give a smaller value, or unset it "
        << "for the driver's default";
    LOG(INFO) << "caffemem: CUDA stack size of device " << device << " set to "
        << stack << " bytes (CAFFEMEM_CUDA_STACK_BYTES)";
  }
}

CudnnPool::~CudnnPool() {
  // As stock's layer destructors: unchecked, on the pool's own device.
  int current = -1;
  cudaGetDevice(&current);
  if (current != device_) { cudaSetDevice(device_); }
  for (int k = 0; k < kPairs; ++k) {
    if (made_[k]) {
      cudnnDestroy(handles_[k]);
      cudaStreamDestroy(streams_[k]);
    }
  }
  if (made_default_) { cudnnDestroy(default_); }
  cudaFree(workspace_);
  if (current >= 0 && current != device_) { cudaSetDevice(current); }
}

void CudnnPool::MakePair(int k) {
  CHECK(k >= 0 && k < kPairs) << "caffemem: cuDNN pool pair " << k
      << " asked for; the pool has " << kPairs;
  if (made_[k]) { return; }
  // As stock CuDNNConvolutionLayer::LayerSetUp makes each of its own.
  CUDA_CHECK(cudaStreamCreate(&streams_[k]));
  CUDNN_CHECK(cudnnCreate(&handles_[k]));
  CUDNN_CHECK(cudnnSetStream(handles_[k], streams_[k]));
  made_[k] = true;
}

cudnnHandle_t CudnnPool::handle(int k) {
  boost::mutex::scoped_lock lock(mutex_);
  MakePair(k);
  return handles_[k];
}

cudaStream_t CudnnPool::stream(int k) {
  boost::mutex::scoped_lock lock(mutex_);
  MakePair(k);
  return streams_[k];
}

cudnnHandle_t CudnnPool::default_handle() {
  boost::mutex::scoped_lock lock(mutex_);
  if (!made_default_) {
    CUDNN_CHECK(cudnnCreate(&default_));  // as each stock layer's own
    made_default_ = true;
  }
  return default_;
}

bool CudnnPool::Reserve(size_t block) {
  boost::mutex::scoped_lock lock(mutex_);
  if (block <= block_) { return true; }
  // Free, then allocate the larger blocks, as stock grows its own workspace
  // (cudaFree waits for the device: no kernel still uses the old blocks).
  cudaFree(workspace_);
  workspace_ = NULL;
  if (cudaMalloc(&workspace_, kPairs * block) == cudaSuccess) {
    block_ = block;
    return true;
  }
  cudaGetLastError();  // the failed cudaMalloc is not the next kernel's error
  workspace_ = NULL;
  if (block_ > 0) {
    const cudaError_t err = cudaMalloc(&workspace_, kPairs * block_);
    CHECK_EQ(err, cudaSuccess) << "caffemem: device " << device_ << " could "
        << "not give back the shared cuDNN workspace (" << kPairs << " x "
        << block_ << " bytes) after failing to grow it to " << kPairs
        << " x " << block << " bytes (" << cudaGetErrorString(err) << "); "
        << "run with a smaller batch, or with CAFFEMEM_CUDNN_POOL=0 (each "
        << "cuDNN layer its own workspace, as stock Caffe)";
  }
  return false;
}

void CudnnPool::Point(void** workspace, int n) const {
  for (int i = 0; i < n; ++i) {
    workspace[i] = block_ == 0 ? NULL :
        static_cast<char*>(workspace_) + (i % kPairs) * block_;
  }
}
#endif  // USE_CUDNN

}  // namespace caffe
