// cohort's conv2d / max_pool2d kernels against oneDNN (the library PyTorch
// 1.13 runs for these convolutions), one instruction set per process.
//
//   bench_onednn_conv --isa avx2 [--threads 1] [--seconds 0.3] [--repeats 9]
//                     [--batch 64] [--filter text] [--algo direct|auto]
//
// --isa (baseline, avx2, avx512; default: cohort's current path) holds both
// sides to one ISA: cohort through set_kernel_path, oneDNN through
// dnnl::set_max_cpu_isa (sse41, avx2, avx512_core) before its first
// primitive. An ISA this CPU (or this build of cohort) lacks prints one
// "skip" line and exits 0, so scripts can loop over all of them.
//
// Passes, on Net's layers at batch 64, float32, NCHW, stride 1, no padding:
// conv1 = Conv2d(1, 20, 5) on 28x28, conv2 = Conv2d(20, 20, 5) on 24x24:
// forward (+bias), forward_relu (fused ReLU), backward_input (dx),
// backward_weight (dw + dbias), backward_relu (ReLU backward + dx + dw + dbias,
// conv1 without dx as in training); pool = max_pool2d 2x2 of [64, 20, 20, 20]
// forward (with argmax / workspace) and backward.
//
// Each pass is timed for cohort and for three ways of calling oneDNN:
//   onednn         primitives created with format_tag::any, and every tensor
//                  kept in the layout the forward primitive chose (what a
//                  framework that stays in oneDNN's blocked layouts runs);
//                  a backward primitive that wants another layout pays its
//                  reorder inside the timed call.
//   onednn+reorder the same primitives on NCHW / OIHW tensors: reorders in
//                  and out of the chosen layouts are timed (what PyTorch
//                  1.13 does for ordinary NCHW tensors; weights change every
//                  step, so they are reordered every call too).
//   onednn_nchw    primitives created for the plain layouts themselves (no
//                  reorders; what cohort would get by handing oneDNN its
//                  NCHW buffers as they are).
// Every figure is the median over --repeats rounds (after a warm-up) of the
// time per call; the implementations' rounds are interleaved so that load
// from other processes falls on all of them alike. Before timing, every
// variant's outputs are checked against cohort's ("# check" lines).
//
// The top lines give the CPU, the ISA each side is held to, the core's clock
// (measured with a chain of dependent adds, one per cycle; /proc/cpuinfo's
// "cpu MHz" beside it) and the fp32 peak per core = FMA units x lanes x 2 x
// clock (baseline: SSE without FMA, counted as a multiply and an add per unit
// pair), checked against an FMA loop. GFLOP/s counts 2 x the multiply-adds of
// a direct convolution (cohort::kernels::conv2d_macs), so Winograd, which
// does fewer, can pass 100% of the peak.
// --threads N[,M...] sets both cohort's thread budget (set_num_threads) and
// oneDNN's (omp_set_num_threads: Debian's oneDNN runs on OpenMP, libgomp);
// the default is 1. The baseline ISA re-executes itself with
// OPENBLAS_CORETYPE=Nehalem, so that OpenBLAS (cohort's im2col path) is held
// to SSE like oneDNN's sse41.
#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bench/kernels/core_peak.h"
#include "bench/kernels/interleaved_timing.h"
#include "bench/kernels/onednn_ops.h"
#include "cohort/base/cpu.h"
#include "cohort/base/parallel.h"
#include "cohort/core/kernels/conv2d.h"
#include "cohort/core/kernels/pool2d.h"
#include "oneapi/dnnl/dnnl.hpp"

using cohort::kernels::Conv2dGeometry;

using cohort::bench::Chain;
using cohort::bench::cpuinfo_mhz;
using cohort::bench::fma_loop;
using cohort::bench::Impl;
using cohort::bench::kBestOf;
using cohort::bench::layout_name;
using cohort::bench::loadavg;
using cohort::bench::measure_clock_ghz;
using cohort::bench::median;
using cohort::bench::OnednnConv;
using cohort::bench::OnednnPool;
using cohort::bench::Tag;
using cohort::bench::time_all;
using cohort::bench::Variant;
using cohort::bench::variant_name;
using dnnl::memory;

namespace {

std::vector<float> random_vec(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& e : v) e = d(rng);
  return v;
}

struct Isa {
  cohort::KernelPath path;
  dnnl::cpu_isa onednn;
  const char* onednn_name;
  int lanes;        // fp32 lanes per vector (per FMA-unit equivalent)
  const char* why;  // how the peak is counted
};

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
  }
  return diff / scale;
}

