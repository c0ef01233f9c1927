// Behaviour every Store implementation shares, run over each of them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/rendezvous/file_store.h"
#include "cohort/rendezvous/hash_store.h"
#include "cohort/rendezvous/prefix_store.h"
#include "cohort/rendezvous/test_stores.h"

namespace cohort::rendezvous {
namespace {

using namespace std::chrono_literals;

class StoreTest : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override { fixture_ = make_test_store(GetParam()); }
  Store& store() { return *fixture_->store; }
  std::unique_ptr<TestStoreFixture> fixture_;
};

TEST_P(StoreTest, SetThenGet) {
  store().set("a", std::string("hello"));
  EXPECT_EQ(store().get_string("a"), "hello");
  store().set("a", Bytes{0, 1, 2, 255});
  EXPECT_EQ(store().get("a"), (Bytes{0, 1, 2, 255}));
  store().set("empty", Bytes{});
  EXPECT_TRUE(store().get("empty").empty());
}

TEST_P(StoreTest, AddCountsAndReadsAsDecimal) {
  EXPECT_EQ(store().add("n", 1), 1);
  EXPECT_EQ(store().add("n", 5), 6);
  EXPECT_EQ(store().add("n", -10), -4);
  EXPECT_EQ(store().get_string("n"), "-4");
  store().set("text", std::string("abc"));
  EXPECT_THROW(store().add("text", 1), InvalidArgument);
}

TEST_P(StoreTest, CompareSet) {
  Bytes one{1}, two{2}, three{3};
  // Missing key with non-empty expected: unchanged, returns expected.
  EXPECT_EQ(store().compare_set("k", one, two), one);
  EXPECT_FALSE(store().check({"k"}));
  // Missing key with empty expected: set.
  EXPECT_EQ(store().compare_set("k", {}, two), two);
  EXPECT_EQ(store().compare_set("k", one, three), two);  // mismatch: current value
  EXPECT_EQ(store().compare_set("k", two, three), three);
  EXPECT_EQ(store().get("k"), three);
}

TEST_P(StoreTest, CheckAndDelete) {
  EXPECT_TRUE(store().check({}));
  EXPECT_FALSE(store().check({"x"}));
  store().set("x", std::string("1"));
  store().set("y", std::string("2"));
  EXPECT_TRUE(store().check({"x", "y"}));
  EXPECT_TRUE(store().delete_key("x"));
  EXPECT_FALSE(store().delete_key("x"));
  EXPECT_FALSE(store().check({"x", "y"}));
  EXPECT_TRUE(store().check({"y"}));
}

TEST_P(StoreTest, WaitTimesOutNamingMissingKeys) {
  store().set("present", std::string("1"));
  try {
    store().wait({"present", "absent1", "absent2"}, 50ms);
    FAIL() << "wait did not time out";
  } catch (const TimeoutError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("absent1"), std::string::npos) << what;
    EXPECT_NE(what.find("absent2"), std::string::npos) << what;
    EXPECT_EQ(what.find("present,"), std::string::npos) << what;
  }
}

TEST_P(StoreTest, GetTimesOutWithStoreTimeout) {
  store().set_timeout(50ms);
  EXPECT_THROW(store().get("never"), TimeoutError);
}

TEST_P(StoreTest, WaitReturnsWhenAnotherThreadSets) {
  std::thread setter([&] {
    std::this_thread::sleep_for(20ms);
    store().set("late", std::string("v"));
  });
  store().wait({"late"}, 30s);
  EXPECT_EQ(store().get_string("late"), "v");
  setter.join();
}

TEST_P(StoreTest, ConcurrentAddsAreAtomic) {
  constexpr int kThreads = 4, kAdds = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kAdds; ++i) store().add("counter", 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store().add("counter", 0), kThreads * kAdds);
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreTest, ::testing::ValuesIn(all_store_kinds()),
                         [](const auto& info) { return store_kind_name(info.param); });

TEST(PrefixStore, KeysLiveUnderPrefixInBase) {
  auto base = std::make_shared<HashStore>();
  PrefixStore a("group1", base), b("group2", base);
  a.set("k", std::string("A"));
  b.set("k", std::string("B"));
  EXPECT_EQ(a.get_string("k"), "A");
  EXPECT_EQ(b.get_string("k"), "B");
  EXPECT_EQ(base->get_string("group1/k"), "A");
  EXPECT_FALSE(base->check({"k"}));
  PrefixStore nested("inner", std::make_shared<PrefixStore>("outer", base));
  nested.set("z", std::string("1"));
  EXPECT_TRUE(base->check({"outer/inner/z"}));
}

TEST(FileStore, ProcessesShareOneFile) {
  auto path = std::filesystem::temp_directory_path() /
              ("cohort_filestore_procs_" + std::to_string(::getpid()));
  std::filesystem::remove(path);
  constexpr int kProcs = 4, kAdds = 50;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 0;
      try {
        FileStore s(path.string(), 30s);
        for (int i = 0; i < kAdds; ++i) s.add("counter", 1);
        s.set("done" + std::to_string(p), std::string("1"));
        s.wait({"go"});
      } catch (...) {
        code = 1;
      }
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  FileStore s(path.string(), 30s);
  s.wait({"done0", "done1", "done2", "done3"});
  EXPECT_EQ(s.add("counter", 0), kProcs * kAdds);
  s.set("go", std::string("1"));
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::filesystem::remove(path);
}

TEST(FileStore, StuckLockHolderTimesOut) {
  auto path = std::filesystem::temp_directory_path() /
              ("cohort_filestore_lock_" + std::to_string(::getpid()));
  std::filesystem::remove(path);
  FileStore s(path.string(), 50ms);
  // Another open file description holding the lock, as a stopped process would.
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  EXPECT_THROW(s.set("k", std::string("v")), TimeoutError);
  ::close(fd);  // releases the lock
  s.set("k", std::string("v"));
  EXPECT_EQ(s.get_string("k"), "v");
  std::filesystem::remove(path);
}

TEST(FileStore, TornRecordIsCutByNextWriter) {
  auto path = std::filesystem::temp_directory_path() /
              ("cohort_filestore_torn_" + std::to_string(::getpid()));
  std::filesystem::remove(path);
  {
    FileStore s(path.string());
    s.set("a", std::string("1"));
  }
  {
    // A writer that died after part of a record header.
    FILE* f = std::fopen(path.c_str(), "ab");
    ASSERT_NE(f, nullptr);
    const unsigned char partial[] = {1, 9, 0};
    std::fwrite(partial, 1, sizeof(partial), f);
    std::fclose(f);
  }
  FileStore s(path.string());
  EXPECT_EQ(s.get_string("a"), "1");
  s.set("b", std::string("2"));
  FileStore again(path.string());
  EXPECT_EQ(again.get_string("b"), "2");
  EXPECT_EQ(again.get_string("a"), "1");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace cohort::rendezvous
