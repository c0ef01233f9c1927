#include "cohort/base/runtime.h"

#include <pthread.h>

#include "cohort/base/error.h"

namespace cohort {

Runtime::Runtime()
    : storage_blocks_(RuntimeOptions{}.storage_cache_bytes),
      kernel_scratch_(RuntimeOptions{}.kernel_scratch_bytes),
      thread_buffer_limit_(RuntimeOptions{}.thread_buffer_bytes),
      thread_pool_(std::make_unique<ThreadPool>(RuntimeOptions{}.num_threads)) {}

Runtime& Runtime::process() {
  static Runtime* runtime = [] {
    auto* r = new Runtime();  // never destroyed: outlives static tensors
    // A forked child (spawn, DataLoader-free workers) inherits the pool object
    // but none of its threads, and maybe a mutex locked by one: it starts a
    // fresh pool and abandons the old one (destroying it would join threads
    // that do not exist in the child).
    pthread_atfork(nullptr, nullptr, [] {
      Runtime& rt = Runtime::process();
      const int threads = rt.thread_pool_->default_threads();
      (void)rt.thread_pool_.release();
      rt.thread_pool_ = std::make_unique<ThreadPool>(threads);
    });
    return r;
  }();
  return *runtime;
}

void Runtime::configure(const RuntimeOptions& options) {
  COHORT_CHECK(options.num_threads >= 0, "Runtime::configure: num_threads must be >= 0, got {}",
               options.num_threads);
  COHORT_CHECK(options.device_wait_timeout_s > 0,
               "Runtime::configure: device_wait_timeout_s must be positive, got {}",
               options.device_wait_timeout_s);
  device_wait_timeout_s_.store(options.device_wait_timeout_s, std::memory_order_relaxed);
  cudnn_attention_.store(options.cudnn_attention, std::memory_order_relaxed);
  storage_blocks_.set_limit(options.storage_cache_bytes);
  kernel_scratch_.set_limit(options.kernel_scratch_bytes);
  thread_buffer_limit_.store(options.thread_buffer_bytes, std::memory_order_relaxed);
  thread_pool_->set_default_threads(options.num_threads);
}

RuntimeOptions Runtime::options() const {
  RuntimeOptions o;
  o.storage_cache_bytes = storage_blocks_.stats().limit;
  o.kernel_scratch_bytes = kernel_scratch_.stats().limit;
  o.thread_buffer_bytes = thread_buffer_limit();
  o.num_threads = thread_pool_->default_threads();
  o.device_wait_timeout_s = device_wait_timeout_s_.load(std::memory_order_relaxed);
  o.cudnn_attention = cudnn_attention_.load(std::memory_order_relaxed);
  return o;
}

RuntimeStats Runtime::stats() const {
  RuntimeStats s;
  s.storage_blocks = storage_blocks_.stats();
  s.kernel_scratch = kernel_scratch_.stats();
  s.thread_buffers = thread_buffers_.snapshot(thread_buffer_limit());
  s.thread_pool = thread_pool_->stats();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& r : resources_) s.resources.emplace_back(r->name(), r->stats());
  return s;
}

void Runtime::release_caches() {
  storage_blocks_.release();
  kernel_scratch_.release();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& r : resources_) r->release_cached();
}

void Runtime::attach(std::shared_ptr<RuntimeResource> resource) {
  COHORT_CHECK(resource != nullptr, "Runtime::attach: resource is null");
  std::lock_guard<std::mutex> lock(mu_);
  resources_.push_back(std::move(resource));
}

RuntimeOptionsGuard::RuntimeOptionsGuard(const RuntimeOptions& options)
    : saved_(Runtime::process().options()) {
  Runtime::process().configure(options);
}

RuntimeOptionsGuard::~RuntimeOptionsGuard() { Runtime::process().configure(saved_); }

ThreadBuffer::~ThreadBuffer() {
  if (buf_.capacity() > 0) Runtime::process().thread_buffer_counters().sub_held(buf_.capacity());
}

void ThreadBuffer::grow(size_t bytes) {
  const size_t before = buf_.capacity();
  buf_.reset();  // first: the old block need not live beside the new one
  Runtime::process().thread_buffer_counters().sub_held(before);
  buf_.reserve(bytes);
  CacheCounters& c = Runtime::process().thread_buffer_counters();
  c.add_held(buf_.capacity());
  c.miss();
}

void ThreadBuffer::done() noexcept {
  const size_t held = buf_.capacity();
  if (held <= Runtime::process().thread_buffer_limit()) return;
  CacheCounters& c = Runtime::process().thread_buffer_counters();
  c.sub_held(held);
  c.drop();
  buf_.reset();
}

}  // namespace cohort
