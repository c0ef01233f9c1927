#include "cohort/checkpoint/distributed_checkpoint.h"

#include <exception>
#include <functional>

namespace cohort::checkpoint {
namespace {

// Broadcasts a string from rank 0 (length, then bytes).
std::string broadcast_string(distributed::ProcessGroup& group, std::string s) {
  int64_t n = group.rank() == 0 ? static_cast<int64_t>(s.size()) : 0;
  group.broadcast(&n, 1, distributed::DataType::kInt64, {.root = 0});
  s.resize(static_cast<size_t>(n));
  if (n > 0)
    group.broadcast(s.data(), static_cast<size_t>(n), distributed::DataType::kUInt8, {.root = 0});
  return s;
}

// Runs fn on rank 0 and shares its outcome: the returned string on success;
// on failure rank 0 rethrows and the others throw IoError with its message.
// Message format on the wire: one status byte ('+' ok, '-' failed), then text.
std::string run_on_rank0(distributed::ProcessGroup& group, const char* op,
                         const std::function<std::string()>& fn) {
  std::string wire;
  std::exception_ptr error;
  if (group.rank() == 0) {
    try {
      wire = "+" + fn();
    } catch (const std::exception& e) {
      error = std::current_exception();
      wire = std::string("-") + e.what();
    }
  }
  wire = broadcast_string(group, std::move(wire));
  if (error) std::rethrow_exception(error);
  if (wire.empty() || wire[0] != '+') {
    throw IoError(fmt::format("{}: rank {} of {}: rank 0 failed: {}", op, group.rank(),
                              group.size(), wire.empty() ? std::string("?") : wire.substr(1)));
  }
  return wire.substr(1);
}

}  // namespace

std::string save_checkpoint(distributed::ProcessGroup& group, const std::string& root,
                            const nn::Module& model, const optim::Optimizer* optimizer,
                            const TrainingState& state, const SaveOptions& options) {
  return run_on_rank0(group, "save_checkpoint",
                      [&] { return save_checkpoint(root, model, optimizer, state, options); });
}

std::optional<std::string> resolve_resume(distributed::ProcessGroup& group,
                                          const std::string& resume, const std::string& root) {
  // '=' marks "a checkpoint follows", an empty answer "none".
  std::string answer = run_on_rank0(group, "resolve_resume", [&] {
    std::optional<std::string> p = resolve_resume(resume, root);
    return p ? "=" + *p : std::string();
  });
  if (answer.empty()) return std::nullopt;
  return answer.substr(1);
}

void check_writable_dir(distributed::ProcessGroup& group, const std::string& root) {
  run_on_rank0(group, "check_writable_dir", [&] {
    check_writable_dir(root);
    return std::string();
  });
}

}  // namespace cohort::checkpoint
