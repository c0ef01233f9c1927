#include "cohort/parallel/pipeline/stage_channel.h"

#include <chrono>

#include "cohort/base/error.h"
#include "cohort/parallel/model_check.h"

namespace cohort::parallel::pipeline {

namespace {

constexpr int64_t kMagic = 0x636f68707069;  // "cohppi"
constexpr int64_t kMaxDims = 8;
constexpr int64_t kHeaderSize = 16;
constexpr uint32_t kHeaderTag = 0x5050;
constexpr uint32_t kPayloadTag = 0x5051;
enum Field : int64_t {
  kMagicF,
  kStepF,
  kKindF,
  kMbF,
  kStageF,
  kDtypeF,
  kNdimF,
  kDimsF,
  kSenderF = 15
};

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const char* kind_word(bool gradient) { return gradient ? "gradient" : "activation"; }

}  // namespace

void StageChannel::send(const Tensor& t, const MessageId& id, int peer) {
  Tensor payload = t.to(device_).contiguous();
  COHORT_CHECK(payload.dim() <= kMaxDims,
               "pipeline (rank {}): a {} of {} dims cannot be sent: at most {}", group_->rank(),
               kind_word(id.gradient), payload.dim(), kMaxDims);
  Tensor header = Tensor::zeros({kHeaderSize}, kInt64);
  int64_t* h = header.data_ptr<int64_t>();
  h[kMagicF] = kMagic;
  h[kStepF] = id.step;
  h[kKindF] = id.gradient ? 1 : 0;
  h[kMbF] = id.mb;
  h[kStageF] = id.stage;
  h[kDtypeF] = static_cast<int64_t>(payload.dtype());
  h[kNdimF] = payload.dim();
  for (int64_t d = 0; d < payload.dim(); ++d) h[kDimsF + d] = payload.size(d);
  h[kSenderF] = group_->rank();
  header = header.to(exchange_device(*group_, device_));
  // Drop the sends that completed so long steps do not pile up buffers.
  std::erase_if(pending_,
                [](const Pending& p) { return p.work.is_completed() && p.work.is_success(); });
  pending_.push_back(
      {group_->send(header, peer, {.tag = kHeaderTag}, distributed::async_op), header});
  pending_.push_back(
      {group_->send(payload, peer, {.tag = kPayloadTag}, distributed::async_op), payload});
}

Tensor StageChannel::recv(const MessageId& expected, int peer, const Shape* expected_shape) {
  auto t0 = std::chrono::steady_clock::now();
  Tensor header = Tensor::zeros({kHeaderSize}, kInt64, exchange_device(*group_, device_));
  group_->recv(header, peer, {.tag = kHeaderTag});
  header = header.cpu();
  const int64_t* h = header.data_ptr<int64_t>();
  const int me = group_->rank();
  auto mismatch = [&](const char* what, auto want, auto got) {
    recv_seconds_ += since(t0);
    throw Error(fmt::format(
        "pipeline: rank {} expected from rank {} the {} of micro-batch {} for stage {} (step {}), "
        "but the message's {} is {} where {} was expected",
        me, peer, kind_word(expected.gradient), expected.mb, expected.stage, expected.step, what,
        got, want));
  };
  // A header that cannot describe a payload ends the exchange at once; any
  // other mismatch is reported after the payload was taken off the wire, so
  // the channel stays in step with its peer.
  if (h[kMagicF] != kMagic) mismatch("header magic", kMagic, h[kMagicF]);
  if (h[kNdimF] < 0 || h[kNdimF] > kMaxDims) mismatch("ndim", "at most 8", h[kNdimF]);
  if (h[kDtypeF] < 0 || h[kDtypeF] > static_cast<int64_t>(DType::kFloat16))
    mismatch("dtype", "a known dtype", h[kDtypeF]);
  Shape shape(h + kDimsF, h + kDimsF + h[kNdimF]);
  Tensor payload = Tensor::empty(shape, static_cast<DType>(h[kDtypeF]), device_);
  group_->recv(payload, peer, {.tag = kPayloadTag});
  if (h[kSenderF] != peer) mismatch("sender", peer, h[kSenderF]);
  if (h[kStepF] != expected.step) mismatch("step", expected.step, h[kStepF]);
  if (h[kKindF] != (expected.gradient ? 1 : 0))
    mismatch("kind", kind_word(expected.gradient), kind_word(h[kKindF] != 0));
  if (h[kMbF] != expected.mb) mismatch("micro-batch", expected.mb, h[kMbF]);
  if (h[kStageF] != expected.stage) mismatch("stage", expected.stage, h[kStageF]);
  if (expected_shape != nullptr && shape != *expected_shape)
    mismatch("shape", shape_str(*expected_shape), shape_str(shape));
  recv_seconds_ += since(t0);
  return payload;
}

void StageChannel::wait_sends() {
  auto t0 = std::chrono::steady_clock::now();
  for (Pending& p : pending_) p.work.wait();
  pending_.clear();
  send_wait_seconds_ += since(t0);
}

}  // namespace cohort::parallel::pipeline
