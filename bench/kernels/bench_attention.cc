// Causal attention, forward and forward + backward, three ways measured in
// one run: cohort's fused op (scaled_dot_product_attention over the blocked
// kernels), the same attention composed from cohort's generic ops (matmul,
// an additive -inf mask, softmax, matmul) and PyTorch 1.13's composed
// attention as nanoGPT writes it without flash (torch_attention.py, a child
// process it talks to through pipes). For each shape the three alternate for
// `--rounds` rounds and each figure is the best round (the machine is shared:
// the minimum is the least disturbed); the ratios compare figures of this run.
// Also printed: the CPU, the kernel path, the threads, and the memory each
// needs beyond its inputs and outputs (fused: scratch tiles per thread plus
// O(T) row statistics; composed: each of its B x H x T x T tensors).
//
// With --bf16 (on a CPU with avx512_bf16) a second table: the fused op's
// forward + backward under a bf16 PrecisionPolicy, its products widened to
// float32 (the kEmulated path) against its products on vdpbf16ps (the
// kAvx512Bf16 path), next to float32, alternating in the same rounds.
//
// Usage: bench_attention [--threads N] [--seconds S] [--rounds R] [--no-torch]
//                        [--torch-script PATH] [--quick] [--bf16]
// COHORT_KERNELS=baseline|avx2|avx512 forces cohort's kernel path.
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/kernels/interleaved_timing.h"
#include "cohort/autograd/ops.h"
#include "cohort/autograd/precision.h"
#include "cohort/base/cpu.h"
#include "cohort/base/parallel.h"
#include "cohort/core/kernels/attention.h"
#include "cohort/core/random.h"

