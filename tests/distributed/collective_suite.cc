// The collective correctness suite as one rank of a job: every collective
// through a ProcessGroup, checked against a serial reference, over sizes 0,
// 1, odd counts, counts not divisible by the world size and ones large
// enough for the pipelined algorithms, several dtypes and reductions,
// send/recv and recv_any, subgroups, tensor overloads and async issue. The
// same program runs under `cohort run` (native backend, env://) and under
// `mpirun` (mpi backend), so both backends pass the same cases.
//
//   collective_suite --backend native|mpi [--expect-transport shm|tcp]
//
// Exits 0 when every case passed; otherwise prints the first failed case
// (rank, op, count, dtype, reduction) and exits 1.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/distributed/process_group.h"
#include "tests/distributed/suite_values.h"

namespace cohort::suite {
namespace {

using distributed::ProcessGroup;
using distributed::Work;

const DataType kAllDtypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
                               DataType::kInt64,   DataType::kUInt8,   DataType::kBFloat16,
                               DataType::kFloat16, DataType::kInt8,    DataType::kBool};
// Paired with the dtypes through collectives::reduction_defined (the others
// are refused by the call: refusals()).
const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAvg,  ReduceOp::kProduct, ReduceOp::kMin,
                            ReduceOp::kMax, ReduceOp::kBand, ReduceOp::kBor,     ReduceOp::kBxor};

struct Case {
  DataType dtype;
  ReduceOp op;
};

std::string describe(const char* what, size_t count, DataType dt, ReduceOp op) {
  return std::string(what) + " count=" + std::to_string(count) +
         " dtype=" + std::string(collectives::dtype_name(dt)) +
         " op=" + std::string(collectives::reduce_op_name(op));
}

void expect(bool ok, const std::string& what) {
  if (!ok) throw Error("wrong result: " + what);
}

class Suite {
 public:
  explicit Suite(ProcessGroup& pg) : pg_(pg), n_(pg.size()), r_(pg.rank()) {}

  // Counts: empty, one, odd, not divisible by the world size, and large
  // enough (with 4-byte elements) to take the ring / chunked algorithms.
  std::vector<size_t> counts(size_t large) const {
    return {0, 1, 7, static_cast<size_t>(13 * n_ + 1), large};
  }

  void all_reduce() {
    for (size_t count : counts(70001)) {
      for (DataType dt : kAllDtypes) {
        for (ReduceOp op : kAllOps) {
          if (collectives::reduction_defined(op, dt)) check_all_reduce(count, dt, op);
        }
      }
    }
  }

  void broadcast() {
    for (size_t count : counts(70001)) {
      for (int root : {0, n_ - 1}) {
        for (DataType dt : {DataType::kInt32, DataType::kBFloat16}) {
          Values v = make_input(r_, count, dt, ReduceOp::kSum);
          pg_.broadcast(v.data(), count, dt, {.root = root});
          expect(
              v == make_input(root, count, dt, ReduceOp::kSum),
              describe("broadcast", count, dt, ReduceOp::kSum) + " root=" + std::to_string(root));
        }
      }
    }
  }

  void reduce() {
    int root = n_ / 2;
    for (size_t count : counts(70001)) {
      for (Case c :
           {Case{DataType::kFloat32, ReduceOp::kSum}, Case{DataType::kInt64, ReduceOp::kMax},
            Case{DataType::kFloat64, ReduceOp::kAvg}}) {
        Values v = make_input(r_, count, c.dtype, c.op);
        pg_.reduce(v.data(), count, c.dtype, {.op = c.op, .root = root});
        // Off the root the data is unchanged.
        Values want = r_ == root ? reference_reduce(n_, 0, count, c.dtype, c.op)
                                 : make_input(r_, count, c.dtype, c.op);
        expect(v == want, describe("reduce", count, c.dtype, c.op));
      }
    }
  }

  void all_gather_and_gather() {
    for (size_t count : counts(30001)) {
      for (DataType dt : {DataType::kFloat32, DataType::kInt64, DataType::kUInt8}) {
        Values in = make_input(r_, count, dt, ReduceOp::kSum);
        Values all(dt, count * static_cast<size_t>(n_));
        pg_.all_gather(in.data(), all.data(), count, dt);
        expect(all == gathered(count, dt), describe("all_gather", count, dt, ReduceOp::kSum));
        Values got(dt, count * static_cast<size_t>(n_));
        int root = n_ - 1;
        pg_.gather(in.data(), r_ == root ? got.data() : nullptr, count, dt, {.root = root});
        if (r_ == root) {
          expect(got == gathered(count, dt), describe("gather", count, dt, ReduceOp::kSum));
        }
      }
    }
  }

