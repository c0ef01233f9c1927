#include "cohort/rendezvous/wait_for_ranks.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "cohort/base/error.h"
#include "cohort/base/log.h"

namespace cohort::rendezvous {

void wait_for_ranks(Store& store, const std::vector<std::string>& keys, int rank,
                    const std::string& what, Duration timeout, Duration report_every,
                    const char* unit) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  auto missing = [&] {
    std::vector<int> out;
    for (size_t r = 0; r < keys.size(); ++r)
      if (!store.check({keys[r]})) out.push_back(static_cast<int>(r));
    return out;
  };
  for (;;) {
    const auto left = std::chrono::duration_cast<Duration>(deadline - Clock::now());
    try {
      store.wait(keys, std::max(Duration(1), std::min(left, report_every)));
      return;
    } catch (const TimeoutError&) {
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start);
      const std::vector<int> m = missing();
      if (m.empty()) return;
      if (Clock::now() >= deadline) {
        throw TimeoutError(fmt::format(
            "{}: {} {} timed out after {} s waiting for {}s [{}] (not started, stuck, or "
            "unable to reach the store?)",
            what, unit, rank, waited.count(), unit, fmt::join(m, ", ")));
      }
      log(LogLevel::kWarn, "{}: {} {} still waiting after {} s for {}s [{}]", what, unit, rank,
          waited.count(), unit, fmt::join(m, ", "));
    }
  }
}

}  // namespace cohort::rendezvous
