// CohortWork: the c10d::Work of one op of the cohort backend of
// torch.distributed (process_group_cohort.h): wait(timeout), isCompleted,
// isSuccess, exception, result, sourceRank and getFuture over one of
// cohort's async ops.
//
// The op runs on cohort's group (in issue order, on the group's thread, or
// on the thread that waits for it when nothing runs ahead of it). When it
// ends, a completion callback (distributed::Work::then) unpacks the outputs
// of the list forms, marks this Work complete and completes its future with
// the output tensors (the value DDP's reducer and its comm hooks read) or
// with the op's error. Failures keep cohort's message: the op, group, rank,
// sequence number and cause; Python sees them as RuntimeError.
//
// Ownership: the pending op holds a reference to its Work until it ends, so
// dropping the Python object of an isend does not cut the op short.
// Thread safety: any thread; the future's callbacks run on the thread that
// completed the op.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <functional>
#include <vector>

#include "cohort/libtorch/process_group.h"

namespace cohort::torch_backend {

class CohortWork final : public c10d::Work {
 public:
  // The Work of `op` (already issued): `inputs` are what the profiler
  // records of it (the op's input tensors, as gloo records them), `outputs`
  // the tensors it writes (its result and its future's value); `after` (may be empty) runs once
  // the op succeeded, before completion is signalled (e.g. the coalesced
  // forms' unflattening); `source` gives the sender of an any-source receive.
  static c10::intrusive_ptr<CohortWork> make(int rank, c10d::OpType type, const char* title,
                                             const std::vector<at::Tensor>& inputs,
                                             std::vector<at::Tensor> outputs, libtorch::Work op,
                                             std::function<void()> after = {},
                                             std::function<int()> source = {});
  // The same over an op of cohort's own ProcessGroup on raw buffers: `keep`
  // holds the tensors behind them until it ended.
  static c10::intrusive_ptr<CohortWork> make(int rank, c10d::OpType type, const char* title,
                                             const std::vector<at::Tensor>& inputs,
                                             std::vector<at::Tensor> outputs, distributed::Work op,
                                             std::vector<at::Tensor> keep,
                                             std::function<void()> after = {},
                                             std::function<int()> source = {});

  // `finish` runs once the op succeeded (it may throw: the op then fails).
  CohortWork(int rank, c10d::OpType type, const char* title, const std::vector<at::Tensor>& inputs,
             std::vector<at::Tensor> outputs, distributed::Work op, std::function<void()> finish,
             std::function<int()> source);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override {}
  // timeout 0 (kNoTimeout): the group's op timeout, counted from the op's
  // start (cohort's default wait); otherwise from this call.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  // The op ended: unpack, record the outcome, complete the future.
  void on_end() noexcept;

  // Arms the completion callback (a second reference to this Work).
  static c10::intrusive_ptr<CohortWork> armed(c10::intrusive_ptr<CohortWork> w);

  std::vector<at::Tensor> outputs_;
  distributed::Work op_;
  std::function<void()> finish_;
  std::function<int()> source_;
  int source_rank_ = -1;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace cohort::torch_backend
