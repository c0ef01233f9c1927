// TrainOptions: everything one training run of a reference model needs (the
// settings behind `cohort train`), with the parsing of the names the CLI
// accepts. Plain data; validate() throws InvalidArgument naming the first bad
// field and its value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cohort/autograd/precision.h"
#include "cohort/core/device.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/optim/bf16_weights.h"
#include "cohort/train/comm_hook_choice.h"

namespace cohort::train {

// kGpt: the GPT-2-family transformer (nn/models/gpt.h) at the reference size
// unless the n_* fields say otherwise; kGpt2: GPT-2 124M's shape; kNetBn:
// kNet with BatchNorm2d after each convolution (nn/models/net_bn.h).
enum class ModelKind { kNet, kToy, kMlp, kGpt, kGpt2, kNetBn };
// kText: a byte-level text file (data_file; default: the Debian corpus of
// data/default_corpus.h); kTokens: llm.c token shards (data_file: a file, a
// directory or a glob).
enum class DatasetKind { kFashionMnist, kMnist, kSynthetic, kText, kTokens };
enum class OptimizerKind { kSgd, kAdam, kAdamW };
// kAuto: DDP when the environment describes a job of more than one process
// (WORLD_SIZE, OMPI_COMM_WORLD_SIZE or a Slurm step's SLURM_NTASKS > 1, i.e.
// under `cohort run`, mpirun or srun), else one process.
// kPipeline / kTensor: model parallelism; kPs: a parameter server (train_strategy.h).
enum class Strategy { kAuto, kSingle, kDdp, kDp, kPipeline, kTensor, kPs, kZero };

struct TrainOptions {
  ModelKind model = ModelKind::kNet;
  DatasetKind dataset = DatasetKind::kFashionMnist;
  std::string data_dir;  // "": the data set's default directory
  int64_t epochs = 1;
  int64_t batch_size = 64;  // per process (DDP) / per step (DP: split over replicas)
  // Unset: the sampler pads so that every rank has as many batches
  // (PyTorch's DistributedSampler). true: the tail that does not fill a rank,
  // and the last incomplete batch, are dropped. false: nothing is dropped or
  // repeated, so ranks may hold different numbers of batches and DDP trains
  // them under a Join (parallel/join.h).
  std::optional<bool> drop_last;
  std::optional<double> lr;        // default: 0.01 for Net, 0.001 for ToyModel (docs/reference.md)
  std::optional<double> momentum;  // SGD only; default: 0.9 for Net, 0 for ToyModel
  OptimizerKind optimizer = OptimizerKind::kSgd;
  // Intra-op threads of the run's own thread; 0: the process default (the
  // CLI's: --threads, COHORT_NUM_THREADS, a Slurm task's CPUs, else all cores).
  int threads = 0;
  uint64_t seed = 0;
  int64_t max_steps = 0;         // 0: no limit; counts optimizer steps over the whole run
  std::string checkpoint_dir;    // "": no checkpoints
  int64_t checkpoint_every = 0;  // steps; 0: only at the end of each epoch and of the run
  int64_t keep_last = 0;         // checkpoints kept in checkpoint_dir (0: all)
  std::string resume;            // "", "auto" (latest in checkpoint_dir) or a path
  // "whole": rank 0 writes the whole model and optimizer (checkpoint.h);
  // "sharded": every rank writes its shards (checkpoint/sharded_checkpoint.h;
  // --strategy zero only). Either resumes at any world size.
  std::string checkpoint_format = "whole";
  // --checkpoint-async: a checkpoint blocks the step only while the state is
  // copied into host memory; a background thread writes it (atomically, as a
  // synchronous one) while training goes on, and the last one is waited for
  // before the run ends (checkpoint/async_checkpoint.h). Off by default: the
  // copy doubles the host memory of the model and optimizer state, and a
  // failed write is reported at the next checkpoint instead of at once.
  bool checkpoint_async = false;
  std::string metrics_path;  // "": no metrics file
  // "": no trace. Else a Chrome/Perfetto trace of every rank (data, forward,
  // backward, each bucket's all_reduce, optimizer, checkpoints), merged into
  // this file by rank 0 at the end (see cohort/train/run_trace.h).
  std::string trace_path;
  // DDP's gradient bucket size (PyTorch's bucket_cap_mb): smaller buckets
  // start their all_reduce earlier in backward.
  // Unset: DDP's automatic size (parallel/distributed_data_parallel.h).
  std::optional<double> bucket_cap_mb;
  // DDP: the model's BatchNorm layers take their statistics over the whole
  // global batch (parallel::convert_sync_batchnorm before DDP wraps it).
  // --strategy ddp or auto, a model with BatchNorm (net-bn), the CPU.
  bool sync_batchnorm = false;
  Strategy strategy = Strategy::kAuto;
  // Under `cohort run --fault-tolerant`: train through failures without a
  // restart (fault_tolerant_run.h): the replicas still alive go on at the
  // next step, a restarted worker takes the state from a live one.
  bool fault_tolerant = false;
  // The job of a fault-tolerant run, from the launcher's environment (the
  // CLI reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and
  // COHORT_FT_REPLACEMENT into it; fault_tolerant_run.h). rank -1: none.
  struct FaultTolerantJob {
    int rank = -1;
    int world_size = 1;
    std::string master_addr = "127.0.0.1";
    int master_port = 0;
    bool replacement = false;  // started in place of a replica that died
    int replica_size = 1;      // processes per replica (COHORT_FT_REPLICA_SIZE)
  } fault_tolerant_job;
  int replicas = 2;  // DataParallel replicas
  // --strategy pipeline: "gpipe", "1f1b", "interleaved" or "zb-h1"; the
  // micro-batches each step's batch is cut into (unset: 4, or batch_size
  // when that is smaller; checked only under the pipeline, the one strategy
  // that cuts a batch); the stages (0: every rank is a stage; else the world
  // is stages x data-parallel replicas).
  std::string pipeline_schedule = "1f1b";
  std::optional<int64_t> micro_batches;
  int pipeline_stages = 0;
  // --strategy tensor with a GPT: Megatron's sequence parallelism (each rank
  // keeps T/p positions between the tensor-parallel regions).
  bool sequence_parallel = false;
  // --strategy ps: the first ps_servers ranks serve, the others train;
  // "sync", "ssp" or "async"; ssp's staleness bound (steps).
  int ps_servers = 1;
  std::string ps_mode = "sync";
  int64_t ps_staleness = 3;
  // --strategy zero: ZeRO stage 1 (optimizer state sharded), 2 (+ gradients)
  // or 3 (+ parameters, FSDP); see cohort/parallel/zero/sharded_data_parallel.h.
  // 0: auto, the lowest-traffic stage whose model state fits in
  // zero_memory_per_rank bytes (parallel::choose_zero_stage).
  int zero_stage = 2;
  double zero_memory_per_rank = 0;
  // --strategy zero: HSDP, sharded over groups of this many consecutive ranks
  // (a node's under `cohort run`) and replicated across them
  // (ZeroOptions::hybrid_shard_size). 0: the world size (plain ZeRO).
  int zero_shard_size = 0;
  // --strategy pipeline --zero-stage 1|2: ZeRO over each stage's replicas
  // (parallel::pipeline::PipelineOptions::zero_stage); 0: off (the stages'
  // gradients all-reduced over the replicas).
  int pipeline_zero_stage = 0;
  // The parameter server's RPC over TCP even between ranks on one host (what
  // ranks on different hosts use anyway); the CLI sets it from
  // COHORT_TRANSPORT=tcp, the switch the process groups follow.
  bool rpc_force_tcp = false;
  // The process group backend: "native", "mpi", "nccl" (--device cuda only)
  // or "auto": mpi under mpirun when MASTER_ADDR is not exported (and the mpi
  // backend was built); else, for CUDA tensors, nccl when every local rank has
  // its own GPU and NCCL is built, otherwise native
  // (distributed::choose_backend; the run's start-up line says which and why).
  std::string backend = "auto";
  int64_t synthetic_train_size = 6000;  // --dataset synthetic
  int64_t synthetic_test_size = 1000;
  // Batches the DataLoader gathers ahead on a background thread (0: inline).
  // Gathering an in-memory batch costs ~0.2 ms, less than a thread hand-off
  // on a busy machine, so the default gathers inline.
  int64_t prefetch = 0;
  int64_t log_every = 0;  // progress period in steps; 0: about 10 per epoch
  // Where the model trains: the CPU, or GPUs (--device cuda[:N]; checked at
  // once by validate()). In a job (ddp, zero) "cuda" without an index is each
  // worker's own GPU, cuda:(LOCAL_RANK mod device count)
  // (distributed::worker_device); "cuda:N" puts every worker on GPU N.
  // Strategies on GPUs: runs_on_gpus().
  Device device = kCPU;

