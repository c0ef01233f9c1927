// Times cohort's fused transformer ops against the same computation composed
// from cohort's unfused ops and against PyTorch (torch_transformer_ops.py,
// which this program runs itself so that every number comes from one run),
// forward + backward in float32, at the GPT reference size (rows B*T = 2048,
// C 256, 4C 1024, vocabulary 256) and GPT-2 124M's (rows 256, C 768, vocabulary
// 50304). Prints the CPU, the kernel path, then one line per (size, op):
//   <size> <op> threads=<t> fused_ms=<> composed_ms=<> torch_ms=<> fused/composed=<> fused/torch=<>
// (best wall time per call over 5 rounds). "composed" is what a model wrote
// before the fused ops: linear then gelu, x + delta then layer_norm,
// log_softmax then nll_loss, the tanh formula from pointwise ops; layer_norm
// and adamw have no composed form (the same kernel either way: "-").
// Usage: bench_transformer_ops [--threads 2] [--seconds 1] [--sizes ref,gpt2]
//        [--python /usr/bin/python3] [--torch-script PATH] [--ops NAME] [--no-torch]
// (--ops: only the ops whose name contains NAME).
// Never time while a compiler runs on the machine (pgrep -c cc1plus).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cohort/autograd/engine.h"
#include "cohort/autograd/ops.h"
#include "cohort/base/cpu.h"
#include "cohort/base/parallel.h"
#include "cohort/optim/adam.h"

using cohort::Tensor;

namespace {

struct Size {
  const char* name;
  int64_t rows, c, vocab, params;  // params: AdamW's tensor (ref model; one GPT-2 block)
};
const Size kSizes[] = {{"ref", 2048, 256, 256, 3260000}, {"gpt2", 256, 768, 50304, 7087872}};

double time_ms(const std::function<void()>& fn, double seconds) {
  fn();
  auto t0 = std::chrono::steady_clock::now();
  fn();
  const double one = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int iters = std::max(1, static_cast<int>(seconds / 5 / std::max(one, 1e-6)));
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) fn();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters);
  }
  return best * 1e3;
}

Tensor randn(const cohort::Shape& s, uint64_t seed, double scale = 1.0, bool grad = true) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0.0f, static_cast<float>(scale));
  std::vector<float> v(cohort::shape_numel(s));
  for (float& x : v) x = n(g);
  Tensor t = Tensor::from_vector(v, s);
  return grad ? t.set_requires_grad(true) : t;
}

