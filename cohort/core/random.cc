#include "cohort/core/random.h"

#include <cmath>

#include "cohort/base/parallel.h"
#include "cohort/core/dispatch.h"

namespace cohort {

namespace {

constexpr uint32_t kStateVersion = 1;

// The innermost recording and replay of this thread (random.h).
thread_local GeneratorRecording* t_recording = nullptr;
thread_local GeneratorReplay* t_replay = nullptr;
constexpr int64_t kGrain = 16384;

inline float u32_to_float(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }
inline double u64_to_double(uint64_t x) {
  return static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
}

// Element values for a fill of n elements starting at block `base`: floats use
// 4 lanes per block, doubles 2 (64 bits each). fn(i, uniform in [0,1)).
template <typename T, typename F>
void for_uniform(int64_t n, uint64_t base, uint64_t seed, F fn) {
  constexpr int64_t kPerBlock = std::is_same_v<T, float> ? 4 : 2;
  const int64_t blocks = (n + kPerBlock - 1) / kPerBlock;
  parallel_for(0, blocks, kGrain / kPerBlock, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      auto r = philox4x32(base + static_cast<uint64_t>(b), seed);
      for (int64_t l = 0; l < kPerBlock; ++l) {
        int64_t i = b * kPerBlock + l;
        if (i >= n) break;
        if constexpr (std::is_same_v<T, float>) {
          fn(i, static_cast<double>(u32_to_float(r[l])));
        } else {
          uint64_t v = (static_cast<uint64_t>(r[2 * l]) << 32) | r[2 * l + 1];
          fn(i, u64_to_double(v));
        }
      }
    }
  });
}

uint64_t blocks_for(int64_t n, bool is_float) {
  int64_t per = is_float ? 4 : 2;
  return static_cast<uint64_t>((n + per - 1) / per);
}

// Fills a contiguous scratch buffer then copies into t (handles any layout).
template <typename F>
Tensor& fill_random(Tensor& t, const char* op, F make) {
  COHORT_CHECK(t.dtype() == DType::kFloat32 || t.dtype() == DType::kFloat64,
               "{}: needs a float32 or float64 tensor, got {}", op, dtype_name(t.dtype()));
  Tensor dst = t.is_contiguous() ? t : Tensor::empty(t.sizes(), t.dtype());
  t.storage()->bump_version();
  make(dst);
  if (!dst.is_same(t)) t.copy_(dst);
  return t;
}

}  // namespace

std::array<uint32_t, 4> philox4x32(uint64_t block, uint64_t seed) {
  uint32_t c0 = static_cast<uint32_t>(block), c1 = static_cast<uint32_t>(block >> 32), c2 = 0,
           c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {c0, c1, c2, c3};
}

Generator::Generator(const Generator& other) {
  std::lock_guard<std::mutex> lock(other.mu_);
  seed_ = other.seed_;
  offset_ = other.offset_;
}

Generator& Generator::operator=(const Generator& other) {
  if (this == &other) return *this;
  uint64_t s, o;
  {
    std::lock_guard<std::mutex> lock(other.mu_);
    s = other.seed_;
    o = other.offset_;
  }
  std::lock_guard<std::mutex> lock(mu_);
  seed_ = s;
  offset_ = o;
  return *this;
}

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mu_);
  seed_ = seed;
  offset_ = 0;
}

GeneratorSnapshot* Generator::replayed(const Generator* g) {
  for (GeneratorReplay* r = t_replay; r != nullptr; r = r->outer_)
    if (GeneratorSnapshot* s = r->find(g)) return s;
  return nullptr;
}

uint64_t Generator::seed() const {
  if (const GeneratorSnapshot* s = replayed(this)) return s->seed;
  std::lock_guard<std::mutex> lock(mu_);
  return seed_;
}

