// Checkpoints are interchangeable with PyTorch (torch 1.13 from Debian's
// python3-torch): a cohort checkpoint loaded into PyTorch's Net, and weights
// trained by PyTorch evaluated by `cohort eval`, give the same Fashion-MNIST
// test accuracy both ways (to 0.1 points; in practice to the last image).
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "tests/train/process_util.h"
#include "tests/train/train_test_util.h"

namespace cohort::test {
namespace {

const std::string kScript =
    std::string(COHORT_SOURCE_DIR) + "/tests/parity/checkpoint_interchange.py";

double number_after(const std::string& text, const std::string& label) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(label + " ([0-9.]+)"))) {
    ADD_FAILURE() << "no '" << label << " <number>' in\n" << text;
    return -1;
  }
  return std::stod(m[1]);
}

Finished python(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/python3", kScript};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

TEST(CheckpointInterchange, CohortCheckpointInPyTorchGivesTheSameAccuracy) {
  const std::string dir = make_temp_dir("interchange-cohort");
  Finished train = run_command({kCohort, "train", "--max-steps", "40", "--threads", "1", "--seed",
                                "2", "--checkpoint-dir", dir});
  ASSERT_EQ(train.exit_code, 0) << train.output;
  Finished eval = run_command({kCohort, "eval", "--checkpoint", dir, "--threads", "1"});
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  Finished torch = python({"eval", step_dir(dir, 40) + "/model.safetensors"});
  ASSERT_EQ(torch.exit_code, 0) << "PyTorch side (needs /usr/bin/python3 with python3-torch, "
                                   "installed by scripts/install_deps.sh --tests):\n"
                                << torch.output;
  const double cohort_acc = number_after(eval.output, "test accuracy");
  const double torch_acc = number_after(torch.output, "accuracy");
  EXPECT_GT(cohort_acc, 0.3) << "40 steps should learn something";
  EXPECT_NEAR(cohort_acc, torch_acc, 0.001) << eval.output << torch.output;
}

TEST(CheckpointInterchange, PyTorchWeightsInCohortEvalGiveTheSameAccuracy) {
  const std::string dir = make_temp_dir("interchange-torch");
  const std::string weights = dir + "/model.safetensors";
  Finished torch = python({"train", weights, "40", "3"});
  ASSERT_EQ(torch.exit_code, 0) << "PyTorch side (needs /usr/bin/python3 with python3-torch, "
                                   "installed by scripts/install_deps.sh --tests):\n"
                                << torch.output;
  Finished eval =
      run_command({kCohort, "eval", "--checkpoint", weights, "--model", "net", "--threads", "1"});
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  EXPECT_NE(eval.output.find("(model net, plain weights)"), std::string::npos) << eval.output;
  const double torch_acc = number_after(torch.output, "accuracy");
  const double cohort_acc = number_after(eval.output, "test accuracy");
  EXPECT_GT(torch_acc, 0.3);
  EXPECT_NEAR(cohort_acc, torch_acc, 0.001) << eval.output << torch.output;
}

}  // namespace
}  // namespace cohort::test
