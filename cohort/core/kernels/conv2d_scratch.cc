#include "cohort/core/kernels/conv2d_scratch.h"

#include <mutex>

namespace cohort::kernels::detail {
namespace {

struct ScratchPool {
  std::mutex mu;
  std::vector<std::unique_ptr<ScratchLease::Buffers>> free;
};

ScratchPool& scratch_pool() {
  static ScratchPool pool;
  return pool;
}

}  // namespace

float* ensure_vecs(std::vector<Vec16>& buf, int64_t vecs) {
  if (static_cast<int64_t>(buf.size()) < vecs) {
    buf = std::vector<Vec16>();
    buf.resize(vecs);
  }
  return reinterpret_cast<float*>(buf.data());
}

ScratchLease::ScratchLease() {
  ScratchPool& pool = scratch_pool();
  {
    std::lock_guard<std::mutex> lock(pool.mu);
    if (!pool.free.empty()) {
      s_ = std::move(pool.free.back());
      pool.free.pop_back();
    }
  }
  if (!s_) s_ = std::make_unique<Buffers>();
}

ScratchLease::~ScratchLease() {
  ScratchPool& pool = scratch_pool();
  std::lock_guard<std::mutex> lock(pool.mu);
  try {
    pool.free.push_back(std::move(s_));
  } catch (...) {
    // Out of memory growing the free list: the buffers are simply freed.
  }
}

float* ScratchLease::get(int i, int64_t floats) {
  return ensure_vecs(s_->buf[i], (floats + kLanes - 1) / kLanes);
}

}  // namespace cohort::kernels::detail
