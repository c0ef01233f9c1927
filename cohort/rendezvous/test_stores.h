// Test support: builds one store of each kind with whatever it needs kept
// alive (a temporary file, a server), so one test suite can run over all of
// them. Used by cohort's tests only; lives in the library so other layers'
// tests can run over every store too.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cohort/rendezvous/store.h"

namespace cohort::rendezvous {

enum class StoreKind { kHash, kFile, kPrefix, kTcp };

std::vector<StoreKind> all_store_kinds();
std::string store_kind_name(StoreKind kind);

// Owns a store and its supports; removes temporary files on destruction.
struct TestStoreFixture {
  std::shared_ptr<Store> store;
  std::string file_path;  // kFile: the file to remove
  std::shared_ptr<void> keep_alive;
  ~TestStoreFixture();
};

std::unique_ptr<TestStoreFixture> make_test_store(StoreKind kind);

}  // namespace cohort::rendezvous
