// OpenMPI's MPI_Allreduce (float32, sum, in place), the peer of
// `cohort bench collectives --op all_reduce`, measured the same way: per size
// (-b..-e bytes, x2), warmup, then timed iterations; each iteration's time is
// the slowest rank's; the median is reported. Rank 0 prints one JSON object
// per size: impl, op, bytes, time_us, rank_median_us (the largest of the
// ranks' own medians), algbw_gbps, busbw_gbps (2(n-1)/n).
//
//   mpirun --allow-run-as-root --oversubscribe -np 2 cohort_bench_mpi_allreduce [MIN [MAX]]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t lo = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 8;
  size_t hi = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : (size_t{64} << 20);
  const int warmup = 5;
  for (size_t bytes = lo; bytes <= hi; bytes *= 2) {
    size_t count = std::max<size_t>(bytes / sizeof(float), 1);
    bytes = count * sizeof(float);
    std::vector<float> buf(count, 0.0f);
    int iters = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / bytes, 20, 1000));
    for (int i = 0; i < warmup; ++i) {
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    }
    std::vector<double> t(static_cast<size_t>(iters));
    for (int i = 0; i < iters; ++i) {
      double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      t[static_cast<size_t>(i)] = (MPI_Wtime() - t0) * 1e6;
    }
    // Each rank's own median, the slowest rank's reported, as cohort's bench does.
    std::vector<double> own = t;
    std::nth_element(own.begin(), own.begin() + iters / 2, own.end());
    double rank_median = own[static_cast<size_t>(iters / 2)];
    MPI_Allreduce(MPI_IN_PLACE, &rank_median, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, t.data(), iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    std::sort(t.begin(), t.end());
    double us = t[t.size() / 2];
    double algbw = static_cast<double>(bytes) / (us * 1e-6) / 1e9;
    double busbw = algbw * 2.0 * (size - 1) / size;
    if (rank == 0) {
      std::printf(
          "{\"impl\": \"openmpi\", \"op\": \"all_reduce\", \"bytes\": %zu, \"iters\": %d, "
          "\"time_us\": %.3f, \"rank_median_us\": %.3f, \"algbw_gbps\": %.4f, "
          "\"busbw_gbps\": %.4f}\n",
          bytes, iters, us, rank_median, algbw, busbw);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
