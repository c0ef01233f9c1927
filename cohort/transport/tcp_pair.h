// TcpPair: a Pair over one non-blocking TCP connection (TCP_NODELAY). Used
// between hosts, and between all ranks when COHORT_TRANSPORT=tcp.
//
// Ownership: owns the socket. Thread safety: one writer and one reader thread.
// Failure: EOF or a reset throws cohort::PeerLost naming the peer rank.
#pragma once

#include "cohort/base/unique_fd.h"
#include "cohort/transport/pair.h"

namespace cohort::transport {

class TcpPair final : public Pair {
 public:
  TcpPair(int rank, int peer, UniqueFd fd);

  std::string_view kind() const override { return "tcp"; }
  size_t write_some(const void* data, size_t n) override;
  size_t write_gather(std::span<const Slice> slices) override;
  size_t read_some(void* data, size_t n) override;
  bool readable() override;
  bool writable() override;
  int fd() const override { return fd_.get(); }

 private:
  [[noreturn]] void lost(const char* what, int err);
  UniqueFd fd_;
};

}  // namespace cohort::transport
