// ParameterServer: one shard of a parameter server, as an in-process state
// machine -- the weights of its parameters, the optimizer over them, and the
// clocks of the workers that train against it. It knows nothing of RPC:
// ParameterServerService (parameter_server_service.h) answers remote pulls
// and pushes by calling pull()/push() here, and unit tests drive it directly
// from threads that play the workers.
//
// Clocks. Worker w's clock c_w is the number of steps it has pushed. To run
// step t a worker pulls with clock t (= c_w), computes gradients at those
// weights and pushes them with clock t, which makes c_w = t + 1. The clock
// gap of a pull is t - min(c_v over the active workers v): how many steps the
// puller is ahead of the slowest worker. One staleness bound s covers the
// three modes (Ho et al. 2013, "More effective distributed ML via a stale
// synchronous parallel parameter server"):
//
//   kSync  (s = 0)  pushes of step t are kept until every active worker has
//                   pushed step t; then their average (summed in worker order,
//                   so the result does not depend on arrival order) becomes
//                   the gradient of one optimizer step. A pull of step t waits
//                   for that step. The weights follow exactly what DDP or one
//                   process on the global batch computes.
//   kSsp   (s >= 0) every push is applied when it arrives (one optimizer step
//                   per push); a pull waits while its gap would exceed s.
//   kAsync (s = inf) every push is applied at once; pulls never wait
//                   (Hogwild-style; the gap is only measured).
//
// In kSsp/kAsync a push's gradient is scaled by 1/num_workers before the
// optimizer step (PushScale::kMean, the default): the W pushes of one round
// then move the weights as far as one synchronous step on the global batch
// would, and the learning rate of a synchronous run carries over (num_workers
// is the count the server started with: a lost worker's share of the round
// is simply missing, the step per push stays the same). kSum
// applies each worker's gradient as is (PyTorch's RPC parameter-server
// tutorial), which is W times the step per round.
//
// Gradient clipping is not done here: clip_grad_norm needs the norm over the
// whole model, and a shard sees only its part. Workers clip their local
// gradients before push() if they want clipping.
//
// Workers leave in two ways. finish(w): the worker is done; it no longer
// counts for the slowest clock or for a synchronous step. drop_worker(w):
// the worker is lost (its process died: the RPC layer said PeerLost, or it
// stayed silent past the deadline). In kSsp/kAsync it is removed, logged and
// listed in stats().lost, and the others go on. In kSync a lost worker fails
// the server: every waiting and later call throws the error naming it.
//
// Failure: a pull that waits past options.timeout throws TimeoutError naming
// the server, the step and the workers it waited for; in kSync this also
// fails the server (the step cannot complete). A wrong clock, worker index or
// gradient shape throws InvalidArgument. Nothing here blocks without a
// deadline.
//
// Thread safety: every member function may be called from any thread; one
// mutex guards the state, and the optimizer steps under it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cohort/core/tensor.h"
#include "cohort/core/tensor_dict.h"
#include "cohort/nn/module.h"
#include "cohort/optim/optimizer.h"

namespace cohort::parallel {

enum class PsMode { kSync, kSsp, kAsync };

// "sync", "ssp", "async"; parse_ps_mode throws InvalidArgument for other names.
const char* ps_mode_name(PsMode mode);
PsMode parse_ps_mode(const std::string& name);

enum class PushScale { kMean, kSum };

// Builds the optimizer of a shard over its parameters (the server's copies),
// e.g. [](std::vector<Tensor> p) { return std::make_unique<optim::SGD>(p, opts); }.
using OptimizerFactory =
    std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor> params)>;

inline constexpr int64_t kUnboundedStaleness = std::numeric_limits<int64_t>::max();

struct ParameterServerOptions {
  PsMode mode = PsMode::kSync;
  // kSsp only: the largest clock gap a pull may see. kSync uses 0, kAsync
  // no bound, whatever is set here.
  int64_t staleness = 0;
  int num_workers = 1;
  // Longest a pull waits for the slowest workers (kSsp) or for a step to
  // complete (kSync). In kSsp/kAsync, ParameterServerService also drops a
  // worker silent (no pull or push) for longer: keep it above a step's time.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
  PushScale push_scale = PushScale::kMean;  // kSsp/kAsync only (see above)
  // For messages: this server's name and the workers' names (default
  // "worker <i>"); worker_names must be empty or have num_workers entries.
  std::string name = "parameter server";
  std::vector<std::string> worker_names = {};
};

