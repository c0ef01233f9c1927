// RRef: a reference to a value that lives on one worker (its owner), made by
// RpcAgent::remote (PyTorch's torch.distributed.rpc.RRef). The owner ran the
// function and keeps its result (an opaque Message) under the RRef's id; any
// worker holding an RRef can fetch it (to_here) or pass the id to a function
// on the owner, which looks the value up with RpcAgent::local_value(id).
//
// Reference counting across workers: the owner keeps the value while any
// user reference exists anywhere. Copies of an RRef object within a process
// share one reference. serialize() adds one reference on the owner (a short
// synchronous message, so the count can never drop to zero while the bytes
// travel); RRef::deserialize takes over that reference, exactly once per
// serialize() (deserializing the same bytes twice over-releases; bytes never
// deserialized leak the value until the owner shuts down). When the last
// copy of a reference dies, a fire-and-forget "release" message goes to the
// owner. References held by a worker that dies are not released (the owner
// frees them at its shutdown).
//
// Thread safety: an RRef is a value; the methods may be called from any
// thread. Failure: to_here throws what a call would (PeerLost naming the
// owner when it died, TimeoutError, the creating function's error).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cohort/rpc/future.h"
#include "cohort/rpc/message.h"

namespace cohort::rpc {

class RpcAgent;
// Globally unique: the creating worker's rank in the top 16 bits, a counter below.
using RRefId = uint64_t;

namespace detail {
struct RRefState;
}  // namespace detail

class RRef {
 public:
  RRef() = default;
  explicit RRef(std::shared_ptr<detail::RRefState> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  RRefId id() const;
  // The owner's rank and name.
  int owner() const;
  std::string owner_name() const;
  // True when this process is the owner.
  bool is_owner() const;

  // Fetches a copy of the value (waits for the creating call to finish).
  // timeout 0: the agent's default timeout.
  Message to_here(Duration timeout = Duration::zero()) const;
  // The creating call's outcome on the owner: completes when the value exists
  // (the Message is empty) or with the function's error.
  Future created() const;

  // Bytes that another worker turns back into an RRef with deserialize();
  // adds one reference on the owner first (blocks up to the default timeout).
  std::string serialize() const;
  static RRef deserialize(RpcAgent& agent, const std::string& bytes);

 private:
  std::shared_ptr<detail::RRefState> state_;
};

}  // namespace cohort::rpc
