// max/min/argmax, gather, embedding, cat, stack.
#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/core/native/index.h"
#include "cohort/core/native/reduce.h"

namespace cohort {

using autograd::record;

namespace {

std::pair<Tensor, Tensor> extreme_dim(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  auto [values, indices] = is_max ? native::max(x, dim, keepdim) : native::min(x, dim, keepdim);
  if (!autograd::any_requires_grad({x})) return {values, indices};
  int64_t d = wrap_dim(dim, x.dim(), "max");
  Tensor idx = keepdim ? indices : indices.unsqueeze(d);
  Shape in = x.sizes();
  DType dt = x.dtype();
  record(values, is_max ? "max" : "min", {x},
         [idx, in, dt, d, keepdim](const Tensor& g, const std::vector<bool>&) {
           Tensor gk = keepdim ? g : g.unsqueeze(d);
           return std::vector<Tensor>{native::scatter_add(in, dt, d, idx, gk.contiguous())};
         });
  return {values, indices};
}

Tensor extreme_all(const Tensor& x, bool is_max) {
  Tensor flat = x.reshape({-1});
  auto [v, i] = is_max ? native::max(flat, 0, false) : native::min(flat, 0, false);
  if (!autograd::any_requires_grad({x})) return v;
  int64_t at = i.item<int64_t>();
  Shape in = x.sizes();
  DType dt = x.dtype();
  return record(v, is_max ? "max" : "min", {x},
                [at, in, dt](const Tensor& g, const std::vector<bool>&) {
                  Tensor z = Tensor::zeros(in, dt, g.device());
                  z.reshape({-1}).narrow(0, at, 1).copy_(g.reshape({1}));
                  return std::vector<Tensor>{z};
                });
}

}  // namespace

std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim(x, dim, keepdim, true);
}
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim(x, dim, keepdim, false);
}
Tensor max(const Tensor& x) { return extreme_all(x, true); }
Tensor min(const Tensor& x) { return extreme_all(x, false); }
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return native::argmax(x, dim, keepdim);
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = native::gather(x, dim, index);
  if (!autograd::any_requires_grad({x})) return out;
  Tensor idx = index.detach();
  Shape in = x.sizes();
  DType dt = x.dtype();
  return record(out, "gather", {x},
                [=](const Tensor& g, const std::vector<bool>&) {
                  return std::vector<Tensor>{native::scatter_add(in, dt, dim, idx, g)};
                },
                {idx});
}

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx) {
  COHORT_CHECK(weight.dim() == 2, "embedding: weight must be 2-D [num_embeddings, dim], got {}",
               shape_str(weight.sizes()));
  Tensor flat = indices.reshape({-1});
  Tensor rows = native::index_select(weight, 0, flat);
  Shape os = indices.sizes();
  os.push_back(weight.sizes()[1]);
  Tensor out = rows.view(os);
  if (!autograd::any_requires_grad({weight})) return out;
  Tensor idx = flat.to(kInt64).contiguous();
  Shape ws = weight.sizes();
  DType dt = weight.dtype();
  return record(out, "embedding", {weight},
                [=](const Tensor& g, const std::vector<bool>&) {
                  Tensor g2 = g.reshape({-1, ws[1]});
                  if (padding_idx) {
                    // Rows looked up at padding_idx contribute nothing.
                    const int64_t* pi = idx.data_ptr<int64_t>();
                    Tensor masked = g2.clone();
                    for (int64_t i = 0; i < idx.numel(); ++i)
                      if (pi[i] == *padding_idx) masked.select(0, i).zero_();
                    g2 = masked;
                  }
                  return std::vector<Tensor>{native::index_add(ws, dt, 0, idx, g2)};
                },
                {idx});
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  Tensor out = native::cat(tensors, dim);
  if (!autograd::any_requires_grad(tensors)) return out;
  int64_t d = wrap_dim(dim, tensors[0].dim(), "cat");
  std::vector<int64_t> lens;
  std::vector<DType> dts;
  for (const Tensor& t : tensors) {
    lens.push_back(t.sizes()[d]);
    dts.push_back(t.dtype());
  }
  return record(out, "cat", tensors,
                [d, lens, dts](const Tensor& g, const std::vector<bool>& needs) {
                  std::vector<Tensor> grads(lens.size());
                  int64_t at = 0;
                  for (size_t i = 0; i < lens.size(); ++i) {
                    if (needs[i]) grads[i] = g.narrow(d, at, lens[i]).to(dts[i]);
                    at += lens[i];
                  }
                  return grads;
                });
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  COHORT_CHECK(!tensors.empty(), "stack: needs at least one tensor");
  int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    COHORT_CHECK(tensors[i].sizes() == tensors[0].sizes(),
                 "stack: tensor {} has shape {}, tensor 0 has {}", i, shape_str(tensors[i].sizes()),
                 shape_str(tensors[0].sizes()));
    parts.push_back(unsqueeze(tensors[i], d));
  }
  return cat(parts, d);
}

}  // namespace cohort