  void scatter() {
    for (size_t count : counts(30001)) {
      for (int root : {0, n_ / 2}) {
        DataType dt = DataType::kFloat32;
        Values send = gathered(count, dt);  // block j = rank j's input
        Values got(dt, count);
        pg_.scatter(r_ == root ? send.data() : nullptr, got.data(), count, dt, {.root = root});
        expect(got == make_input(r_, count, dt, ReduceOp::kSum),
               describe("scatter", count, dt, ReduceOp::kSum) + " root=" + std::to_string(root));
      }
    }
  }

  void reduce_scatter() {
    for (size_t count : counts(30001)) {
      for (DataType dt : kAllDtypes) {
        for (ReduceOp op : kAllOps) {
          if (!collectives::reduction_defined(op, dt)) continue;
          size_t total = count * static_cast<size_t>(n_);
          Values send = make_input(r_, total, dt, op);
          Values got(dt, count);
          pg_.reduce_scatter(send.data(), got.data(), count, dt, {.op = op});
          expect(got == reference_reduce(n_, static_cast<size_t>(r_) * count, count, dt, op),
                 describe("reduce_scatter", count, dt, op));
        }
      }
    }
  }

  void all_to_all() {
    for (size_t count : counts(20001)) {
      for (DataType dt : {DataType::kInt32, DataType::kFloat64}) {
        size_t total = count * static_cast<size_t>(n_);
        Values send(dt, total), got(dt, total), want(dt, total);
        for (size_t j = 0; j < static_cast<size_t>(n_); ++j) {
          for (size_t i = 0; i < count; ++i) {
            send.set(j * count + i, 1000.0 * r_ + 10.0 * static_cast<double>(j) + i % 10);
            want.set(j * count + i, 1000.0 * static_cast<double>(j) + 10.0 * r_ + i % 10);
          }
        }
        pg_.all_to_all(send.data(), got.data(), count, dt);
        expect(got == want, describe("all_to_all", count, dt, ReduceOp::kSum));
      }
    }
  }

  // Uneven counts with zeros: rank r sends ((r + 2j) % 3) * scale elements
  // to rank j, each naming sender, receiver and position.
  void all_to_all_v() {
    for (size_t scale : {size_t{0}, size_t{1}, size_t{5}, size_t{9001}}) {
      for (DataType dt : {DataType::kInt32, DataType::kInt8}) {
        auto count = [&](int from, int to) {
          return static_cast<size_t>((from + 2 * to) % 3) * scale;
        };
        auto value = [&](int from, int to, size_t i) {
          return dt == DataType::kInt8 ? 10.0 * from + to : 1000.0 * from + 10.0 * to + i % 10;
        };
        std::vector<size_t> sc, rc;
        size_t send_total = 0, recv_total = 0;
        for (int j = 0; j < n_; ++j) {
          sc.push_back(count(r_, j));
          rc.push_back(count(j, r_));
          send_total += sc.back();
          recv_total += rc.back();
        }
        Values send(dt, send_total), got(dt, recv_total), want(dt, recv_total);
        size_t s = 0, w = 0;
        for (int j = 0; j < n_; ++j) {
          for (size_t i = 0; i < count(r_, j); ++i) send.set(s++, value(r_, j, i));
          for (size_t i = 0; i < count(j, r_); ++i) want.set(w++, value(j, r_, i));
        }
        pg_.all_to_all_v(send.data(), sc, got.data(), rc, dt);
        expect(got == want, describe("all_to_all_v", scale, dt, ReduceOp::kSum));
      }
    }
  }

  // Calls refused on every rank alike, before anything is issued: the
  // group goes on working.
  void refusals() {
    float f[4] = {};
    for (ReduceOp op : {ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor}) {
      refused([&] { pg_.all_reduce(f, 4, DataType::kFloat32, {.op = op}); },
              "needs an integer or bool dtype, got float32");
    }
    uint8_t b[4] = {};
    refused([&] { pg_.all_reduce(b, 4, DataType::kBool, {.op = ReduceOp::kAvg}); },
            "reduction 'avg' needs a dtype other than bool, got bool");
    int32_t x = 1;
    pg_.all_reduce(&x, 1, DataType::kInt32);
    expect(x == n_, "all_reduce after refused calls");
  }

  // mpi: counts that disagree are found by the counts' allgather on every
  // rank alike (a mismatch, not a hang or a truncation), and the group goes
  // on working. (native: a mismatch breaks the group; its unit tests cover it.)
  void all_to_all_v_mismatch() {
    if (n_ == 1 || pg_.backend() != distributed::BackendKind::kMpi) return;
    std::vector<size_t> sc(static_cast<size_t>(n_), 1), rc = sc;
    if (r_ == 0) sc[1] = 2;
    int32_t send[16] = {}, got[16] = {};
    refused([&] { pg_.all_to_all_v(send, sc, got, rc, DataType::kInt32); },
            "rank 0 sends 2 elements to rank 1 (its send_counts[1]), but rank 1 expects 1 from "
            "rank 0 (its recv_counts[0])");
    pg_.barrier();
  }

