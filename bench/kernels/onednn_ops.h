// The oneDNN side of bench_onednn_conv: its primitives for Net's
// convolutions and max pooling, set up once per (layer, variant) and run as
// timed chains, with their outputs read back in NCHW for the cross-check
// against cohort. Not thread-safe: one stream, used by one thread.
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cohort/core/kernels/conv2d.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace cohort::bench {

using dnnl::memory;
using Tag = dnnl::memory::format_tag;

// How the benchmark calls oneDNN (bench_onednn_conv.cc says what each is).
enum class Variant { kKeepLayout, kNchwReorder, kNchwPlain };
const char* variant_name(Variant v);

// oneDNN's own name for a blocked layout (what ONEDNN_VERBOSE prints): one
// letter per dimension, outermost first, upper case when the dimension is
// also blocked inside, then the inner blocks ("aBcd8b" is nChw8c).
std::string layout_name(const memory::desc& md);

// A timed call: primitives (reorders included) run in order on one stream.
struct Chain {
  std::vector<std::pair<dnnl::primitive, std::unordered_map<int, memory>>> steps;
  std::string what;  // "jit:avx2 aBcd8b ABcd8b8a a>aBcd8b": impl, layouts in>out
  int reorders = 0;
  void run(dnnl::stream& s) {
    for (auto& [p, args] : steps) p.execute(s, args);
    s.wait();
  }
};

// Everything one (layer, variant) needs, set up once.
class OnednnConv {
 public:
  OnednnConv(const dnnl::engine& eng, dnnl::stream& s, const kernels::Conv2dGeometry& g, Variant v,
             dnnl::algorithm algo, const std::vector<float>& x, const std::vector<float>& w,
             const std::vector<float>& b, const std::vector<float>& dy, bool want_dx);

  Chain forward, forward_relu, backward_input, backward_weight, backward_relu;

  // The outputs in NCHW / OIHW, for the cross-check against cohort.
  std::vector<float> y() { return to_plain(y_, y_plain_); }
  std::vector<float> yr() { return to_plain(yr_, y_plain_); }
  std::vector<float> dx() { return to_plain(dx_, x_plain_); }
  std::vector<float> dw() { return to_plain(dw_, w_plain_); }
  std::vector<float> db() {
    return to_plain(db_, memory::desc(db_.get_desc().dims(), memory::data_type::f32, Tag::x));
  }
  const memory::desc& y_layout() const { return y_layout_; }

 private:
  struct Bind {
    int arg;
    memory mem;  // as the caller holds it
    memory::desc want;
  };

  memory from_plain(const std::vector<float>& v, const memory::desc& plain,
                    const memory::desc& want);
  std::vector<float> to_plain(memory m, const memory::desc& plain);

  // Appends pd's primitive to c with reorders of inputs whose layout differs
  // from what it wants, and of outputs back into the caller's layout.
  void add(Chain& c, const dnnl::primitive& p, const dnnl::primitive_desc_base& pd,
           const std::vector<Bind>& in, const std::vector<Bind>& out);

  dnnl::engine eng_;
  dnnl::stream& s_;
  memory::desc x_plain_, w_plain_, y_plain_, y_layout_;
  memory x_, w_, b_, dy_, y_, yr_, dx_, dw_, db_, g_;
};

// max_pool2d 2x2 stride 2 on src in the given layout (forward_training with
// the workspace oneDNN's backward needs, which is its argmax).
class OnednnPool {
 public:
  OnednnPool(const dnnl::engine& eng, dnnl::stream& s, const memory::desc& src_md,
             const std::vector<float>& x);
  Chain forward, backward;

  // Output and input gradient in NCHW, after one backward call.
  std::pair<std::vector<float>, std::vector<float>> outputs(dnnl::stream& s);

 private:
  std::vector<float> to_nchw(memory m, dnnl::stream& s);

  dnnl::engine eng_;
  memory x_, y_, ws_, dx_;
};

}  // namespace cohort::bench
