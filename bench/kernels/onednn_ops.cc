#include "bench/kernels/onednn_ops.h"

#include <algorithm>

namespace cohort::bench {

using cohort::kernels::Conv2dGeometry;

const char* variant_name(Variant v) {
  switch (v) {
    case Variant::kKeepLayout:
      return "onednn";
    case Variant::kNchwReorder:
      return "onednn+reorder";
    case Variant::kNchwPlain:
      return "onednn_nchw";
  }
  return "?";
}

std::string layout_name(const memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked) return "special";
  const auto& b = d.format_desc.blocking;
  std::vector<int> order(d.ndims);
  for (int i = 0; i < d.ndims; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](int x, int y) { return b.strides[x] > b.strides[y]; });
  std::string s;
  for (int i : order) {
    bool blocked = false;
    for (int k = 0; k < b.inner_nblks; ++k) blocked |= b.inner_idxs[k] == i;
    s += static_cast<char>((blocked ? 'A' : 'a') + i);
  }
  for (int k = 0; k < b.inner_nblks; ++k)
    s += std::to_string(b.inner_blks[k]) + static_cast<char>('a' + b.inner_idxs[k]);
  return s;
}

OnednnConv::OnednnConv(const dnnl::engine& eng, dnnl::stream& s, const Conv2dGeometry& g, Variant v,
                       dnnl::algorithm algo, const std::vector<float>& x,
                       const std::vector<float>& w, const std::vector<float>& b,
                       const std::vector<float>& dy, bool want_dx)
    : eng_(eng), s_(s) {
  const memory::dims xd{g.batch, g.in_channels, g.in_h, g.in_w};
  const memory::dims wd{g.out_channels, g.in_channels, g.kernel_h, g.kernel_w};
  const memory::dims bd{g.out_channels};
  const memory::dims yd{g.batch, g.out_channels, g.out_h(), g.out_w()};
  const memory::dims strides{g.stride_h, g.stride_w}, pad{g.pad_h, g.pad_w};
  const auto f32 = memory::data_type::f32;
  x_plain_ = memory::desc(xd, f32, Tag::nchw);
  w_plain_ = memory::desc(wd, f32, Tag::oihw);
  y_plain_ = memory::desc(yd, f32, Tag::nchw);
  const memory::desc b_md(bd, f32, Tag::x);
  const bool any = v != Variant::kNchwPlain;
  const memory::desc x_c = any ? memory::desc(xd, f32, Tag::any) : x_plain_;
  const memory::desc w_c = any ? memory::desc(wd, f32, Tag::any) : w_plain_;
  const memory::desc y_c = any ? memory::desc(yd, f32, Tag::any) : y_plain_;

  using dnnl::convolution_forward;
  const convolution_forward::desc fwd_d(dnnl::prop_kind::forward_training, algo, x_c, w_c, b_md,
                                        y_c, strides, pad, pad);
  const convolution_forward::primitive_desc fwd_pd(fwd_d, eng);
  dnnl::post_ops relu;
  relu.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
  dnnl::primitive_attr relu_attr;
  relu_attr.set_post_ops(relu);
  const convolution_forward::primitive_desc fwd_relu_pd(fwd_d, relu_attr, eng);
  const dnnl::convolution_backward_data::primitive_desc bwd_data_pd(
      dnnl::convolution_backward_data::desc(algo, x_c, w_c, y_c, strides, pad, pad), eng, fwd_pd);
  const dnnl::convolution_backward_weights::primitive_desc bwd_w_pd(
      dnnl::convolution_backward_weights::desc(algo, x_c, w_c, b_md, y_c, strides, pad, pad), eng,
      fwd_pd);

  // The tensors as the caller holds them: in the forward's layouts, or NCHW.
  const bool keep = v == Variant::kKeepLayout;
  const memory::desc x_u = keep ? fwd_pd.src_desc() : x_plain_;
  const memory::desc w_u = keep ? fwd_pd.weights_desc() : w_plain_;
  const memory::desc y_u = keep ? fwd_pd.dst_desc() : y_plain_;
  x_ = from_plain(x, x_plain_, x_u);
  w_ = from_plain(w, w_plain_, w_u);
  b_ = from_plain(b, b_md, b_md);
  dy_ = from_plain(dy, y_plain_, y_u);
  y_ = memory(y_u, eng);
  yr_ = memory(y_u, eng);
  dx_ = memory(x_u, eng);
  dw_ = memory(w_u, eng);
  db_ = memory(b_md, eng);
  g_ = memory(y_u, eng);  // ReLU-masked gradient inside backward_relu
  y_layout_ = y_u;

  add(forward, dnnl::convolution_forward(fwd_pd), fwd_pd,
      {{DNNL_ARG_SRC, x_, fwd_pd.src_desc()},
       {DNNL_ARG_WEIGHTS, w_, fwd_pd.weights_desc()},
       {DNNL_ARG_BIAS, b_, fwd_pd.bias_desc()}},
      {{DNNL_ARG_DST, y_, fwd_pd.dst_desc()}});
  add(forward_relu, dnnl::convolution_forward(fwd_relu_pd), fwd_relu_pd,
      {{DNNL_ARG_SRC, x_, fwd_relu_pd.src_desc()},
       {DNNL_ARG_WEIGHTS, w_, fwd_relu_pd.weights_desc()},
       {DNNL_ARG_BIAS, b_, fwd_relu_pd.bias_desc()}},
      {{DNNL_ARG_DST, yr_, fwd_relu_pd.dst_desc()}});
  forward_relu.run(s_);  // yr_ feeds backward_relu
  auto add_bwd_data = [&](Chain& c, const memory& dy_mem) {
    add(c, dnnl::convolution_backward_data(bwd_data_pd), bwd_data_pd,
        {{DNNL_ARG_DIFF_DST, dy_mem, bwd_data_pd.diff_dst_desc()},
         {DNNL_ARG_WEIGHTS, w_, bwd_data_pd.weights_desc()}},
        {{DNNL_ARG_DIFF_SRC, dx_, bwd_data_pd.diff_src_desc()}});
  };
  auto add_bwd_w = [&](Chain& c, const memory& dy_mem) {
    add(c, dnnl::convolution_backward_weights(bwd_w_pd), bwd_w_pd,
        {{DNNL_ARG_SRC, x_, bwd_w_pd.src_desc()},
         {DNNL_ARG_DIFF_DST, dy_mem, bwd_w_pd.diff_dst_desc()}},
        {{DNNL_ARG_DIFF_WEIGHTS, dw_, bwd_w_pd.diff_weights_desc()},
         {DNNL_ARG_DIFF_BIAS, db_, bwd_w_pd.diff_bias_desc()}});
  };
  add_bwd_data(backward_input, dy_);
  add_bwd_w(backward_weight, dy_);

  // backward_relu: ReLU backward from the forward_relu output, in the layout
  // the caller holds, then the convolution gradients from its result.
  const auto relu_bwd_alg = dnnl::algorithm::eltwise_relu_use_dst_for_bwd;
  const dnnl::eltwise_forward::primitive_desc relu_fwd_pd(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, relu_bwd_alg, y_u), eng);
  const dnnl::eltwise_backward::primitive_desc relu_bwd_pd(
      dnnl::eltwise_backward::desc(relu_bwd_alg, y_u, y_u), eng, relu_fwd_pd);
  add(backward_relu, dnnl::eltwise_backward(relu_bwd_pd), relu_bwd_pd,
      {{DNNL_ARG_DST, yr_, y_u}, {DNNL_ARG_DIFF_DST, dy_, y_u}}, {{DNNL_ARG_DIFF_SRC, g_, y_u}});
  if (want_dx) add_bwd_data(backward_relu, g_);
  add_bwd_w(backward_relu, g_);
}