std::vector<uint8_t> Generator::get_state() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint8_t> out(20);
  auto put = [&](size_t at, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out[at + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  put(0, kStateVersion, 4);
  put(4, seed_, 8);
  put(12, offset_, 8);
  return out;
}

void Generator::set_state(const std::vector<uint8_t>& state) {
  COHORT_CHECK(state.size() == 20, "Generator::set_state: expected 20 bytes, got {}", state.size());
  auto get = [&](size_t at, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(state[at + i]) << (8 * i);
    return v;
  };
  COHORT_CHECK(get(0, 4) == kStateVersion,
               "Generator::set_state: state version {} is not the supported version {}", get(0, 4),
               kStateVersion);
  std::lock_guard<std::mutex> lock(mu_);
  seed_ = get(4, 8);
  offset_ = get(12, 8);
}

uint64_t Generator::reserve(uint64_t blocks) { return draw(blocks).second; }

std::pair<uint64_t, uint64_t> Generator::draw(uint64_t blocks) {
  uint64_t seed, b;
  if (GeneratorSnapshot* s = replayed(this)) {
    seed = s->seed;
    b = s->offset;
    s->offset += blocks;
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    seed = seed_;
    b = offset_;
    offset_ += blocks;
  }
  for (GeneratorRecording* r = t_recording; r != nullptr; r = r->outer_) r->note(this, seed, b);
  return {seed, b};
}

uint64_t Generator::next_u64() {
  auto [seed, b] = draw(1);
  auto r = philox4x32(b, seed);
  return (static_cast<uint64_t>(r[0]) << 32) | r[1];
}

GeneratorRecording::GeneratorRecording() : outer_(t_recording) { t_recording = this; }

GeneratorRecording::~GeneratorRecording() { t_recording = outer_; }

void GeneratorRecording::note(const Generator* g, uint64_t seed, uint64_t offset) {
  for (const GeneratorSnapshot& s : seen_)
    if (s.generator == g) return;
  seen_.push_back({g, seed, offset});
}

GeneratorReplay::GeneratorReplay(const std::vector<GeneratorSnapshot>& snapshots)
    : outer_(t_replay), state_(snapshots) {
  t_replay = this;
}

GeneratorReplay::~GeneratorReplay() { t_replay = outer_; }

GeneratorSnapshot* GeneratorReplay::find(const Generator* g) {
  for (GeneratorSnapshot& s : state_)
    if (s.generator == g) return &s;
  return nullptr;
}

Tensor& uniform_(Tensor& t, double lo, double hi, Generator& gen) {
  return fill_random(t, "uniform_", [&](Tensor& d) {
    const bool f = d.dtype() == DType::kFloat32;
    const int64_t n = d.numel();
    uint64_t seed = gen.seed();
    uint64_t base = gen.reserve(blocks_for(n, f));
    dispatch_floating(d.dtype(), "uniform_", [&](auto tag) {
      using T = decltype(tag);
      T* p = d.data_ptr<T>();
      const double span = hi - lo;
      for_uniform<T>(n, base, seed, [&](int64_t i, double u) {
        T v = static_cast<T>(lo + span * u);
        // Rounding can land on hi; keep the interval half-open.
        p[i] = v < static_cast<T>(hi) ? v : static_cast<T>(lo);
      });
    });
  });
}

Tensor& normal_(Tensor& t, double mean, double stdv, Generator& gen) {
  COHORT_CHECK(stdv >= 0, "normal_: std must be >= 0, got {}", stdv);
  return fill_random(t, "normal_", [&](Tensor& d) {
    const int64_t n = d.numel();
    const int64_t pairs = (n + 1) / 2;
    uint64_t seed = gen.seed();
    // One block gives two (u1, u2) pairs of 32-bit uniforms -> four normals
    // for float; for double one pair of 64-bit uniforms per block.
    const bool f = d.dtype() == DType::kFloat32;
    const int64_t per_block = f ? 2 : 1;
    const int64_t blocks = (pairs + per_block - 1) / per_block;
    uint64_t base = gen.reserve(static_cast<uint64_t>(blocks));
    dispatch_floating(d.dtype(), "normal_", [&](auto tag) {
      using T = decltype(tag);
      T* p = d.data_ptr<T>();
      parallel_for(0, blocks, kGrain / 4, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          auto r = philox4x32(base + static_cast<uint64_t>(b), seed);
          for (int64_t k = 0; k < per_block; ++k) {
            double u1, u2;
            if (f) {
              u1 = 1.0 - static_cast<double>(u32_to_float(r[2 * k]));  // (0, 1]
              u2 = static_cast<double>(u32_to_float(r[2 * k + 1]));
            } else {
              u1 = 1.0 - u64_to_double((static_cast<uint64_t>(r[0]) << 32) | r[1]);
              u2 = u64_to_double((static_cast<uint64_t>(r[2]) << 32) | r[3]);
            }
            double rad = std::sqrt(-2.0 * std::log(u1));
            double th = 2.0 * M_PI * u2;
            int64_t i = 2 * (b * per_block + k);
            if (i < n) p[i] = static_cast<T>(mean + stdv * rad * std::cos(th));
            if (i + 1 < n) p[i + 1] = static_cast<T>(mean + stdv * rad * std::sin(th));
          }
        }
      });
    });
  });
}

