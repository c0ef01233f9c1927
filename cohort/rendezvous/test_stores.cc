#include "cohort/rendezvous/test_stores.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>

#include "cohort/rendezvous/file_store.h"
#include "cohort/rendezvous/hash_store.h"
#include "cohort/rendezvous/prefix_store.h"
#include "cohort/rendezvous/tcp_store.h"

namespace cohort::rendezvous {

std::vector<StoreKind> all_store_kinds() {
  return {StoreKind::kHash, StoreKind::kFile, StoreKind::kPrefix, StoreKind::kTcp};
}

std::string store_kind_name(StoreKind kind) {
  switch (kind) {
    case StoreKind::kHash:
      return "Hash";
    case StoreKind::kFile:
      return "File";
    case StoreKind::kPrefix:
      return "Prefix";
    case StoreKind::kTcp:
      return "Tcp";
  }
  return "Unknown";
}

TestStoreFixture::~TestStoreFixture() {
  store.reset();
  keep_alive.reset();
  if (!file_path.empty()) {
    std::error_code ec;
    std::filesystem::remove(file_path, ec);
  }
}

std::unique_ptr<TestStoreFixture> make_test_store(StoreKind kind) {
  static std::atomic<int> counter{0};
  auto f = std::make_unique<TestStoreFixture>();
  switch (kind) {
    case StoreKind::kHash:
      f->store = std::make_shared<HashStore>();
      break;
    case StoreKind::kFile: {
      f->file_path =
          (std::filesystem::temp_directory_path() / ("cohort_store_" + std::to_string(::getpid()) +
                                                     "_" + std::to_string(counter.fetch_add(1))))
              .string();
      std::filesystem::remove(f->file_path);
      f->store = std::make_shared<FileStore>(f->file_path);
      break;
    }
    case StoreKind::kPrefix:
      f->store = std::make_shared<PrefixStore>("pfx", std::make_shared<HashStore>());
      break;
    case StoreKind::kTcp: {
      TcpStoreOptions o;
      o.is_server = true;
      o.token = "test-token";
      f->store = std::make_shared<TcpStore>(o);
      break;
    }
  }
  return f;
}

}  // namespace cohort::rendezvous