memory OnednnConv::from_plain(const std::vector<float>& v, const memory::desc& plain,
                              const memory::desc& want) {
  memory src(plain, eng_, const_cast<float*>(v.data()));
  memory dst(want, eng_);
  dnnl::reorder(src, dst).execute(s_, src, dst);
  s_.wait();
  return dst;
}

std::vector<float> OnednnConv::to_plain(memory m, const memory::desc& plain) {
  std::vector<float> out(plain.get_size() / sizeof(float));
  memory dst(plain, eng_, out.data());
  dnnl::reorder(m, dst).execute(s_, m, dst);
  s_.wait();
  return out;
}

void OnednnConv::add(Chain& c, const dnnl::primitive& p, const dnnl::primitive_desc_base& pd,
                     const std::vector<Bind>& in, const std::vector<Bind>& out) {
  std::unordered_map<int, memory> args;
  std::string layouts;
  for (const Bind& b : in) {
    if (b.mem.get_desc() == b.want) {
      args[b.arg] = b.mem;
    } else {
      memory tmp(b.want, eng_);
      c.steps.push_back({dnnl::reorder(b.mem, tmp), {{DNNL_ARG_FROM, b.mem}, {DNNL_ARG_TO, tmp}}});
      ++c.reorders;
      args[b.arg] = tmp;
    }
    layouts += ' ';
    layouts += layout_name(b.want);
  }
  std::vector<std::pair<memory, memory>> back;
  for (const Bind& b : out) {
    if (b.mem.get_desc() == b.want) {
      args[b.arg] = b.mem;
    } else {
      memory tmp(b.want, eng_);
      back.push_back({tmp, b.mem});
      args[b.arg] = tmp;
    }
    layouts += '>';
    layouts += layout_name(b.want);
  }
  if (pd.get_kind() != dnnl::primitive::kind::eltwise) {
    if (!c.what.empty()) c.what += " | ";
    c.what += std::string(pd.impl_info_str()) + layouts;
  }
  c.steps.push_back({p, std::move(args)});
  for (auto& [from, to] : back) {
    c.steps.push_back({dnnl::reorder(from, to), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}});
    ++c.reorders;
  }
}

