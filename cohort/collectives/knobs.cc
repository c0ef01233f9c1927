#include "cohort/collectives/knobs.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdint>

#include "cohort/base/error.h"

namespace cohort::collectives {
namespace {

constexpr const char* kTransportEnv = "COHORT_TRANSPORT";
constexpr const char* kSpinEnv = "COHORT_SPIN_US";

const std::string* find(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

}  // namespace

std::vector<std::string> knob_names() {
  std::vector<std::string> names{kTransportEnv, kSpinEnv};
  for (const OpInfo* i = op_table_begin(); i != op_table_end(); ++i) {
    if (*i->algo_env != '\0') names.emplace_back(i->algo_env);
  }
  return names;
}

void apply_knobs(const std::map<std::string, std::string>& env, TransportKind& transport,
                 CollectiveTuning& tuning) {
  TransportKind t = transport;
  if (const std::string* v = find(env, kTransportEnv)) {
    TransportKind asked = TransportKind::kAuto;
    if (*v == "tcp") {
      asked = TransportKind::kTcp;
    } else if (*v == "shm") {
      asked = TransportKind::kShm;
    } else if (*v != "auto") {
      throw InvalidArgument(fmt::format("{}={}: expected one of tcp|shm|auto", kTransportEnv, *v));
    }
    if (t == TransportKind::kAuto) t = asked;
  }
  CollectiveTuning out = tuning;
  if (const std::string* v = find(env, kSpinEnv)) {
    int64_t us = -1;
    auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), us);
    COHORT_CHECK(ec == std::errc() && end == v->data() + v->size() && us >= 0,
                 "{}={}: expected a number of microseconds >= 0", kSpinEnv, *v);
    out.spin = std::chrono::microseconds(us);
  }
  for (const OpInfo* i = op_table_begin(); i != op_table_end(); ++i) {
    if (*i->algo_env == '\0') continue;
    if (const std::string* v = find(env, i->algo_env)) {
      out.algorithms.set(i->kind, parse_algo(i->kind, *v, i->algo_env));
    }
  }
  transport = t;
  tuning = out;
}

}  // namespace cohort::collectives
