// `cohort train`: trains a reference model (cohort/train/trainer.h) with the
// options below; a thin layer over train::Trainer that parses flags and
// prints progress (train_progress.h).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/base/parallel.h"
#include "cohort/rendezvous/env_bootstrap.h"
#include "cohort/train/trainer.h"
#include "tools/cohort/command.h"
#include "tools/cohort/train_progress.h"

namespace cohort::cli {
namespace {

struct TrainArgs {
  std::string model = "net";
  std::string dataset;    // "": fashion-mnist, or text for a language model
  std::string optimizer;  // "": sgd, or adamw for a language model
  int64_t n_layer = 0, n_head = 0, n_embd = 0, block_size = 0, vocab_size = 0;
  double weight_decay = 0;
  double bucket_cap_mb = 0;
  std::string drop_last;
  std::string strategy = "auto";
  std::string device = "cpu";
  std::string zero_stage = "2";
  int64_t micro_batches = 4;
  double lr = 0;
  double momentum = 0;
  std::string precision = "fp32", bf16_path = "auto", grad_reduce = "fp32", bf16_weights;
  std::string activation_checkpointing = "none";
  std::string checkpoint_async = "false";
  std::string comm_hook;
  int64_t powersgd_start_iter = train::CommHookChoice{}.start_iter;
  train::TrainOptions options;
};

// Flags that only some strategies read. Given to another strategy they
// change nothing, which is worth a warning rather than an error: a script may
// pass one set of flags to several strategies.
struct StrategyFlag {
  const char* flag;
  std::vector<train::Strategy> strategies;  // the strategies that read it
};

const std::vector<StrategyFlag>& strategy_flags() {
  using S = train::Strategy;
  static const std::vector<StrategyFlag> flags = {
      {"--micro-batches", {S::kPipeline}},
      {"--pipeline-schedule", {S::kPipeline}},
      {"--pipeline-stages", {S::kPipeline}},
      {"--zero-stage", {S::kZero, S::kPipeline}},
      {"--memory-per-rank", {S::kZero}},
      {"--replicas", {S::kDp}},
      {"--ps-servers", {S::kPs}},
      {"--ps-mode", {S::kPs}},
      {"--ps-staleness", {S::kPs}},
      {"--bucket-cap-mb", {S::kDdp}},
      {"--sync-batchnorm", {S::kDdp}},
      {"--comm-hook", {S::kDdp, S::kZero}},
      {"--powersgd-start-iter", {S::kDdp}},
  };
  return flags;
}

// One warning per flag given explicitly that the strategy the run resolves
// to ignores.
void warn_ignored_flags(const CLI::App& app, train::Strategy requested) {
  const train::Strategy strategy = train::resolve_strategy(requested);
  const std::string running =
      requested == train::Strategy::kAuto
          ? fmt::format("--strategy auto (here {})", train::strategy_name(strategy))
          : fmt::format("--strategy {}", train::strategy_name(strategy));
  for (const StrategyFlag& f : strategy_flags()) {
    if (app.count(f.flag) == 0 ||
        std::find(f.strategies.begin(), f.strategies.end(), strategy) != f.strategies.end())
      continue;
    std::string readers;
    for (train::Strategy s : f.strategies)
      readers += fmt::format("{}{}", readers.empty() ? "" : " or ", train::strategy_name(s));
    std::fprintf(stderr, "cohort train: warning: %s applies to --strategy %s; %s ignores it\n",
                 f.flag, readers.c_str(), running.c_str());
  }
}

int run_train(CLI::App* app, TrainArgs* args) {
  train::TrainOptions& o = args->options;
  std::unique_ptr<train::Trainer> trainer;
  try {
    o.model = train::parse_model(args->model);
    const bool lm = o.is_language_model();
    o.dataset = train::parse_dataset(!args->dataset.empty() ? args->dataset
                                     : lm                   ? "text"
                                                            : "fashion-mnist");
    o.optimizer = train::parse_optimizer(!args->optimizer.empty() ? args->optimizer
                                         : lm                     ? "adamw"
                                                                  : "sgd");
    for (auto [flag, value, field] :
         {std::tuple{"--n-layer", args->n_layer, &o.n_layer},
          std::tuple{"--n-head", args->n_head, &o.n_head},
          std::tuple{"--n-embd", args->n_embd, &o.n_embd},
          std::tuple{"--block-size", args->block_size, &o.block_size},
          std::tuple{"--vocab-size", args->vocab_size, &o.vocab_size}}) {
      if (app->count(flag) > 0) *field = value;
    }
    if (app->count("--weight-decay") > 0) o.weight_decay = args->weight_decay;
    o.activation_checkpointing = nn::parse_gpt_checkpointing(args->activation_checkpointing);
    if (app->count("--bucket-cap-mb") > 0) o.bucket_cap_mb = args->bucket_cap_mb;
    if (app->count("--drop-last") > 0) o.drop_last = args->drop_last == "true";
    o.checkpoint_async = args->checkpoint_async == "true";
    o.strategy = train::parse_strategy(args->strategy);
    o.device = Device(args->device);
    if (o.strategy == train::Strategy::kPipeline) {
      // ZeRO over each stage's replicas, when asked (-1: auto, refused by validate()).
      if (app->count("--zero-stage") > 0)
        o.pipeline_zero_stage = args->zero_stage == "auto" ? -1 : std::stoi(args->zero_stage);
    } else {
      o.zero_stage = args->zero_stage == "auto" ? 0 : std::stoi(args->zero_stage);
    }
    if (app->count("--micro-batches") > 0) o.micro_batches = args->micro_batches;
    if (app->count("--lr") > 0) o.lr = args->lr;
    if (app->count("--momentum") > 0) o.momentum = args->momentum;
    o.precision = parse_precision(args->precision);
    if (args->bf16_path != "auto") o.bf16_path = native::parse_bf16_path(args->bf16_path);
    o.grad_reduce = parse_precision(args->grad_reduce);
    if (!args->comm_hook.empty()) {
      o.comm_hook = train::parse_comm_hook(args->comm_hook);
      o.comm_hook->start_iter = args->powersgd_start_iter;
    }
    if (!args->bf16_weights.empty())
      o.bf16_weights = args->bf16_weights == "nearest" ? optim::WeightRounding::kNearest
                                                       : optim::WeightRounding::kStochastic;
    if (app->count("--resume") > 0 && o.resume.empty()) o.resume = "auto";
    // The environment is read at the edge (docs/design.md rule 11): here,
    // and by main (env_settings(): COHORT_NUM_THREADS, already applied as the
    // process default).
    if (o.fault_tolerant) {
      // The job as `cohort run --fault-tolerant` (or a scheduler) describes it.
      auto env = [](const char* name) {
        const char* v = std::getenv(name);
        return std::string(v != nullptr ? v : "");
      };
      auto number = [&](const char* name, int fallback) {
        const std::string v = env(name);
        if (v.empty()) return fallback;
        try {
          return std::stoi(v);
        } catch (const std::logic_error&) {
          throw InvalidArgument(fmt::format("{} must be an integer, got '{}'", name, v));
        }
      };
      o.fault_tolerant_job.rank = number("RANK", -1);
      o.fault_tolerant_job.world_size = number("WORLD_SIZE", 1);
      if (!env("MASTER_ADDR").empty()) o.fault_tolerant_job.master_addr = env("MASTER_ADDR");
      o.fault_tolerant_job.master_port = number("MASTER_PORT", 0);
      o.fault_tolerant_job.replacement = env("COHORT_FT_REPLACEMENT") == "1";
      o.fault_tolerant_job.replica_size = number("COHORT_FT_REPLICA_SIZE", 1);
    }
    const char* transport = std::getenv("COHORT_TRANSPORT");
    o.rpc_force_tcp = transport != nullptr && std::string(transport) == "tcp";
    if (o.threads == 0 && !env_settings().num_threads) {
      o.threads = rendezvous::slurm_task_cpus().value_or(0);
    }
    // The CLI decides the process default: the threads a run starts (RPC
    // handlers, the data loader) draw on it; the trainer bounds only its own.
    if (o.threads > 0) set_default_num_threads(o.threads);
    trainer = std::make_unique<train::Trainer>(o);
    warn_ignored_flags(*app, o.strategy);
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "cohort train: error: %s\n\n%s", e.what(), app->help().c_str());
    return 2;
  }
  const bool terminal = isatty(fileno(stdout)) != 0;
  if (terminal && o.log_every == 0) o.log_every = 1;  // the printer throttles redraws
  ProgressPrinter printer(stdout, terminal, trainer->options());
  trainer->run(&printer);
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  train::TrainOptions& o = args->options;
  // A flag given twice: the last one wins (scripts append overrides).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--model", args->model,
                 "Model: net (the DDP tutorial's CNN), net-bn (net with BatchNorm after each "
                 "convolution), mlp (784 -> 4 x 1024 -> 10), toy "
                 "(ToyModel), gpt (a GPT-2-family transformer, 4 layers x width 256 unless "
                 "--n-layer ... say otherwise) or gpt2 (GPT-2 124M's shape)")
      ->check(CLI::IsMember({"net", "net-bn", "mlp", "toy", "gpt", "gpt2"}))
      ->capture_default_str();
  app.add_option("--dataset", args->dataset,
                 "Data set: fashion-mnist (default), mnist or synthetic; for gpt: text (default: "
                 "a byte-level text file, --data-file, else the Debian package fortunes' corpus) "
                 "or tokens (llm.c token shards, --data-file)")
      ->check(CLI::IsMember({"fashion-mnist", "mnist", "synthetic", "text", "tokens"}));
  app.add_option("--data-file", o.data_file,
                 "gpt: the text file (--dataset text) or the token shard, directory of shards or "
                 "glob (--dataset tokens; *_val_* shards are the validation split)");
  app.add_option("--n-layer", args->n_layer, "gpt: transformer blocks (default 4; gpt2 12)");
  app.add_option("--n-head", args->n_head, "gpt: attention heads (default 4; gpt2 12)");
  app.add_option("--n-embd", args->n_embd, "gpt: embedding width (default 256; gpt2 768)");
  app.add_option("--block-size", args->block_size,
                 "gpt: context length, tokens per example (default 128; gpt2 1024)");
  app.add_option("--vocab-size", args->vocab_size,
                 "gpt: vocabulary (default 256 for text, 50304 for tokens and gpt2)");
  app.add_option("--val-fraction", o.val_fraction,
                 "gpt: the share of the tokens, at the end, held out for validation")
      ->capture_default_str();
  app.add_option("--steps-per-epoch", o.steps_per_epoch,
                 "gpt: steps per epoch (0: about one pass over the training tokens)")
      ->capture_default_str();
  app.add_option("--eval-batches", o.eval_batches,
                 "gpt: validation batches of --batch-size windows at each epoch's end (0: all)")
      ->capture_default_str();
  app.add_option("--weight-decay", args->weight_decay,
                 "AdamW weight decay (default 0.1 on a gpt's matrices only, else 0.01)");
  app.add_option("--data-dir", o.data_dir,
                 "Directory of the IDX files (default: /usr/share/datasets/fashion-mnist, "
                 "Debian package dataset-fashion-mnist; /usr/share/datasets/mnist for mnist)");
  app.add_option("--epochs", o.epochs, "Epochs to train")->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "Examples per step and process")
      ->capture_default_str();
  app.add_option("--lr", args->lr,
                 "Learning rate (default: 0.01 for net and mlp, 0.001 for toy, 3e-4 for gpt)");
  app.add_option("--momentum", args->momentum, "SGD momentum (default: 0.9 for net, 0 for toy)");
  app.add_option("--optimizer", args->optimizer,
                 "sgd (default), adam or adamw (default for gpt: betas 0.9/0.95)")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  app.add_option("--device", args->device,
                 "cpu (default), cuda or cuda:N: train on GPUs (--strategy single, ddp, zero); "
                 "in a job, cuda is each worker's own GPU, cuda:(LOCAL_RANK mod GPUs); fails at "
                 "once naming what is missing where there is none")
      ->capture_default_str();
  app.add_option("--threads", o.threads,
                 "Intra-op threads (0: COHORT_NUM_THREADS, e.g. cohort run's share; under srun "
                 "SLURM_CPUS_PER_TASK, else the node's CPUs over its tasks; else all cores)")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the initial weights and the data order")
      ->capture_default_str();
  app.add_option("--drop-last", args->drop_last,
                 "true: drop the samples that do not fill every rank and the last incomplete "
                 "batch; false: drop and repeat nothing, so ranks may hold different numbers of "
                 "batches (DDP trains them under a Join). Unset: pad, as PyTorch's "
                 "DistributedSampler")
      ->check(CLI::IsMember({"true", "false"}));
  app.add_option("--max-steps", o.max_steps, "Stop after this many optimizer steps (0: no limit)")
      ->capture_default_str();
  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "Write checkpoints here (step-NNNNNNNN/ directories, atomically)");
  app.add_option("--checkpoint-every", o.checkpoint_every,
                 "Also checkpoint every N steps (0: at the end of each epoch and of the run only)")
      ->capture_default_str();
  app.add_option("--keep-last", o.keep_last, "Keep only the newest N checkpoints (0: all)")
      ->capture_default_str();
  app.add_option("--resume", o.resume,
                 "Resume from a checkpoint directory or file, or 'auto' (alone: auto): the "
                 "latest complete checkpoint in --checkpoint-dir, if any")
      ->expected(0, 1);
  app.add_option("--checkpoint-format", o.checkpoint_format,
                 "whole: rank 0 writes the whole model and optimizer; sharded (--strategy zero): "
                 "every rank writes its shards with their offsets (`cohort reshard` converts)")
      ->check(CLI::IsMember({"whole", "sharded"}))
      ->capture_default_str();
  app.add_option("--checkpoint-async", args->checkpoint_async,
                 "true: a checkpoint blocks training only while the state is copied to host "
                 "memory, a background thread writes it (atomically) and the last one is waited "
                 "for before exit; false: written before the step goes on")
      ->check(CLI::IsMember({"true", "false"}))
      ->capture_default_str();
  app.add_option("--metrics", o.metrics_path,
                 "Append one JSON object per step and per epoch to this file (draw it with "
                 "`cohort plot`)");
  app.add_option("--bucket-cap-mb", args->bucket_cap_mb,
                 "DDP gradient bucket size in MiB (smaller: all_reduce starts earlier in "
                 "backward; default: an eighth of the model's gradients, within 1..25 MiB)");
  app.add_flag("--fault-tolerant", o.fault_tolerant,
               "Train through failures without a restart (under `cohort run --fault-tolerant`): "
               "when a worker dies the others go on at the next step, and its replacement takes "
               "the state from a live one (docs/fault_tolerance.md)");
  app.add_flag("--sync-batchnorm", o.sync_batchnorm,
               "DDP: BatchNorm statistics over the whole global batch instead of each rank's "
               "share (SyncBatchNorm; --model net-bn)");
  app.add_option(
      "--trace", o.trace_path,
      "Write a Chrome/Perfetto trace of every rank here (data, forward, backward, each "
      "bucket's all_reduce, optimizer, checkpoints); `cohort trace-stats` summarises it");
  app.add_option(
         "--strategy", args->strategy,
         "auto (DDP under cohort run, mpirun or srun, else single), single, ddp, dp, pipeline "
         "(layers in stages over the ranks), tensor (fc layers split over the ranks), ps "
         "(a parameter server), zero (ZeRO: optimizer state, gradients, parameters sharded "
         "over the ranks by --zero-stage)")
      ->check(CLI::IsMember({"auto", "single", "ddp", "dp", "pipeline", "tensor", "ps", "zero"}))
      ->capture_default_str();
  app.add_option("--zero-stage", args->zero_stage,
                 "--strategy zero: 1 shards the optimizer state, 2 also the gradients, 3 also "
                 "the parameters (FSDP); auto: the lowest-traffic stage whose model state fits "
                 "in --memory-per-rank. --strategy pipeline: 1 or 2 shards each stage over its "
                 "data-parallel replicas (default there: off)")
      ->check(CLI::IsMember({"1", "2", "3", "auto"}))
      ->capture_default_str();
  app.add_option("--zero-shard-size", o.zero_shard_size,
                 "--strategy zero: HSDP, shard over groups of K consecutive ranks (e.g. a "
                 "node's: --nproc-per-node) and replicate across them; 0: the world size")
      ->capture_default_str();
  app.add_option("--memory-per-rank", o.zero_memory_per_rank,
                 "--zero-stage auto: bytes of model state (parameters, gradients, AdamW state) "
                 "each rank may keep, e.g. 2e9");
  app.add_option("--ps-servers", o.ps_servers,
                 "Parameter servers (--strategy ps): the first S ranks serve, the others train")
      ->capture_default_str();
  app.add_option("--ps-mode", o.ps_mode,
                 "sync (= DDP), ssp (bounded staleness) or async (each push applied at once)")
      ->check(CLI::IsMember({"sync", "ssp", "async"}))
      ->capture_default_str();
  app.add_option("--ps-staleness", o.ps_staleness,
                 "--ps-mode ssp: how many steps a trainer may run ahead of the slowest")
      ->capture_default_str();
  app.add_option("--pipeline-schedule", o.pipeline_schedule,
                 "Pipeline schedule: gpipe, 1f1b, interleaved (2 virtual stages per rank) or "
                 "zb-h1 (zero bubble)")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1"}))
      ->capture_default_str();
  app.add_option("--micro-batches", args->micro_batches,
                 "Micro-batches each step's batch is cut into (--strategy pipeline; default: 4, "
                 "or --batch-size when smaller)");
  app.add_option("--pipeline-stages", o.pipeline_stages,
                 "Pipeline stages (0: every rank; else data-parallel replicas = world / stages)")
      ->capture_default_str();
  app.add_option("--activation-checkpointing", args->activation_checkpointing,
                 "gpt/gpt2: recompute during backward instead of keeping the activations of "
                 "every block (block) or of each block's attention (attention); none: keep all")
      ->capture_default_str();
  app.add_flag("--sequence-parallel", o.sequence_parallel,
               "Megatron's sequence parallelism (--strategy tensor, --model gpt/gpt2): each rank "
               "keeps T / ranks positions between the tensor-parallel regions");
  app.add_option("--precision", args->precision,
                 "Compute precision: fp32, or bf16 (matmul, linear, conv2d and attention in bf16 "
                 "with fp32 accumulation; fp32 master weights, gradients and optimizer state)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_option("--bf16-path", args->bf16_path,
                 "bf16 kernels (--precision bf16): auto (the best this CPU runs; `cohort info`), "
                 "emulated (fp32 GEMM on bf16 values, every CPU) or onednn (AVX512-BF16/AMX)")
      ->check(CLI::IsMember({"auto", "emulated", "onednn"}))
      ->capture_default_str();
  app.add_option("--grad-reduce", args->grad_reduce,
                 "DDP and ZeRO gradients on the wire: fp32, or bf16 (half the bytes, about 3 "
                 "digits)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_option("--comm-hook", args->comm_hook,
                 "DDP's communication hook: allreduce, fp16 or bf16 (half the bytes), powersgd or "
                 "powersgd:RANK (low-rank compression with error feedback, PyTorch's "
                 "powerSGD_hook), batched_powersgd[:RANK] (one matrix per bucket); ZeRO's: "
                 "allreduce (its reduce_scatter), fp16 or bf16");
  app.add_option("--powersgd-start-iter", args->powersgd_start_iter,
                 "Plain all_reduce steps before PowerSGD starts (start_powerSGD_iter, > 1)")
      ->capture_default_str();
  app.add_option("--bf16-weights", args->bf16_weights,
                 "Round every parameter to bf16 after each step, nearest or stochastic (the "
                 "numerics of bf16 weights; default: fp32 master weights)")
      ->check(CLI::IsMember({"nearest", "stochastic"}));
  app.add_option("--replicas", o.replicas, "DataParallel replicas (--strategy dp)")
      ->capture_default_str();
  app.add_option("--backend", o.backend,
                 "Process group backend: native, mpi, nccl (--device cuda), or auto: mpi under "
                 "mpirun without MASTER_ADDR; else on --device cuda nccl when every local rank "
                 "has its own GPU and NCCL is built, otherwise native (CUDA tensors staged "
                 "through host memory); else native. The start-up line says which and why")
      ->check(CLI::IsMember({"auto", "native", "mpi", "nccl"}))
      ->capture_default_str();
  app.add_option("--synthetic-train-size", o.synthetic_train_size,
                 "Training examples of --dataset synthetic")
      ->capture_default_str();
  app.add_option("--synthetic-test-size", o.synthetic_test_size,
                 "Test examples of --dataset synthetic")
      ->capture_default_str();
  app.add_option("--prefetch", o.prefetch,
                 "Batches gathered ahead on a background thread (0: gathered inline)")
      ->capture_default_str();
  app.add_option("--log-every", o.log_every,
                 "Progress every N steps (0: about ten lines per epoch)")
      ->capture_default_str();
  CLI::App* self = &app;
  return [self, args] { return run_train(self, args.get()); };
}

CommandRegistrar reg({"train",
                      "Train a reference model (net, mlp, toy) on Fashion-MNIST, MNIST or "
                      "synthetic data, or a GPT on text, in one process, with DDP, DataParallel, "
                      "a pipeline or tensor parallelism",
                      setup});

}  // namespace
}  // namespace cohort::cli
