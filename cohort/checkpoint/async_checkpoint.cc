#include "cohort/checkpoint/async_checkpoint.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "cohort/base/log.h"
#include "cohort/base/parallel.h"
#include "cohort/checkpoint/checkpoint_writers_impl.h"

namespace cohort::checkpoint {
namespace {

namespace fs = std::filesystem;
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The file a rank whose write failed leaves in the temporary directory, so
// that rank 0's writer stops waiting for its rank file and names the cause.
std::string error_marker(const std::string& dir, int rank) {
  return (fs::path(dir) / fmt::format(".error-rank-{:05d}", rank)).string();
}

std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown error";
  }
}

// Rank 0 of a sharded checkpoint: waits until every other rank's file is in
// dir under its final name (each appears by an atomic rename), or one of them
// reports a failure, or the timeout passes, or the writer is closing.
void wait_for_rank_files(const std::string& dir, int world, std::chrono::milliseconds timeout,
                         const std::atomic<bool>& cancel) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  for (int r = 1; r < world; ++r) {
    const fs::path file = fs::path(dir) / rank_file_name(r, world);
    for (;;) {
      std::error_code ec;
      if (fs::exists(file, ec)) break;
      if (fs::exists(error_marker(dir, r), ec)) {
        std::ifstream in(error_marker(dir, r));
        std::string cause((std::istreambuf_iterator<char>(in)), {});
        throw IoError(fmt::format("rank {} failed to write its file: {}", r, cause));
      }
      if (cancel.load())
        throw IoError(
            fmt::format("the writer was closed before rank {} wrote '{}'", r, file.string()));
      if (Clock::now() > deadline)
        throw TimeoutError(fmt::format("rank {} did not write '{}' within {} ms", r, file.string(),
                                       timeout.count()));
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
  }
}

}  // namespace

AsyncCheckpointWriter::AsyncCheckpointWriter(AsyncCheckpointOptions options)
    : options_(std::move(options)), thread_([this] { run(); }) {}

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  std::unique_lock lock(mu_);
  if (in_flight_ &&
      !cv_.wait_for(lock, options_.close_timeout, [&] { return job_ == nullptr && !running_; })) {
    COHORT_WARN(
        "AsyncCheckpointWriter: a checkpoint is still being written after {} ms; giving up "
        "on it (the earlier checkpoints are intact)",
        options_.close_timeout.count());
    cancel_ = true;
  }
  stop_ = true;
  job_ = nullptr;  // a queued job that never started is dropped
  lock.unlock();
  cv_.notify_all();
  thread_.join();
  if (in_flight_ && error_)
    COHORT_WARN("AsyncCheckpointWriter: a background checkpoint failed and was not waited for: {}",
                message_of(error_));
}

void AsyncCheckpointWriter::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || job_ != nullptr; });
    if (job_ == nullptr) return;  // stopping, nothing queued
    std::function<std::string()> job = std::move(job_);
    job_ = nullptr;
    running_ = true;
    lock.unlock();
    const auto t0 = Clock::now();
    std::string path;
    std::exception_ptr error;
    try {
      path = job();
    } catch (...) {
      error = std::current_exception();  // background threads never throw
    }
    job = nullptr;  // frees the staged copies unless buffers_ keeps them
    lock.lock();
    running_ = false;
    result_ = std::move(path);
    error_ = error;
    stats_.write_seconds = seconds_since(t0);
    cv_.notify_all();
  }
}

void AsyncCheckpointWriter::start(std::function<std::string()> job) {
  std::lock_guard lock(mu_);
  COHORT_ASSERT(!in_flight_, "AsyncCheckpointWriter: a write is still in flight");
  job_ = std::move(job);
  in_flight_ = true;
  error_ = nullptr;
  result_.clear();
  cv_.notify_all();
}

bool AsyncCheckpointWriter::busy() const {
  std::lock_guard lock(mu_);
  return job_ != nullptr || running_;
}

AsyncCheckpointStats AsyncCheckpointWriter::last_stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

