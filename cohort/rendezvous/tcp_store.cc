#include "cohort/rendezvous/tcp_store.h"

#include "cohort/base/error.h"
#include "cohort/rendezvous/store_util.h"
#include "cohort/rendezvous/tcp_store_server.h"
#include "cohort/rendezvous/token.h"
#include "cohort/transport/socket.h"

namespace cohort::rendezvous {

using proto::Op;
using proto::Status;

namespace {

// Extra time a client gives the server beyond a request's own timeout before
// it concludes the server is hung.
constexpr Duration kReplySlack = std::chrono::seconds(5);

uint64_t to_ms(Duration d) { return d.count() < 0 ? 0 : static_cast<uint64_t>(d.count()); }

}  // namespace

TcpStore::TcpStore(TcpStoreOptions options) : options_(std::move(options)) {
  timeout_ = options_.timeout;
  port_ = options_.port;
  if (options_.is_server) {
    TcpStoreServerOptions so;
    so.bind_host =
        !options_.bind_host.empty() ? options_.bind_host : transport::bind_host_for(options_.host);
    so.port = options_.port;
    so.token = options_.token;
    server_ = std::make_unique<TcpStoreServer>(so);
    port_ = server_->port();
  }
  COHORT_CHECK(port_ != 0, "TcpStore: client needs the server's port (got 0 for host {})",
               options_.host);
  idle_.push_back(connect_and_handshake(transport::Clock::now() + timeout_));
}

UniqueFd TcpStore::connect_and_handshake(transport::Clock::time_point deadline) {
  transport::ConnectOptions co;
  co.what = "TcpStore";
  co.peer = "the store";
  co.retry_unreachable = true;  // the master's host may still be coming up
  UniqueFd fd;
  try {
    fd = transport::connect_tcp(options_.host, port_, deadline, co);
  } catch (const TimeoutError& e) {
    throw TimeoutError(fmt::format(
        "{} (is the master (node 0's `cohort run`, or rank 0) running, and is MASTER_ADDR "
        "reachable from this host?)",
        e.what()));
  }
  std::string token = resolve_token(options_.token);
  auto hello =
      std::move(proto::Encoder().u32(proto::kMagic).u32(proto::kVersion).str(token)).finish();
  std::string what = "TcpStore handshake with " + where();
  transport::write_all(fd.get(), hello.data(), hello.size(), deadline, what);
  uint8_t len_buf[4];
  transport::read_all(fd.get(), len_buf, 4, deadline, what);
  uint32_t len = proto::read_u32_le(len_buf);
  if (len == 0 || len > proto::kMaxHandshakeFrame) {
    throw IoError(what + ": malformed reply (is this a cohort store?)");
  }
  std::vector<uint8_t> payload(len);
  transport::read_all(fd.get(), payload.data(), len, deadline, what);
  proto::Decoder d(payload.data(), payload.size());
  auto status = static_cast<Status>(d.u8());
  if (status != Status::kOk) {
    std::string reason = status == Status::kRefused ? d.str() : "unexpected reply";
    throw IoError(what + ": refused: " + reason);
  }
  return fd;
}

TcpStore::~TcpStore() {
  idle_.clear();  // close our connections before the server (if ours) stops
  server_.reset();
}

std::string TcpStore::where() const { return fmt::format("{}:{}", options_.host, port_); }

std::vector<uint8_t> TcpStore::call(const char* op, std::vector<uint8_t> frame,
                                    Duration wait_budget) {
  std::string what = fmt::format("TcpStore {} ({})", op, where());
  auto deadline = transport::Clock::now() + wait_budget + kReplySlack;
  UniqueFd fd;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_) throw PeerLost(what + ": the connection to the store server was lost earlier");
    if (!idle_.empty()) {
      fd = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  std::vector<uint8_t> payload;
  try {
    if (!fd.valid()) fd = connect_and_handshake(transport::Clock::now() + timeout_);
    transport::write_all(fd.get(), frame.data(), frame.size(), deadline, what);
    uint8_t len_buf[4];
    transport::read_all(fd.get(), len_buf, 4, deadline, what);
    uint32_t len = proto::read_u32_le(len_buf);
    if (len == 0 || len > proto::kMaxFrame) throw IoError(what + ": malformed reply");
    payload.resize(len);
    transport::read_all(fd.get(), payload.data(), len, deadline, what);
  } catch (const PeerLost&) {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = true;
    throw;
  }
  // Only a connection whose reply was read whole is in step for reuse.
  {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(fd));
  }
  auto status = static_cast<Status>(payload[0]);
  if (status == Status::kOk) return payload;
  proto::Decoder d(payload.data() + 1, payload.size() - 1);
  if (status == Status::kTimeout) {
    throw TimeoutError(detail::timeout_message(what, wait_budget, d.keys(), "TCP store"));
  }
  if (status == Status::kError) throw InvalidArgument(d.str());
  throw IoError(fmt::format("{}: unexpected reply status {}", what, static_cast<int>(status)));
}

