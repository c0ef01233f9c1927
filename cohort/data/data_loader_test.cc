#include "cohort/data/data_loader.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>

#include "cohort/data/distributed_sampler.h"
#include "cohort/data/tensor_dataset.h"

namespace cohort::data {
namespace {

std::shared_ptr<TensorDataset> make_dataset(int64_t n) {
  return std::make_shared<TensorDataset>(
      Tensor::arange(0, double(n), 1, DType::kFloat32).reshape({n, 1}),
      Tensor::arange(n, DType::kInt64));
}

// The targets of each batch of one epoch.
std::vector<std::vector<int64_t>> epoch_targets(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (Batch& b : loader) out.push_back(b.target.to_vector<int64_t>());
  return out;
}

TEST(DataLoader, SequentialBatches) {
  for (int64_t prefetch : {0, 1, 3}) {
    DataLoader loader(make_dataset(10), {.batch_size = 4, .prefetch = prefetch});
    EXPECT_EQ(loader.num_batches(), 3);
    auto batches = epoch_targets(loader);
    ASSERT_EQ(batches.size(), 3u);
    EXPECT_EQ(batches[0], (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(batches[2], (std::vector<int64_t>{8, 9}));
    EXPECT_EQ(epoch_targets(loader), batches);  // the next epoch, same order
  }
}

TEST(DataLoader, DropLast) {
  DataLoader loader(make_dataset(10), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(loader.num_batches(), 2);
  EXPECT_EQ(epoch_targets(loader).size(), 2u);
}

TEST(DataLoader, ShuffleCoversEveryExampleAndChangesPerEpoch) {
  DataLoader loader(make_dataset(50), {.batch_size = 8, .shuffle = true, .seed = 4});
  auto flat = [](const std::vector<std::vector<int64_t>>& bs) {
    std::vector<int64_t> v;
    for (auto& b : bs) v.insert(v.end(), b.begin(), b.end());
    return v;
  };
  auto e0 = flat(epoch_targets(loader));
  auto e1 = flat(epoch_targets(loader));
  EXPECT_EQ(std::set<int64_t>(e0.begin(), e0.end()).size(), 50u);
  EXPECT_EQ(e0.size(), 50u);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(loader.state().epoch, 2);
}

TEST(DataLoader, ResumeContinuesTheSameOrder) {
  auto ds = make_dataset(40);
  DataLoaderOptions opts{.batch_size = 5, .shuffle = true, .seed = 9};
  DataLoader a(ds, opts);
  epoch_targets(a);  // epoch 0
  std::vector<std::vector<int64_t>> seen;
  SamplerState saved;
  int step = 0;
  for (Batch& b : a) {  // epoch 1, "checkpoint" after 3 batches
    seen.push_back(b.target.to_vector<int64_t>());
    if (++step == 3) saved = a.state();
  }
  EXPECT_EQ(saved, (SamplerState{1, 15}));
  DataLoader b(ds, opts);
  b.load_state(saved);
  auto rest = epoch_targets(b);
  ASSERT_EQ(rest.size(), 5u);
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], seen[i + 3]);
  EXPECT_EQ(b.state(), (SamplerState{2, 0}));
  EXPECT_EQ(epoch_targets(b), epoch_targets(a));  // epoch 2 on both
}

TEST(DataLoader, DistributedResumeContinuesEachRanksOrder) {
  auto ds = make_dataset(50);
  for (int64_t rank = 0; rank < 2; ++rank) {
    DistributedSampler::Options so{.num_replicas = 2, .rank = rank, .seed = 3};
    DataLoader full(ds, {.batch_size = 4}, std::make_shared<DistributedSampler>(50, so));
    full.set_epoch(2);
    auto expected = epoch_targets(full);
    DataLoader part(ds, {.batch_size = 4}, std::make_shared<DistributedSampler>(50, so));
    part.set_epoch(2);
    SamplerState saved;
    int step = 0;
    for (Batch& b : part) {
      (void)b;
      if (++step == 4) {
        saved = part.state();
        break;
      }
    }
    DataLoader resumed(ds, {.batch_size = 4}, std::make_shared<DistributedSampler>(50, so));
    resumed.load_state(saved);
    resumed.set_epoch(saved.epoch);  // what a training loop does on resume
    auto rest = epoch_targets(resumed);
    ASSERT_EQ(rest.size() + 4, expected.size());
    for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], expected[i + 4]);
  }
}

TEST(DataLoader, BreakingOutRestartsNextIterationFromStart) {
  DataLoader loader(make_dataset(12), {.batch_size = 3});
  for (Batch& b : loader) {
    (void)b;
    break;
  }
  EXPECT_EQ(loader.state(), (SamplerState{0, 3}));
  auto all = epoch_targets(loader);
  EXPECT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0], (std::vector<int64_t>{0, 1, 2}));
}

