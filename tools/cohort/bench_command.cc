// `cohort bench collectives`: collective bandwidth and latency through a
// ProcessGroup, like nccl-tests. For each message size (-b .. -e, times -f)
// it runs --warmup untimed and --iters timed ops, takes the slowest rank's
// time of each iteration and reports the median: time_us (--json adds
// rank_median_us, the largest of the ranks' own medians), algbw = bytes /
// time, busbw = algbw x the op's factor (nccl-tests: all_reduce 2(n-1)/n;
// all_gather, reduce_scatter, all_to_all, gather, scatter (n-1)/n;
// broadcast, reduce, sendrecv 1). `bytes` is nccl-tests' size: the whole
// buffer (all_gather: the gathered output; reduce_scatter: the input).
//
// Runs as one rank of a job started by `cohort run` or `mpirun` (env://), or
// starts its own --nproc ranks (cohort::spawn). Rank 0 prints.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/collectives/reduce_kernels.h"
#include "cohort/distributed/process_group.h"
#include "cohort/launch/spawn.h"
#include "tools/cohort/command.h"

namespace cohort::cli {
namespace {

using distributed::DataType;
using distributed::ProcessGroup;
using distributed::ReduceOp;

struct BenchArgs {
  std::string op = "all_reduce";
  std::string min_bytes = "8";
  std::string max_bytes = "64M";
  double factor = 2.0;
  std::string dtype = "float32";
  std::string reduce_op = "sum";
  int iters = 0;  // 0: by size
  int warmup = 5;
  std::string backend = "native";
  std::string init_method = "env://";
  int nproc = 0;
  bool json = false;
  bool check = true;
  bool async = false;
};

size_t parse_size(const std::string& s) {
  COHORT_CHECK(!s.empty(), "bench: empty size");
  size_t mult = 1;
  std::string digits = s;
  char last = static_cast<char>(std::toupper(static_cast<unsigned char>(s.back())));
  if (last == 'K' || last == 'M' || last == 'G') {
    mult = last == 'K' ? (1ull << 10) : last == 'M' ? (1ull << 20) : (1ull << 30);
    digits = s.substr(0, s.size() - 1);
  }
  size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(digits, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  COHORT_CHECK(pos == digits.size() && !digits.empty(),
               "bench: size must be a number with an optional K, M or G suffix, got '{}'", s);
  return static_cast<size_t>(v) * mult;
}

DataType parse_dtype(const std::string& s) {
  static const std::map<std::string, DataType> k{
      {"float32", DataType::kFloat32}, {"float64", DataType::kFloat64},
      {"int32", DataType::kInt32},     {"int64", DataType::kInt64},
      {"uint8", DataType::kUInt8},     {"bfloat16", DataType::kBFloat16},
      {"float16", DataType::kFloat16}, {"int8", DataType::kInt8},
      {"bool", DataType::kBool}};
  auto it = k.find(s);
  COHORT_CHECK(it != k.end(),
               "bench: --dtype must be float32, float64, int32, int64, uint8, bfloat16, "
               "float16, int8 or bool, got '{}'",
               s);
  return it->second;
}

ReduceOp parse_reduce_op(const std::string& s) {
  static const std::map<std::string, ReduceOp> k{
      {"sum", ReduceOp::kSum}, {"avg", ReduceOp::kAvg},  {"product", ReduceOp::kProduct},
      {"min", ReduceOp::kMin}, {"max", ReduceOp::kMax},  {"band", ReduceOp::kBand},
      {"bor", ReduceOp::kBor}, {"bxor", ReduceOp::kBxor}};
  auto it = k.find(s);
  COHORT_CHECK(it != k.end(),
               "bench: --reduce-op must be sum, avg, product, min, max, band, bor or bxor, got "
               "'{}'",
               s);
  return it->second;
}

const std::vector<std::string>& known_ops() {
  static const std::vector<std::string> k{"all_reduce",     "broadcast",  "reduce", "all_gather",
                                          "reduce_scatter", "all_to_all", "gather", "scatter",
                                          "barrier",        "sendrecv"};
  return k;
}

// How many elements each rank contributes for a buffer of `bytes` (nccl-tests' size).
size_t per_rank_count(const std::string& op, size_t bytes, size_t es, size_t n) {
  bool split = op == "all_gather" || op == "reduce_scatter" || op == "all_to_all" ||
               op == "gather" || op == "scatter";
  size_t count = split ? bytes / (es * n) : bytes / es;
  return std::max<size_t>(count, op == "barrier" ? 0 : 1);
}

double bus_factor(const std::string& op, double n) {
  if (n <= 1) return op == "all_reduce" || op == "broadcast" || op == "reduce" ? 1.0 : 0.0;
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all" || op == "gather" ||
      op == "scatter")
    return (n - 1) / n;
  return 1.0;
}

// Buffers for one size; `count` elements per rank.
struct Buffers {
  std::vector<std::byte> a;  // in-place data, or send
  std::vector<std::byte> b;  // recv
};

// Runs an op blocking (then returns an undefined Work: a blocking call makes
// none, and the timed loop should not either) or async. issue(tag...) passes
// the async_op tag on, or nothing.
template <typename Issue>
distributed::Work blocking_or_async(bool async, Issue issue) {
  if (async) return issue(distributed::async_op);
  issue();
  return distributed::Work();
}

// Waits for an async op's Work; a blocking op's (undefined) Work is done.
void finish(const distributed::Work& w) {
  if (w.defined()) w.wait();
}

distributed::Work issue(ProcessGroup& pg, const std::string& op, Buffers& buf, size_t count,
                        DataType dt, ReduceOp rop, bool async) {
  int n = pg.size(), r = pg.rank();
  std::byte* a = buf.a.data();
  std::byte* b = buf.b.data();
  auto run = [&](auto issue) { return blocking_or_async(async, issue); };
  if (op == "all_reduce")
    return run([&](auto... tag) { return pg.all_reduce(a, count, dt, {.op = rop}, tag...); });
  if (op == "broadcast")
    return run([&](auto... tag) { return pg.broadcast(a, count, dt, {.root = 0}, tag...); });
  if (op == "reduce")
    return run(
        [&](auto... tag) { return pg.reduce(a, count, dt, {.op = rop, .root = 0}, tag...); });
  if (op == "all_gather")
    return run([&](auto... tag) { return pg.all_gather(a, b, count, dt, {}, tag...); });
  if (op == "reduce_scatter")
    return run(
        [&](auto... tag) { return pg.reduce_scatter(a, b, count, dt, {.op = rop}, tag...); });
  if (op == "all_to_all")
    return run([&](auto... tag) { return pg.all_to_all(a, b, count, dt, {}, tag...); });
  if (op == "gather")
    return run([&](auto... tag) { return pg.gather(a, b, count, dt, {.root = 0}, tag...); });
  if (op == "scatter")
    return run([&](auto... tag) { return pg.scatter(a, b, count, dt, {.root = 0}, tag...); });
  if (op == "barrier") return run([&](auto... tag) { return pg.barrier({}, tag...); });
  // sendrecv: a ring; even ranks send first so no cycle of blocked senders forms.
  if (n == 1) return distributed::Work();
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  auto send = [&](auto... tag) { return pg.send(a, count, dt, next, {}, tag...); };
  auto recv = [&](auto... tag) { return pg.recv(b, count, dt, prev, {}, tag...); };
  // The group runs ops in issue order, so the second op's Work completes last.
  if (r % 2 == 0) {
    run(send);
    return run(recv);
  }
  run(recv);
  return run(send);
}

// all_reduce / broadcast / all_gather results checked once per size.
void check_result(ProcessGroup& pg, const std::string& op, Buffers& buf, size_t count,
                  DataType dt) {
  if (dt != DataType::kFloat32 || count == 0) return;
  int n = pg.size(), r = pg.rank();
  auto* a = reinterpret_cast<float*>(buf.a.data());
  auto* b = reinterpret_cast<float*>(buf.b.data());
  auto fail = [&](size_t i, float got, float want) {
    throw Error(fmt::format("bench {}: wrong result on rank {} at element {} of {}: {} != {}", op,
                            r, i, count, got, want));
  };
  if (op == "all_reduce") {
    for (size_t i = 0; i < count; ++i) a[i] = static_cast<float>(r + 1 + static_cast<int>(i % 3));
    pg.all_reduce(a, count, dt);
    for (size_t i = 0; i < count; ++i) {
      float want = static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i % 3));
      if (a[i] != want) fail(i, a[i], want);
    }
  } else if (op == "broadcast") {
    std::fill(a, a + count, static_cast<float>(r == 0 ? 5 : -1));
    pg.broadcast(a, count, dt);
    for (size_t i = 0; i < count; ++i)
      if (a[i] != 5.0f) fail(i, a[i], 5.0f);
  } else if (op == "all_gather") {
    std::fill(a, a + count, static_cast<float>(r));
    pg.all_gather(a, b, count, dt);
    for (size_t i = 0; i < count * static_cast<size_t>(n); ++i)
      if (b[i] != static_cast<float>(i / count)) fail(i, b[i], static_cast<float>(i / count));
  }
}