  void send_recv() {
    if (n_ == 1) return;
    int next = (r_ + 1) % n_, prev = (r_ + n_ - 1) % n_;
    for (size_t count : {size_t{0}, size_t{1}, size_t{100003}}) {
      DataType dt = DataType::kFloat32;
      Values out = make_input(r_, count, dt, ReduceOp::kSum);
      Values in(dt, count);
      auto tag = static_cast<uint32_t>(count % 1000);
      // Even ranks send first, odd ranks receive first: no cycle of senders.
      Work a, b;
      if (r_ % 2 == 0) {
        a = pg_.send(out.data(), count, dt, next, {.tag = tag}, distributed::async_op);
        b = pg_.recv(in.data(), count, dt, prev, {.tag = tag}, distributed::async_op);
      } else {
        b = pg_.recv(in.data(), count, dt, prev, {.tag = tag}, distributed::async_op);
        a = pg_.send(out.data(), count, dt, next, {.tag = tag}, distributed::async_op);
      }
      a.wait();
      b.wait();
      expect(in == make_input(prev, count, dt, ReduceOp::kSum),
             describe("send/recv", count, dt, ReduceOp::kSum));
    }
  }

  // Every other rank sends to rank 0, which takes the messages with
  // recv_any in whatever order they come: each sender once, with its payload
  // and rank; small and large counts, raw buffers blocking, tensors async.
  void recv_any() {
    if (n_ == 1) return;
    const DataType dt = DataType::kFloat32;
    for (size_t count : {size_t{0}, size_t{1}, size_t{100003}}) {
      const auto tag = static_cast<uint32_t>(20 + count % 1000);
      if (r_ != 0) {
        Values out = make_input(r_, count, dt, ReduceOp::kSum);
        pg_.send(out.data(), count, dt, 0, {.tag = tag});
        continue;
      }
      std::vector<int> seen;
      for (int i = 1; i < n_; ++i) {
        Values in(dt, count);
        int src = pg_.recv_any(in.data(), count, dt, {.tag = tag});
        expect(src > 0 && src < n_ && in == make_input(src, count, dt, ReduceOp::kSum),
               describe("recv_any", count, dt, ReduceOp::kSum) + " from " + std::to_string(src));
        seen.push_back(src);
      }
      check_each_sender_once(seen, "recv_any");
    }
    if (r_ != 0) {
      pg_.send(Tensor::full({3}, static_cast<double>(r_)), 0, {.tag = 30});
    } else {
      std::vector<Tensor> got;
      std::vector<Work> works;
      for (int i = 1; i < n_; ++i) {
        got.push_back(Tensor::zeros({3}));
        works.push_back(pg_.recv_any(got.back(), {.tag = 30}, distributed::async_op));
      }
      std::vector<int> seen;
      for (size_t i = 0; i < works.size(); ++i) {
        works[i].wait();
        int src = works[i].source_rank();
        expect(got[i].to_vector<float>() == std::vector<float>(3, static_cast<float>(src)),
               "async tensor recv_any from " + std::to_string(src));
        seen.push_back(src);
      }
      check_each_sender_once(seen, "async recv_any");
    }
    pg_.barrier();
  }

  void subgroups() {
    std::vector<int> evens, odds;
    for (int r = 0; r < n_; ++r) (r % 2 == 0 ? evens : odds).push_back(r);
    auto even = pg_.new_group(evens);
    auto odd = odds.empty() ? nullptr : pg_.new_group(odds);
    auto& mine = r_ % 2 == 0 ? even : odd;
    if (!mine) throw Error("new_group returned null on a member");
    if ((r_ % 2 == 0 ? odd : even) != nullptr)
      throw Error("new_group returned a group to a non-member");
    const std::vector<int>& members = r_ % 2 == 0 ? evens : odds;
    int64_t v = r_;
    mine->all_reduce(&v, 1, DataType::kInt64);
    int64_t want = 0;
    for (int m : members) want += m;
    expect(v == want, "subgroup all_reduce");
    int32_t b = mine->rank() == 0 ? 99 : r_;
    mine->broadcast(&b, 1, DataType::kInt32);
    expect(b == 99, "subgroup broadcast");
    expect(mine->world_ranks() == members, "subgroup world_ranks");
    mine->destroy();
    // The world group still works after the subgroups.
    pg_.barrier();
  }