std::optional<std::string> AsyncCheckpointWriter::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!in_flight_) return std::nullopt;
  if (!cv_.wait_for(lock, timeout, [&] { return job_ == nullptr && !running_; }))
    throw TimeoutError(fmt::format(
        "AsyncCheckpointWriter::wait: the background checkpoint is still being written after {} "
        "ms",
        timeout.count()));
  in_flight_ = false;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return result_;
}

std::optional<std::string> AsyncCheckpointWriter::wait(distributed::ProcessGroup& group,
                                                       std::chrono::milliseconds timeout) {
  if (!group_pending_) return wait(timeout);
  std::exception_ptr error;
  try {
    wait(timeout);
  } catch (...) {
    error = std::current_exception();
  }
  std::optional<std::string> path = std::exchange(group_pending_, std::nullopt);
  detail::agree(group, "background checkpoint", error);
  return path;
}

// The copy that makes save() return: into a buffer of the previous save
// when it has this tensor's shape and dtype, else a fresh one.
Tensor AsyncCheckpointWriter::stage(const Tensor& t, std::vector<Tensor>& staged) {
  COHORT_CHECK(t.defined(), "AsyncCheckpointWriter: an undefined tensor in the state");
  const size_t i = staged.size();
  Tensor out;
  if (!t.is_cpu()) {
    out = t.detach().to(kCPU);  // the device-to-host copy is a new host tensor
  } else {
    const Tensor src = t.detach().contiguous();
    const bool reuse = options_.reuse_buffers && i < buffers_.size() &&
                       buffers_[i].dtype() == t.dtype() && buffers_[i].sizes() == t.sizes();
    out = reuse ? buffers_[i] : Tensor::empty(t.sizes(), t.dtype());
    const auto* from = static_cast<const char*>(src.raw_data());
    auto* to = static_cast<char*>(out.raw_data());
    // Large tensors in chunks over the runtime's threads: memory bandwidth
    // is what the training thread waits for.
    parallel_for(
        0, static_cast<int64_t>(src.nbytes()), int64_t{1} << 22,
        [&](int64_t b, int64_t e) { std::memcpy(to + b, from + b, static_cast<size_t>(e - b)); });
  }
  stats_.staged_bytes += out.nbytes();
  staged.push_back(out);
  return out;
}

TensorDict AsyncCheckpointWriter::stage(const TensorDict& d, std::vector<Tensor>& staged) {
  TensorDict out;
  for (const auto& [name, t] : d) out.insert(name, stage(t, staged));
  return out;
}

void AsyncCheckpointWriter::begin_staging() {
  std::lock_guard lock(mu_);
  stats_ = {};
}

void AsyncCheckpointWriter::end_staging(std::vector<Tensor> staged, Clock::time_point t0,
                                        Clock::time_point staging_start) {
  std::lock_guard lock(mu_);
  stats_.staging_seconds = seconds_since(staging_start);
  stats_.blocked_seconds = seconds_since(t0);
  if (options_.reuse_buffers) {
    buffers_ = std::move(staged);
  } else {
    buffers_.clear();
  }
}

std::string AsyncCheckpointWriter::save(const std::string& root, const nn::Module& model,
                                        const optim::Optimizer* optimizer,
                                        const TrainingState& state, const SaveOptions& options) {
  const auto t0 = Clock::now();
  COHORT_CHECK(state.step >= 0, "save_checkpoint: step must be >= 0, got {}", state.step);
  COHORT_CHECK(options.keep_last >= 0, "save_checkpoint: keep_last must be >= 0, got {}",
               options.keep_last);
  wait(options_.write_timeout);  // the previous write, or its error
  begin_staging();
  const auto staging_start = Clock::now();
  std::vector<Tensor> staged;
  auto model_state = std::make_shared<TensorDict>(stage(model.state_dict(), staged));
  std::shared_ptr<TensorDict> opt_state;
  if (optimizer != nullptr)
    opt_state = std::make_shared<TensorDict>(stage(optimizer->state_dict(), staged));
  const std::string name = step_dir_name(state.step);
  const std::string path = (fs::path(root) / name).string();
  end_staging(std::move(staged), t0, staging_start);
  start([this, root, name, path, model_state, opt_state, state, options] {
    try {
      const std::string tmp = begin_checkpoint_dir(root, name, "background save_checkpoint");
      try {
        if (options_.test_hook) options_.test_hook(AsyncWritePhase::kStarted, tmp);
        detail::write_whole_files(tmp, *model_state, opt_state.get(), state);
        if (options_.test_hook) options_.test_hook(AsyncWritePhase::kFilesWritten, tmp);
      } catch (...) {
        std::error_code ec;
        fs::remove_all(tmp, ec);
        throw;
      }
      return commit_checkpoint_dir(tmp, root, name, options);
    } catch (const std::exception& e) {
      throw IoError(fmt::format("background checkpoint '{}' (step {}) failed: {}", path, state.step,
                                e.what()));
    }
  });
  return path;
}