struct Layer {
  const char* name;
  Conv2dGeometry g;
};

void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--isa baseline|avx2|avx512] [--threads 1[,2...]] [--seconds 0.3]\n"
               "          [--repeats 9] [--batch 64] [--filter text] [--algo direct|auto]\n",
               argv0);
}

}  // namespace

int main(int argc, char** argv) try {
  std::string isa_name;
  std::vector<int> threads{1};
  double seconds = 0.3;
  int repeats = 9;
  int64_t batch = 64;
  std::string filter, algo_name = "direct";
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) {
      usage(argv[0]);
      return 2;
    }
    const char* val = argv[i + 1];
    if (!std::strcmp(argv[i], "--isa")) {
      isa_name = val;
    } else if (!std::strcmp(argv[i], "--threads")) {
      threads.clear();
      for (char* s = argv[i + 1]; *s;) {
        threads.push_back(static_cast<int>(std::strtol(s, &s, 10)));
        if (*s == ',') ++s;
      }
    } else if (!std::strcmp(argv[i], "--seconds")) {
      seconds = std::atof(val);
    } else if (!std::strcmp(argv[i], "--repeats")) {
      repeats = std::max(1, std::atoi(val));
    } else if (!std::strcmp(argv[i], "--batch")) {
      batch = std::atoll(val);
    } else if (!std::strcmp(argv[i], "--filter")) {
      filter = val;
    } else if (!std::strcmp(argv[i], "--algo")) {
      algo_name = val;
    } else {
      usage(argv[0]);
      return 2;
    }
  }
  if (algo_name != "direct" && algo_name != "auto") {
    usage(argv[0]);
    return 2;
  }
  const dnnl::algorithm algo =
      algo_name == "auto" ? dnnl::algorithm::convolution_auto : dnnl::algorithm::convolution_direct;

  const cohort::CpuFeatures& cpu = cohort::cpu_features();
  const bool amd = cpu.model.find("AMD") != std::string::npos;
  const cohort::KernelPath path =
      isa_name.empty() ? cohort::kernel_path() : cohort::parse_kernel_path(isa_name);
  isa_name = cohort::kernel_path_name(path);
  Isa isa{path, dnnl::cpu_isa::sse41, "sse41", 4,
          "2 units x 4 lanes x 2 (SSE, no FMA: a multiply and an add per unit pair; upper "
          "bound)"};
  if (path == cohort::KernelPath::kAvx2) {
    isa = {path, dnnl::cpu_isa::avx2, "avx2", 8, "2 FMA units x 8 lanes x 2"};
  } else if (path == cohort::KernelPath::kAvx512) {
    isa = {path, dnnl::cpu_isa::avx512_core, "avx512_core", amd ? 8 : 16,
           amd ? "2 FMA units x 8 lanes x 2 (AMD runs 512-bit FMAs as two 256-bit halves)"
               : "2 FMA units x 16 lanes x 2 (server Intel; 1-unit parts reach half)"};
  }

  // cohort's baseline path runs im2col + OpenBLAS sgemm, and Debian's OpenBLAS
  // picks its kernels from the CPU (AVX2 ones here): hold it to SSE like
  // oneDNN's sse41 with OPENBLAS_CORETYPE, read when the library loads, so
  // through a re-exec (a value already in the environment is kept).
  if (path == cohort::KernelPath::kBaseline && !std::getenv("OPENBLAS_CORETYPE") &&
      cohort::kernel_path_supported(path)) {
    setenv("OPENBLAS_CORETYPE", "Nehalem", 1);
    execv("/proc/self/exe", argv);
    std::fprintf(stderr, "bench_onednn_conv: re-exec failed; OpenBLAS not held to SSE\n");
  }
  std::printf("# bench_onednn_conv: cohort kernels vs oneDNN, one ISA per process\n");
  std::string flags;
  for (const auto& f : cpu.names()) flags += " " + f;
  std::printf("# cpu: %s (%s:%s), %u logical CPUs\n", cpu.model.c_str(), cpu.arch.c_str(),
              flags.c_str(), std::thread::hardware_concurrency());
  const std::string why = cohort::kernel_path_unsupported_reason(path);
  if (!why.empty()) {
    std::printf("skip isa %s: %s\n", isa_name.c_str(), why.c_str());
    return 0;
  }
  cohort::set_kernel_path(path);
  if (dnnl::set_max_cpu_isa(isa.onednn) != dnnl::status::success) {
    std::printf("skip isa %s: dnnl::set_max_cpu_isa(%s) refused\n", isa_name.c_str(),
                isa.onednn_name);
    return 0;
  }
  std::printf("# OpenBLAS core (cohort's im2col path): %s%s\n", openblas_get_corename(),
              std::getenv("OPENBLAS_CORETYPE") ? " (OPENBLAS_CORETYPE set)" : "");
  const dnnl_version_t* ver = dnnl_version();
  const dnnl::cpu_isa effective = dnnl::get_effective_cpu_isa();
  std::printf(
      "# isa %s: cohort kernel path %s; oneDNN %d.%d.%d max isa %s (effective 0x%x, %s), "
      "algorithm convolution_%s, OpenMP runtime\n",
      isa_name.c_str(), cohort::kernel_path_name(cohort::kernel_path()), ver->major, ver->minor,
      ver->patch, isa.onednn_name, static_cast<unsigned>(effective),
      effective == isa.onednn ? "as asked" : "NOT as asked", algo_name.c_str());

  const double ghz = measure_clock_ghz();
  const double peak = 2.0 * isa.lanes * 2.0 * ghz;  // GFLOP/s per core
  double fma = 0;                                   // best of 7 runs of a few ms
  for (int run = 0; run < 7; ++run) fma = std::max(fma, 1e-9 * fma_loop(path));
  std::printf("# clock %.2f GHz (dependent-add loop, best of %d; /proc/cpuinfo cpu MHz %.0f)\n",
              ghz, kBestOf, cpuinfo_mhz());
  std::printf(
      "# peak per core %.1f GFLOP/s = %s x %.2f GHz; FMA loop measured %.1f GFLOP/s "
      "(%.1f FLOP/cycle, best of %d)\n",
      peak, isa.why, ghz, fma, fma / ghz, kBestOf);
  std::printf("# load average at start: %s\n", loadavg().c_str());
  std::printf(
      "# ms = median over %d interleaved rounds of the wall time per call; min_ms = best "
      "round;\n# cpu_ms = median process CPU time per call (all threads; less disturbed by "
      "other load);\n# GFLOP/s = 2 x multiply-adds of a direct convolution / ms (Winograd does "
      "fewer, so it can pass 100%%);\n# %%peak = GFLOP/s / (threads x peak per core); %%pkcpu = "
      "the same per CPU-second (from cpu_ms);\n# cohort/x = cohort ms / this ms (below 1: "
      "cohort faster); cpu_c/x = the same with cpu_ms\n",
      repeats);

  const Layer layers[] = {{"conv1", {batch, 1, 28, 28, 20, 5, 5}},
                          {"conv2", {batch, 20, 24, 24, 20, 5, 5}}};
  const Variant variants[] = {Variant::kKeepLayout, Variant::kNchwReorder, Variant::kNchwPlain};
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);

  for (int t : threads) {
    cohort::set_num_threads(t);
    omp_set_num_threads(t);
    std::printf("\n%-6s %-16s %-14s %2s %8s %8s %8s %7s %5s %6s %8s %7s  %s\n", "layer", "pass",
                "impl", "t", "ms", "min_ms", "cpu_ms", "GFLOP/s", "%peak", "%pkcpu", "cohort/x",
                "cpu_c/x", "kernel (layouts in>out)");
    // What one training step of Net runs (conv+ReLU forward and backward of
    // both layers, the pool both ways), summed per implementation.
    std::vector<std::string> step_order;
    std::unordered_map<std::string, double> step_ms, step_cpu_ms;
    std::unordered_map<std::string, int> step_parts;
    double step_gflop = 0;
    auto print = [&](const char* layer, const char* pass, std::vector<Impl>& impls, double gflop) {
      const double cohort_ms = median(impls[0].samples) * 1e3;
      const double cohort_cpu_ms = median(impls[0].cpu_samples) * 1e3;
      const std::string p = pass;
      const bool in_step =
          p == "forward_relu" || p == "backward_relu" || !std::strcmp(layer, "pool");
      if (in_step) step_gflop += gflop;
      for (Impl& im : impls) {
        const double ms = median(im.samples) * 1e3;
        const double cpu_ms = median(im.cpu_samples) * 1e3;
        if (in_step) {
          // NCHW pooling needs no reorder: onednn+reorder pools like onednn_nchw.
          std::vector<std::string> names{im.name};
          if (im.name == "onednn_nchw" && !std::strcmp(layer, "pool"))
            names.push_back("onednn+reorder");
          for (const std::string& n : names) {
            if (!step_ms.count(n)) step_order.push_back(n);
            step_ms[n] += ms;
            step_cpu_ms[n] += cpu_ms;
            ++step_parts[n];
          }
        }
        const double lo = *std::min_element(im.samples.begin(), im.samples.end()) * 1e3;
        char gf[32] = "-", pk[32] = "-", pkc[32] = "-";
        if (gflop > 0) {
          std::snprintf(gf, sizeof gf, "%.1f", gflop / (ms * 1e-3));
          std::snprintf(pk, sizeof pk, "%.0f%%", 100 * gflop / (ms * 1e-3) / (t * peak));
          std::snprintf(pkc, sizeof pkc, "%.0f%%", 100 * gflop / (cpu_ms * 1e-3) / peak);
        }
        std::printf("%-6s %-16s %-14s %2d %8.3f %8.3f %8.3f %7s %5s %6s %8.2f %7.2f  %s\n", layer,
                    pass, im.name.c_str(), t, ms, lo, cpu_ms, gf, pk, pkc, cohort_ms / ms,
                    cohort_cpu_ms / cpu_ms, im.what.c_str());
      }
      std::fflush(stdout);
    };
    for (const Layer& l : layers) {
      const Conv2dGeometry& g = l.g;
      const auto x = random_vec(g.batch * g.in_channels * g.in_h * g.in_w, 1);
      const auto w = random_vec(g.out_channels * g.in_channels * g.kernel_h * g.kernel_w, 2);
      const auto b = random_vec(g.out_channels, 3);
      const auto dy = random_vec(g.batch * g.out_channels * g.out_h() * g.out_w(), 4);
      std::vector<float> y(dy.size()), yr(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
      const bool want_dx = g.in_channels > 1;  // Net's input needs no gradient
      const double gflop = 2.0 * cohort::kernels::conv2d_macs(g) * 1e-9;
      std::vector<std::unique_ptr<OnednnConv>> dn;
      for (Variant v : variants)
        dn.push_back(std::make_unique<OnednnConv>(eng, strm, g, v, algo, x, w, b, dy, want_dx));

      namespace k = cohort::kernels;
      // Cross-check: every variant's outputs against cohort's.
      k::conv2d_forward(g, x.data(), w.data(), b.data(), y.data());
      k::conv2d_forward_relu(g, x.data(), w.data(), b.data(), yr.data());
      k::conv2d_backward_input(g, dy.data(), w.data(), dx.data());
      k::conv2d_backward_weight(g, x.data(), dy.data(), dw.data(), db.data());
      for (size_t i = 0; i < dn.size(); ++i) {
        OnednnConv& o = *dn[i];
        o.forward.run(strm);
        o.backward_input.run(strm);
        o.backward_weight.run(strm);
        const double e =
            std::max({max_rel_diff(y, o.y()), max_rel_diff(yr, o.yr()), max_rel_diff(dx, o.dx()),
                      max_rel_diff(dw, o.dw()), max_rel_diff(db, o.db())});
        std::printf("# check %s %s: largest difference from cohort %.1e of the largest value%s\n",
                    l.name, variant_name(variants[i]), e, e > 1e-3 ? "  MISMATCH" : "");
      }

      auto run_pass = [&](const char* pass, std::function<void()> cohort_fn,
                          Chain OnednnConv::*chain, double passes) {
        if ((std::string(l.name) + " " + pass).find(filter) == std::string::npos) return;
        std::vector<Impl> impls;
        impls.push_back({"cohort", std::move(cohort_fn),
                         std::string("path ") + cohort::kernel_path_name(path)});
        for (size_t i = 0; i < dn.size(); ++i) {
          Chain& c = (*dn[i]).*chain;
          std::string what = c.what;
          if (c.reorders) what += " +" + std::to_string(c.reorders) + " reorder(s)";
          impls.push_back({variant_name(variants[i]), [&c, &strm] { c.run(strm); }, what});
        }
        time_all(impls, seconds, repeats);
        print(l.name, pass, impls, passes * gflop);
      };
      run_pass(
          "forward", [&] { k::conv2d_forward(g, x.data(), w.data(), b.data(), y.data()); },
          &OnednnConv::forward, 1);
      run_pass(
          "forward_relu",
          [&] { k::conv2d_forward_relu(g, x.data(), w.data(), b.data(), yr.data()); },
          &OnednnConv::forward_relu, 1);
      run_pass(
          "backward_input", [&] { k::conv2d_backward_input(g, dy.data(), w.data(), dx.data()); },
          &OnednnConv::backward_input, 1);
      run_pass(
          "backward_weight",
          [&] { k::conv2d_backward_weight(g, x.data(), dy.data(), dw.data(), db.data()); },
          &OnednnConv::backward_weight, 1);
      k::conv2d_forward_relu(g, x.data(), w.data(), b.data(), yr.data());
      run_pass(
          "backward_relu",
          [&] {
            k::conv2d_backward(g, x.data(), w.data(), dy.data(), yr.data(),
                               want_dx ? dx.data() : nullptr, dw.data(), db.data());
          },
          &OnednnConv::backward_relu, want_dx ? 2 : 1);

      if (std::strcmp(l.name, "conv2") == 0 &&
          (filter.empty() || filter.find("pool") != std::string::npos)) {
        // Net's pool: relu(conv2) [64, 20, 20, 20] -> [64, 20, 10, 10].
        cohort::kernels::Pool2dGeometry pg{batch, 20, 20, 20, 2, 2, 2, 2};
        const auto px = random_vec(pg.batch * pg.channels * pg.in_h * pg.in_w, 5);
        std::vector<float> py(pg.batch * pg.channels * pg.out_h() * pg.out_w()), pdx(px.size());
        std::vector<int32_t> pa(py.size());
        // In conv2's output layout (what follows relu(conv2) in a blocked
        // framework) and in NCHW (which needs no reorder: oneDNN pools it).
        OnednnPool pool_keep(eng, strm, dn[0]->y_layout(), px);
        OnednnPool pool_nchw(eng, strm,
                             memory::desc({pg.batch, pg.channels, pg.in_h, pg.in_w},
                                          memory::data_type::f32, Tag::nchw),
                             px);
        k::max_pool2d_forward(pg, px.data(), py.data(), pa.data());
        k::max_pool2d_backward(pg, py.data(), pa.data(), pdx.data());
        for (OnednnPool* o : {&pool_keep, &pool_nchw}) {
          const auto [oy, odx] = o->outputs(strm);
          const double e = std::max(max_rel_diff(py, oy), max_rel_diff(pdx, odx));
          std::printf(
              "# check pool %s: largest difference from cohort %.1e of the largest value%s\n",
              o == &pool_keep ? "onednn" : "onednn_nchw", e, e > 1e-6 ? "  MISMATCH" : "");
        }
        for (int pass = 0; pass < 2; ++pass) {
          std::vector<Impl> impls;
          if (pass == 0) {
            impls.push_back({"cohort",
                             [&] { k::max_pool2d_forward(pg, px.data(), py.data(), pa.data()); },
                             std::string("path ") + cohort::kernel_path_name(path)});
          } else {
            k::max_pool2d_forward(pg, px.data(), py.data(), pa.data());
            impls.push_back({"cohort",
                             [&] { k::max_pool2d_backward(pg, py.data(), pa.data(), pdx.data()); },
                             std::string("path ") + cohort::kernel_path_name(path)});
          }
          Chain& ck = pass == 0 ? pool_keep.forward : pool_keep.backward;
          Chain& cn = pass == 0 ? pool_nchw.forward : pool_nchw.backward;
          impls.push_back({"onednn", [&ck, &strm] { ck.run(strm); }, ck.what});
          impls.push_back({"onednn_nchw", [&cn, &strm] { cn.run(strm); }, cn.what});
          time_all(impls, seconds, repeats);
          print("pool", pass == 0 ? "forward" : "backward", impls, 0);
        }
      }
    }
    // Only when every part was measured (no --filter).
    if (!step_order.empty() && step_parts[step_order[0]] == 6) {
      const double cohort_ms = step_ms["cohort"], cohort_cpu_ms = step_cpu_ms["cohort"];
      for (const std::string& n : step_order) {
        if (step_parts[n] != 6) continue;
        const double ms = step_ms[n], cpu_ms = step_cpu_ms[n];
        std::printf("%-6s %-16s %-14s %2d %8.3f %8s %8.3f %7.1f %4.0f%% %5.0f%% %8.2f %7.2f  %s\n",
                    "step", "net_conv_passes", n.c_str(), t, ms, "-", cpu_ms,
                    step_gflop / (ms * 1e-3), 100 * step_gflop / (ms * 1e-3) / (t * peak),
                    100 * step_gflop / (cpu_ms * 1e-3) / peak, cohort_ms / ms,
                    cohort_cpu_ms / cpu_ms,
                    "sum of the medians: conv1, conv2 forward_relu + backward_relu; pool");
      }
      std::fflush(stdout);
    }
  }
  std::printf("# load average at end: %s; clock at end %.2f GHz\n", loadavg().c_str(),
              measure_clock_ghz());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_onednn_conv: %s\n", e.what());
  return 1;
}
