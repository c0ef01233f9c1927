// Splitting this process's CPUs between local workers: each worker gets a
// contiguous share of the CPUs this process may run on (sched_getaffinity),
// so two workers on 32 CPUs get 16 each. With more workers than CPUs, workers
// share CPUs round-robin, one each.
#pragma once

#include <vector>

namespace cohort::launch {

// The CPUs the calling thread may run on, ascending.
std::vector<int> allowed_cpus();

// Splits cpus into nworkers shares (sizes differ by at most one; never empty).
std::vector<std::vector<int>> split_cpus(const std::vector<int>& cpus, int nworkers);

}  // namespace cohort::launch