  // ---- language models (--model gpt / gpt2) ----
  // The transformer's shape; unset: the preset's (gpt: 4 layers, 4 heads,
  // width 256, block 128; gpt2: 12/12/768/1024). vocab_size unset: 256 for
  // --dataset text, 50304 (GPT-2's 50257 padded) for token shards and gpt2.
  std::optional<int64_t> n_layer, n_head, n_embd, block_size, vocab_size;
  std::string data_file;        // --dataset text / tokens ("" for text: the default corpus)
  double val_fraction = 0.1;    // the validation share when no *_val_* shard is given
  int64_t steps_per_epoch = 0;  // 0: about one pass over the training tokens
  // Validation batches evaluated at each epoch's end (0: the whole split).
  int64_t eval_batches = 20;
  std::optional<double> weight_decay;  // AdamW; default 0.1 for gpt (2-D weights only), else 0.01
  // --activation-checkpointing block|attention: what each transformer block
  // recomputes during backward instead of keeping (nn::GPTConfig::
  // checkpointing), under every strategy (the tensor-parallel and pipeline
  // forms are built from the plain model, so they follow it); the loss head
  // then also keeps no logits (GPTConfig::chunked_loss, where the model's own
  // forward(idx, targets) computes the loss: not on a pipeline's last stage
  // nor in the tensor-parallel head).
  nn::GPTCheckpointing activation_checkpointing = nn::GPTCheckpointing::kNone;

