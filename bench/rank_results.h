// How a benchmark's spawned ranks hand their numbers to the parent: each
// rank writes "key value" lines to <dir>/rank<r>.txt (write_results), and
// the parent reads them after spawn returns (read_results). Files, not
// pipes, so a rank's numbers survive the rank. Header only.
#pragma once

#include <fstream>
#include <map>
#include <string>

namespace cohort::bench {

using Results = std::map<std::string, double>;

inline std::string result_path(const std::string& dir, int rank) {
  return dir + "/rank" + std::to_string(rank) + ".txt";
}

inline void write_results(const std::string& dir, int rank, const Results& r) {
  std::ofstream f(result_path(dir, rank));
  for (const auto& [k, v] : r) f << k << " " << v << "\n";
}

// Missing file or keys: an empty map (the caller reads 0 for them).
inline Results read_results(const std::string& dir, int rank) {
  Results r;
  std::ifstream f(result_path(dir, rank));
  std::string k;
  double v = 0;
  while (f >> k >> v) r[k] = v;
  return r;
}

}  // namespace cohort::bench