Tensor rand(const Shape& sizes, Generator& gen, DType dtype) {
  Tensor t = Tensor::empty(sizes, dtype);
  return uniform_(t, 0.0, 1.0, gen);
}

Tensor randn(const Shape& sizes, Generator& gen, DType dtype) {
  Tensor t = Tensor::empty(sizes, dtype);
  return normal_(t, 0.0, 1.0, gen);
}

Tensor randint(int64_t lo, int64_t hi, const Shape& sizes, Generator& gen, DType dtype) {
  COHORT_CHECK(hi > lo, "randint: empty range [{}, {})", lo, hi);
  Tensor out = Tensor::empty(sizes, dtype);
  const int64_t n = out.numel();
  const uint64_t span = static_cast<uint64_t>(hi - lo);
  uint64_t seed = gen.seed();
  uint64_t base = gen.reserve(blocks_for(n, false));
  dispatch_arith(dtype, "randint", [&](auto tag) {
    using T = decltype(tag);
    T* p = out.data_ptr<T>();
    parallel_for(0, (n + 1) / 2, kGrain / 2, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        auto r = philox4x32(base + static_cast<uint64_t>(b), seed);
        for (int64_t l = 0; l < 2; ++l) {
          int64_t i = 2 * b + l;
          if (i >= n) break;
          uint64_t v = (static_cast<uint64_t>(r[2 * l]) << 32) | r[2 * l + 1];
          // 64-bit value modulo span: bias below 2^-40 for spans < 2^24.
          p[i] = static_cast<T>(lo + static_cast<int64_t>(v % span));
        }
      }
    });
  });
  return out;
}

Tensor bernoulli(const Tensor& prob, Generator& gen) {
  COHORT_CHECK(prob.dtype() == DType::kFloat32 || prob.dtype() == DType::kFloat64,
               "bernoulli: probabilities must be float32 or float64, got {}",
               dtype_name(prob.dtype()));
  Tensor pc = prob.contiguous();
  Tensor out = Tensor::empty(prob.sizes(), prob.dtype());
  const int64_t n = out.numel();
  uint64_t seed = gen.seed();
  uint64_t base = gen.reserve(blocks_for(n, out.dtype() == DType::kFloat32));
  dispatch_floating(out.dtype(), "bernoulli", [&](auto tag) {
    using T = decltype(tag);
    const T* p = pc.data_ptr<T>();
    T* o = out.data_ptr<T>();
    for_uniform<T>(n, base, seed, [&](int64_t i, double u) { o[i] = u < p[i] ? T(1) : T(0); });
  });
  return out;
}

Tensor bernoulli(const Shape& sizes, double p, Generator& gen, DType dtype) {
  COHORT_CHECK(p >= 0 && p <= 1, "bernoulli: p must be in [0, 1], got {}", p);
  Tensor out = Tensor::empty(sizes, dtype);
  const int64_t n = out.numel();
  uint64_t seed = gen.seed();
  uint64_t base = gen.reserve(blocks_for(n, dtype == DType::kFloat32));
  dispatch_floating(dtype, "bernoulli", [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data_ptr<T>();
    for_uniform<T>(n, base, seed, [&](int64_t i, double u) { o[i] = u < p ? T(1) : T(0); });
  });
  return out;
}

Tensor randperm(int64_t n, Generator& gen) {
  COHORT_CHECK(n >= 0, "randperm: n must be >= 0, got {}", n);
  Tensor out = Tensor::arange(n, DType::kInt64);
  int64_t* p = out.data_ptr<int64_t>();
  // Fisher-Yates with one 64-bit draw per step (bias < n / 2^64).
  uint64_t seed = gen.seed();
  uint64_t base = gen.reserve(static_cast<uint64_t>((n + 1) / 2));
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t k = n - 1 - i;
    auto r = philox4x32(base + static_cast<uint64_t>(k / 2), seed);
    int64_t l = k % 2;
    uint64_t v = (static_cast<uint64_t>(r[2 * l]) << 32) | r[2 * l + 1];
    int64_t j = static_cast<int64_t>(v % static_cast<uint64_t>(i + 1));
    std::swap(p[i], p[j]);
  }
  return out;
}

}  // namespace cohort
