#include "cohort/checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cohort/autograd/ops.h"
#include "cohort/checkpoint/atomic_file.h"
#include "cohort/core/random.h"
#include "cohort/data/data_loader.h"
#include "cohort/data/synthetic_dataset.h"
#include "cohort/nn/linear.h"
#include "cohort/nn/models/toy_model.h"
#include "cohort/optim/sgd.h"

namespace cohort::checkpoint {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("cohort_ckpt_{}_{}", ::getpid(),
                       testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string root() const { return (dir_ / "ckpt").string(); }

  fs::path dir_;
};

std::shared_ptr<data::SyntheticDataset> toy_data() {
  return std::make_shared<data::SyntheticDataset>(data::SyntheticDataset::Options{
      .size = 48, .input_shape = {10}, .num_classes = 0, .target_shape = {5}, .seed = 3});
}

void train_step(nn::Module& model, optim::Optimizer& opt, const data::Batch& b) {
  opt.zero_grad();
  Tensor loss = mse_loss(model.forward(b.input), b.target);
  loss.backward();
  opt.step();
}

void expect_same_state(const TensorDict& a, const TensorDict& b) {
  ASSERT_EQ(a.keys(), b.keys());
  for (const auto& [name, t] : a) EXPECT_TRUE(equal(t, b.at(name))) << name;
}

TEST_F(CheckpointTest, SaveLoadRoundTripsModelOptimizerAndState) {
  Generator g1(1), g2(2);
  nn::ToyModel a(g1), b(g2);
  optim::SGD opt_a(a.parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD opt_b(b.parameters(), {.lr = 0.05, .momentum = 0.9});
  data::DataLoader loader(toy_data(), {.batch_size = 8});
  for (data::Batch& batch : loader) train_step(a, opt_a, batch);

  TrainingState st{.epoch = 1,
                   .step = 6,
                   .rng_state = Generator(9).get_state(),
                   .sampler = {1, 16},
                   .extra = {{"scheduler.last_epoch", "3"}}};
  std::string path = save_checkpoint(root(), a, &opt_a, st);
  EXPECT_EQ(fs::path(path).filename(), "step-00000006");
  EXPECT_TRUE(fs::exists(fs::path(path) / kModelFile));
  EXPECT_TRUE(fs::exists(fs::path(path) / kOptimizerFile));

  TrainingState loaded = load_checkpoint(path, b, &opt_b);
  EXPECT_EQ(loaded, st);
  expect_same_state(a.state_dict(), b.state_dict());
  expect_same_state(opt_a.state_dict(), opt_b.state_dict());
  // The model file holds exactly the state dict, names unprefixed.
  SafetensorsContents file = load_safetensors((fs::path(path) / kModelFile).string());
  EXPECT_EQ(file.tensors.keys(),
            (std::vector<std::string>{"net1.weight", "net1.bias", "net2.weight", "net2.bias"}));
  EXPECT_EQ(file.metadata.at("format"), "pt");
}

TEST_F(CheckpointTest, ResumedRunMatchesUninterruptedRun) {
  // Uninterrupted: 2 epochs of 6 shuffled batches. Interrupted: a checkpoint
  // after step 8 (mid-epoch 1), a fresh model/optimizer/loader resumed from it.
  auto ds = toy_data();
  const data::DataLoaderOptions lopts{.batch_size = 8, .shuffle = true, .seed = 5};
  Generator g(7);
  nn::ToyModel full(g);
  auto init = full.clone_as<nn::ToyModel>();
  optim::SGD opt_full(full.parameters(), {.lr = 0.05, .momentum = 0.9});
  data::DataLoader loader_full(ds, lopts);

  nn::ToyModel& part = *init;
  optim::SGD opt_part(part.parameters(), {.lr = 0.05, .momentum = 0.9});
  data::DataLoader loader_part(ds, lopts);

  int64_t step = 0;
  std::string saved;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    loader_full.set_epoch(epoch);
    for (data::Batch& b : loader_full) train_step(full, opt_full, b);
  }
  for (int64_t epoch = 0; epoch < 2 && saved.empty(); ++epoch) {
    loader_part.set_epoch(epoch);
    for (data::Batch& b : loader_part) {
      train_step(part, opt_part, b);
      if (++step == 8) {
        saved = save_checkpoint(root(), part, &opt_part,
                                {.epoch = epoch, .step = step, .sampler = loader_part.state()});
        break;  // "crash"
      }
    }
  }
  ASSERT_FALSE(saved.empty());

  Generator other(99);
  nn::ToyModel resumed(other);
  optim::SGD opt_resumed(resumed.parameters(), {.lr = 0.05, .momentum = 0.9});
  data::DataLoader loader_resumed(ds, lopts);
  auto latest = resolve_resume("auto", root());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(*latest, saved);
  TrainingState st = load_checkpoint(*latest, resumed, &opt_resumed);
  EXPECT_EQ(st.sampler, (data::SamplerState{1, 16}));
  loader_resumed.load_state(st.sampler);
  for (int64_t epoch = st.epoch; epoch < 2; ++epoch) {
    loader_resumed.set_epoch(epoch);
    for (data::Batch& b : loader_resumed) train_step(resumed, opt_resumed, b);
  }
  expect_same_state(full.state_dict(), resumed.state_dict());
}

TEST_F(CheckpointTest, DifferentModelNamesFirstMismatchingTensor) {
  Generator g(1);
  nn::Linear small(10, 5, g), wide(10, 6, g);
  nn::ToyModel toy(g);
  std::string path = save_checkpoint(root(), small, nullptr, {.step = 1});
  try {
    load_checkpoint(path, wide);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("'weight'"), std::string::npos) << what;
    EXPECT_NE(what.find("[5, 10]"), std::string::npos) << what;
    EXPECT_NE(what.find("[6, 10]"), std::string::npos) << what;
    EXPECT_NE(what.find(path), std::string::npos) << what;
  }
  try {
    load_checkpoint(path, toy);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'net1.weight' [10, 10] is missing"), std::string::npos)
        << e.what();
  }
  // The failed loads changed nothing; a missing optimizer file is an IoError.
  nn::Linear again(10, 5, g);
  auto before = again.state_dict().at("weight").clone();
  optim::SGD opt(again.parameters(), {.lr = 0.1});
  EXPECT_THROW(load_checkpoint(path, again, &opt), IoError);
  EXPECT_TRUE(equal(again.state_dict().at("weight"), before));
}

