#include "cohort/collectives/flight_recorder.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace cohort::collectives {

const char* op_state_name(OpState s) {
  switch (s) {
    case OpState::kStarted:
      return "started";
    case OpState::kCompleted:
      return "completed";
    case OpState::kFailed:
      return "failed";
  }
  return "unknown";
}

namespace {
size_t power_of_two_at_least(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return n == 0 ? 0 : p;
}
}  // namespace

FlightRecorder::FlightRecorder(size_t capacity)
    : capacity_(power_of_two_at_least(capacity)),
      mask_(capacity_ > 0 ? capacity_ - 1 : 0),
      slots_(capacity_ > 0 ? std::make_unique<Slot[]>(capacity_) : nullptr) {}

void FlightRecorder::fail_newest() {
  const uint64_t n = recorded_.load(std::memory_order_acquire);
  if (capacity_ == 0 || n == 0) return;
  Slot& s = slots_[static_cast<size_t>((n - 1) & mask_)];
  const uint64_t k = s.kind.load(std::memory_order_relaxed);
  if (static_cast<OpState>(k & 0xff) == OpState::kStarted)
    finish((n - 1) & mask_, OpState::kFailed);
}

std::vector<FlightEntry> FlightRecorder::snapshot() const {
  std::vector<FlightEntry> out;
  const uint64_t n = recorded_.load(std::memory_order_acquire);
  const uint64_t kept = std::min<uint64_t>(n, capacity_);
  for (uint64_t i = n - kept; i < n; ++i) {
    const Slot& s = slots_[static_cast<size_t>(i & mask_)];
    const uint64_t k = s.kind.load(std::memory_order_acquire);
    FlightEntry e;
    e.desc.kind = static_cast<OpKind>((k >> 8) & 0xff);
    e.desc.dtype = static_cast<DataType>((k >> 16) & 0xff);
    e.desc.op = static_cast<ReduceOp>((k >> 24) & 0xff);
    e.desc.algo = static_cast<Algo>((k >> 32) & 0xff);
    e.state = static_cast<OpState>(k & 0xff);
    e.desc.seq = s.seq.load(std::memory_order_relaxed);
    e.desc.count = s.count.load(std::memory_order_relaxed);
    const uint64_t rt = s.root_tag.load(std::memory_order_relaxed);
    e.desc.root = static_cast<int32_t>(static_cast<uint32_t>(rt >> 32));
    e.desc.tag = static_cast<uint32_t>(rt);
    const int64_t w = s.waiting_ns.load(std::memory_order_relaxed);
    if (w != 0) {
      e.waiting_since =
          std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(w));
    }
    out.push_back(e);
  }
  return out;
}

namespace {

std::string what(const OpDesc& d) {
  std::string s =
      fmt::format("{} #{} ({} {}", op_kind_name(d.kind), d.seq, d.count, dtype_name(d.dtype));
  if (d.root >= 0) s += fmt::format(", root {}", d.root);
  return s + ")";
}

}  // namespace

std::string FlightRecorder::to_json(int rank, const std::string& group) const {
  nlohmann::json doc;
  doc["rank"] = rank;
  doc["group"] = group;
  doc["capacity"] = capacity_;
  nlohmann::json list = nlohmann::json::array();
  // Steady times become wall-clock for the reader (one offset, read now).
  const auto steady_now = std::chrono::steady_clock::now();
  const auto wall_now = std::chrono::system_clock::now();
  for (const FlightEntry& e : snapshot()) {
    nlohmann::json j;
    j["seq"] = e.desc.seq;
    j["op"] = op_kind_name(e.desc.kind);
    j["count"] = e.desc.count;
    j["dtype"] = std::string(dtype_name(e.desc.dtype));
    j["reduce"] = static_cast<int>(e.desc.op);
    j["root"] = e.desc.root;
    j["algo"] = algo_name(e.desc.algo);
    j["tag"] = e.desc.tag;
    j["state"] = op_state_name(e.state);
    if (e.waiting_since) {
      const auto wall = wall_now - (steady_now - *e.waiting_since);
      j["waiting_since_unix_us"] =
          std::chrono::duration_cast<std::chrono::microseconds>(wall.time_since_epoch()).count();
    }
    list.push_back(std::move(j));
  }
  doc["entries"] = std::move(list);
  return doc.dump();
}

std::string FlightRecorder::summary() const {
  const std::vector<FlightEntry> all = snapshot();
  if (all.empty()) return capacity_ == 0 ? "keeps no record (recorder off)" : "no collective yet";
  const FlightEntry& last = all.back();
  std::string waited;
  if (last.waiting_since) {
    waited = fmt::format(
        ", waiting {:.1f} s",
        std::chrono::duration<double>(std::chrono::steady_clock::now() - *last.waiting_since)
            .count());
  }
  switch (last.state) {
    case OpState::kStarted:
      return fmt::format("is in {}{}", what(last.desc), waited);
    case OpState::kFailed:
      return fmt::format("failed in {}", what(last.desc));
    case OpState::kCompleted:
      break;
  }
  return fmt::format("last completed {}", what(last.desc));
}

}  // namespace cohort::collectives
