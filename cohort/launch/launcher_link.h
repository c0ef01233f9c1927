// LauncherLink: the launchers of a multi-node job watch each other directly,
// not only through their workers. Every other node's launcher holds one TCP
// connection to node 0's launcher (a star); both ends send a byte every
// heartbeat, and a goodbye before they leave. So:
//   - a launcher that dies, whatever the signal, is seen at once: the kernel
//     closes a dead process's sockets, and a connection that ends without a
//     goodbye means the launcher at the other end is gone;
//   - a connection silent for silence_limit means the link is cut or the
//     peer's host is down (or the launcher is stopped).
// Node 0 watches every other node; the others watch node 0 (and hear of a
// third node's loss through the store, from node 0: job_coordinator.h).
//
// The first loss stands: lost() names the launcher (node, pid, host,
// address) and what happened to it, e.g. "node 1's launcher (pid 4242 on
// host h, address 10.0.0.2) died: its link to node 0 closed without a
// goodbye". A link is told the job's token; a connection with another token
// is refused (and named to the one that tried).
//
// Failure: the connecting constructor throws IoError/TimeoutError naming the
// node and address; the background thread never throws (it records losses).
// The destructor closes the links without a goodbye: a launcher that ends by
// an exception is, to the others, a launcher that died.
//
// Thread safety: lost(), is_lost() and linked() from any thread; the rest
// from the thread that made the link.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cohort/base/unique_fd.h"

namespace cohort::launch {

struct LauncherLinkOptions {
  int nnodes = 2;
  int node_rank = 0;
  std::string token;
  // This launcher, as the others name it.
  std::string host;
  std::string address;
  pid_t pid = 0;
  std::chrono::milliseconds heartbeat = std::chrono::milliseconds(500);
  std::chrono::milliseconds silence_limit = std::chrono::seconds(5);
};

class LauncherLink {
 public:
  // Node 0: listens on bind_host (port 0: the kernel picks one, port()) and
  // accepts the other nodes' links in the background.
  LauncherLink(LauncherLinkOptions options, const std::string& bind_host);
  // Node k > 0: links to node 0's launcher at host:port, trying until deadline.
  LauncherLink(LauncherLinkOptions options, const std::string& host, uint16_t port,
               std::chrono::steady_clock::time_point deadline);
  ~LauncherLink();
  LauncherLink(const LauncherLink&) = delete;
  LauncherLink& operator=(const LauncherLink&) = delete;

  uint16_t port() const { return port_; }
  // Whether node's link is up (node 0: linked to it; others: only node 0).
  bool linked(int node) const;
  // The first launcher lost, described; nullopt while all are there.
  std::optional<std::string> lost() const;
  bool is_lost(int node) const;
  // Readable from the first loss on (an eventfd this object owns), so a
  // waiting launcher wakes the moment a launcher is lost.
  int lost_fd() const { return lost_event_.get(); }
  // Says goodbye to every linked launcher and closes the links: this
  // launcher ends on purpose (its outcome is in the store).
  void leave();

 private:
  struct Peer {
    int node = -1;    // -1: accepted, hello not read yet
    std::string who;  // "node 1's launcher (pid P on host H, address A)"
    UniqueFd fd;
    std::string inbox;  // handshake bytes read so far
    std::chrono::steady_clock::time_point last_heard;
    bool goodbye = false;
  };

  void start();
  void stop_thread();
  void run();
  void accept_peers();
  void handshake(Peer& p);
  void read_from(Peer& p);
  void mark_lost(Peer& p, const std::string& what);

  LauncherLinkOptions o_;
  uint16_t port_ = 0;
  UniqueFd listener_;
  UniqueFd wake_read_, wake_write_;  // leave() wakes the thread
  UniqueFd lost_event_;              // see lost_fd()
  std::vector<Peer> peers_;          // the thread's once started
  std::thread thread_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::optional<std::string> lost_;
  std::vector<int> lost_nodes_;
  std::vector<int> linked_nodes_;
};

}  // namespace cohort::launch
