// Every collective against a serial reference, for world sizes 1, 2, 3, 4,
// 7 and 8, counts 0, 1, odd and not divisible by the world size, both
// algorithms where there are two, over shared memory and TCP. Ranks are
// threads here; failure_test.cc and process_test.cc use real processes.
#include <gtest/gtest.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>

#include "cohort/collectives/allgather_direct.h"
#include "cohort/collectives/allgather_pull.h"
#include "cohort/collectives/allgather_ring.h"
#include "cohort/collectives/allreduce_direct.h"
#include "cohort/collectives/allreduce_pull.h"
#include "cohort/collectives/allreduce_ring.h"
#include "cohort/collectives/broadcast_chain.h"
#include "cohort/collectives/broadcast_flat.h"
#include "cohort/collectives/broadcast_pull.h"
#include "cohort/collectives/reduce_direct.h"
#include "cohort/collectives/reduce_ring.h"
#include "cohort/collectives/reduce_scatter_direct.h"
#include "cohort/collectives/reduce_scatter_ring.h"
#include "cohort/collectives/test_util.h"

namespace cohort::collectives {
namespace {

using testing::all_dtypes;
using testing::all_ops;
using testing::case_name;
using testing::make_input;
using testing::reference_reduce;

const int kWorldSizes[] = {1, 2, 3, 4, 7, 8};

// Whether this process may read its own memory with process_vm_readv (ranks
// are threads here), the check the transport makes before choosing the
// single-copy path: a seccomp policy may forbid it, and qemu-user lacks it.
bool cma_works() {
  static const uint64_t value = 0x5eed;
  uint64_t got = 0;
  iovec local{&got, sizeof(got)};
  iovec remote{const_cast<uint64_t*>(&value), sizeof(got)};
  return ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) == sizeof(got) && got == value;
}

std::vector<size_t> counts_for(int n) { return {0, 1, static_cast<size_t>(2 * n + 1), 1031}; }

void expect_bytes(const std::vector<std::byte>& got, const std::vector<std::byte>& want,
                  const std::string& what) {
  if (got != want) throw std::runtime_error("wrong result: " + what);
}

// Fills a buffer with a byte pattern that depends on rank and i (dtype agnostic).
std::vector<std::byte> pattern(int rank, size_t bytes, int salt = 0) {
  std::vector<std::byte> v(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    v[i] = static_cast<std::byte>(
        (static_cast<size_t>(rank) * 131 + i * 7 + static_cast<size_t>(salt)) & 0xff);
  }
  return v;
}

class CollectivesTest : public ::testing::TestWithParam<TransportKind> {};

TEST_P(CollectivesTest, AllReduceEveryDtypeAndOpBothAlgorithms) {
  for (int n : kWorldSizes) {
    testing::run_threads(n, testing::options(GetParam(), "allreduce"), [&](Communicator& c) {
      for (DataType dt : all_dtypes()) {
        for (ReduceOp op : all_ops()) {
          if (!reduction_defined(op, dt)) continue;  // refused by check_op_args (op_table_test)
          for (size_t count : counts_for(n)) {
            std::vector<std::byte> want = reference_reduce(n, count, dt, op);
            for (int algo = 0; algo < 3; ++algo) {
              std::vector<std::byte> buf = make_input(c.rank(), count, dt, op);
              if (algo == 0) {
                AllreduceRing(c, buf.data(), count, dt, op).run();
              } else if (algo == 1) {
                AllreduceDirect(c, buf.data(), count, dt, op).run();
              } else if (c.single_copy() || n == 1) {
                AllreducePull(c, buf.data(), count, dt, op).run();
              } else {
                continue;
              }
              const char* names[] = {" ring", " direct", " pull"};
              expect_bytes(buf, want, case_name(n, count, dt, op) + names[algo]);
            }
          }
        }
      }
      // Same-host shared-memory groups read each other's memory here where
      // the system lets them; TCP groups never do.
      if (n > 1) {
        EXPECT_EQ(c.single_copy(), GetParam() == TransportKind::kShm && cma_works());
      }
      // The Communicator's own choice, on a size that takes the ring (or pull).
      size_t big = 70000 + static_cast<size_t>(n);
      std::vector<std::byte> buf = make_input(c.rank(), big, DataType::kFloat32, ReduceOp::kSum);
      c.all_reduce(buf.data(), big, DataType::kFloat32, ReduceOp::kSum);
      expect_bytes(buf, reference_reduce(n, big, DataType::kFloat32, ReduceOp::kSum),
                   "large float32 sum");
    });
  }
}

TEST_P(CollectivesTest, ReduceAndReduceScatter) {
  const DataType dtypes[] = {DataType::kFloat32, DataType::kInt64, DataType::kBFloat16,
                             DataType::kUInt8,   DataType::kInt8,  DataType::kBool};
  for (int n : kWorldSizes) {
    testing::run_threads(n, testing::options(GetParam(), "reduce"), [&](Communicator& c) {
      for (DataType dt : dtypes) {
        for (ReduceOp op : all_ops()) {
          if (!reduction_defined(op, dt)) continue;  // refused by check_op_args (op_table_test)
          for (size_t count : counts_for(n)) {
            std::vector<std::byte> want = reference_reduce(n, count, dt, op);
            for (int algo = 0; algo < 2; ++algo) {
              for (int root : {0, n - 1}) {
                std::vector<std::byte> buf = make_input(c.rank(), count, dt, op);
                std::vector<std::byte> orig = buf;
                if (algo == 0) {
                  ReduceDirect(c, buf.data(), count, dt, op, root).run();
                } else {
                  ReduceRing(c, buf.data(), count, dt, op, root).run();
                }
                std::string what = case_name(n, count, dt, op) + " reduce root " +
                                   std::to_string(root) + (algo == 0 ? " direct" : " ring");
                expect_bytes(buf, c.rank() == root ? want : orig, what);
              }
            }
            // reduce_scatter: rank r's input block j is make_input(r, ...)
            // of the whole n*count vector, so block j of the reference.
            size_t es = element_size(dt);
            std::vector<std::byte> in =
                make_input(c.rank(), count * static_cast<size_t>(n), dt, op);
            std::vector<std::byte> full =
                reference_reduce(n, count * static_cast<size_t>(n), dt, op);
            std::vector<std::byte> block(
                full.begin() + static_cast<ptrdiff_t>(c.rank() * count * es),
                full.begin() + static_cast<ptrdiff_t>((c.rank() + 1) * count * es));
            for (int algo = 0; algo < 2; ++algo) {
              std::vector<std::byte> out(count * es, std::byte{0x5a});
              if (algo == 0) {
                ReduceScatterDirect(c, in.data(), out.data(), count, dt, op).run();
              } else {
                ReduceScatterRing(c, in.data(), out.data(), count, dt, op).run();
              }
              expect_bytes(out, block,
                           case_name(n, count, dt, op) + (algo == 0 ? " rs direct" : " rs ring"));
            }
          }
        }
      }
    });
  }
}

TEST_P(CollectivesTest, DataMovement) {
  const DataType dtypes[] = {DataType::kFloat32, DataType::kUInt8, DataType::kFloat16,
                             DataType::kFloat64};
  for (int n : kWorldSizes) {
    testing::run_threads(n, testing::options(GetParam(), "movement"), [&](Communicator& c) {
      int r = c.rank();
      auto N = static_cast<size_t>(n);
      for (DataType dt : dtypes) {
        size_t es = element_size(dt);
        for (size_t count : counts_for(n)) {
          std::string what = case_name(n, count, dt, ReduceOp::kSum);
          size_t bytes = count * es;
          for (int root : {0, n / 2, n - 1}) {
            for (int algo = 0; algo < 3; ++algo) {
              if (algo == 2 && !c.single_copy()) continue;
              std::vector<std::byte> buf =
                  r == root ? pattern(root, bytes, algo) : std::vector<std::byte>(bytes);
              if (algo == 0) {
                BroadcastFlat(c, buf.data(), count, dt, root).run();
              } else if (algo == 1) {
                BroadcastChain(c, buf.data(), count, dt, root).run();
              } else {
                BroadcastPull(c, buf.data(), count, dt, root).run();
              }
              expect_bytes(buf, pattern(root, bytes, algo), what + " broadcast");
            }
            // gather
            std::vector<std::byte> mine = pattern(r, bytes, 1);
            std::vector<std::byte> all(r == root ? N * bytes : 0);
            c.gather(mine.data(), all.data(), count, dt, root);
            if (r == root) {
              for (int p = 0; p < n; ++p) {
                std::vector<std::byte> part(all.begin() + static_cast<ptrdiff_t>(p * bytes),
                                            all.begin() + static_cast<ptrdiff_t>((p + 1) * bytes));
                expect_bytes(part, pattern(p, bytes, 1), what + " gather");
              }
            }
            // scatter: root's block p is pattern(p, ..., 2)
            std::vector<std::byte> src;
            if (r == root) {
              for (int p = 0; p < n; ++p) {
                auto b = pattern(p, bytes, 2);
                src.insert(src.end(), b.begin(), b.end());
              }
            }
            std::vector<std::byte> got(bytes);
            c.scatter(src.data(), got.data(), count, dt, root);
            expect_bytes(got, pattern(r, bytes, 2), what + " scatter");
          }
          // all_gather, both algorithms
          for (int algo = 0; algo < 3; ++algo) {
            if (algo == 2 && !c.single_copy()) continue;
            std::vector<std::byte> mine = pattern(r, bytes, 3);
            std::vector<std::byte> all(N * bytes);
            if (algo == 0) {
              AllgatherDirect(c, mine.data(), all.data(), count, dt).run();
            } else if (algo == 1) {
              AllgatherRing(c, mine.data(), all.data(), count, dt).run();
            } else {
              AllgatherPull(c, mine.data(), all.data(), count, dt).run();
            }
            for (int p = 0; p < n; ++p) {
              std::vector<std::byte> part(all.begin() + static_cast<ptrdiff_t>(p * bytes),
                                          all.begin() + static_cast<ptrdiff_t>((p + 1) * bytes));
              expect_bytes(part, pattern(p, bytes, 3), what + " all_gather");
            }
          }
          // all_to_all: block j of rank i is pattern(i * n + j)
          std::vector<std::byte> send, recv(N * bytes);
          for (int p = 0; p < n; ++p) {
            auto b = pattern(r * n + p, bytes, 4);
            send.insert(send.end(), b.begin(), b.end());
          }
          c.all_to_all(send.data(), recv.data(), count, dt);
          for (int p = 0; p < n; ++p) {
            std::vector<std::byte> part(recv.begin() + static_cast<ptrdiff_t>(p * bytes),
                                        recv.begin() + static_cast<ptrdiff_t>((p + 1) * bytes));
            expect_bytes(part, pattern(p * n + r, bytes, 4), what + " all_to_all");
          }
          c.barrier();
        }
      }
      // send/recv around the ring with tags, then a large one.
      if (n > 1) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{3001}, size_t{600000}}) {
          std::vector<std::byte> out = pattern(r, count * 4, 5);
          std::vector<std::byte> in(count * 4);
          // Even ranks send first, odd ranks receive first (large sends block).
          int right = (r + 1) % n, left = (r + n - 1) % n;
          if (r % 2 == 0) {
            c.send(out.data(), count, DataType::kInt32, right, 7);
            c.recv(in.data(), count, DataType::kInt32, left, 7);
          } else {
            c.recv(in.data(), count, DataType::kInt32, left, 7);
            c.send(out.data(), count, DataType::kInt32, right, 7);
          }
          expect_bytes(in, pattern(left, count * 4, 5), "send/recv count " + std::to_string(count));
        }
      }
    });
  }
}

