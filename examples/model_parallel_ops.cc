// The tutorial's two kinds of model parallelism inside one layer, in C++:
//
// intra-op: one matrix multiplication Y = X W^T split into two blocks of W's
//   rows (output features), one block per worker; each worker computes its
//   half of Y and an all-gather joins the halves (ColumnParallelLinear). Two
//   processes (cohort::spawn); each checks the joined Y against the unsplit
//   product.
// inter-op: ops 1 and 2 depend only on the input, op 3 on op 1, op 4 on ops
//   2 and 3. fork runs ops 1 and 3 on a second thread while the caller runs
//   op 2; backward runs the two branches concurrently too. Checked against
//   running the ops one after the other.
//
//   build/examples/model_parallel_ops
#include <cstdio>

#include "cohort/autograd/ops.h"
#include "cohort/distributed/process_group.h"
#include "cohort/launch/spawn.h"
#include "cohort/nn/linear.h"
#include "cohort/parallel/inter_op/fork.h"
#include "cohort/parallel/tensor_parallel/column_parallel_linear.h"

using namespace cohort;

namespace {

void intra_op(int rank) {
  auto pg = distributed::init_process_group("native", "env://");
  Generator gen(0);  // the same full layer on both workers
  nn::Linear full(6, 4, gen, /*bias=*/false);
  Tensor x = rand({3, 6}, gen);
  // Worker r holds rows [2r, 2r + 2) of W: half of the multiplication.
  auto split = parallel::ColumnParallelLinear::from_full(full, pg, {.gather_output = true});
  Tensor y = split->forward(x);
  Tensor want = full.forward(x);
  COHORT_CHECK(allclose(y, want, 1e-5, 1e-6), "rank {}: the split matmul differs", rank);
  std::printf("intra-op, worker %d: W block %s of %s, Y %s equals the unsplit X W^T\n", rank,
              shape_str(split->weight().sizes()).c_str(), shape_str(full.weight().sizes()).c_str(),
              shape_str(y.sizes()).c_str());
  distributed::destroy_process_group(pg);
}

void inter_op() {
  Generator gen(1);
  nn::Linear op1(8, 8, gen), op2(8, 8, gen), op3(8, 8, gen);
  Tensor x = rand({4, 8}, gen);
  auto op4 = [](const Tensor& a, const Tensor& b) { return mul(a, b); };

  Tensor y = [&] {
    auto f = parallel::fork([&] { return op3.forward(relu(op1.forward(x))); });
    Tensor y2 = op2.forward(x);  // beside ops 1 and 3
    return op4(f.wait(), y2);
  }();
  sum(y).backward();
  Tensor g1 = op1.weight().grad().clone();
  op1.weight().set_grad(Tensor());
  op2.weight().set_grad(Tensor());
  op3.weight().set_grad(Tensor());

  Tensor seq = op4(op3.forward(relu(op1.forward(x))), op2.forward(x));
  sum(seq).backward();
  COHORT_CHECK(allclose(y, seq, 1e-6, 1e-6) && allclose(g1, op1.weight().grad(), 1e-5, 1e-6),
               "inter-op: the concurrent branches differ from the sequential ops");
  std::printf("inter-op: ops 1+3 beside op 2, outputs and gradients equal the sequential run\n");
}

}  // namespace

int main() {
  try {
    spawn(intra_op, 2);  // before this process starts threads of its own (spawn.h)
    inter_op();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "model_parallel_ops: %s\n", e.what());
    return 1;
  }
  return 0;
}