TEST(DataLoader, DistributedSamplerAndSetEpoch) {
  auto ds = make_dataset(10);
  auto sampler = std::make_shared<DistributedSampler>(
      10, DistributedSampler::Options{.num_replicas = 3, .rank = 2, .shuffle = false});
  DataLoader loader(ds, {.batch_size = 3}, sampler);
  auto batches = epoch_targets(loader);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0], (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(batches[1], (std::vector<int64_t>{1}));
  loader.set_epoch(4);
  EXPECT_EQ(sampler->epoch(), 4);
  EXPECT_THROW(DataLoader(ds, {.shuffle = true}, sampler), InvalidArgument);
}

// Fails on a chosen index; counts calls so the test can see the thread stop.
class FailingDataset : public Dataset {
 public:
  explicit FailingDataset(int64_t bad) : bad_(bad) {}
  int64_t size() const override { return 20; }
  Example get(int64_t i) const override {
    if (i == bad_) throw IoError(fmt::format("FailingDataset: cannot read example {}", i));
    return Example{Tensor::scalar(double(i)), Tensor::scalar(double(i), DType::kInt64)};
  }

 private:
  int64_t bad_;
};

TEST(DataLoader, ThreadErrorReachesConsumer) {
  DataLoader loader(std::make_shared<FailingDataset>(9), {.batch_size = 4, .prefetch = 2});
  int ok = 0;
  try {
    for (Batch& b : loader) {
      (void)b;
      ++ok;
    }
    ADD_FAILURE() << "no exception";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("example 9"), std::string::npos);
  }
  EXPECT_EQ(ok, 2);  // batches 0..3 and 4..7 arrive before the failing one
}

// Blocks in get_batch until released; lets the test hit the consumer timeout.
class SlowDataset : public Dataset {
 public:
  int64_t size() const override { return 4; }
  Example get(int64_t i) const override {
    while (!released.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return Example{Tensor::scalar(double(i)), Tensor::scalar(double(i), DType::kInt64)};
  }
  mutable std::atomic<bool> released{false};
};

TEST(DataLoader, ConsumerWaitTimesOut) {
  auto ds = std::make_shared<SlowDataset>();
  {
    DataLoader loader(ds, {.batch_size = 2, .timeout = std::chrono::milliseconds(50)});
    EXPECT_THROW(loader.begin(), TimeoutError);
    ds->released = true;  // let the thread finish so the destructor can join it
  }
}

TEST(DataLoader, DestroyingMidEpochJoinsTheThread) {
  auto ds = make_dataset(1000);
  for (int i = 0; i < 20; ++i) {
    DataLoader loader(ds, {.batch_size = 1, .prefetch = 4});
    auto it = loader.begin();
    ++it;
    // Destruction with a full queue and a producer waiting for room.
  }
  SUCCEED();
}

TEST(DataLoader, RejectsBadOptions) {
  auto ds = make_dataset(4);
  EXPECT_THROW(DataLoader(ds, {.batch_size = 0}), InvalidArgument);
  EXPECT_THROW(DataLoader(ds, {.prefetch = -1}), InvalidArgument);
  EXPECT_THROW(DataLoader(nullptr, {}), InvalidArgument);
}

}  // namespace
}  // namespace cohort::data
