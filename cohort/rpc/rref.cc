#include "cohort/rpc/rref.h"

#include <cstring>

#include "cohort/base/error.h"
#include "cohort/rpc/agent_core.h"
#include "cohort/rpc/rpc_agent.h"

namespace cohort::rpc {

namespace {

constexpr uint32_t kRRefMagic = 0x46455252;  // "RREF"

struct __attribute__((packed)) WireRRef {
  uint32_t magic;
  int32_t owner;
  uint64_t id;
};

const detail::RRefState& checked(const std::shared_ptr<detail::RRefState>& s) {
  COHORT_CHECK(s != nullptr, "rpc: use of an invalid (default-constructed) RRef");
  return *s;
}

}  // namespace

RRefId RRef::id() const { return checked(state_).id; }
int RRef::owner() const { return checked(state_).owner; }
std::string RRef::owner_name() const {
  const auto& s = checked(state_);
  return s.core->worker_name(s.owner);
}
bool RRef::is_owner() const {
  const auto& s = checked(state_);
  return s.owner == s.core->rank();
}
Future RRef::created() const { return checked(state_).created; }

Message RRef::to_here(Duration timeout) const {
  const auto& s = checked(state_);
  return s.core
      ->call(s.owner, detail::FrameKind::kFetch, fmt::format("to_here(rref {:#x})", s.id), s.id,
             Message(), timeout)
      .wait();
}

std::string RRef::serialize() const {
  const auto& s = checked(state_);
  // One more reference on the owner before the bytes travel, confirmed, so
  // the owner's count cannot reach zero while they are in flight.
  s.core
      ->call(s.owner, detail::FrameKind::kRefInc, fmt::format("serialize(rref {:#x})", s.id), s.id,
             Message(), Duration::zero())
      .wait();
  WireRRef w{kRRefMagic, s.owner, s.id};
  return std::string(reinterpret_cast<const char*>(&w), sizeof(w));
}

RRef RRef::deserialize(RpcAgent& agent, const std::string& bytes) {
  WireRRef w{};
  COHORT_CHECK(bytes.size() == sizeof(w),
               "rpc: RRef::deserialize on worker '{}': {} bytes, "
               "expected {} (not an RRef::serialize() result)",
               agent.name(), bytes.size(), sizeof(w));
  std::memcpy(&w, bytes.data(), sizeof(w));
  int owner = w.owner;
  COHORT_CHECK(w.magic == kRRefMagic && owner >= 0 && owner < agent.world_size(),
               "rpc: RRef::deserialize on worker '{}': not an RRef::serialize() result of this "
               "group (owner rank {})",
               agent.name(), owner);
  auto state = std::make_shared<detail::RRefState>();
  state->core = agent.core();
  state->id = w.id;
  state->owner = owner;
  state->created = Future::make();
  state->created.set_value(Message());
  return RRef(std::move(state));
}

}  // namespace cohort::rpc
