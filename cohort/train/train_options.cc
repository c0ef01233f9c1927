#include "cohort/train/train_options.h"

#include "cohort/core/device_runtime.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "cohort/base/error.h"
#include "cohort/data/mnist.h"
#include "cohort/train/fault_tolerant_run.h"
#include "cohort/train/workload.h"

namespace cohort::train {
namespace {

template <typename E, size_t N>
E parse_name(std::string_view what, std::string_view name,
             const std::pair<std::string_view, E> (&table)[N]) {
  std::string accepted;
  for (const auto& [n, e] : table) {
    if (n == name) return e;
    accepted += accepted.empty() ? "" : ", ";
    accepted += n;
  }
  throw InvalidArgument(fmt::format("unknown {} '{}' (expected one of: {})", what, name, accepted));
}

template <typename E, size_t N>
std::string_view name_of(E e, const std::pair<std::string_view, E> (&table)[N]) {
  for (const auto& [n, v] : table) {
    if (v == e) return n;
  }
  return "?";
}

constexpr std::pair<std::string_view, ModelKind> kModels[] = {
    {"net", ModelKind::kNet}, {"toy", ModelKind::kToy},   {"mlp", ModelKind::kMlp},
    {"gpt", ModelKind::kGpt}, {"gpt2", ModelKind::kGpt2}, {"net-bn", ModelKind::kNetBn}};
constexpr std::pair<std::string_view, DatasetKind> kDatasets[] = {
    {"fashion-mnist", DatasetKind::kFashionMnist},
    {"mnist", DatasetKind::kMnist},
    {"synthetic", DatasetKind::kSynthetic},
    {"text", DatasetKind::kText},
    {"tokens", DatasetKind::kTokens}};
constexpr std::pair<std::string_view, OptimizerKind> kOptimizers[] = {
    {"sgd", OptimizerKind::kSgd}, {"adam", OptimizerKind::kAdam}, {"adamw", OptimizerKind::kAdamW}};
constexpr std::pair<std::string_view, Strategy> kStrategies[] = {
    {"auto", Strategy::kAuto}, {"single", Strategy::kSingle},     {"ddp", Strategy::kDdp},
    {"dp", Strategy::kDp},     {"pipeline", Strategy::kPipeline}, {"tensor", Strategy::kTensor},
    {"ps", Strategy::kPs},     {"zero", Strategy::kZero}};
constexpr std::string_view kSchedules[] = {"gpipe", "1f1b", "interleaved", "zb-h1"};

}  // namespace

bool runs_on_gpus(Strategy strategy) {
  return strategy == Strategy::kAuto || strategy == Strategy::kSingle ||
         strategy == Strategy::kDdp || strategy == Strategy::kZero;
}

ModelKind parse_model(std::string_view name) { return parse_name("model", name, kModels); }
DatasetKind parse_dataset(std::string_view name) { return parse_name("dataset", name, kDatasets); }
OptimizerKind parse_optimizer(std::string_view name) {
  return parse_name("optimizer", name, kOptimizers);
}
Strategy parse_strategy(std::string_view name) { return parse_name("strategy", name, kStrategies); }
std::string_view model_name(ModelKind kind) { return name_of(kind, kModels); }
std::string_view dataset_name(DatasetKind kind) { return name_of(kind, kDatasets); }
std::string_view optimizer_name(OptimizerKind kind) { return name_of(kind, kOptimizers); }
std::string_view strategy_name(Strategy strategy) { return name_of(strategy, kStrategies); }

double TrainOptions::effective_lr() const {
  if (is_language_model()) return lr.value_or(3e-4);
  return lr.value_or(model == ModelKind::kToy ? 0.001 : 0.01);
}

double TrainOptions::effective_momentum() const {
  return momentum.value_or(model == ModelKind::kToy ? 0.0 : 0.9);
}

int64_t TrainOptions::effective_micro_batches() const {
  constexpr int64_t kDefaultMicroBatches = 4;
  return micro_batches.value_or(std::min(kDefaultMicroBatches, batch_size));
}

std::string TrainOptions::effective_data_dir() const {
  if (!data_dir.empty()) return data_dir;
  return dataset == DatasetKind::kMnist ? data::Mnist::kDefaultRoot
                                        : data::FashionMnist::kDefaultRoot;
}

PrecisionPolicy TrainOptions::precision_policy() const {
  if (precision == ComputePrecision::kFloat32) return PrecisionPolicy::fp32();
  return PrecisionPolicy::bf16(bf16_path.value_or(native::best_bf16_path()));
}

void TrainOptions::validate() const {
  if (!device.is_cpu()) {
    // Fails at once, naming what is missing (no CUDA in the build, no GPU,
    // an index past the device count), before data or models are built.
    device_runtime(device, fmt::format("--device {}", device.str()));
    COHORT_CHECK(runs_on_gpus(strategy),
                 "--device {}: --strategy {} on GPUs is not implemented yet (on GPUs: single, "
                 "ddp, zero or auto)",
                 device.str(), strategy_name(strategy));
    COHORT_CHECK(!bf16_weights, "--bf16-weights is not implemented on --device {}", device.str());
  }
  COHORT_CHECK(backend == "auto" || backend == "native" || backend == "mpi" || backend == "nccl",
               "--backend must be auto, native, mpi or nccl, got '{}'", backend);
  COHORT_CHECK(backend != "nccl" || device.is_cuda(),
               "--backend nccl carries CUDA tensors only: add --device cuda (or use --backend "
               "native or auto on --device {})",
               device.str());
  if (precision == ComputePrecision::kBFloat16 && bf16_path)
    native::check_bf16_path(*bf16_path, "--bf16-path");
  COHORT_CHECK(grad_reduce == ComputePrecision::kFloat32 || strategy == Strategy::kAuto ||
                   strategy == Strategy::kDdp || strategy == Strategy::kZero,
               "--grad-reduce bf16 applies to DDP (--strategy ddp or auto) and ZeRO (--strategy "
               "zero), not --strategy {}",
               strategy_name(strategy));
  if (comm_hook) {
    COHORT_CHECK(
        strategy == Strategy::kAuto || strategy == Strategy::kDdp || strategy == Strategy::kZero,
        "--comm-hook applies to DDP (--strategy ddp or auto) and ZeRO (--strategy zero), "
        "not --strategy {}",
        strategy_name(strategy));
    COHORT_CHECK(
        grad_reduce == ComputePrecision::kFloat32 || comm_hook->kind == CommHookKind::kBf16,
        "--comm-hook {} and --grad-reduce bf16 both say how the gradients go on the "
        "wire; give one (--grad-reduce bf16 is --comm-hook bf16)",
        comm_hook_name(*comm_hook));
    check_comm_hook(*comm_hook);
    if (strategy == Strategy::kZero) {
      make_zero_comm_hook(*comm_hook);  // throws for the PowerSGD kinds, naming why
      COHORT_CHECK(zero_shard_size == 0 || grad_reduce == ComputePrecision::kBFloat16,
                   "--comm-hook {} with --zero-shard-size {} (HSDP) is not supported, as FSDP's "
                   "hybrid strategies (the replicas' all_reduce is not the hook's); "
                   "--grad-reduce bf16 halves the bytes there",
                   comm_hook_name(*comm_hook), zero_shard_size);
    }
  }
  COHORT_CHECK(!bf16_weights || strategy == Strategy::kAuto || strategy == Strategy::kSingle ||
                   strategy == Strategy::kDdp || strategy == Strategy::kDp,
               "--bf16-weights applies to the strategies that hold the whole model on every "
               "worker (single, ddp, dp or auto), not --strategy {}",
               strategy_name(strategy));
  COHORT_CHECK(drop_last != false || strategy == Strategy::kAuto || strategy == Strategy::kSingle ||
                   strategy == Strategy::kDdp || strategy == Strategy::kDp ||
                   strategy == Strategy::kZero,
               "--drop-last false leaves ranks with different numbers of batches, which only DDP "
               "and ZeRO train (under a Join): use --strategy ddp or zero (or single, dp, auto), "
               "not --strategy {}",
               strategy_name(strategy));
  COHORT_CHECK(!drop_last || !is_language_model(),
               "--drop-last applies to the image data sets; a language model's steps draw random "
               "windows (--steps-per-epoch sets their number)");
  COHORT_CHECK(drop_last != false || checkpoint_every == 0,
               "--drop-last false with --checkpoint-every: a rank out of batches cannot take "
               "part in a checkpoint in the middle of an epoch; checkpoint at epoch ends only "
               "(--checkpoint-every 0)");
  COHORT_CHECK(epochs >= 1, "--epochs must be >= 1, got {}", epochs);
  if (fault_tolerant) check_fault_tolerant_options(*this);
  COHORT_CHECK(batch_size >= 1, "--batch-size must be >= 1, got {}", batch_size);
  double l = effective_lr();
  COHORT_CHECK(l > 0 && std::isfinite(l), "--lr must be a positive finite number, got {}", l);
  COHORT_CHECK(!bucket_cap_mb || *bucket_cap_mb > 0, "--bucket-cap-mb must be positive, got {}",
               bucket_cap_mb.value_or(0));
  double m = effective_momentum();
  COHORT_CHECK(m >= 0 && m < 1, "--momentum must be in [0, 1), got {}", m);
  COHORT_CHECK(!momentum.has_value() || optimizer == OptimizerKind::kSgd,
               "--momentum applies to --optimizer sgd only, not {}", optimizer_name(optimizer));
  COHORT_CHECK(threads >= 0, "--threads must be >= 0 (0: all cores), got {}", threads);
  COHORT_CHECK(max_steps >= 0, "--max-steps must be >= 0 (0: no limit), got {}", max_steps);
  COHORT_CHECK(checkpoint_every >= 0, "--checkpoint-every must be >= 0, got {}", checkpoint_every);
  COHORT_CHECK(keep_last >= 0, "--keep-last must be >= 0, got {}", keep_last);
  COHORT_CHECK(checkpoint_every == 0 || !checkpoint_dir.empty(),
               "--checkpoint-every needs --checkpoint-dir");
  COHORT_CHECK(!checkpoint_async || !checkpoint_dir.empty(),
               "--checkpoint-async true needs --checkpoint-dir");
  COHORT_CHECK(resume.empty() || resume != "auto" || !checkpoint_dir.empty(),
               "--resume auto needs --checkpoint-dir (where to look for the latest checkpoint)");
  COHORT_CHECK(checkpoint_format == "whole" || checkpoint_format == "sharded",
               "--checkpoint-format must be whole or sharded, got '{}'", checkpoint_format);
  COHORT_CHECK(checkpoint_format == "whole" || strategy == Strategy::kZero,
               "--checkpoint-format sharded applies to --strategy zero (each rank writes its "
               "shards), not --strategy {}",
               strategy_name(strategy));
  COHORT_CHECK(replicas >= 1, "--replicas must be >= 1, got {}", replicas);
  COHORT_CHECK(prefetch >= 0, "--prefetch must be >= 0, got {}", prefetch);
  COHORT_CHECK(log_every >= 0, "--log-every must be >= 0, got {}", log_every);
  COHORT_CHECK(model != ModelKind::kToy || dataset == DatasetKind::kSynthetic,
               "--model toy takes 10 inputs and trains on --dataset synthetic only, not {}",
               dataset_name(dataset));
  bool known_schedule = false;
  for (std::string_view n : kSchedules) known_schedule = known_schedule || n == pipeline_schedule;
  COHORT_CHECK(known_schedule,
               "--pipeline-schedule must be one of gpipe, 1f1b, interleaved, zb-h1, got '{}'",
               pipeline_schedule);
  // Only the pipeline cuts a batch into micro-batches; other strategies
  // ignore the field, so its default must not fail their small batches.
  COHORT_CHECK(strategy != Strategy::kPipeline ||
                   (effective_micro_batches() >= 1 && effective_micro_batches() <= batch_size),
               "--micro-batches must be in [1, --batch-size = {}], got {}", batch_size,
               effective_micro_batches());
  COHORT_CHECK(pipeline_stages >= 0, "--pipeline-stages must be >= 0 (0: every rank), got {}",
               pipeline_stages);
  COHORT_CHECK(ps_servers >= 1, "--ps-servers must be >= 1, got {}", ps_servers);
  COHORT_CHECK(ps_mode == "sync" || ps_mode == "ssp" || ps_mode == "async",
               "--ps-mode must be one of sync, ssp, async, got '{}'", ps_mode);
  COHORT_CHECK(ps_staleness >= 0, "--ps-staleness must be >= 0, got {}", ps_staleness);
  COHORT_CHECK(zero_stage >= 0 && zero_stage <= 3,
               "--zero-stage must be 1, 2, 3 or auto (0), got {}", zero_stage);
  COHORT_CHECK(zero_shard_size >= 0,
               "--zero-shard-size must be >= 0 (0: the world size, plain ZeRO), got {}",
               zero_shard_size);
  COHORT_CHECK(zero_shard_size == 0 || strategy == Strategy::kZero,
               "--zero-shard-size applies to --strategy zero, not --strategy {}",
               strategy_name(strategy));
  COHORT_CHECK(pipeline_zero_stage == 0 || strategy == Strategy::kPipeline,
               "pipeline_zero_stage applies to --strategy pipeline, not --strategy {}",
               strategy_name(strategy));
  COHORT_CHECK(pipeline_zero_stage >= 0 && pipeline_zero_stage <= 2,
               "--strategy pipeline --zero-stage must be 1 (optimizer state sharded over each "
               "stage's replicas) or 2 (+ gradients); stage 3 and auto are --strategy zero's, "
               "got {}",
               pipeline_zero_stage < 0 ? std::string("auto") : std::to_string(pipeline_zero_stage));
  COHORT_CHECK(zero_stage != 0 || zero_memory_per_rank > 0,
               "--zero-stage auto needs --memory-per-rank BYTES (the model state each rank may "
               "keep), got {}",
               zero_memory_per_rank);
  COHORT_CHECK(model != ModelKind::kNetBn || strategy == Strategy::kAuto ||
                   strategy == Strategy::kSingle || strategy == Strategy::kDdp ||
                   strategy == Strategy::kDp,
               "--model net-bn trains under the strategies that hold the whole model on every "
               "worker (single, ddp, dp or auto), not --strategy {}",
               strategy_name(strategy));
  // SyncBatchNorm's collectives run on DDP's group from the training thread;
  // dp's replica threads would issue them concurrently, and the other
  // strategies do not hold whole BatchNorm layers on every rank.
  COHORT_CHECK(!sync_batchnorm || strategy == Strategy::kAuto || strategy == Strategy::kDdp,
               "--sync-batchnorm applies to --strategy ddp (or auto under cohort run), not "
               "--strategy {}",
               strategy_name(strategy));
  COHORT_CHECK(!sync_batchnorm || model == ModelKind::kNetBn,
               "--sync-batchnorm converts the model's BatchNorm layers; --model {} has none (use "
               "--model net-bn)",
               model_name(model));
  COHORT_CHECK(!sync_batchnorm || device.is_cpu(),
               "--sync-batchnorm runs on the CPU only (like BatchNorm), not --device {}",
               device.str());
  COHORT_CHECK(model != ModelKind::kToy || strategy != Strategy::kTensor,
               "--strategy tensor splits the linear layers of net or mlp, not of toy");
  const bool lm = is_language_model();
  COHORT_CHECK(!sequence_parallel || (lm && strategy == Strategy::kTensor),
               "--sequence-parallel applies to --strategy tensor with --model gpt or gpt2, not "
               "--strategy {} with --model {}",
               strategy_name(strategy), model_name(model));
  const bool text_data = dataset == DatasetKind::kText || dataset == DatasetKind::kTokens;
  COHORT_CHECK(lm == text_data, "--model {} trains on {}, not --dataset {}", model_name(model),
               lm ? "--dataset text or tokens" : "fashion-mnist, mnist or synthetic",
               dataset_name(dataset));
  COHORT_CHECK(dataset != DatasetKind::kTokens || !data_file.empty(),
               "--dataset tokens needs --data-file (an llm.c token shard, a directory of them or a "
               "glob)");
  for (const auto& [name, v] :
       {std::pair<const char*, const std::optional<int64_t>&>{"--n-layer", n_layer},
        {"--n-head", n_head},
        {"--n-embd", n_embd},
        {"--block-size", block_size},
        {"--vocab-size", vocab_size}}) {
    COHORT_CHECK(!v || *v >= 1, "{} must be >= 1, got {}", name, *v);
  }
  COHORT_CHECK(val_fraction >= 0 && val_fraction < 1, "--val-fraction must be in [0, 1), got {}",
               val_fraction);
  COHORT_CHECK(steps_per_epoch >= 0, "--steps-per-epoch must be >= 0 (0: one pass), got {}",
               steps_per_epoch);
  COHORT_CHECK(eval_batches >= 0, "--eval-batches must be >= 0 (0: all), got {}", eval_batches);
  COHORT_CHECK(!weight_decay || (*weight_decay >= 0 && std::isfinite(*weight_decay)),
               "--weight-decay must be >= 0, got {}", weight_decay.value_or(0));
  COHORT_CHECK(!weight_decay || optimizer == OptimizerKind::kAdamW,
               "--weight-decay applies to --optimizer adamw only, not {}",
               optimizer_name(optimizer));
  COHORT_CHECK(lm || activation_checkpointing == nn::GPTCheckpointing::kNone,
               "--activation-checkpointing applies to --model gpt or gpt2 (its transformer "
               "blocks), not --model {}",
               model_name(model));
  if (lm) gpt_config(*this).validate();
  COHORT_CHECK(synthetic_train_size >= 1 && synthetic_test_size >= 1,
               "synthetic data set sizes must be >= 1, got {} and {}", synthetic_train_size,
               synthetic_test_size);
}

}  // namespace cohort::train
