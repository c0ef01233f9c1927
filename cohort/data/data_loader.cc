#include "cohort/data/data_loader.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <span>
#include <thread>

#include "cohort/base/parallel.h"
#include "cohort/core/device_runtime.h"

namespace cohort::data {

// One iteration: the remaining indices, cut into batches, gathered either on
// a background thread into a bounded queue or on demand.
class DataLoader::Epoch {
 public:
  Epoch(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices,
        const DataLoaderOptions& options)
      : dataset_(std::move(dataset)), indices_(std::move(indices)), options_(resolved(options)) {
    const auto n = static_cast<int64_t>(indices_.size());
    num_batches_ = options.drop_last ? n / options.batch_size
                                     : (n + options.batch_size - 1) / options.batch_size;
    if (options.prefetch > 0 && num_batches_ > 0) thread_ = std::thread([this] { produce(); });
  }

  ~Epoch() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  // The next batch; false at the end of the epoch. Rethrows the producer's
  // exception; throws TimeoutError when no batch comes in time.
  bool next(Batch* out) {
    if (consumed_ == num_batches_) return false;
    if (options_.prefetch == 0) {
      *out = to_device(make_batch(consumed_++));
      return true;
    }
    std::unique_lock<std::mutex> lock(mu_);
    const bool ready =
        cv_.wait_for(lock, options_.timeout, [&] { return !queue_.empty() || error_ != nullptr; });
    if (!queue_.empty()) {
      Ready r = std::move(queue_.front());
      queue_.pop_front();
      ++consumed_;
      lock.unlock();
      cv_.notify_all();
      if (r.copied.valid()) receive(r);
      *out = std::move(r.batch);
      return true;
    }
    if (error_) std::rethrow_exception(error_);
    COHORT_ASSERT(!ready);
    throw TimeoutError(fmt::format("DataLoader: no batch within {} ms (batch {} of {})",
                                   options_.timeout.count(), consumed_ + 1, num_batches_));
  }

  int64_t examples_in(int64_t batch) const {
    const auto n = static_cast<int64_t>(indices_.size());
    return std::min(options_.batch_size, n - batch * options_.batch_size);
  }

 private:
  // "cuda" is the consumer's current device: resolved on its thread, as the
  // prefetch thread's own current device is another (0, until it selects).
  static DataLoaderOptions resolved(DataLoaderOptions options) {
    if (!options.device.is_cpu()) options.device = resolve_device(options.device);
    return options;
  }

  Batch make_batch(int64_t b) const {
    const int64_t begin = b * options_.batch_size;
    return dataset_->get_batch(
        std::span<const int64_t>(indices_.data() + begin, static_cast<size_t>(examples_in(b))));
  }

  struct Ready {
    Batch batch;
    Event copied;  // a device batch: the end of its copy on the side stream
  };

  Batch to_device(Batch b) const {
    if (options_.device.is_cpu()) return b;
    b.input = b.input.to(options_.device);
    b.target = b.target.to(options_.device);
    return b;
  }

  // The consumer's stream waits for the side stream's copy, and the batch's
  // memory is marked as used by the consumer's stream, so that the allocator
  // does not hand it to the side stream again before the step has read it.
  void receive(const Ready& r) const {
    const Stream consumer = current_stream(options_.device);
    DeviceRuntime& rt = device_runtime(consumer.device, "DataLoader");
    rt.wait(consumer, r.copied);
    for (const Tensor* t : {&r.batch.input, &r.batch.target}) {
      if (t->defined() && t->numel() > 0)
        rt.record_stream(consumer.device.index(), t->storage()->data(), consumer);
    }
  }

  // The background thread: never throws, hands its exception to the consumer.
  void produce() {
    // Gathering is memory-bound; keep the thread from competing for the
    // compute threads of the training step.
    set_num_threads(1);
    std::optional<StreamGuard> side;
    DeviceRuntime* rt = nullptr;
    for (int64_t b = 0; b < num_batches_; ++b) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        // Re-checks stop_ on every wake; the consumer may legitimately take
        // long between batches, so this wait has no deadline of its own.
        while (!stop_ && static_cast<int64_t>(queue_.size()) >= options_.prefetch)
          cv_.wait_for(lock, std::chrono::milliseconds(200));
        if (stop_) return;
      }
      Ready ready;
      try {
        if (!options_.device.is_cpu() && rt == nullptr) {
          const Device d = options_.device;
          rt = &device_runtime(d, "DataLoader");
          // This thread works for that device only: its first device call
          // must not create a context on another (GPU 0 by default).
          rt->set_device(d.index());
          side.emplace(rt->side_stream(d.index(), StreamPurpose::kDataLoader));
        }
        ready.batch = to_device(make_batch(b));
        if (rt != nullptr) ready.copied = rt->record(current_stream(options_.device));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        error_ = std::current_exception();
        cv_.notify_all();
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        queue_.push_back(std::move(ready));
      }
      cv_.notify_all();
    }
  }

  std::shared_ptr<const Dataset> dataset_;
  const std::vector<int64_t> indices_;
  const DataLoaderOptions options_;
  int64_t num_batches_ = 0;
  int64_t consumed_ = 0;  // consumer side only

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Ready> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;  // last: started after everything it uses exists
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options,
                       std::shared_ptr<Sampler> sampler)
    : dataset_(std::move(dataset)), options_(options), sampler_(std::move(sampler)) {
  COHORT_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
  COHORT_CHECK(options.batch_size >= 1, "DataLoader: batch_size must be >= 1, got {}",
               options.batch_size);
  COHORT_CHECK(options.prefetch >= 0, "DataLoader: prefetch must be >= 0, got {}",
               options.prefetch);
  COHORT_CHECK(options.timeout.count() > 0, "DataLoader: timeout must be > 0 ms, got {}",
               options.timeout.count());
  COHORT_CHECK(!(options.shuffle && sampler_),
               "DataLoader: shuffle=true and an explicit sampler are mutually exclusive");
  if (!sampler_) {
    if (options.shuffle)
      sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options.seed);
    else
      sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
}

DataLoader::~DataLoader() = default;

DataLoader::Iterator DataLoader::begin() {
  epoch_.reset();
  epoch_ = std::make_unique<Epoch>(dataset_, sampler_->begin_epoch(), options_);
  Iterator it(this);
  if (!next(&it.batch_)) it.loader_ = nullptr;
  return it;
}

DataLoader::Iterator DataLoader::end() { return Iterator(nullptr); }

bool DataLoader::next(Batch* out) {
  COHORT_CHECK(epoch_ != nullptr, "DataLoader: iterator used after its epoch was stopped");
  if (!epoch_->next(out)) {
    epoch_.reset();
    sampler_->end_epoch();
    return false;
  }
  sampler_->advance(out->size());
  return true;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  if (loader_ != nullptr && !loader_->next(&batch_)) loader_ = nullptr;
  return *this;
}

int64_t DataLoader::num_batches() const {
  const int64_t n = sampler_->size();
  return options_.drop_last ? n / options_.batch_size
                            : (n + options_.batch_size - 1) / options_.batch_size;
}

}  // namespace cohort::data
