// The quorum service of fault-tolerant training (torchft's lighthouse):
// which replicas take part in the next step. It lives in the TCP store's
// server (tcp_store_server.h: the kQuorum and kHeartbeat requests), beside
// the keys the replicas' process groups meet over; TcpStore::quorum() and
// heartbeat() are its client side, parallel/fault_tolerance/ the replicas'.
//
// Each replica (a stable id, e.g. "r2", kept by its replacement) heartbeats
// while it lives and, at the start of every step, asks to join the next
// quorum with its step count. A quorum forms as soon as every live replica
// asked -- live: heard from within heartbeat_timeout, and no connection of it
// closed since -- or, once join_timeout passed since the first request, with
// whoever asked; never with fewer than min_replicas. Everyone who asked gets
// the same answer: a quorum id, the members in id order (their group ranks)
// with their steps, and the group epoch, which changes whenever the member
// set differs from the previous quorum's or a member reports that its last
// step failed: then every member builds a new process group. A SIGKILLed
// replica is dropped at once (its connections close); a stopped one
// (SIGSTOP) once its heartbeats are older than heartbeat_timeout.
//
// QuorumState is the rule alone, with the clock passed in (unit-tested);
// the server calls it from its one loop thread. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cohort::rendezvous {

struct QuorumMember {
  std::string id = {};
  int64_t step = 0;
  bool operator==(const QuorumMember&) const = default;
};

struct Quorum {
  uint64_t id = 0;                         // counts the quorums formed, from 1
  uint64_t group_epoch = 0;                // changes when the members must build a new group
  std::vector<QuorumMember> members = {};  // by id
};

// What a replica sends with its request (the same on every replica of a job).
struct QuorumRequest {
  std::string id = {};
  int64_t step = 0;
  bool last_step_failed = false;
  int min_replicas = 1;
  std::chrono::milliseconds join_timeout{500};
  std::chrono::milliseconds heartbeat_timeout{1000};
};

class QuorumState {
 public:
  using Clock = std::chrono::steady_clock;

  // A heartbeat (or any request) from replica `id`: it is live from now.
  void heard(const std::string& id, Clock::time_point now);
  // A connection of replica `id` closed: it is gone (and its request with it)
  // until it is heard from again.
  void lost(const std::string& id);
  // Replica r.id asks to join the next quorum (replacing an earlier request).
  void request(const QuorumRequest& r, Clock::time_point now);
  // The request of `id` ended without a quorum (it timed out).
  void withdraw(const std::string& id);
  // The quorum, when the rule above says it forms now; the requests it
  // answers are consumed.
  std::optional<Quorum> try_form(Clock::time_point now);
  // When try_form should next be called without new events (the join
  // timeout of the oldest request, a heartbeat expiring); nullopt: none.
  std::optional<Clock::time_point> next_deadline(Clock::time_point now) const;

  bool has_request(const std::string& id) const { return requests_.count(id) != 0; }
  bool is_live(const std::string& id, Clock::time_point now) const;

 private:
  struct Replica {
    Clock::time_point last_heard;
    bool lost = false;
  };
  std::map<std::string, Replica> replicas_;
  std::map<std::string, QuorumRequest> requests_;
  std::optional<Clock::time_point> first_request_;
  std::chrono::milliseconds heartbeat_timeout_{1000};
  std::vector<std::string> last_members_;
  uint64_t quorums_ = 0;
  uint64_t epoch_ = 0;
};

}  // namespace cohort::rendezvous
