// `cohort reshard SRC DST --world-size M | --whole`: converts a checkpoint
// offline between world sizes (a sharded checkpoint written by N ranks into
// one for M ranks) and to or from a whole checkpoint (model.safetensors +
// optimizer.safetensors, what DDP and `cohort train` write by default),
// streaming one tensor piece at a time (checkpoint/sharded_checkpoint.h).
#include <cstdio>
#include <string>

#include "cohort/checkpoint/sharded_checkpoint.h"
#include "tools/cohort/command.h"

namespace cohort::cli {
namespace {

struct ReshardArgs {
  std::string src, dst;
  int world_size = 0;
  bool whole = false;
};

int run_reshard(const ReshardArgs& a) {
  if (a.whole == (a.world_size > 0))
    throw InvalidArgument(
        "cohort reshard: give exactly one of --world-size M (M >= 1: sharded over M ranks) and "
        "--whole (one model.safetensors + optimizer.safetensors)");
  std::unique_ptr<checkpoint::CheckpointSource> src = checkpoint::open_checkpoint(a.src);
  uint64_t largest = 0;
  for (const checkpoint::TensorEntry& e : src->tensors())
    largest = std::max<uint64_t>(largest, e.numel() * dtype_size(e.dtype));
  const std::string from = src->sharded() ? fmt::format("sharded over {} ranks", src->world_size())
                                          : std::string("whole");
  const std::string path = src->path();
  src.reset();
  checkpoint::ReshardStats s = checkpoint::reshard_checkpoint(path, a.dst, a.world_size);
  const std::string to =
      a.whole ? std::string("whole") : fmt::format("sharded over {} ranks", a.world_size);
  std::printf(
      "%s (%s) -> %s (%s): %lld tensors, %llu bytes; largest buffer %llu bytes (largest "
      "tensor %llu)\n",
      path.c_str(), from.c_str(), a.dst.c_str(), to.c_str(), static_cast<long long>(s.tensors),
      static_cast<unsigned long long>(s.bytes),
      static_cast<unsigned long long>(s.largest_buffer_bytes),
      static_cast<unsigned long long>(largest));
  return 0;
}

CommandRegistrar reg(
    {"reshard",
     "Convert a checkpoint to another world size, or to or from a whole checkpoint, offline "
     "(memory: one tensor)",
     [](CLI::App& app) {
       auto a = std::make_shared<ReshardArgs>();
       app.add_option("src", a->src,
                      "Checkpoint to read: a step-N directory (sharded or whole), a "
                      "model.safetensors file, or a checkpoint root (its latest)")
           ->required();
       app.add_option("dst", a->dst, "New checkpoint directory to write (must not exist)")
           ->required();
       app.add_option("--world-size", a->world_size,
                      "Write a sharded checkpoint for this many ranks")
           ->check(CLI::PositiveNumber);
       app.add_flag("--whole", a->whole,
                    "Write a whole checkpoint (model.safetensors + optimizer.safetensors)");
       return std::function<int()>([a] { return run_reshard(*a); });
     }});

}  // namespace
}  // namespace cohort::cli
