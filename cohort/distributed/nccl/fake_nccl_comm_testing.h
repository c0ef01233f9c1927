// Test double of the NCCL communicator (not installed): FakeNcclComm is one
// rank of a FakeNcclWorld whose ranks are threads of the test. "Device"
// memory is host memory (core/fake_device_testing.h), so an op runs on the
// host: a collective once every rank has called it (the last one to arrive
// computes it for all, with the collectives layer's reduction kernels), a
// send at once into the peer's mailbox, a recv when its message is there;
// between group_start and group_end the sends go first, then the recvs.
// With `hang` set, every op is accepted and never runs (with the fake
// device's events left incomplete, that is an op stuck on the GPU).
// `async_error` is what every rank's async_error() returns. Every wait is
// bounded by `wait_limit` (then the call throws).
// Thread safety: a world is shared by its ranks' threads; each comm is used
// by its rank's threads as NcclComm allows.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/collectives/reduce_kernels.h"
#include "cohort/distributed/nccl/nccl_comm.h"

namespace cohort::distributed::testing {

using collectives::DataType;
using collectives::ReduceOp;

struct FakeNcclWorld {
  explicit FakeNcclWorld(int n) : size(n) {}

  // One collective call of one rank.
  struct Call {
    std::string name;
    const void* send = nullptr;
    void* recv = nullptr;
    size_t count = 0;
    DataType dtype = DataType::kFloat32;
    ReduceOp op = ReduceOp::kSum;
    int root = 0;
  };
  struct Round {
    std::vector<Call> calls;
    std::vector<bool> arrived;
    int count = 0;
    bool done = false;
    std::string error;  // ranks disagreed
  };

  const int size;
  std::chrono::milliseconds wait_limit{10000};
  std::atomic<bool> hang{false};
  std::atomic<int> aborts{0};
  std::atomic<int> calls{0};  // communicator calls, all ranks
  // Called (rank, call name) before each call is carried out.
  std::function<void(int, const std::string&)> on_call;

  std::mutex mu;
  std::condition_variable cv;
  NcclAsyncError async_error;        // (mu)
  std::map<uint64_t, Round> rounds;  // the k-th collective of every rank (mu)
  std::map<std::pair<int, int>, std::deque<std::vector<std::byte>>> mail;  // (src, dst) (mu)

  void set_async_error(NcclAsyncError e) {
    std::lock_guard<std::mutex> lk(mu);
    async_error = std::move(e);
  }
};

class FakeNcclComm final : public NcclComm {
 public:
  FakeNcclComm(std::shared_ptr<FakeNcclWorld> world, int rank)
      : world_(std::move(world)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return world_->size; }