TEST_F(CheckpointTest, LatestSkipsIncompleteAndDamagedCheckpoints) {
  Generator g(1);
  nn::Linear m(4, 3, g);
  EXPECT_FALSE(latest_checkpoint(root()).has_value());
  std::string s10 = save_checkpoint(root(), m, nullptr, {.step = 10});
  std::string s20 = save_checkpoint(root(), m, nullptr, {.step = 20});
  EXPECT_EQ(latest_checkpoint(root()), s20);
  // A crashed writer's leftovers are not checkpoints.
  fs::create_directories(fs::path(root()) / ".tmp.step-00000030.999999.0");
  EXPECT_EQ(latest_checkpoint(root()), s20);
  // A damaged newest checkpoint is skipped.
  fs::resize_file(fs::path(s20) / kModelFile, 20);
  testing::internal::CaptureStderr();
  EXPECT_EQ(latest_checkpoint(root()), s10);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("skipping damaged"), std::string::npos);
  // Loading the damaged one names the file.
  try {
    load_checkpoint(s20, m);
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(s20), std::string::npos) << e.what();
  }
  // load_checkpoint on the root picks the latest complete one.
  EXPECT_EQ(load_checkpoint(root(), m).step, 10);
}

TEST_F(CheckpointTest, KeepLastAndResaveOfTheSameStep) {
  Generator g(1);
  nn::Linear m(4, 3, g);
  for (int64_t s = 1; s <= 5; ++s)
    save_checkpoint(root(), m, nullptr, {.step = s}, {.keep_last = 2});
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root())) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step-00000004", "step-00000005"}));
  save_checkpoint(root(), m, nullptr, {.epoch = 7, .step = 5});
  EXPECT_EQ(load_checkpoint(root(), m).epoch, 7);
}

TEST_F(CheckpointTest, KilledSaveLeavesEarlierCheckpointsLoadable) {
  Generator g(1);
  nn::Linear big(512, 512, g);
  save_checkpoint(root(), big, nullptr, {.step = 1});
  for (int delay_us : {0, 500, 2000, 8000}) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int64_t s = 2;; ++s) save_checkpoint(root(), big, nullptr, {.step = s});
    }
    ::usleep(static_cast<useconds_t>(delay_us));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    auto latest = latest_checkpoint(root());
    ASSERT_TRUE(latest.has_value());
    nn::Linear into(512, 512, g);
    load_checkpoint(*latest, into);
    EXPECT_TRUE(equal(into.state_dict().at("weight"), big.state_dict().at("weight")));
  }
  // The next save cleans up what the killed writers left.
  save_checkpoint(root(), big, nullptr, {.step = 100000});
  for (const auto& e : fs::directory_iterator(root()))
    EXPECT_FALSE(e.path().filename().string().starts_with(kTempPrefix)) << e.path();
}

TEST_F(CheckpointTest, UnwritableDirectoryIsReportedUpFront) {
  std::ofstream(dir_ / "file") << "x";
  std::string bad = (dir_ / "file" / "ckpt").string();
  try {
    check_writable_dir(bad);
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
  check_writable_dir(root());
  EXPECT_TRUE(fs::is_directory(root()));
  EXPECT_TRUE(fs::is_empty(root()));
  EXPECT_THROW(resolve_resume((dir_ / "nope").string(), root()), IoError);
  EXPECT_FALSE(resolve_resume("", root()).has_value());
}

TEST_F(CheckpointTest, SaveModelAndLoadModel) {
  Generator g(4);
  nn::ToyModel a(g), b(g);
  std::string p = (dir_ / "toy.safetensors").string();
  save_model(p, a);
  load_model(p, b);
  expect_same_state(a.state_dict(), b.state_dict());
  nn::Linear wrong(10, 10, g);
  EXPECT_THROW(load_model(p, wrong), InvalidArgument);
  // A plain weights file is not a training checkpoint.
  EXPECT_THROW(load_checkpoint(p, b), IoError);
}

}  // namespace
}  // namespace cohort::checkpoint