// all_to_all_v: rank r sends count(r, j) elements to rank j, with zeros,
// uneven blocks, and (scale 20000) blocks larger than the engine's chunk and
// the shared-memory rings; element k of the block r -> j holds a value that
// names r, j and k.
size_t v_count(int from, int to, size_t scale) {
  return static_cast<size_t>((from * 3 + to * 5 + 1) % 4) * scale;
}
int32_t v_value(int from, int to, size_t k) {
  return from * 1000000 + to * 100000 + static_cast<int32_t>(k % 99991);
}

TEST_P(CollectivesTest, AllToAllVUnevenAndZeroCounts) {
  for (int n : {1, 2, 3, 4}) {
    testing::run_threads(n, testing::options(GetParam(), "alltoallv"), [&](Communicator& c) {
      const int r = c.rank();
      for (size_t scale : {size_t{0}, size_t{1}, size_t{7}, size_t{20000}}) {
        std::vector<size_t> sc, rc;
        std::vector<int32_t> send, want;
        for (int j = 0; j < n; ++j) {
          sc.push_back(v_count(r, j, scale));
          rc.push_back(v_count(j, r, scale));
          for (size_t k = 0; k < sc.back(); ++k) send.push_back(v_value(r, j, k));
          for (size_t k = 0; k < rc.back(); ++k) want.push_back(v_value(j, r, k));
        }
        std::vector<int32_t> recv(want.size(), -1);
        c.all_to_all_v(send.data(), sc.data(), recv.data(), rc.data(), DataType::kInt32);
        if (recv != want) {
          throw std::runtime_error("wrong result: all_to_all_v n=" + std::to_string(n) +
                                   " scale=" + std::to_string(scale));
        }
      }
      // One-byte elements: the blocks' offsets are in elements, not bytes of 4.
      std::vector<size_t> sc(static_cast<size_t>(n)), rc(static_cast<size_t>(n));
      std::vector<int8_t> send, want;
      for (int j = 0; j < n; ++j) {
        sc[static_cast<size_t>(j)] = static_cast<size_t>(r + j);
        rc[static_cast<size_t>(j)] = static_cast<size_t>(j + r);
        for (int k = 0; k < r + j; ++k) send.push_back(static_cast<int8_t>(r * 16 + j));
        for (int k = 0; k < j + r; ++k) want.push_back(static_cast<int8_t>(j * 16 + r));
      }
      std::vector<int8_t> recv(want.size());
      c.all_to_all_v(send.data(), sc.data(), recv.data(), rc.data(), DataType::kInt8);
      if (recv != want) throw std::runtime_error("wrong result: all_to_all_v int8");
      EXPECT_EQ(c.sequence(), 5u);
    });
  }
}

TEST_P(CollectivesTest, RepeatedLargeAllReduceStaysConsistent) {
  // Many back-to-back ring all_reduces of a size that wraps the shm rings
  // several times; each rank's result must equal the reference every time.
  const int n = 3;
  const size_t count = (size_t{3} << 20) / 4 + 5;
  std::vector<std::byte> want = reference_reduce(n, count, DataType::kFloat32, ReduceOp::kSum);
  testing::run_threads(n, testing::options(GetParam(), "repeat"), [&](Communicator& c) {
    for (int it = 0; it < 4; ++it) {
      std::vector<std::byte> buf = make_input(c.rank(), count, DataType::kFloat32, ReduceOp::kSum);
      c.all_reduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
      expect_bytes(buf, want, "iteration " + std::to_string(it));
    }
    EXPECT_EQ(c.sequence(), 4u);
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, CollectivesTest, ::testing::ValuesIn(testing::transports()),
                         [](const auto& info) { return testing::transport_label(info.param); });

}  // namespace
}  // namespace cohort::collectives
