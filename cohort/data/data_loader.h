// DataLoader: batches of a Dataset in the order of a Sampler, with the next
// batches gathered ahead on a background thread, as torch.utils.data
// .DataLoader with one worker.
//
//   DataLoader loader(dataset, {.batch_size = 64, .shuffle = true, .seed = 1});
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     loader.set_epoch(epoch);
//     for (Batch& b : loader) { ... b.input [64, 1, 28, 28], b.target [64] ... }
//   }
//
// One iteration (begin() .. end()) is one epoch. begin() starts a background
// thread that fills a bounded queue (options.prefetch batches); the
// consumer's wait for a batch has a timeout (TimeoutError). An exception in
// the thread (e.g. a bad index, a failed read) is rethrown to the consumer
// when it reaches that batch. Starting a new iteration, or destroying the
// loader, stops and joins the thread of the previous one.
//
// Checkpoints: state() / load_state() give the sampler's (epoch, position),
// position counting only the examples already handed to the consumer, so a
// resumed run continues with the next unseen batch of the same order.
//
// Ownership: shares the dataset and the sampler. Thread safety: one consumer
// thread; the dataset must allow const calls from the prefetch thread (all
// cohort datasets do).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "cohort/data/dataset.h"
#include "cohort/data/sampler.h"

namespace cohort::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  // Without an explicit sampler: RandomSampler(seed) when true, else
  // SequentialSampler.
  bool shuffle = false;
  uint64_t seed = 0;
  // Drop the last batch when it is smaller than batch_size.
  bool drop_last = false;
  // Batches gathered ahead on the background thread (the queue bound);
  // 0 gathers on the consumer's thread, no thread.
  int64_t prefetch = 2;
  // The longest the consumer waits for one batch.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  // Where batches are delivered. A device other than the CPU: the prefetch
  // thread copies each batch there on a side stream (the host side staged
  // through pinned memory) while the consumer's step runs, and the
  // consumer's current stream waits for that copy on the device, not on the
  // host; without prefetch the consumer's thread copies.
  Device device = kCPU;
};

class DataLoader {
 public:
  class Iterator;

  // Throws InvalidArgument on a null dataset, batch_size < 1, prefetch < 0,
  // shuffle together with a sampler.
  DataLoader(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options,
             std::shared_ptr<Sampler> sampler = nullptr);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts an epoch (stopping any iteration still running).
  Iterator begin();
  Iterator end();

  // Batches in a full epoch (len(loader)).
  int64_t num_batches() const;
  // Forwards to the sampler.
  void set_epoch(int64_t epoch) { sampler_->set_epoch(epoch); }
  SamplerState state() const { return sampler_->state(); }
  void load_state(const SamplerState& state) { sampler_->load_state(state); }

  const Dataset& dataset() const { return *dataset_; }
  Sampler& sampler() { return *sampler_; }
  const DataLoaderOptions& options() const { return options_; }

 private:
  class Epoch;
  bool next(Batch* out);

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<Sampler> sampler_;
  std::unique_ptr<Epoch> epoch_;  // the iteration in progress
};

// An input iterator over one epoch's batches.
class DataLoader::Iterator {
 public:
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;

  Batch& operator*() { return batch_; }
  Batch* operator->() { return &batch_; }
  Iterator& operator++();
  bool operator==(const Iterator& other) const { return loader_ == other.loader_; }

 private:
  friend class DataLoader;
  explicit Iterator(DataLoader* loader) : loader_(loader) {}
  DataLoader* loader_;  // null: end
  Batch batch_;
};

}  // namespace cohort::data
