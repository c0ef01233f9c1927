// Checkpoints written in the background (PyTorch's
// torch.distributed.checkpoint.async_save): save() blocks the training
// thread only while the state is copied into host memory that the writer
// owns, so training may change the parameters and optimizer state the moment
// it returns; one background thread then writes those copies with the
// synchronous writers' code and commit (checkpoint.h, sharded_checkpoint.h,
// checkpoint_dir.h), so the files are the same bytes a synchronous save
// writes, and a crash at any point leaves every earlier checkpoint intact and
// no partial step-* directory.
//
//   AsyncCheckpointWriter writer;
//   writer.save(group, root, model, &opt, state);      // whole: rank 0 writes
//   writer.save_sharded(group, root, pieces, state);   // sharded: every rank
//   ... train on ...
//   writer.wait(group);  // before exit: the last one committed, or its error
//
// At most one write is in flight: a save waits for the previous one first
// (as async_save's callers do with its future), so host memory holds one
// staged copy of the state (kept for the next save to copy into when
// options.reuse_buffers, which saves the page faults of a fresh allocation).
//
// Collectives. The background thread never communicates over the group:
// training runs collectives on it concurrently, and a group's ops must be
// issued in one order by every rank. Everything collective stays in save()
// and wait(group), on the training thread, where every rank calls them:
// agreeing on the previous write's outcome, and for a sharded checkpoint rank
// 0 creating the temporary directory and broadcasting its name. The commit
// of a sharded checkpoint needs every rank's file, so rank 0's writer waits
// for them through the file system the checkpoint is written to anyway (each
// rank file appears under its final name by an atomic rename; a rank whose
// write failed leaves an ".error-rank-N" file naming its cause), then writes
// sharded.safetensors and renames the directory. So checkpoint N is
// committed as soon as every rank has written it, without a barrier, and
// every rank learns the outcome at the next save or wait(group): the
// collective check there is what fails every rank when one failed.
//
// Errors: a failed write is kept and rethrown (an IoError naming the
// checkpoint's path, the rank and the cause) by the next save, wait or
// wait(group) -- on every rank for the collective calls -- and never lost:
// the destructor logs one nobody collected. wait() throws TimeoutError when
// the write is still running at its timeout (the write goes on). The
// destructor waits for a write in flight (up to options.close_timeout, then
// rank 0 stops waiting for other ranks' files and drops that checkpoint), so
// nothing is half-written at a normal exit; it never throws.
//
// Thread safety: one training thread calls save and wait; the background
// thread touches only the copies. The model, optimizer and pieces are read
// only during save(). Collective calls (those taking a group) must be made by
// every rank of the group in the same order, bounded by its timeout.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cohort/checkpoint/checkpoint_dir.h"
#include "cohort/checkpoint/sharded_checkpoint.h"
#include "cohort/checkpoint/training_state.h"
#include "cohort/distributed/process_group.h"
#include "cohort/nn/module.h"
#include "cohort/optim/optimizer.h"

namespace cohort::checkpoint {

// Where the background write is, for AsyncCheckpointOptions::test_hook.
enum class AsyncWritePhase {
  kStarted,       // the temporary directory exists; nothing written yet
  kFilesWritten,  // this rank's files are written; not committed yet
};

struct AsyncCheckpointOptions {
  // How long a save waits for the previous write, and rank 0's writer for
  // the other ranks' files of a sharded checkpoint.
  std::chrono::milliseconds write_timeout = std::chrono::minutes(30);
  // How long the destructor waits for a write in flight.
  std::chrono::milliseconds close_timeout = std::chrono::minutes(5);
  // Copy into the previous save's staging buffers when the state has the
  // same tensors (the usual case); false: fresh buffers each time, freed
  // after the write.
  bool reuse_buffers = true;
  // Tests: called on the background thread at each phase with the
  // temporary directory; it may block (to hold a write in progress) or throw
  // (to fail it).
  std::function<void(AsyncWritePhase, const std::string& dir)> test_hook;
};

// Times of the last save, for benchmarks and logs.
struct AsyncCheckpointStats {
  double blocked_seconds = 0;  // the save() call on the training thread, all of it
  double staging_seconds = 0;  // of which the copy into host memory
  double write_seconds = 0;    // the background write and commit (once done)
  uint64_t staged_bytes = 0;   // tensor bytes copied by this rank
};

class AsyncCheckpointWriter final {
 public:
  explicit AsyncCheckpointWriter(AsyncCheckpointOptions options = {});
  ~AsyncCheckpointWriter();
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;

  // A whole checkpoint <root>/step-<state.step>/ of model (and optimizer),
  // written by this process alone (save_checkpoint's files). Returns the
  // path it has once committed.
  std::string save(const std::string& root, const nn::Module& model,
                   const optim::Optimizer* optimizer, const TrainingState& state,
                   const SaveOptions& options = {});

  // Collective: the same, written by rank 0 of group (as the synchronous
  // distributed save_checkpoint); returns the path on every rank.
  std::string save(distributed::ProcessGroup& group, const std::string& root,
                   const nn::Module& model, const optim::Optimizer* optimizer,
                   const TrainingState& state, const SaveOptions& options = {});

  // Collective: a sharded checkpoint (save_sharded_checkpoint's files) of
  // this rank's pieces; returns its path on every rank.
  std::string save_sharded(distributed::ProcessGroup& group, const std::string& root,
                           const std::vector<ShardPiece>& pieces, const TrainingState& state,
                           const Metadata& info = {}, const SaveOptions& options = {});

  // Waits up to `timeout` for this process's write in flight; returns the
  // path it committed (nullopt when none was in flight, or when this rank
  // had nothing to write), or rethrows its error. TimeoutError when it is
  // still running (it goes on).
  std::optional<std::string> wait(std::chrono::milliseconds timeout);
  std::optional<std::string> wait() { return wait(options_.write_timeout); }

  // Collective: waits for the last collective save on every rank and agrees
  // on its outcome: its path on every rank (nullopt when there was none), or
  // an error on every rank.
  std::optional<std::string> wait(distributed::ProcessGroup& group,
                                  std::chrono::milliseconds timeout);
  std::optional<std::string> wait(distributed::ProcessGroup& group) {
    return wait(group, options_.write_timeout);
  }

  // Whether a write of this process is still running.
  bool busy() const;
  AsyncCheckpointStats last_stats() const;

 private:
  using Clock = std::chrono::steady_clock;
  void start(std::function<std::string()> job);
  void run();
  Tensor stage(const Tensor& t, std::vector<Tensor>& staged);
  TensorDict stage(const TensorDict& d, std::vector<Tensor>& staged);
  void begin_staging();
  void end_staging(std::vector<Tensor> staged, Clock::time_point t0,
                   Clock::time_point staging_start);

  AsyncCheckpointOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::function<std::string()> job_;  // queued, not yet taken by the thread
  bool running_ = false;              // taken by the thread, not finished
  bool in_flight_ = false;            // queued or running or finished, not yet collected
  bool stop_ = false;
  std::string result_;
  std::exception_ptr error_;
  std::atomic<bool> cancel_{false};  // rank 0 stops waiting for other ranks' files
  // The collective save whose outcome wait(group) has not agreed on yet.
  std::optional<std::string> group_pending_;
  std::vector<Tensor> buffers_;  // the last save's staged copies
  AsyncCheckpointStats stats_;
  std::thread thread_;  // last: started after everything it reads
};

}  // namespace cohort::checkpoint
