#include "cohort/torch_backend/cohort_work.h"

#include <ATen/core/ivalue.h>
#include <fmt/format.h>

#include "cohort/base/error.h"

namespace cohort::torch_backend {
namespace {

c10::intrusive_ptr<c10::ivalue::Future> tensor_list_future() {
  return c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
}

}  // namespace

CohortWork::CohortWork(int rank, c10d::OpType type, const char* title,
                       const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs,
                       distributed::Work op, std::function<void()> finish,
                       std::function<int()> source)
    : c10d::Work(rank, type, title, c10::optional<std::vector<at::Tensor>>(inputs)),
      outputs_(std::move(outputs)),
      op_(std::move(op)),
      finish_(std::move(finish)),
      source_(std::move(source)),
      future_(tensor_list_future()) {}

c10::intrusive_ptr<CohortWork> CohortWork::armed(c10::intrusive_ptr<CohortWork> w) {
  // The callback's reference keeps the Work alive until the op ended.
  w->op_.then([w] { w->on_end(); });
  return w;
}

c10::intrusive_ptr<CohortWork> CohortWork::make(int rank, c10d::OpType type, const char* title,
                                                const std::vector<at::Tensor>& inputs,
                                                std::vector<at::Tensor> outputs, libtorch::Work op,
                                                std::function<void()> after,
                                                std::function<int()> source) {
  distributed::Work inner = op.work();
  // libtorch's wait() rethrows the op's failure and unpacks its list forms.
  auto finish = [op = std::move(op), after = std::move(after)] {
    op.wait();
    if (after) after();
  };
  return armed(c10::make_intrusive<CohortWork>(rank, type, title, inputs, std::move(outputs),
                                               std::move(inner), std::move(finish),
                                               std::move(source)));
}

c10::intrusive_ptr<CohortWork> CohortWork::make(int rank, c10d::OpType type, const char* title,
                                                const std::vector<at::Tensor>& inputs,
                                                std::vector<at::Tensor> outputs,
                                                distributed::Work op, std::vector<at::Tensor> keep,
                                                std::function<void()> after,
                                                std::function<int()> source) {
  auto finish = [op, keep = std::move(keep), after = std::move(after)] {
    op.wait();
    if (after) after();
  };
  return armed(c10::make_intrusive<CohortWork>(rank, type, title, inputs, std::move(outputs),
                                               std::move(op), std::move(finish),
                                               std::move(source)));
}

void CohortWork::on_end() noexcept {
  std::exception_ptr failure;
  try {
    if (finish_) finish_();  // rethrows the op's failure, unpacks outputs
    if (source_) source_rank_ = source_();
  } catch (...) {
    failure = std::current_exception();
  }
  finish_ = nullptr;  // releases the op's buffers
  finish(failure);    // c10d::Work: completed_, exception_, the profiler's range; wakes waiters
  if (failure) {
    future_->setError(failure);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

bool CohortWork::isCompleted() {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool CohortWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr CohortWork::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

int CohortWork::sourceRank() const {
  COHORT_CHECK(source_, "Work::source_rank: only a receive from any source has a source rank");
  std::lock_guard<std::mutex> lock(mutex_);
  COHORT_CHECK(completed_, "Work::source_rank: the receive has not completed yet; wait() first");
  return source_rank_;
}

std::vector<at::Tensor> CohortWork::result() { return outputs_; }

bool CohortWork::wait(std::chrono::milliseconds timeout) {
  if (op_.defined()) {
    // Runs the op here when nothing is ahead of it; bounded by the op's
    // deadline (the default) or by `timeout`.
    op_.wait(timeout == kNoTimeout ? distributed::kUseDefaultTimeout : timeout);
  }
  std::unique_lock<std::mutex> lock(mutex_);
  // The op ended (or failed): on_end is running or ran; it only copies.
  const bool ended = cv_.wait_for(lock, std::chrono::seconds(60), [&] { return completed_; });
  if (!ended) {
    throw TimeoutError(fmt::format(
        "{}: the op ended, but its completion did not arrive within 60 s", op_.describe()));
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

}  // namespace cohort::torch_backend