  // ---- precision (autograd/precision.h) ----
  // kBFloat16: matmul, linear, conv2d and attention compute in bf16 with
  // float32 accumulation during training steps; parameters, gradients and
  // optimizer state stay float32 (master weights); evaluation runs in float32.
  ComputePrecision precision = ComputePrecision::kFloat32;
  std::optional<native::Bf16Path> bf16_path;  // unset: the best this CPU runs
  // DDP's and ZeRO's gradients on the wire: float32 (default, as Megatron)
  // or bf16 (half the bytes; parallel/comm_hooks/compression_hooks.h,
  // ZeroOptions::reduce_dtype).
  ComputePrecision grad_reduce = ComputePrecision::kFloat32;
  // --comm-hook: the communication hook registered with DDP, or its sharded
  // form with ZeRO (comm_hook_choice.h; not the PowerSGD kinds, not under
  // HSDP). Unset: --grad-reduce decides. With --grad-reduce bf16 only
  // --comm-hook bf16 agrees (the same hook); others are refused.
  std::optional<CommHookChoice> comm_hook;
  // --bf16-weights: every parameter rounded to bf16 after each step (and
  // before the first), nearest or stochastic (optim/bf16_weights.h): the
  // numerics of bf16 weights instead of float32 master weights. Replicated
  // strategies only (single, ddp, dp), where every rank rounds the same values.
  std::optional<optim::WeightRounding> bf16_weights;
  // The policy a training step runs under.
  PrecisionPolicy precision_policy() const;

  bool is_language_model() const { return model == ModelKind::kGpt || model == ModelKind::kGpt2; }
  // The effective learning rate and momentum.
  double effective_lr() const;
  double effective_momentum() const;
  // The pipeline's micro-batches per step (micro_batches or its default).
  int64_t effective_micro_batches() const;
  // data_dir or the data set's default directory.
  std::string effective_data_dir() const;
  void validate() const;
};

// Name <-> enum ("net", "toy", "mlp", "gpt", "gpt2", "net-bn"; "fashion-mnist", "mnist",
// "synthetic", "text", "tokens"; "sgd", "adam", "adamw"; "auto", "single", "ddp", "dp", "pipeline",
// "tensor", "ps", "zero"). Parsing throws InvalidArgument listing the accepted names.
ModelKind parse_model(std::string_view name);
DatasetKind parse_dataset(std::string_view name);
OptimizerKind parse_optimizer(std::string_view name);
Strategy parse_strategy(std::string_view name);
std::string_view model_name(ModelKind kind);
std::string_view dataset_name(DatasetKind kind);
std::string_view optimizer_name(OptimizerKind kind);
std::string_view strategy_name(Strategy strategy);
// Whether the strategy trains on --device cuda: single, ddp, zero (and auto,
// which resolves to single or ddp). dp, pipeline, tensor and ps are CPU-only.
bool runs_on_gpus(Strategy strategy);

}  // namespace cohort::train