  void tensors_and_async() {
    Tensor t = Tensor::full({3, 5}, static_cast<double>(r_ + 1));
    pg_.all_reduce(t);
    expect(t.to_vector<float>() == std::vector<float>(15, static_cast<float>(n_ * (n_ + 1) / 2)),
           "tensor all_reduce");
    Tensor in = Tensor::full({2}, static_cast<double>(r_), kInt64);
    Tensor out = Tensor::zeros({n_, 2}, kInt64);
    pg_.all_gather_into_tensor(out, in);
    std::vector<int64_t> g = out.to_vector<int64_t>();
    for (size_t i = 0; i < g.size(); ++i)
      expect(g[i] == static_cast<int64_t>(i / 2), "tensor all_gather");
    // Many ops in flight, waited in reverse order.
    std::vector<std::vector<int32_t>> bufs(10, std::vector<int32_t>(1001, r_));
    std::vector<Work> works;
    for (auto& b : bufs)
      works.push_back(
          pg_.all_reduce(b.data(), b.size(), DataType::kInt32, {}, distributed::async_op));
    for (auto it = works.rbegin(); it != works.rend(); ++it) it->wait();
    for (auto& b : bufs)
      expect(b == std::vector<int32_t>(1001, n_ * (n_ - 1) / 2), "async all_reduce");
    for (int i = 0; i < 3; ++i) pg_.barrier();
  }

 private:
  // call() must throw InvalidArgument with `part` in its message.
  void refused(const std::function<void()>& call, const std::string& part) {
    try {
      call();
    } catch (const InvalidArgument& e) {
      expect(std::string(e.what()).find(part) != std::string::npos,
             std::string("refusal names the problem: ") + e.what());
      return;
    }
    throw Error("wrong result: accepted a call that must be refused (" + part + ")");
  }

  void check_all_reduce(size_t count, DataType dt, ReduceOp op) {
    Values v = make_input(r_, count, dt, op);
    pg_.all_reduce(v.data(), count, dt, {.op = op});
    expect(v == reference_reduce(n_, 0, count, dt, op), describe("all_reduce", count, dt, op));
  }

  void check_each_sender_once(std::vector<int> seen, const std::string& what) const {
    std::sort(seen.begin(), seen.end());
    for (int i = 1; i < n_; ++i) {
      expect(seen[static_cast<size_t>(i - 1)] == i, what + ": not every sender exactly once");
    }
  }

  // Every rank's make_input(sum) concatenated in rank order.
  Values gathered(size_t count, DataType dt) const {
    Values all(dt, count * static_cast<size_t>(n_));
    for (int j = 0; j < n_; ++j) {
      for (size_t i = 0; i < count; ++i) {
        all.set(static_cast<size_t>(j) * count + i, input_value(j, i, ReduceOp::kSum, dt));
      }
    }
    return all;
  }

  ProcessGroup& pg_;
  int n_;
  int r_;
};

int run(int argc, char** argv) {
  std::string backend = "native", expect_transport;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--backend") == 0) backend = argv[i + 1];
    if (std::strcmp(argv[i], "--expect-transport") == 0) expect_transport = argv[i + 1];
  }
  auto pg = distributed::init_process_group(backend, "env://", -1, -1, std::chrono::seconds(120));
  int rank = pg->rank();
  try {
    if (!expect_transport.empty()) {
      for (int p = 0; p < pg->size(); ++p) {
        if (p != rank && pg->transport_name(p) != expect_transport) {
          throw Error("transport to rank " + std::to_string(p) + " is " + pg->transport_name(p) +
                      ", expected " + expect_transport);
        }
      }
    }
    Suite s(*pg);
    s.all_reduce();
    s.broadcast();
    s.reduce();
    s.all_gather_and_gather();
    s.scatter();
    s.reduce_scatter();
    s.all_to_all();
    s.all_to_all_v();
    s.refusals();
    s.all_to_all_v_mismatch();
    s.send_recv();
    s.recv_any();
    s.subgroups();
    s.tensors_and_async();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collective_suite: rank %d of %d (%s): FAILED: %s\n", rank, pg->size(),
                 backend.c_str(), e.what());
    // Tell the peers, so they fail at once instead of waiting for this rank.
    pg->abort(std::string("rank ") + std::to_string(rank) + " failed the suite");
    return 1;
  }
  if (rank == 0) {
    std::printf("collective_suite: %s backend, %d ranks: all cases passed\n", backend.c_str(),
                pg->size());
  }
  distributed::destroy_process_group(pg);
  return 0;
}

}  // namespace
}  // namespace cohort::suite

int main(int argc, char** argv) {
  try {
    return cohort::suite::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collective_suite: %s\n", e.what());
    return 1;
  }
}