OnednnPool::OnednnPool(const dnnl::engine& eng, dnnl::stream& s, const memory::desc& src_md,
                       const std::vector<float>& x)
    : eng_(eng) {
  const memory::dims dims = src_md.dims();
  const memory::dims yd{dims[0], dims[1], dims[2] / 2, dims[3] / 2};
  const memory::desc y_any(yd, memory::data_type::f32, Tag::any);
  const memory::dims k{2, 2}, pad{0, 0};
  const dnnl::pooling_forward::primitive_desc fwd_pd(
      dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::pooling_max,
                                  src_md, y_any, k, k, pad, pad),
      eng);
  const dnnl::pooling_backward::primitive_desc bwd_pd(
      dnnl::pooling_backward::desc(dnnl::algorithm::pooling_max, src_md, fwd_pd.dst_desc(), k, k,
                                   pad, pad),
      eng, fwd_pd);
  memory plain(memory::desc(dims, memory::data_type::f32, Tag::nchw), eng,
               const_cast<float*>(x.data()));
  x_ = memory(src_md, eng);
  dnnl::reorder(plain, x_).execute(s, plain, x_);
  y_ = memory(fwd_pd.dst_desc(), eng);
  ws_ = memory(fwd_pd.workspace_desc(), eng);
  dx_ = memory(src_md, eng);
  forward.steps.push_back({dnnl::pooling_forward(fwd_pd),
                           {{DNNL_ARG_SRC, x_}, {DNNL_ARG_DST, y_}, {DNNL_ARG_WORKSPACE, ws_}}});
  forward.what = std::string(fwd_pd.impl_info_str()) + " " + layout_name(src_md) + ">" +
                 layout_name(fwd_pd.dst_desc());
  forward.run(s);
  // The incoming gradient: the forward's output stands in for it.
  backward.steps.push_back(
      {dnnl::pooling_backward(bwd_pd),
       {{DNNL_ARG_DIFF_DST, y_}, {DNNL_ARG_WORKSPACE, ws_}, {DNNL_ARG_DIFF_SRC, dx_}}});
  backward.what = std::string(bwd_pd.impl_info_str()) + " " + layout_name(bwd_pd.diff_dst_desc()) +
                  ">" + layout_name(bwd_pd.diff_src_desc());
}

std::pair<std::vector<float>, std::vector<float>> OnednnPool::outputs(dnnl::stream& s) {
  backward.run(s);
  return {to_nchw(y_, s), to_nchw(dx_, s)};
}

std::vector<float> OnednnPool::to_nchw(memory m, dnnl::stream& s) {
  const memory::desc plain(m.get_desc().dims(), memory::data_type::f32, Tag::nchw);
  std::vector<float> out(plain.get_size() / sizeof(float));
  memory dst(plain, eng_, out.data());
  dnnl::reorder(m, dst).execute(s, m, dst);
  s.wait();
  return out;
}

}  // namespace cohort::bench