void clear(std::initializer_list<Tensor> ts) {
  for (const Tensor& t : ts) t.set_grad(Tensor());
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

struct Row {
  double fused = -1, composed = -1, torch = -1;
};

std::string fmt_ms(double v) {
  if (v < 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", v);
  return b;
}

std::string fmt_ratio(double a, double b) {
  if (a < 0 || b <= 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", a / b);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cohort;
  std::vector<int> threads{2};
  double seconds = 1.0;
  std::string sizes = "ref,gpt2", python = "/usr/bin/python3";
  std::string script = std::string(COHORT_BENCH_SOURCE_DIR) + "/torch_transformer_ops.py";
  std::string only;  // ops whose name contains it
  bool with_torch = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--threads") {
      threads.clear();
      for (const char* s = v; *s;) {
        char* end;
        threads.push_back(static_cast<int>(std::strtol(s, &end, 10)));
        s = *end == ',' ? end + 1 : end;
      }
      ++i;
    } else if (a == "--seconds") {
      seconds = std::atof(v);
      ++i;
    } else if (a == "--sizes") {
      sizes = v;
      ++i;
    } else if (a == "--python") {
      python = v;
      ++i;
    } else if (a == "--torch-script") {
      script = v;
      ++i;
    } else if (a == "--ops") {
      only = v;
      ++i;
    } else if (a == "--no-torch") {
      with_torch = false;
    } else {
      std::fprintf(stderr,
                   "usage: bench_transformer_ops [--threads 2] [--seconds 1] [--sizes ref,gpt2] "
                   "[--python /usr/bin/python3] [--torch-script PATH] [--ops NAME] [--no-torch]\n");
      return 2;
    }
  }
  std::printf("cpu: %s; kernel path: %s\n", cpu_model().c_str(), kernel_path_name(kernel_path()));
  std::map<std::string, Row> rows;  // "<size> <op> threads=<t>"
  std::vector<std::string> order;
  auto key = [](const char* size, const char* op, int t) {
    return std::string(size) + " " + op + " threads=" + std::to_string(t);
  };
  for (int t : threads) {
    ThreadBudgetGuard budget(t);
    for (const Size& sz : kSizes) {
      if (sizes.find(sz.name) == std::string::npos) continue;
      const int64_t n = sz.rows, c = sz.c, v = sz.vocab;
      Tensor x4 = randn({n, 4 * c}, 1), g4 = randn({n, 4 * c}, 2, 1.0, false);
      Tensor x = randn({n, c}, 3), d = randn({n, c}, 4);
      Tensor w1 = randn({4 * c, c}, 5, 0.05), b1 = randn({4 * c}, 6);
      Tensor lw = randn({c}, 7), lb = randn({c}, 8);
      Tensor gs = randn({n, c}, 9, 1.0, false), gy = randn({n, c}, 10, 1.0, false);
      Tensor logits = randn({n, v}, 11);
      std::vector<int64_t> tv(n);
      for (int64_t i = 0; i < n; ++i) tv[i] = (i * 7919) % v;
      Tensor target = Tensor::from_vector(tv, {n});
      auto add = [&](const char* op, std::function<void()> fused, std::function<void()> composed) {
        if (std::string(op).find(only) == std::string::npos) return;
        const std::string k = key(sz.name, op, t);
        order.push_back(k);
        rows[k].fused = time_ms(fused, seconds);
        if (composed) rows[k].composed = time_ms(composed, seconds);
      };
      add(
          "gelu_tanh",
          [&] {
            clear({x4});
            gelu(x4, "tanh").backward(g4);
          },
          [&] {
            clear({x4});
            Tensor y = 0.5 * x4 * (1.0 + tanh(0.7978845608028654 * (x4 + 0.044715 * x4 * x4 * x4)));
            y.backward(g4);
          });
      add(
          "linear_gelu",
          [&] {
            clear({x, w1, b1});
            linear_gelu(x, w1, b1).backward(g4);
          },
          [&] {
            clear({x, w1, b1});
            gelu(linear(x, w1, b1), "tanh").backward(g4);
          });
      add(
          "add_layer_norm",
          [&] {
            clear({x, d, lw, lb});
            auto [s, y] = add_layer_norm(x, d, lw, lb);
            autograd::run_backward({s, y}, {gs, gy});
          },
          [&] {
            clear({x, d, lw, lb});
            Tensor s = x + d;
            Tensor y = layer_norm(s, {c}, lw, lb);
            autograd::run_backward({s, y}, {gs, gy});
          });
      add(
          "layer_norm",
          [&] {
            clear({x, lw, lb});
            layer_norm(x, {c}, lw, lb).backward(gy);
          },
          nullptr);
      add(
          "cross_entropy",
          [&] {
            clear({logits});
            cross_entropy(logits, target).backward();
          },
          [&] {
            clear({logits});
            nll_loss(log_softmax(logits, 1), target).backward();
          });
      if (std::string("adamw").find(only) == std::string::npos) continue;
      Tensor param = randn({sz.params}, 12, 0.02);
      param.set_grad(randn({sz.params}, 13, 1e-3, false));
      optim::AdamWOptions o;
      o.lr = 3e-4;
      o.beta1 = 0.9;
      o.beta2 = 0.95;
      o.weight_decay = 0.1;
      optim::AdamW opt({param}, o);
      add(
          "adamw", [&] { opt.step(); }, nullptr);
    }
  }
  if (with_torch) {
    std::string ts;
    for (int t : threads) ts += (ts.empty() ? "" : ",") + std::to_string(t);
    const std::string cmd = "OPENBLAS_NUM_THREADS=1 " + python + " " + script + " --threads " + ts +
                            " --seconds " + std::to_string(seconds) + " --sizes " + sizes;
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) {
      std::fprintf(stderr, "bench_transformer_ops: cannot run %s\n", cmd.c_str());
      return 1;
    }
    char line[512];
    while (std::fgets(line, sizeof line, p)) {
      std::string s = line;
      const size_t at = s.find(" ms=");
      if (at == std::string::npos) continue;
      auto it = rows.find(s.substr(0, at));
      if (it != rows.end()) it->second.torch = std::atof(s.c_str() + at + 4);
    }
    const int rc = pclose(p);
    if (rc != 0)
      std::fprintf(stderr, "bench_transformer_ops: %s exited with %d\n", cmd.c_str(), rc);
  }
  for (const std::string& k : order) {
    const Row& r = rows[k];
    std::printf("%s fused_ms=%s composed_ms=%s torch_ms=%s fused/composed=%s fused/torch=%s\n",
                k.c_str(), fmt_ms(r.fused).c_str(), fmt_ms(r.composed).c_str(),
                fmt_ms(r.torch).c_str(), fmt_ratio(r.fused, r.composed).c_str(),
                fmt_ratio(r.fused, r.torch).c_str());
  }
  return 0;
}
