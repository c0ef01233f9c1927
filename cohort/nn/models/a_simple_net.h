// ASimpleNet (docs/reference.md): net = Sequential(Linear(3, 3, bias=False), ReLU,
// Linear(3, 3, bias=False), ReLU, Linear(3, 3, bias=False), ReLU);
// x [N, 3] -> [N, 3]. Parameters net.0.weight, net.2.weight, net.4.weight.
// Each forward reports the batch size it was given to the optional reporter
// (DataParallel's demonstration that each replica sees a slice of the batch)
// and remembers it in last_batch_size().
// Thread safety: forward is safe to share; the reporter is called on the
// forwarding thread and must be thread safe itself.
#pragma once

#include <atomic>
#include <functional>

#include "cohort/core/random.h"
#include "cohort/nn/module.h"
#include "cohort/nn/sequential.h"

namespace cohort::nn {

class ASimpleNet : public Cloneable<ASimpleNet> {
 public:
  using Reporter = std::function<void(int64_t batch_size)>;

  explicit ASimpleNet(Generator& gen);
  ASimpleNet(const ASimpleNet& other);

  Tensor forward(const Tensor& x) override;

  // Copied into clones and replicas.
  void set_reporter(Reporter reporter) { reporter_ = std::move(reporter); }
  // 0 before the first forward.
  int64_t last_batch_size() const { return last_batch_size_.load(); }
  Sequential& net() const { return child<Sequential>(0); }

 private:
  Reporter reporter_;
  std::atomic<int64_t> last_batch_size_{0};
};

}  // namespace cohort::nn
