// caffemem runtime patch v6: added by `caffemem patch` (caffemem/runtime/cpp).
// Runs again, in Net::Backward, the Forwards listed by NetParameter.mem_param's
// recompute entries; see include/caffe/util/mem_recompute.hpp.
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "caffe/common.hpp"
#include "caffe/layer.hpp"
#include "caffe/net.hpp"
#include "caffe/util/benchmark.hpp"
#include "caffe/util/math_functions.hpp"
#include "caffe/util/mem_recompute.hpp"
#include "caffe/util/mem_slots.hpp"

#ifdef USE_CUDNN
#include "caffe/layers/cudnn_conv_layer.hpp"
#endif

namespace caffe {

namespace {

const char kRerun[] = "; rerun `caffemem optimize` on this net (with the input "
    "shapes and phase you run it with) to write a new table";

// from's data into to's, on the side where from's data is current: host
// memory in CPU mode or when from's head is on the host (BatchNorm's scale
// factor, which its Forward_gpu updates through mutable_cpu_data), the device
// otherwise (caffe_copy is a memcpy or a cudaMemcpy). Copying a host-headed
// blob on the device would move its head (a synchronous cudaMemcpy now, and
// one more when the layer next writes it on the host) for nothing.
template <typename Dtype>
void CopyData(const Blob<Dtype>& from, Blob<Dtype>* to) {
  if (Caffe::mode() == Caffe::GPU &&
      from.data()->head() != SyncedMemory::HEAD_AT_CPU) {
    caffe_copy(from.count(), from.gpu_data(), to->mutable_gpu_data());
  } else {
    caffe_copy(from.count(), from.cpu_data(), to->mutable_cpu_data());
  }
}

// Layer::Forward less its Reshape (layer.hpp: Reshape, then Forward_cpu or
// Forward_gpu, then the loss of loss tops, which no recomputed layer has).
// Forward_cpu/_gpu are protected; a pointer to them formed in a derived
// class calls them (virtually) on any Layer.
template <typename Dtype>
struct ForwardOnly : public Layer<Dtype> {
  static void Run(Layer<Dtype>* layer, const vector<Blob<Dtype>*>& bottom,
      const vector<Blob<Dtype>*>& top) {
    typedef void (Layer<Dtype>::*Step)(const vector<Blob<Dtype>*>&,
        const vector<Blob<Dtype>*>&);
    Step step = Caffe::mode() == Caffe::GPU ? &ForwardOnly::Forward_gpu
                                             : &ForwardOnly::Forward_cpu;
    (layer->*step)(bottom, top);
  }
};

// Whether a recomputed Forward may skip the layer's Reshape. Net::Backward
// runs it in the iteration whose Forward pass reshaped the layer for the same
// bottoms, so its tops and descriptors are as Reshape would leave them; what
// Reshape may still do is refill a buffer (bias_multiplier's ones, BatchNorm's
// sum multipliers) that mem_param's slot table shares with others, so:
//  - a layer none of whose buffers the table binds: skip (its buffers keep
//    what the Forward pass's Reshape left);
//  - a cuDNN convolution in GPU mode: skip (its Forward_gpu reads none of the
//    buffers Reshape fills, only the workspace, whose slot Reshape points it
//    at again); its Reshape asks cuDNN for three algorithms, host work that
//    on a fast card costs more than the convolution (issue 33);
//  - otherwise Reshape runs, as in Layer::Forward.
template <typename Dtype>
bool SkipsReshape(const Layer<Dtype>* layer, bool planned) {
  if (!planned) { return true; }
#ifdef USE_CUDNN
  if (Caffe::mode() == Caffe::GPU &&
      dynamic_cast<const CuDNNConvolutionLayer<Dtype>*>(layer) != NULL) {
    return true;
  }
#endif
  return false;
}

}  // namespace

template <typename Dtype>
shared_ptr<MemoryRecomputes<Dtype> > MemoryRecomputes<Dtype>::Bind(
    const NetParameter& param, const Net<Dtype>* net) {
  shared_ptr<MemoryRecomputes<Dtype> > table(new MemoryRecomputes<Dtype>(net));
  const MemoryOptimizationParameter& mem = param.mem_param();
  const string where = "net " + net->name() + " (phase " +
      (net->phase() == TRAIN ? "TRAIN" : "TEST") + ")";
  // Caffe lets layers share a name; an entry names its layers, so a name the
  // net gives twice is refused (counted here), never looked up as one of them.
  std::map<string, int> index, named;
  for (int i = 0; i < net->layer_names().size(); ++i) {
    index[net->layer_names()[i]] = i;
    ++named[net->layer_names()[i]];
  }
  table->before_.resize(net->layers().size());
  std::set<std::pair<int, int> > seen;
  std::map<int, int> saved;  // layer -> its copies in saved_
  int n = 0;
  for (int r = 0; r < mem.recompute_size(); ++r) {
    const MemoryRecompute& entry = mem.recompute(r);
    if (entry.phase() != net->phase()) { continue; }
    const std::map<string, int>::const_iterator layer =
        index.find(entry.layer());
    const std::map<string, int>::const_iterator before =
        index.find(entry.before());
    // The words of `caffemem verify` (caffemem/plan/verify.py), which checks
    // a table as this does.
    CHECK(layer != index.end()) << "mem_param recompute: " << entry.layer()
        << " is not a layer of " << where << kRerun;
    CHECK(before != index.end()) << "mem_param recompute: " << entry.before()
        << " is not a layer of " << where << kRerun;
    const string* names[] = { &entry.layer(), &entry.before() };
    for (int k = 0; k < 2; ++k) {
      CHECK_EQ(named[*names[k]], 1) << "mem_param recompute: " << *names[k]
          << " names " << named[*names[k]] << " layers of " << where
          << ": Caffe lets layers share a name, but a recompute entry must "
          << "name one layer; give each its own name" << kRerun;
    }
    CHECK(layer->second <= before->second) << "mem_param recompute: "
        << entry.layer() << " runs again before the Backward of "
        << entry.before() << ", an earlier layer of " << where << kRerun;
    CHECK(seen.insert(std::make_pair(layer->second, before->second)).second)
        << "mem_param recompute: " << entry.layer() << " before "
        << entry.before() << " is listed twice" << kRerun;
    const bool planned = !PlannedBuffers(param, net->phase(), layer->second,
        entry.layer()).empty();
    Entry run = { layer->second, -1,
        SkipsReshape(net->layers()[layer->second].get(), planned) };
    if (entry.restore_params()) {
      const vector<shared_ptr<Blob<Dtype> > >& params =
          net->layers()[layer->second]->blobs();
      CHECK(!params.empty()) << "mem_param recompute: " << entry.layer()
          << " has no parameters to restore" << kRerun;
      if (saved.count(layer->second) == 0) {
        saved[layer->second] = table->saved_.size();
        table->saved_.push_back(vector<shared_ptr<Blob<Dtype> > >());
        for (int j = 0; j < params.size(); ++j) {
          shared_ptr<Blob<Dtype> > copy(new Blob<Dtype>(params[j]->shape()));
          if (Caffe::mode() == Caffe::GPU) {  // allocated now, once
            copy->mutable_gpu_data();
          } else {
            copy->mutable_cpu_data();
          }
          table->bytes_ += copy->count() * sizeof(Dtype);
          table->saved_.back().push_back(copy);
        }
      }
      run.saved = saved[layer->second];
    }
    table->before_[before->second].push_back(run);
    ++n;
  }
  if (n == 0) { return shared_ptr<MemoryRecomputes<Dtype> >(); }
  // CAFFEMEM_RECOMPUTE_TIMES=1: each entry's time, logged as it runs (on the
  // card the timer waits for the Forward to finish, so it slows the run).
  const char* timed = std::getenv("CAFFEMEM_RECOMPUTE_TIMES");
  table->timed_ = timed != NULL && *timed != '\0' && string(timed) != "0";
  LOG(INFO) << "mem_param: " << n << " Forward(s) of " << where << " run "
      << "again in Backward; " << table->bytes_ << " bytes of parameter "
      << "copies";
  return table;
}

template <typename Dtype>
void MemoryRecomputes<Dtype>::Before(int i) {
  for (int e = 0; e < before_[i].size(); ++e) {
    const Entry& run = before_[i][e];
    const vector<shared_ptr<Blob<Dtype> > >& params =
        net_->layers()[run.layer]->blobs();
    if (run.saved >= 0) {
      for (int j = 0; j < params.size(); ++j) {
        CopyData(*params[j], saved_[run.saved][j].get());
      }
    }
    Layer<Dtype>* layer = net_->layers()[run.layer].get();
    Timer timer;
    if (timed_) { timer.Start(); }
    if (run.skip_reshape) {
      ForwardOnly<Dtype>::Run(layer, net_->bottom_vecs()[run.layer],
          net_->top_vecs()[run.layer]);
    } else {
      layer->Forward(net_->bottom_vecs()[run.layer],
          net_->top_vecs()[run.layer]);
    }
    if (run.saved >= 0) {
      for (int j = 0; j < params.size(); ++j) {
        CopyData(*saved_[run.saved][j], params[j].get());
      }
    }
    if (timed_) {
      LOG(INFO) << "mem_param recompute: " << net_->layer_names()[run.layer]
          << " before " << net_->layer_names()[i] << ": "
          << timer.MicroSeconds() << " us, Reshape "
          << (run.skip_reshape ? "skipped" : "run");
    }
  }
}

INSTANTIATE_CLASS(MemoryRecomputes);

}  // namespace caffe