void TcpStore::set(const std::string& key, const Bytes& value) {
  call(
      "set",
      std::move(proto::Encoder().u8(static_cast<uint8_t>(Op::kSet)).str(key).bytes(value)).finish(),
      timeout_);
}

Bytes TcpStore::get(const std::string& key) {
  auto reply = call(
      "get",
      std::move(proto::Encoder().u8(static_cast<uint8_t>(Op::kGet)).str(key).u64(to_ms(timeout_)))
          .finish(),
      timeout_);
  proto::Decoder d(reply.data() + 1, reply.size() - 1);
  return d.bytes();
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  auto reply = call(
      "add",
      std::move(proto::Encoder().u8(static_cast<uint8_t>(Op::kAdd)).str(key).i64(delta)).finish(),
      timeout_);
  proto::Decoder d(reply.data() + 1, reply.size() - 1);
  return d.i64();
}

Bytes TcpStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  auto reply = call("compare_set",
                    std::move(proto::Encoder()
                                  .u8(static_cast<uint8_t>(Op::kCompareSet))
                                  .str(key)
                                  .bytes(expected)
                                  .bytes(desired))
                        .finish(),
                    timeout_);
  proto::Decoder d(reply.data() + 1, reply.size() - 1);
  return d.bytes();
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  auto reply = call(
      "check", std::move(proto::Encoder().u8(static_cast<uint8_t>(Op::kCheck)).keys(keys)).finish(),
      timeout_);
  return reply.size() > 1 && reply[1] != 0;
}

bool TcpStore::delete_key(const std::string& key) {
  auto reply =
      call("delete_key",
           std::move(proto::Encoder().u8(static_cast<uint8_t>(Op::kDelete)).str(key)).finish(),
           timeout_);
  return reply.size() > 1 && reply[1] != 0;
}

void TcpStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  call(
      "wait",
      std::move(proto::Encoder().u8(static_cast<uint8_t>(Op::kWait)).keys(keys).u64(to_ms(timeout)))
          .finish(),
      timeout);
}

int64_t TcpStore::num_keys() {
  auto reply =
      call("num_keys", std::move(proto::Encoder().u8(static_cast<uint8_t>(Op::kNumKeys))).finish(),
           timeout_);
  proto::Decoder d(reply.data() + 1, reply.size() - 1);
  return static_cast<int64_t>(d.u64());
}

void TcpStore::heartbeat(const std::string& id) {
  call("heartbeat",
       std::move(proto::Encoder().u8(static_cast<uint8_t>(Op::kHeartbeat)).str(id)).finish(),
       timeout_);
}

Quorum TcpStore::quorum(const QuorumRequest& r, Duration timeout) {
  auto reply = call("quorum",
                    std::move(proto::Encoder()
                                  .u8(static_cast<uint8_t>(Op::kQuorum))
                                  .str(r.id)
                                  .i64(r.step)
                                  .u8(r.last_step_failed ? 1 : 0)
                                  .u32(static_cast<uint32_t>(r.min_replicas))
                                  .u64(static_cast<uint64_t>(r.join_timeout.count()))
                                  .u64(static_cast<uint64_t>(r.heartbeat_timeout.count()))
                                  .u64(to_ms(timeout)))
                        .finish(),
                    timeout);
  proto::Decoder d(reply.data() + 1, reply.size() - 1);
  Quorum q;
  q.id = d.u64();
  q.group_epoch = d.u64();
  const uint32_t n = d.u32();
  for (uint32_t i = 0; i < n; ++i) {
    QuorumMember m;
    m.id = d.str();
    m.step = d.i64();
    q.members.push_back(std::move(m));
  }
  return q;
}

}  // namespace cohort::rendezvous
