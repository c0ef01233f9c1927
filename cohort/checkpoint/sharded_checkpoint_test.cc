#include "cohort/checkpoint/sharded_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cohort/autograd/ops.h"
#include "cohort/checkpoint/checkpoint.h"
#include "cohort/core/random.h"
#include "cohort/nn/linear.h"
#include "cohort/optim/adam.h"

namespace cohort::checkpoint {
namespace {

namespace fs = std::filesystem;

class ShardedCheckpointTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("cohort_sckpt_{}_{}", ::getpid(),
                       testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A whole checkpoint of a Linear(7, 5) (35 + 5 elements) trained one step
  // with Adam: model tensors, per-parameter moments, 0-d steps, group options.
  std::string whole_checkpoint() {
    Generator gen(3);
    nn::Linear model(7, 5, gen);
    optim::Adam opt(model.parameters(), {.lr = 0.01});
    opt.zero_grad();
    sum(model.forward(rand({4, 7}, gen))).backward();
    opt.step();
    TrainingState st;
    st.step = 7;
    st.epoch = 1;
    st.sampler = {.epoch = 1, .position = 12};
    st.extra["world_size"] = "4";
    return save_checkpoint(path("whole"), model, &opt, st);
  }

  fs::path dir_;
};

// Every tensor's bytes, by name (prefixed), from any checkpoint.
std::map<std::string, std::string> all_bytes(const std::string& p) {
  auto src = open_checkpoint(p);
  std::map<std::string, std::string> out;
  for (const TensorEntry& e : src->tensors()) {
    Tensor t = src->read_tensor(e.name);
    out[e.name] = std::string(static_cast<const char*>(t.raw_data()), t.nbytes()) + "|" +
                  shape_str(e.shape) + std::string(dtype_name(e.dtype));
  }
  return out;
}

std::string file_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(ShardRange, SplitsLikeFlatLayoutWithEmptyTail) {
  EXPECT_EQ(shard_range(10, 0, 4), (std::pair<int64_t, int64_t>(0, 3)));
  EXPECT_EQ(shard_range(10, 3, 4), (std::pair<int64_t, int64_t>(9, 10)));
  EXPECT_EQ(shard_range(1, 0, 4), (std::pair<int64_t, int64_t>(0, 1)));
  EXPECT_EQ(shard_range(1, 2, 4), (std::pair<int64_t, int64_t>(1, 1)));  // empty
  EXPECT_EQ(shard_range(5, 3, 4), (std::pair<int64_t, int64_t>(5, 5)));  // c = 2: 0,2,4,6
  EXPECT_THROW(shard_range(5, 4, 4), InvalidArgument);
}

TEST_F(ShardedCheckpointTest, ReshardRoundTripsBitForBit) {
  const std::string whole = whole_checkpoint();
  const auto want = all_bytes(whole);
  ASSERT_GT(want.size(), 6u);  // 2 model, 2x3 Adam state, group options
  reshard_checkpoint(whole, path("w4"), 4);
  EXPECT_TRUE(is_sharded_checkpoint(path("w4")));
  EXPECT_EQ(open_checkpoint(path("w4"))->world_size(), 4);
  reshard_checkpoint(path("w4"), path("w3"), 3);
  reshard_checkpoint(path("w3"), path("w1"), 1);
  reshard_checkpoint(path("w1"), path("w4b"), 4);
  reshard_checkpoint(path("w4b"), path("back"), 0);
  for (const char* p : {"w4", "w3", "w1", "w4b", "back"}) EXPECT_EQ(all_bytes(path(p)), want) << p;
  // The same conversion gives the same files, byte for byte.
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(file_bytes(path("w4") + "/" + rank_file_name(r, 4)),
              file_bytes(path("w4b") + "/" + rank_file_name(r, 4)));
  // Whole -> sharded -> whole keeps the tensor data and training state.
  EXPECT_EQ(open_checkpoint(path("back"))->state(), open_checkpoint(whole)->state());
  EXPECT_EQ(open_checkpoint(path("w3"))->state(), open_checkpoint(whole)->state());
}

TEST_F(ShardedCheckpointTest, PlainWeightsReshardAndComeBack) {
  Generator gen(4);
  nn::Linear model(3, 2, gen);
  save_model(path("plain.safetensors"), model);
  reshard_checkpoint(path("plain.safetensors"), path("w2"), 2);
  reshard_checkpoint(path("w2"), path("back"), 0);
  EXPECT_EQ(all_bytes(path("back")), all_bytes(path("plain.safetensors")));
  nn::Linear loaded(3, 2, gen);
  load_model(path("back") + "/" + kModelFile, loaded);
  EXPECT_TRUE(equal(loaded.weight(), model.weight()));
}

TEST_F(ShardedCheckpointTest, ReshardHoldsOneTensorOrPieceAtATime) {
  const std::string whole = whole_checkpoint();
  // The largest tensor: the weight or its moments, 35 float32.
  const uint64_t largest = 35 * 4;
  ReshardStats to3 = reshard_checkpoint(whole, path("w3"), 3);
  EXPECT_EQ(to3.largest_buffer_bytes, 12u * 4);  // ceil(35 / 3) elements
  ReshardStats back = reshard_checkpoint(path("w3"), path("back"), 0);
  EXPECT_EQ(back.largest_buffer_bytes, largest);
  EXPECT_EQ(back.bytes, to3.bytes);
  EXPECT_EQ(back.tensors, to3.tensors);
}

TEST_F(ShardedCheckpointTest, ReadsOnlyTheOverlappingRanges) {
  const std::string whole = whole_checkpoint();
  reshard_checkpoint(whole, path("w4"), 4);
  auto src = open_checkpoint(path("w4"));
  // Elements [8, 20) of the 35-element weight span rank files 0 (0-9),
  // 1 (9-18) and 2 (18-27).
  Tensor part = src->read_range("model/weight", 8, 20);
  Tensor full = open_checkpoint(whole)->read_tensor("model/weight");
  EXPECT_TRUE(equal(part, full.reshape({-1}).narrow(0, 8, 12)));
  EXPECT_EQ(src->bytes_read(), 12u * 4);
}

TEST_F(ShardedCheckpointTest, LoadCheckpointReadsShardedIntoAWholeModel) {
  const std::string whole = whole_checkpoint();
  reshard_checkpoint(whole, path("root/step-00000007"), 3);
  Generator gen(9);
  nn::Linear model(7, 5, gen);
  optim::Adam opt(model.parameters(), {.lr = 0.01});
  TrainingState st = load_checkpoint(path("root"), model, &opt);  // the root: latest
  EXPECT_EQ(st.step, 7);
  EXPECT_EQ(st.sampler.position, 12);
  auto w = open_checkpoint(whole);
  EXPECT_TRUE(equal(model.weight(), w->read_tensor("model/weight")));
  EXPECT_TRUE(
      equal(opt.state_dict().at("state.0.exp_avg"), w->read_tensor("optimizer/state.0.exp_avg")));
  EXPECT_EQ(latest_checkpoint(path("root")), path("root/step-00000007"));
}

TEST_F(ShardedCheckpointTest, MissingOrInconsistentFilesAreNamed) {
  const std::string whole = whole_checkpoint();
  reshard_checkpoint(whole, path("w3"), 3);
  fs::remove(path("w3") + "/" + rank_file_name(1, 3));
  try {
    open_checkpoint(path("w3"));
    FAIL() << "a missing rank file went unnoticed";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("rank-00001-of-00003"), std::string::npos) << e.what();
  }
  // A rank file from another conversion whose pieces overlap: the tensor is named.
  reshard_checkpoint(whole, path("w2"), 2);
  fs::copy_file(path("w2") + "/" + rank_file_name(0, 2), path("w3") + "/" + rank_file_name(1, 3));
  try {
    open_checkpoint(path("w3"));
    FAIL() << "overlapping pieces went unnoticed";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("in two files"), std::string::npos) << e.what();
  }
  EXPECT_THROW(reshard_checkpoint(whole, path("w2"), 2), InvalidArgument);  // exists
  EXPECT_THROW(open_checkpoint(path("w2"))->read_range("model/weight", 30, 36), InvalidArgument);
  EXPECT_THROW(open_checkpoint(path("w2"))->read_range("model/nope", 0, 1), InvalidArgument);
}

}  // namespace
}  // namespace cohort::checkpoint
