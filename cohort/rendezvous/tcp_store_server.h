// TcpStoreServer: serves the key-value data of a TcpStore to any number of
// clients from ONE background thread running an epoll loop (no thread per
// client). Clients must open with the job token (see token.h); a connection
// with a wrong or missing token gets a refusal and is closed, and one that
// says nothing is closed after handshake_timeout. Blocking requests (get,
// wait) are parked in the loop until their keys appear or their deadline
// passes; then the server replies with the keys still missing.
//
// Ownership: owns the listening socket, all client sockets and the thread;
// the destructor stops the loop and closes them (clients then see PeerLost).
// Thread safety: the public methods may be called from any thread.
#pragma once

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "cohort/base/unique_fd.h"
#include "cohort/rendezvous/store.h"

namespace cohort::rendezvous {

struct TcpStoreServerOptions {
  // Address to listen on (transport/socket.h, listen_tcp): "" for every
  // interface of both IP families, "0.0.0.0" for every IPv4 one, "127.0.0.1"
  // or "::1" for this host only.
  std::string bind_host = {};
  uint16_t port = 0;  // 0: the kernel picks a free port (see port())
  // nullopt: COHORT_TOKEN, or "" when unset; "" accepts clients that present "".
  std::optional<std::string> token;
  Duration handshake_timeout = std::chrono::seconds(10);
};

class TcpStoreServer {
 public:
  // Binds and starts serving. Throws IoError when the port cannot be bound.
  explicit TcpStoreServer(TcpStoreServerOptions options);
  // Serves on an already bound and listening socket (from transport::listen_tcp);
  // lets a caller bind, fork, and start the thread only in the parent.
  TcpStoreServer(UniqueFd listener, TcpStoreServerOptions options);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  uint16_t port() const { return port_; }
  // Clients that completed the handshake and are still connected.
  int num_clients() const { return num_clients_.load(); }
  // Connections refused for a wrong or missing token since start.
  int num_refused() const { return num_refused_.load(); }
  // Rethrows the error that stopped the loop thread, if one did.
  void check() const;

 private:
  class Loop;
  void run() noexcept;

  uint16_t port_ = 0;
  std::unique_ptr<Loop> loop_;
  std::atomic<int> num_clients_{0};
  std::atomic<int> num_refused_{0};
  mutable std::mutex error_mu_;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace cohort::rendezvous
