#include "cohort/checkpoint/safetensors.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cohort/checkpoint/atomic_file.h"
#include "cohort/core/random.h"

namespace cohort::checkpoint {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("cohort_st_{}_{}", ::getpid(),
                       testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::string write_raw(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }

  static std::string read_raw(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  // A file with a hand-written JSON header and `data` bytes.
  std::string with_header(const std::string& name, std::string json, const std::string& data) {
    std::string out(8, '\0');
    uint64_t n = json.size();
    for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
    return write_raw(name, out + json + data);
  }

  fs::path dir_;
};

void expect_io_error(const std::string& file, const std::string& needle) {
  try {
    load_safetensors(file);
    ADD_FAILURE() << "no IoError for " << file;
  } catch (const IoError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(file), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

TEST_F(SafetensorsTest, RoundTripsEveryDtypeAndMetadata) {
  Generator gen(1);
  TensorDict d;
  d.insert("fc.weight", randn({3, 4}, gen));
  d.insert("fc.bias", randn({4}, gen, DType::kFloat64));
  d.insert("steps", Tensor::from_vector<int64_t>({1, -2, 3}));
  d.insert("idx", Tensor::from_vector<int32_t>({7}, {1, 1}));
  d.insert("mask", Tensor::from_vector<uint8_t>({0, 255}));
  d.insert("half", randn({2, 2}, gen).to(DType::kFloat16));
  d.insert("brain", randn({5}, gen).to(DType::kBFloat16));
  d.insert("scalar", Tensor::scalar(2.5));
  d.insert("empty", Tensor::empty({0, 3}));
  d.insert("transposed", randn({2, 3}, gen).transpose(0, 1));  // written contiguous
  save_safetensors(path("a.safetensors"), d, {{"format", "pt"}, {"step", "12"}});

  SafetensorsContents c = load_safetensors(path("a.safetensors"));
  EXPECT_EQ(c.metadata, (Metadata{{"format", "pt"}, {"step", "12"}}));
  ASSERT_EQ(c.tensors.keys(), d.keys());
  for (const auto& [name, t] : d) {
    const Tensor& u = c.tensors.at(name);
    EXPECT_EQ(u.dtype(), t.dtype()) << name;
    EXPECT_EQ(u.sizes(), t.sizes()) << name;
    EXPECT_EQ(std::memcmp(u.raw_data(), t.contiguous().raw_data(), t.nbytes()), 0) << name;
  }
  // Header padded so the data section is 8-byte aligned.
  EXPECT_EQ(read_safetensors_header(path("a.safetensors")).data_start % 8, 0u);
}

TEST_F(SafetensorsTest, ReadsAHandWrittenReferenceFile) {
  // As huggingface's writer lays it out: metadata first, tensors by offset.
  std::string data(12, '\0');
  float f[2] = {1.5f, -2.0f};
  uint8_t u[4] = {1, 2, 3, 4};
  std::memcpy(data.data(), f, 8);
  std::memcpy(data.data() + 8, u, 4);
  std::string p = with_header(
      "ref.safetensors",
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"U8","shape":[2,2],"data_offsets":[8,12]},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
      data);
  SafetensorsContents c = load_safetensors(p);
  EXPECT_EQ(c.tensors.keys(), (std::vector<std::string>{"a", "b"}));  // offset order
  EXPECT_EQ(c.tensors.at("a").to_vector<float>(), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(c.tensors.at("b").sizes(), (Shape{2, 2}));
  EXPECT_EQ(c.tensors.at("b").to_vector<uint8_t>(), (std::vector<uint8_t>{1, 2, 3, 4}));
}

TEST_F(SafetensorsTest, RejectsTruncatedFiles) {
  TensorDict d;
  d.insert("w", Tensor::ones({64}));
  save_safetensors(path("full"), d);
  std::string full = read_raw(path("full"));
  expect_io_error(write_raw("t0", full.substr(0, 5)), "truncated");
  expect_io_error(write_raw("t1", full.substr(0, 20)), "truncated");
  expect_io_error(write_raw("t2", full.substr(0, full.size() - 1)), "truncated");
  expect_io_error(write_raw("t3", full + "extra"), "trailing");
}

TEST_F(SafetensorsTest, RejectsCorruptHeaders) {
  const std::string eight(8, '\0');
  expect_io_error(with_header("json", R"({"a": {"dtype": "F32",)", eight), "bad JSON");
  expect_io_error(with_header("array", R"([1, 2])", ""), "not an object");
  expect_io_error(
      with_header("dtype", R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", eight),
      "unknown dtype 'Q7'");
  expect_io_error(
      with_header("range", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", eight),
      "run past");
  expect_io_error(with_header("overlap",
                              R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                              eight),
                  "overlap");
  expect_io_error(
      with_header("hole", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
      "hole");
  expect_io_error(
      with_header("count", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
      "needs 12 bytes");
  expect_io_error(
      with_header("shape", R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
      "negative");
  expect_io_error(with_header("fields", R"({"a":{"dtype":"F32"}})", ""), "data_offsets");
  expect_io_error(with_header("meta", R"({"__metadata__":{"k":1}})", ""), "not a string");
  // A header length beyond the file.
  std::string huge(8, '\0');
  huge[4] = 1;  // 2^32
  expect_io_error(write_raw("huge", huge + "{}"), "exceeds");
  expect_io_error(path("missing"), "cannot open");
}

TEST_F(SafetensorsTest, RejectsBadNames) {
  TensorDict d;
  d.insert("__metadata__", Tensor::ones({1}));
  EXPECT_THROW(save_safetensors(path("x"), d), InvalidArgument);
  EXPECT_FALSE(fs::exists(path("x")));
}

TEST_F(SafetensorsTest, OverwriteReplacesAtomicallyAndLeavesNoTemporaries) {
  TensorDict a, b;
  a.insert("w", Tensor::full({4}, 1.0));
  b.insert("w", Tensor::full({8}, 2.0));
  save_safetensors(path("m"), a);
  save_safetensors(path("m"), b);
  EXPECT_EQ(load_safetensors(path("m")).tensors.at("w").sizes(), (Shape{8}));
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_FALSE(e.path().filename().string().starts_with(kTempPrefix)) << e.path();
}

// A writer killed mid-write leaves the previous file intact (and only a
// temporary file behind).
TEST_F(SafetensorsTest, KilledWriterLeavesPreviousFileIntact) {
  TensorDict old_dict, new_dict;
  old_dict.insert("w", Tensor::full({16}, 1.0));
  new_dict.insert("w", Tensor::full({1 << 16}, 2.0));
  const std::string target = path("ckpt.safetensors");
  save_safetensors(target, old_dict);

  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Child: write the header and half the data of the new file, say so, and
    // wait to be killed.
    ::close(ready[0]);
    AtomicFile f(target);
    std::string header = safetensors_header_bytes(new_dict, {});
    f.write(header.data(), header.size());
    f.write(new_dict.at("w").raw_data(), new_dict.at("w").nbytes() / 2);
    char c = 'x';
    [[maybe_unused]] auto n = ::write(ready[1], &c, 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));

  SafetensorsContents c2 = load_safetensors(target);
  EXPECT_TRUE(equal(c2.tensors.at("w"), old_dict.at("w")));
  int temporaries = 0;
  for (const auto& e : fs::directory_iterator(dir_))
    temporaries += e.path().filename().string().starts_with(kTempPrefix);
  EXPECT_EQ(temporaries, 1);
}

// Killed at an arbitrary moment of save_safetensors, the target holds either
// the old or the new checkpoint, complete.
TEST_F(SafetensorsTest, KilledAtAnyMomentLeavesAWholeFile) {
  TensorDict old_dict, new_dict;
  old_dict.insert("w", Tensor::full({16}, 1.0));
  new_dict.insert("w", Tensor::full({1 << 20}, 2.0));
  const std::string target = path("ckpt.safetensors");
  save_safetensors(target, old_dict);
  for (int delay_us : {0, 200, 1000, 3000, 10000}) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (;;) save_safetensors(target, new_dict);
    }
    ::usleep(static_cast<useconds_t>(delay_us));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    SafetensorsContents c = load_safetensors(target);
    const Tensor& w = c.tensors.at("w");
    EXPECT_TRUE(equal(w, old_dict.at("w")) || equal(w, new_dict.at("w"))) << delay_us;
  }
}

}  // namespace
}  // namespace cohort::checkpoint
