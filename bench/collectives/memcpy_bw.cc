// Single-thread memcpy bandwidth: the physical limit a one-host collective is
// measured against (a shared-memory all_reduce copies every byte at least
// once). Prints one JSON object per size: {"impl": "memcpy", "bytes", "time_us", "gbps"},
// gbps = bytes copied / time (median of the repetitions).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

int main() {
  for (size_t bytes : {size_t{1} << 20, size_t{64} << 20}) {
    std::vector<char> src(bytes, 1), dst(bytes, 0);
    int reps = bytes <= (size_t{1} << 20) ? 2000 : 30;
    for (int i = 0; i < 3; ++i) std::memcpy(dst.data(), src.data(), bytes);
    std::vector<double> t(static_cast<size_t>(reps));
    for (int i = 0; i < reps; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      std::memcpy(dst.data(), src.data(), bytes);
      // Keep the copy from being optimised away.
      asm volatile("" : : "r"(dst.data()) : "memory");
      auto t1 = std::chrono::steady_clock::now();
      t[static_cast<size_t>(i)] = std::chrono::duration<double, std::micro>(t1 - t0).count();
    }
    std::sort(t.begin(), t.end());
    double us = t[t.size() / 2];
    std::printf("{\"impl\": \"memcpy\", \"bytes\": %zu, \"time_us\": %.3f, \"gbps\": %.3f}\n",
                bytes, us, static_cast<double>(bytes) / (us * 1e-6) / 1e9);
  }
  return 0;
}
