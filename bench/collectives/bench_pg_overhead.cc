// bench_pg_overhead: what ProcessGroup adds to one op, measured without a
// peer (1 rank, so no transport and no waiting on another process: the
// difference is bookkeeping alone, and it is stable on a loaded machine).
// Times a 4-byte all_reduce on a raw Communicator, through a ProcessGroup
// blocking (the inline path), and async_op + wait (the queued path), in
// alternating rounds; prints each round's ns per op and the medians.
//
//   cohort_bench_pg_overhead [ROUNDS [OPS_PER_ROUND]]   (default 9 200000)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cohort/collectives/communicator.h"
#include "cohort/distributed/process_group.h"
#include "cohort/rendezvous/hash_store.h"

using namespace cohort;
using Clock = std::chrono::steady_clock;

namespace {

template <typename Op>
double ns_per_op(int ops, Op op) {
  auto start = Clock::now();
  for (int i = 0; i < ops; ++i) op();
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / ops;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 9;
  int ops = argc > 2 ? std::atoi(argv[2]) : 200000;
  if (rounds < 1 || ops < 1) {
    std::fprintf(stderr, "usage: cohort_bench_pg_overhead [ROUNDS [OPS_PER_ROUND]]\n");
    return 2;
  }
  auto store = std::make_shared<rendezvous::HashStore>();
  collectives::CommunicatorOptions co;
  co.name = "raw";
  auto comm = collectives::Communicator::create(*store, 0, 1, co);
  distributed::ProcessGroupOptions po;
  po.name = "pg";
  auto pg = distributed::ProcessGroup::create(distributed::BackendKind::kNative, store, 0, 1, po);
  float v = 1.0f;
  using distributed::DataType;
  auto raw = [&] { comm->all_reduce(&v, 1, DataType::kFloat32, collectives::ReduceOp::kSum); };
  auto blocking = [&] { pg->all_reduce(&v, 1, DataType::kFloat32); };
  auto queued = [&] {
    pg->all_reduce(&v, 1, DataType::kFloat32, {}, distributed::async_op).wait();
  };
  ns_per_op(ops / 10 + 1, raw);
  ns_per_op(ops / 10 + 1, blocking);
  ns_per_op(ops / 10 + 1, queued);
  std::vector<double> r, b, q;
  std::printf("# all_reduce 4 B, 1 rank, %d ops per round: ns per op\n", ops);
  std::printf("%6s %10s %14s %14s\n", "round", "raw", "pg blocking", "pg async+wait");
  for (int i = 0; i < rounds; ++i) {
    // Alternate the order so that drift in the machine's load falls on all three.
    if (i % 2 == 0) {
      r.push_back(ns_per_op(ops, raw));
      b.push_back(ns_per_op(ops, blocking));
      q.push_back(ns_per_op(ops, queued));
    } else {
      q.push_back(ns_per_op(ops, queued));
      b.push_back(ns_per_op(ops, blocking));
      r.push_back(ns_per_op(ops, raw));
    }
    std::printf("%6d %10.1f %14.1f %14.1f\n", i, r.back(), b.back(), q.back());
  }
  double mr = median(r), mb = median(b), mq = median(q);
  std::printf("median %10.1f %14.1f %14.1f\n", mr, mb, mq);
  std::printf("ProcessGroup adds %.1f ns (blocking, inline) and %.1f ns (async_op + wait)\n",
              mb - mr, mq - mr);
  distributed::ProcessGroupStats s = pg->stats();
  std::printf("ops run inline %llu, queued %llu\n", static_cast<unsigned long long>(s.ops_inline),
              static_cast<unsigned long long>(s.ops_queued));
  return 0;
}
