#include "cohort/rendezvous/quorum.h"

#include <algorithm>

namespace cohort::rendezvous {

void QuorumState::heard(const std::string& id, Clock::time_point now) {
  Replica& r = replicas_[id];
  r.last_heard = now;
  r.lost = false;
}

void QuorumState::lost(const std::string& id) {
  auto it = replicas_.find(id);
  if (it != replicas_.end()) it->second.lost = true;
  withdraw(id);
}

void QuorumState::request(const QuorumRequest& r, Clock::time_point now) {
  heard(r.id, now);
  heartbeat_timeout_ = r.heartbeat_timeout;
  requests_[r.id] = r;
  if (!first_request_) first_request_ = now;
}

void QuorumState::withdraw(const std::string& id) {
  requests_.erase(id);
  if (requests_.empty()) first_request_.reset();
}

bool QuorumState::is_live(const std::string& id, Clock::time_point now) const {
  auto it = replicas_.find(id);
  return it != replicas_.end() && !it->second.lost &&
         now - it->second.last_heard <= heartbeat_timeout_;
}

std::optional<Quorum> QuorumState::try_form(Clock::time_point now) {
  if (requests_.empty()) return std::nullopt;
  // Every request carries the job's settings (all replicas send the same).
  const QuorumRequest& settings = requests_.begin()->second;
  if (static_cast<int>(requests_.size()) < settings.min_replicas) return std::nullopt;
  bool everyone = true;
  for (const auto& [id, r] : replicas_)
    if (is_live(id, now) && !requests_.count(id)) everyone = false;
  if (!everyone && now < *first_request_ + settings.join_timeout) return std::nullopt;
  Quorum q;
  q.id = ++quorums_;
  bool failed = false;
  std::vector<std::string> ids;
  for (const auto& [id, r] : requests_) {  // std::map: by id
    q.members.push_back({id, r.step});
    ids.push_back(id);
    failed = failed || r.last_step_failed;
  }
  if (failed || ids != last_members_) ++epoch_;
  q.group_epoch = epoch_;
  last_members_ = std::move(ids);
  requests_.clear();
  first_request_.reset();
  return q;
}

std::optional<QuorumState::Clock::time_point> QuorumState::next_deadline(
    Clock::time_point now) const {
  if (requests_.empty()) return std::nullopt;
  std::optional<Clock::time_point> next = *first_request_ + requests_.begin()->second.join_timeout;
  // A live replica that has not asked holds the quorum until its heartbeat expires.
  for (const auto& [id, r] : replicas_) {
    if (r.lost || requests_.count(id)) continue;
    const Clock::time_point expiry = r.last_heard + heartbeat_timeout_;
    if (expiry > now) next = std::min(*next, expiry);
  }
  return next;
}

}  // namespace cohort::rendezvous