namespace {

using namespace cohort;

// /usr/bin/python3 torch_attention.py as a child with pipes on stdin/stdout.
class TorchPeer {
 public:
  explicit TorchPeer(const std::string& script) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0)
      throw std::runtime_error(std::string("bench_attention: pipe: ") + std::strerror(errno));
    // PyTorch 1.13's fastest setting on this kind of host (issue 21): its own
    // threads only, OpenBLAS single-threaded inside them. The environment is
    // built before fork: the child only calls async-signal-safe functions.
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    if (!std::getenv("OPENBLAS_NUM_THREADS")) env.emplace_back("OPENBLAS_NUM_THREADS=1");
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string py = "/usr/bin/python3";
    std::vector<char*> args{py.data(), const_cast<char*>(script.c_str()), nullptr};
    pid_ = fork();
    if (pid_ < 0)
      throw std::runtime_error(std::string("bench_attention: fork: ") + std::strerror(errno));
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      execve(py.c_str(), args.data(), envp.data());
      const char msg[] = "bench_attention: cannot exec /usr/bin/python3\n";
      (void)!write(2, msg, sizeof msg - 1);
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = out[0];
  }
  ~TorchPeer() {
    if (to_ >= 0) close(to_);  // EOF ends the script
    if (from_ >= 0) close(from_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  TorchPeer(const TorchPeer&) = delete;
  TorchPeer& operator=(const TorchPeer&) = delete;

  // One line from the script, waiting at most timeout_s.
  std::string read_line(int timeout_s = 600) {
    std::string line;
    for (;;) {
      pollfd p{from_, POLLIN, 0};
      const int r = poll(&p, 1, timeout_s * 1000);
      if (r == 0)
        throw std::runtime_error("bench_attention: torch_attention.py did not answer in time");
      if (r < 0 && errno == EINTR) continue;
      char c;
      const ssize_t n = read(from_, &c, 1);
      if (n == 0)
        throw std::runtime_error(
            "bench_attention: torch_attention.py exited (see its error above)");
      if (n < 0) {
        if (errno == EINTR) continue;
        throw std::runtime_error(std::string("bench_attention: read: ") + std::strerror(errno));
      }
      if (c == '\n') return line;
      line += c;
    }
  }
  std::string ask(const std::string& request) {
    const std::string msg = request + "\n";
    if (write(to_, msg.data(), msg.size()) != static_cast<ssize_t>(msg.size()))
      throw std::runtime_error("bench_attention: cannot write to torch_attention.py");
    return read_line();
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
};

double field(const std::string& line, const std::string& key) {
  const size_t p = line.find(key + "=");
  if (p == std::string::npos)
    throw std::runtime_error("bench_attention: no " + key + " in torch's answer: " + line);
  return std::stod(line.substr(p + key.size() + 1));
}

Tensor composed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  Tensor s = matmul(q, transpose(k, -2, -1)) * (1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  return matmul(softmax(s + mask, -1), v);
}

struct Shape4 {
  int64_t b, h, t, d;
};

struct Figures {
  double fused_f = 1e30, fused_fb = 1e30, comp_f = 1e30, comp_fb = 1e30, torch_f = 1e30,
         torch_fb = 1e30;
};

double timed_ms(const std::function<void()>& fn, double seconds) {
  std::vector<bench::Impl> one{{"x", fn, ""}};
  bench::time_all(one, seconds, 1);
  return one[0].samples[0] * 1e3;
}

Figures measure(const Shape4& s, double seconds, int rounds, TorchPeer* torch, int threads) {
  Generator gen(1);
  const cohort::Shape shape{s.b, s.h, s.t, s.d};
  Tensor q = randn(shape, gen).set_requires_grad(true),
         k = randn(shape, gen).set_requires_grad(true);
  Tensor v = randn(shape, gen).set_requires_grad(true), dy = randn(shape, gen);
  std::vector<float> m(static_cast<size_t>(s.t * s.t));
  for (int64_t i = 0; i < s.t; ++i)
    for (int64_t j = 0; j < s.t; ++j)
      m[static_cast<size_t>(i * s.t + j)] = j <= i ? 0.0f : -std::numeric_limits<float>::infinity();
  const Tensor mask = Tensor::from_vector(m, {s.t, s.t});
  auto clear = [&] {
    q.set_grad(Tensor());
    k.set_grad(Tensor());
    v.set_grad(Tensor());
  };
  auto fused_f = [&] {
    NoGradGuard g;
    scaled_dot_product_attention(q, k, v, true);
  };
  auto fused_fb = [&] {
    clear();
    scaled_dot_product_attention(q, k, v, true).backward(dy);
  };
  auto comp_f = [&] {
    NoGradGuard g;
    composed(q, k, v, mask);
  };
  auto comp_fb = [&] {
    clear();
    composed(q, k, v, mask).backward(dy);
  };
  Figures f;
  for (int r = 0; r < rounds; ++r) {
    f.fused_f = std::min(f.fused_f, timed_ms(fused_f, seconds));
    f.fused_fb = std::min(f.fused_fb, timed_ms(fused_fb, seconds));
    f.comp_f = std::min(f.comp_f, timed_ms(comp_f, seconds));
    f.comp_fb = std::min(f.comp_fb, timed_ms(comp_fb, seconds));
    if (torch) {
      const std::string a = torch->ask(std::to_string(s.b) + " " + std::to_string(s.h) + " " +
                                       std::to_string(s.t) + " " + std::to_string(s.d) + " " +
                                       std::to_string(seconds) + " " + std::to_string(threads));
      f.torch_f = std::min(f.torch_f, field(a, "fwd_ms"));
      f.torch_fb = std::min(f.torch_fb, field(a, "fwdbwd_ms"));
    }
  }
  return f;
}

// The fused forward + backward in float32 and under the two bf16 paths.
struct Bf16Figures {
  double fp32 = 1e30, widened = 1e30, products = 1e30;
};

Bf16Figures measure_bf16(const Shape4& s, double seconds, int rounds) {
  Generator gen(1);
  const cohort::Shape shape{s.b, s.h, s.t, s.d};
  Tensor q = randn(shape, gen).set_requires_grad(true),
         k = randn(shape, gen).set_requires_grad(true);
  Tensor v = randn(shape, gen).set_requires_grad(true), dy = randn(shape, gen);
  auto fb = [&](std::optional<native::Bf16Path> path) {
    return [&, path] {
      std::optional<PrecisionScope> scope;
      if (path) scope.emplace(PrecisionPolicy::bf16(*path));
      q.set_grad(Tensor());
      k.set_grad(Tensor());
      v.set_grad(Tensor());
      scaled_dot_product_attention(q, k, v, true).backward(dy);
    };
  };
  Bf16Figures f;
  for (int r = 0; r < rounds; ++r) {
    f.fp32 = std::min(f.fp32, timed_ms(fb(std::nullopt), seconds));
    f.widened = std::min(f.widened, timed_ms(fb(native::Bf16Path::kEmulated), seconds));
    f.products = std::min(f.products, timed_ms(fb(native::Bf16Path::kAvx512Bf16), seconds));
  }
  return f;
}

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", bytes / (1 << 20));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (const char* v = std::getenv("COHORT_KERNELS"))
      cohort::apply_kernel_path_setting(v, "COHORT_KERNELS");
    int threads = cohort::num_threads(), rounds = 3;
    double seconds = 0.3;
    bool use_torch = true, quick = false, bf16 = false;
    std::string script = COHORT_BENCH_KERNELS_DIR "/torch_attention.py";
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw std::runtime_error("bench_attention: " + a + " needs a value");
        return argv[++i];
      };
      if (a == "--threads")
        threads = std::stoi(next());
      else if (a == "--seconds")
        seconds = std::stod(next());
      else if (a == "--rounds")
        rounds = std::stoi(next());
      else if (a == "--no-torch")
        use_torch = false;
      else if (a == "--torch-script")
        script = next();
      else if (a == "--quick")
        quick = true;
      else if (a == "--bf16")
        bf16 = true;
      else
        throw std::runtime_error("bench_attention: unknown argument " + a);
    }
    cohort::set_num_threads(threads);
    std::printf("cpu: %s; kernel path %s; %d threads; best of %d rounds of ~%.2f s each\n",
                cohort::cpu_features().model.c_str(),
                cohort::kernel_path_name(cohort::kernel_path()), threads, rounds, seconds);
    std::unique_ptr<TorchPeer> torch;
    if (use_torch) {
      torch = std::make_unique<TorchPeer>(script);
      const char* ob = std::getenv("OPENBLAS_NUM_THREADS");
      std::printf(
          "peer: %s (composed: q@k^T, masked_fill, softmax, @v), %d threads, "
          "OPENBLAS_NUM_THREADS=%s\n",
          torch->read_line().c_str(), threads, ob ? ob : "1");
    }
    std::vector<std::pair<std::string, Shape4>> shapes{{"gpt reference", {16, 4, 128, 64}},
                                                       {"long context", {2, 4, 1024, 64}}};
    for (int64_t t : {256, 512, 1024, 2048})
      if (!quick || t <= 512) shapes.push_back({"table", {1, 4, t, 64}});
    std::printf("%-14s %2s %2s %5s %3s | %9s %9s %9s | %9s %9s %9s | %7s %7s %7s | %7s %10s %10s\n",
                "shape", "B", "H", "T", "D", "fused_f", "comp_f", "torch_f", "fused_fb", "comp_fb",
                "torch_fb", "fb/comp", "fb/trch", "f/trch", "GFLOP/s", "fused_MiB", "TxT_MiB");
    for (const auto& [label, s] : shapes) {
      const Figures f = measure(s, seconds, rounds, torch.get(), threads);
      // Causal: half of the T x T scores; forward 2 GEMMs, backward 5 (dq, dk,
      // dv, dP and the recomputed scores): 7 x 2 x BH x T^2/2 x D flops.
      const double bh = static_cast<double>(s.b * s.h);
      const double gflop = 7.0 * bh * s.t * s.t * s.d * 1e-9;
      const cohort::kernels::AttentionShape as{s.b * s.h, s.t, s.t, s.d, true, 0.125};
      const double fused_bytes =
          4.0 * (static_cast<double>(cohort::kernels::attention_scratch_floats(as)) * threads +
                 3.0 * bh * s.t);
      const double txt_bytes = 4.0 * bh * s.t * s.t;
      std::printf(
          "%-14s %2ld %2ld %5ld %3ld | %9.3f %9.3f %9.3f | %9.3f %9.3f %9.3f | %7.3f %7.3f %7.3f | "
          "%7.1f %10s %10s\n",
          label.c_str(), s.b, s.h, s.t, s.d, f.fused_f, f.comp_f, torch ? f.torch_f : NAN,
          f.fused_fb, f.comp_fb, torch ? f.torch_fb : NAN, f.fused_fb / f.comp_fb,
          torch ? f.fused_fb / f.torch_fb : NAN, torch ? f.fused_f / f.torch_f : NAN,
          gflop / (f.fused_fb * 1e-3), mib(fused_bytes).c_str(), mib(txt_bytes).c_str());
      std::fflush(stdout);
    }
    std::printf(
        "ms per call; _f forward (no grad), _fb forward + backward; fb/comp = fused_fb / comp_fb, "
        "fb/trch = fused_fb / torch_fb, f/trch = fused_f / torch_f (below 1: cohort's fused op "
        "is faster); GFLOP/s of the fused forward + backward (7 x B H T^2 D); fused_MiB = scratch "
        "tiles x threads + lse/delta rows; TxT_MiB = one B x H x T x T float tensor (composed "
        "attention keeps several)\n");
    if (bf16) {
      cohort::native::check_bf16_path(cohort::native::Bf16Path::kAvx512Bf16,
                                      "bench_attention --bf16");
      std::printf("\n%-14s %2s %2s %5s %3s | %9s %9s %9s | %9s %9s | %7s\n", "bf16 fused_fb", "B",
                  "H", "T", "D", "fp32", "widened", "products", "prod/f32", "prod/wid", "GFLOP/s");
      for (const auto& [label, s] : shapes) {
        const Bf16Figures f = measure_bf16(s, seconds, rounds);
        const double gflop = 7.0 * static_cast<double>(s.b * s.h) * s.t * s.t * s.d * 1e-9;
        std::printf("%-14s %2ld %2ld %5ld %3ld | %9.3f %9.3f %9.3f | %9.3f %9.3f | %7.1f\n",
                    label.c_str(), s.b, s.h, s.t, s.d, f.fp32, f.widened, f.products,
                    f.products / f.fp32, f.products / f.widened, gflop / (f.products * 1e-3));
        std::fflush(stdout);
      }
      std::printf(
          "ms per forward + backward of the fused op: float32; under a bf16 policy with the "
          "products widened to float32 (kEmulated) and on vdpbf16ps (kAvx512Bf16, P and dS "
          "rounded); GFLOP/s of the bf16 products' run (7 x B H T^2 D)\n");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