  void all_reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                  void*) override {
    collective({"all_reduce", send, recv, count, dtype, op, 0});
  }
  void broadcast(const void* send, void* recv, size_t count, DataType dtype, int root,
                 void*) override {
    collective({"broadcast", send, recv, count, dtype, ReduceOp::kSum, root});
  }
  void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root,
              void*) override {
    collective({"reduce", send, recv, count, dtype, op, root});
  }
  void all_gather(const void* send, void* recv, size_t count, DataType dtype, void*) override {
    collective({"all_gather", send, recv, count, dtype, ReduceOp::kSum, 0});
  }
  void reduce_scatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                      void*) override {
    collective({"reduce_scatter", send, recv, count, dtype, op, 0});
  }
  void send(const void* data, size_t count, DataType dtype, int peer, void*) override {
    enter("send");
    if (world_->hang) return;
    Message m{data, nullptr, count * collectives::element_size(dtype), peer};
    if (grouped_) {
      sends_.push_back(m);
    } else {
      post(m);
    }
  }
  void recv(void* data, size_t count, DataType dtype, int peer, void*) override {
    enter("recv");
    if (world_->hang) return;
    Message m{nullptr, data, count * collectives::element_size(dtype), peer};
    if (grouped_) {
      recvs_.push_back(m);
    } else {
      take(m);
    }
  }
  void group_start() override {
    enter("group_start");
    grouped_ = true;
  }
  void group_end() override {
    enter("group_end");
    grouped_ = false;
    std::vector<Message> sends = std::move(sends_), recvs = std::move(recvs_);
    sends_.clear();
    recvs_.clear();
    for (const Message& m : sends) post(m);
    for (const Message& m : recvs) take(m);
  }

  NcclAsyncError async_error() override {
    std::lock_guard<std::mutex> lk(world_->mu);
    if (aborted_) return {false, false, "the fake communicator was aborted"};
    return world_->async_error;
  }
  void abort() override {
    {
      std::lock_guard<std::mutex> lk(world_->mu);
      if (aborted_) return;
      aborted_ = true;
    }
    ++world_->aborts;
    world_->cv.notify_all();
  }
  bool aborted() const {
    std::lock_guard<std::mutex> lk(world_->mu);
    return aborted_;
  }

 private:
  struct Message {
    const void* src;
    void* dst;
    size_t bytes;
    int peer;
  };

  void enter(const std::string& name) {
    {
      std::lock_guard<std::mutex> lk(world_->mu);
      if (aborted_)
        throw Error("fake nccl: rank " + std::to_string(rank_) + ": " + name +
                    " on an aborted communicator");
    }
    ++world_->calls;
    if (world_->on_call) world_->on_call(rank_, name);
  }

  template <typename Pred>
  void wait(std::unique_lock<std::mutex>& lk, const char* what, Pred pred) {
    if (!world_->cv.wait_for(lk, world_->wait_limit, [&] { return aborted_ || pred(); })) {
      throw TimeoutError(std::string("fake nccl: rank ") + std::to_string(rank_) +
                         " waited too long for " + what);
    }
    if (aborted_) throw Error("fake nccl: aborted while waiting for " + std::string(what));
  }

  void post(const Message& m) {
    const auto* p = static_cast<const std::byte*>(m.src);
    {
      std::lock_guard<std::mutex> lk(world_->mu);
      world_->mail[{rank_, m.peer}].emplace_back(p, p + m.bytes);
    }
    world_->cv.notify_all();
  }
  void take(const Message& m) {
    std::unique_lock<std::mutex> lk(world_->mu);
    auto& box = world_->mail[{m.peer, rank_}];
    wait(lk, "a message", [&] { return !box.empty(); });
    COHORT_CHECK(box.front().size() == m.bytes,
                 "fake nccl: rank {} expected {} bytes from rank {}, got {}", rank_, m.bytes,
                 m.peer, box.front().size());
    if (m.bytes) std::memcpy(m.dst, box.front().data(), m.bytes);
    box.pop_front();
  }

  void collective(FakeNcclWorld::Call c) {
    enter(c.name);
    if (world_->hang) return;
    const uint64_t k = rounds_++;
    std::unique_lock<std::mutex> lk(world_->mu);
    FakeNcclWorld::Round& round = world_->rounds[k];
    if (round.calls.empty()) {
      round.calls.resize(static_cast<size_t>(world_->size));
      round.arrived.assign(static_cast<size_t>(world_->size), false);
    }
    round.calls[static_cast<size_t>(rank_)] = c;
    round.arrived[static_cast<size_t>(rank_)] = true;
    if (++round.count == world_->size) {
      compute(round);
      round.done = true;
      world_->cv.notify_all();
    } else {
      wait(lk, c.name.c_str(), [&] { return round.done; });
    }
    if (!round.error.empty()) throw Error(round.error);
  }

  // Runs round's collective for every rank (world_->mu held).
  void compute(FakeNcclWorld::Round& round) {
    const auto& calls = round.calls;
    const FakeNcclWorld::Call& c0 = calls[0];
    for (const auto& c : calls) {
      if (c.name != c0.name || c.count != c0.count || c.dtype != c0.dtype || c.root != c0.root) {
        round.error = "fake nccl: ranks disagree: " + c0.name + " and " + c.name;
        return;
      }
    }
    const int n = world_->size;
    const size_t es = collectives::element_size(c0.dtype);
    const size_t block = c0.count * es;
    auto reduced = [&](size_t elements, auto src_of) {
      std::vector<std::byte> acc(elements * es);
      if (!acc.empty()) std::memcpy(acc.data(), src_of(0), acc.size());
      for (int r = 1; r < n; ++r) {
        collectives::reduce_into(acc.data(), src_of(r), elements, c0.dtype, c0.op);
      }
      if (c0.op == ReduceOp::kAvg) collectives::finish_avg(acc.data(), elements, c0.dtype, n);
      return acc;
    };
    auto at = [](const void* p, size_t off) { return static_cast<const std::byte*>(p) + off; };
    if (c0.name == "all_reduce" || c0.name == "reduce") {
      auto acc = reduced(c0.count, [&](int r) { return calls[static_cast<size_t>(r)].send; });
      for (int r = 0; r < n; ++r) {
        if (c0.name == "reduce" && r != c0.root) continue;
        if (block) std::memcpy(calls[static_cast<size_t>(r)].recv, acc.data(), block);
      }
    } else if (c0.name == "broadcast") {
      std::vector<std::byte> v(at(calls[static_cast<size_t>(c0.root)].send, 0),
                               at(calls[static_cast<size_t>(c0.root)].send, block));
      for (const auto& c : calls) {
        if (block) std::memcpy(c.recv, v.data(), block);
      }
    } else if (c0.name == "all_gather") {
      std::vector<std::byte> all(block * static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) {
        if (block) std::memcpy(all.data() + block * r, calls[static_cast<size_t>(r)].send, block);
      }
      for (const auto& c : calls) {
        if (!all.empty()) std::memcpy(c.recv, all.data(), all.size());
      }
    } else if (c0.name == "reduce_scatter") {
      auto acc = reduced(c0.count * static_cast<size_t>(n),
                         [&](int r) { return calls[static_cast<size_t>(r)].send; });
      for (int r = 0; r < n; ++r) {
        if (block) std::memcpy(calls[static_cast<size_t>(r)].recv, acc.data() + block * r, block);
      }
    }
  }

  std::shared_ptr<FakeNcclWorld> world_;
  int rank_;
  uint64_t rounds_ = 0;  // collectives this rank called
  bool grouped_ = false;
  std::vector<Message> sends_, recvs_;
  bool aborted_ = false;  // (world_->mu)
};

}  // namespace cohort::distributed::testing
