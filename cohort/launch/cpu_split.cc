#include "cohort/launch/cpu_split.h"

#include <sched.h>

#include <cerrno>

#include "cohort/base/error.h"

namespace cohort::launch {

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) throw_errno("sched_getaffinity", errno);
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

std::vector<std::vector<int>> split_cpus(const std::vector<int>& cpus, int nworkers) {
  COHORT_CHECK(nworkers >= 1, "split_cpus: need at least one worker, got {}", nworkers);
  COHORT_CHECK(!cpus.empty(), "split_cpus: no CPUs to split");
  std::vector<std::vector<int>> shares(static_cast<size_t>(nworkers));
  size_t n = cpus.size(), w = static_cast<size_t>(nworkers);
  if (w >= n) {
    for (size_t i = 0; i < w; ++i) shares[i] = {cpus[i % n]};
    return shares;
  }
  size_t base = n / w, extra = n % w, pos = 0;
  for (size_t i = 0; i < w; ++i) {
    size_t take = base + (i < extra ? 1 : 0);
    shares[i].assign(cpus.begin() + static_cast<ptrdiff_t>(pos),
                     cpus.begin() + static_cast<ptrdiff_t>(pos + take));
    pos += take;
  }
  return shares;
}

}  // namespace cohort::launch