int bench_rank(const BenchArgs& args, ProcessGroup& pg) {
  const DataType dt = parse_dtype(args.dtype);
  const ReduceOp rop = parse_reduce_op(args.reduce_op);
  const size_t es = collectives::element_size(dt);
  const size_t n = static_cast<size_t>(pg.size());
  size_t lo = parse_size(args.min_bytes), hi = parse_size(args.max_bytes);
  COHORT_CHECK(lo <= hi, "bench: -b {} is larger than -e {}", lo, hi);
  COHORT_CHECK(args.factor > 1.0, "bench: -f must be > 1, got {}", args.factor);
  std::vector<size_t> sizes;
  if (args.op == "barrier") {
    sizes.push_back(0);
  } else {
    for (double s = static_cast<double>(lo); s <= static_cast<double>(hi) * 1.0000001;
         s *= args.factor) {
      sizes.push_back(static_cast<size_t>(s));
    }
  }
  bool print = pg.rank() == 0;
  if (print && !args.json) {
    std::string transport = n > 1 ? pg.transport_name(pg.rank() == 0 ? 1 : 0) : "self";
    std::printf(
        "# cohort bench collectives: op %s, dtype %s, reduce %s, backend %s, %zu ranks, "
        "transport %s, %s calls\n",
        args.op.c_str(), args.dtype.c_str(), args.reduce_op.c_str(), args.backend.c_str(), n,
        transport.c_str(), args.async ? "async_op" : "blocking");
    std::printf("# %12s %12s %6s %12s %12s %12s\n", "size(B)", "count", "iters", "time(us)",
                "algbw(GB/s)", "busbw(GB/s)");
    std::fflush(stdout);
  }
  for (size_t requested : sizes) {
    size_t count = per_rank_count(args.op, requested, es, n);
    bool split = args.op == "all_gather" || args.op == "reduce_scatter" ||
                 args.op == "all_to_all" || args.op == "gather" || args.op == "scatter";
    size_t bytes = args.op == "barrier" ? 0 : (split ? count * n : count) * es;
    Buffers buf;
    size_t a_elems =
        (args.op == "reduce_scatter" || args.op == "all_to_all" || args.op == "scatter") ? count * n
                                                                                         : count;
    size_t b_elems = (args.op == "all_gather" || args.op == "all_to_all" || args.op == "gather")
                         ? count * n
                         : count;
    buf.a.assign(std::max<size_t>(a_elems * es, 1), std::byte{0});
    buf.b.assign(std::max<size_t>(b_elems * es, 1), std::byte{0});
    int iters = args.iters > 0 ? args.iters
                               : static_cast<int>(std::clamp<size_t>(
                                     (size_t{256} << 20) / std::max<size_t>(bytes, 1), 20, 1000));
    for (int i = 0; i < args.warmup; ++i)
      finish(issue(pg, args.op, buf, count, dt, rop, args.async));
    std::vector<double> times(static_cast<size_t>(iters));
    for (int i = 0; i < iters; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      finish(issue(pg, args.op, buf, count, dt, rop, args.async));
      auto t1 = std::chrono::steady_clock::now();
      times[static_cast<size_t>(i)] = std::chrono::duration<double, std::micro>(t1 - t0).count();
    }
    // Also each rank's own median, the slowest rank's reported (OSU's way):
    // it leaves out the skew between the ranks, which alternates from one
    // iteration to the next and which time_us counts in full.
    std::vector<double> own = times;
    std::nth_element(own.begin(), own.begin() + static_cast<long>(own.size() / 2), own.end());
    double rank_median = own[own.size() / 2];
    pg.all_reduce(&rank_median, 1, DataType::kFloat64, {.op = ReduceOp::kMax});
    // The op takes as long as its slowest rank.
    pg.all_reduce(times.data(), times.size(), DataType::kFloat64, {.op = ReduceOp::kMax});
    if (args.check) check_result(pg, args.op, buf, count, dt);
    std::sort(times.begin(), times.end());
    double median = times[times.size() / 2];
    double algbw = median > 0 ? static_cast<double>(bytes) / (median * 1e-6) / 1e9 : 0.0;
    double busbw = algbw * bus_factor(args.op, static_cast<double>(n));
    if (!print) continue;
    if (args.json) {
      fmt::print(
          "{{\"op\": \"{}\", \"bytes\": {}, \"count\": {}, \"dtype\": \"{}\", "
          "\"world_size\": {}, \"backend\": \"{}\", \"async\": {}, \"iters\": {}, "
          "\"time_us\": {:.3f}, \"rank_median_us\": {:.3f}, \"algbw_gbps\": {:.4f}, "
          "\"busbw_gbps\": {:.4f}}}\n",
          args.op, bytes, count, args.dtype, n, args.backend, args.async, iters, median,
          rank_median, algbw, busbw);
    } else {
      fmt::print("  {:12} {:12} {:6} {:12.2f} {:12.3f} {:12.3f}\n", bytes, count, iters, median,
                 algbw, busbw);
    }
    std::fflush(stdout);
  }
  pg.barrier();
  return 0;
}

