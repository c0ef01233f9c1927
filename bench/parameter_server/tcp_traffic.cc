#include "bench/parameter_server/tcp_traffic.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

namespace cohort::bench {

TcpTraffic tcp_traffic() {
  TcpTraffic t;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = 0;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    tcp_info info{};
    socklen_t len = sizeof(info);
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) continue;
    t.sent += info.tcpi_bytes_acked;
    t.received += info.tcpi_bytes_received;
  }
  return t;
}

}  // namespace cohort::bench
