// How Tensor's view members (view, reshape, transpose, narrow, ...) and its
// contiguous()/to() record autograd, as PyTorch's do, while core does not
// depend on the autograd library (tensor.h): core computes the view and its
// backward formula; the autograd library installs the recorder that turns
// them into a graph node (when grad mode is on), at start-up of any program
// that links it (autograd/node.cc). Without the autograd library nothing can
// run backward, so a view that is not recorded there loses nothing.
// Thread safety: the recorder is installed once, before main.
#pragma once

#include <functional>

#include "cohort/core/tensor.h"

namespace cohort::detail {

// Maps the gradient of a view to the gradient of its base.
using ViewBackward = std::function<Tensor(const Tensor& grad)>;
// Makes `out` the output of a node named `name` over `base` with `backward`
// when grad mode is on (the recorder decides); `base` requires grad.
using ViewRecorder = void (*)(Tensor& out, const Tensor& base, const char* name,
                              ViewBackward backward);

void set_view_recorder(ViewRecorder recorder);

ViewRecorder view_recorder();

// out, recorded as a view of base when base requires grad and a recorder is
// installed. make_backward() builds the formula only then, so views of
// tensors without autograd state cost nothing extra.
template <typename MakeBackward>
Tensor record_view(Tensor out, const Tensor& base, const char* name, MakeBackward make_backward) {
  if (!base.requires_grad()) return out;
  if (ViewRecorder r = view_recorder()) r(out, base, name, make_backward());
  return out;
}

}  // namespace cohort::detail