std::string AsyncCheckpointWriter::save(distributed::ProcessGroup& group, const std::string& root,
                                        const nn::Module& model, const optim::Optimizer* optimizer,
                                        const TrainingState& state, const SaveOptions& options) {
  wait(group);  // every rank learns the previous checkpoint's outcome
  std::string path = (fs::path(root) / step_dir_name(state.step)).string();
  if (group.rank() == 0) {
    std::exception_ptr error;
    try {
      path = save(root, model, optimizer, state, options);
    } catch (...) {
      error = std::current_exception();
    }
    group_pending_ = path;
    if (error) std::rethrow_exception(error);  // only argument errors: the rest comes at wait
  } else {
    group_pending_ = path;
  }
  return path;
}

std::string AsyncCheckpointWriter::save_sharded(distributed::ProcessGroup& group,
                                                const std::string& root,
                                                const std::vector<ShardPiece>& pieces,
                                                const TrainingState& state, const Metadata& info,
                                                const SaveOptions& options) {
  const auto t0 = Clock::now();
  wait(group);
  const int rank = group.rank(), world = group.size();
  const std::string name = step_dir_name(state.step);
  const std::string path = (fs::path(root) / name).string();
  // Rank 0 makes the temporary directory and tells the others (collectives:
  // on this thread).
  const std::string tmp = detail::begin_sharded_dir(group, root, name, state.step,
                                                    "background save_sharded_checkpoint");

  begin_staging();
  const auto staging_start = Clock::now();
  std::vector<Tensor> staged;
  auto copies = std::make_shared<std::vector<ShardPiece>>();
  copies->reserve(pieces.size());
  for (const ShardPiece& p : pieces) {
    COHORT_CHECK(p.data.defined(), "save_sharded_checkpoint: piece of '{}' is undefined", p.name);
    copies->push_back({p.name, p.shape, p.begin, stage(p.data, staged)});
  }
  end_staging(std::move(staged), t0, staging_start);
  group_pending_ = path;
  start([this, root, name, path, tmp, copies, state, info, options, rank, world] {
    try {
      try {
        if (options_.test_hook) options_.test_hook(AsyncWritePhase::kStarted, tmp);
        write_rank_file((fs::path(tmp) / rank_file_name(rank, world)).string(), *copies, rank,
                        world);
        if (options_.test_hook) options_.test_hook(AsyncWritePhase::kFilesWritten, tmp);
      } catch (const std::exception& e) {
        if (rank != 0) {
          // Best effort: rank 0 then stops waiting for this rank's file.
          std::ofstream(error_marker(tmp, rank)) << e.what();
        } else {
          std::error_code ec;
          fs::remove_all(tmp, ec);
        }
        throw;
      }
      if (rank != 0) return path;
      try {
        wait_for_rank_files(tmp, world, options_.write_timeout, cancel_);
        detail::write_sharded_meta(tmp, state, info, world);
        for (int r = 1; r < world; ++r) {
          std::error_code ec;
          fs::remove(error_marker(tmp, r), ec);  // none, unless a rank failed after writing
        }
        return commit_checkpoint_dir(tmp, root, name, options);
      } catch (...) {
        std::error_code ec;
        fs::remove_all(tmp, ec);
        throw;
      }
    } catch (const std::exception& e) {
      throw IoError(fmt::format("background checkpoint '{}' (step {}) failed on rank {} of {}: {}",
                                path, state.step, rank, world, e.what()));
    }
  });
  return path;
}

}  // namespace cohort::checkpoint