int run_bench(const BenchArgs& args) {
  COHORT_CHECK(std::find(known_ops().begin(), known_ops().end(), args.op) != known_ops().end(),
               "bench: unknown --op '{}'; expected all_reduce, broadcast, reduce, all_gather, "
               "reduce_scatter, all_to_all, gather, scatter, barrier or sendrecv",
               args.op);
  parse_dtype(args.dtype);
  parse_reduce_op(args.reduce_op);
  distributed::BackendKind kind = distributed::parse_backend(args.backend);
  auto body = [&args, kind]() {
    auto pg = distributed::init_process_group(kind, args.init_method);
    bench_rank(args, *pg);
    distributed::destroy_process_group(pg);
  };
  if (args.nproc > 0) {
    COHORT_CHECK(kind != distributed::BackendKind::kMpi,
                 "bench: --nproc cannot start mpi ranks; run `mpirun -np N cohort bench "
                 "collectives --backend mpi` instead");
    spawn([&](int) { body(); }, args.nproc);
    return 0;
  }
  body();
  return 0;
}

std::function<int()> setup_bench(CLI::App& app) {
  app.require_subcommand(1);
  auto args = std::make_shared<BenchArgs>();
  CLI::App* c =
      app.add_subcommand("collectives", "Collective latency and bandwidth (like nccl-tests)");
  c->add_option("--op", args->op,
                "all_reduce|broadcast|reduce|all_gather|reduce_scatter|"
                "all_to_all|gather|scatter|barrier|sendrecv")
      ->capture_default_str();
  c->add_option("-b,--minbytes", args->min_bytes, "Smallest size (bytes; K/M/G suffixes)")
      ->capture_default_str();
  c->add_option("-e,--maxbytes", args->max_bytes, "Largest size")->capture_default_str();
  c->add_option("-f,--stepfactor", args->factor, "Size multiplier between steps")
      ->capture_default_str();
  c->add_option("--dtype", args->dtype,
                "float32|float64|int32|int64|uint8|bfloat16|float16|int8|bool")
      ->capture_default_str();
  c->add_option("--reduce-op", args->reduce_op, "sum|avg|product|min|max|band|bor|bxor")
      ->capture_default_str();
  c->add_option("--iters", args->iters, "Timed iterations per size (0: 20..1000 by size)")
      ->capture_default_str();
  c->add_option("--warmup", args->warmup, "Untimed iterations per size")->capture_default_str();
  c->add_option("--backend", args->backend, "native|mpi")->capture_default_str();
  c->add_option("--init-method", args->init_method, "env://, tcp://host:port or file://path")
      ->capture_default_str();
  c->add_option("--nproc", args->nproc,
                "Start this many local ranks (instead of running under cohort run / mpirun)")
      ->capture_default_str();
  c->add_flag("--json", args->json, "One JSON object per size");
  c->add_flag("--async", args->async,
              "Issue each op with async_op=true and wait on its Work (default: blocking calls)");
  c->add_flag("!--no-check", args->check, "Skip the result check after each size");
  c->footer(
      "Examples:\n  cohort bench collectives --nproc 2 --op all_reduce -b 8 -e 64M -f 2\n"
      "  cohort run --nproc-per-node 4 -- cohort bench collectives --op all_gather\n"
      "  mpirun -np 2 cohort bench collectives --backend mpi");
  return [args, c]() -> int {
    if (c->parsed()) return run_bench(*args);
    return 1;
  };
}

CommandRegistrar reg({"bench", "Benchmarks (collectives)", setup_bench});

}  // namespace
}  // namespace cohort::cli