// What pull() returns: the shard's weights (copies the caller owns, in the
// order of the shard's parameters) and the server's version (optimizer steps
// taken so far).
struct PullResult {
  int64_t version = 0;
  std::vector<Tensor> weights;
};

struct LostWorker {
  int worker = -1;
  std::string name;
  std::string reason;
};

struct ParameterServerStats {
  int64_t version = 0;           // optimizer steps taken
  int64_t pulls = 0;             // pulls answered
  int64_t pushes = 0;            // pushes received
  int64_t pulls_waited = 0;      // pulls that had to wait for slower workers
  int64_t max_clock_gap = 0;     // the largest gap a pull was answered with
  int active_workers = 0;        // neither finished nor lost
  std::vector<int> finished;     // workers that called finish(), in order
  std::vector<LostWorker> lost;  // workers dropped, in order
};

class ParameterServer {
 public:
  // shard: the names and initial values of this server's parameters (copied;
  // the server owns its weights). Throws InvalidArgument for bad options.
  ParameterServer(const nn::NamedTensors& shard, const OptimizerFactory& make_optimizer,
                  ParameterServerOptions options);
  ~ParameterServer();
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  // Worker `worker` is about to run step `clock` (its clock). Waits as the
  // mode says (see the header comment), then returns copies of the weights.
  PullResult pull(int worker, int64_t clock);

  // Worker `worker`'s gradients of step `clock`, one per shard parameter in
  // shard order (same shapes; an undefined tensor means "no gradient", i.e.
  // zeros). The server keeps or modifies the tensors it is given: pass
  // tensors the caller no longer uses.
  void push(int worker, int64_t clock, std::vector<Tensor> grads);

  // The worker is done; idempotent.
  void finish(int worker);

  // The worker is lost (see the header comment); idempotent.
  void drop_worker(int worker, const std::string& reason);

  // Waits until no worker is active (all finished or lost). Returns false at
  // the deadline; throws the server's failure if it failed (kSync).
  bool wait_done(std::chrono::milliseconds timeout);

  // Workers that are active and whose last pull or push is older than `age`
  // (a liveness monitor probes these).
  std::vector<int> silent_workers(std::chrono::milliseconds age) const;
  // Active workers that a pull is waiting for right now.
  std::vector<int> awaited_workers() const;

  // Copies of the weights under their names; load_state_dict overwrites the
  // weights (all names of the shard must be present with the same shapes;
  // extra names are ignored, so a full model's state can be passed).
  TensorDict state_dict() const;
  void load_state_dict(const TensorDict& dict);
  // The shard optimizer's state dict (copies), parameter indices in the
  // shard optimizer's order; load_optimizer_state_dict takes one (a resume),
  // failing as Optimizer::load_state_dict does.
  TensorDict optimizer_state_dict() const;
  void load_optimizer_state_dict(const TensorDict& dict);

  ParameterServerStats stats() const;
  const std::vector<std::string>& param_names() const { return names_; }
  const ParameterServerOptions& options() const { return options_; }
  // The error that failed the server (kSync), or nullptr.
  std::exception_ptr failure() const;
  std::string worker_name(int worker) const;

 private:
  enum class WorkerState { kActive, kFinished, kLost };
  using Clock = std::chrono::steady_clock;

  void check_worker(int worker, const char* op) const;   // throws unless active (mutex held)
  int64_t min_active_clock() const;                      // mutex held; INT64_MAX when none
  bool pull_may_proceed(int64_t clock) const;            // mutex held
  std::vector<int> laggards(int64_t clock) const;        // mutex held
  void maybe_step_sync();                                // mutex held
  void apply(std::vector<Tensor>& grads, double scale);  // mutex held
  void fail(std::exception_ptr error);                   // mutex held
  void rethrow_failure() const;                          // mutex held

  ParameterServerOptions options_;
  int64_t staleness_ = 0;
  std::vector<std::string> names_;
  std::vector<Tensor> weights_;
  std::unique_ptr<optim::Optimizer> optimizer_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<WorkerState> state_;
  std::vector<int64_t> clocks_;
  std::vector<Clock::time_point> last_seen_;
  std::vector<std::vector<Tensor>> pending_;  // kSync: gradients of the current step
  std::vector<int64_t> waiting_clocks_;       // clocks of the pulls waiting now
  std::exception_ptr failure_;
  ParameterServerStats stats_;
};

}  // namespace cohort::parallel
