#include "cohort/transport/network.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "cohort/base/error.h"
#include "cohort/base/unique_fd.h"

namespace cohort::transport {
namespace {

std::string ntop(const in_addr& a) {
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &a, buf, sizeof(buf));
  return buf;
}

struct Interface {
  std::string name, ip;
  bool loopback = false;
};

std::vector<Interface> interfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) throw_errno("transport: getifaddrs", errno);
  std::vector<Interface> out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0) continue;
    out.push_back({i->ifa_name, ntop(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr),
                   (i->ifa_flags & IFF_LOOPBACK) != 0});
  }
  ::freeifaddrs(list);
  return out;
}

}  // namespace

bool is_loopback_ip(const std::string& ip) { return ip.rfind("127.", 0) == 0; }

std::string resolve_ipv4(const std::string& host) {
  in_addr a{};
  if (::inet_pton(AF_INET, host.c_str(), &a) == 1) return host;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return "";
  std::string out = ntop(reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr);
  ::freeaddrinfo(res);
  return out;
}

std::string route_address(const std::string& host, uint16_t port) {
  const std::string ip = resolve_ipv4(host);
  if (ip.empty()) {
    throw InvalidArgument(
        fmt::format("transport: master address '{}' does not resolve to an IPv4 address", host));
  }
  UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw_errno("transport: socket(UDP)", errno);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port != 0 ? port : 9);
  ::inet_pton(AF_INET, ip.c_str(), &to.sin_addr);
  // A UDP connect only picks the route and source address; nothing is sent.
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    throw IoError(errno_message(
        fmt::format("transport: no route from this host to the master {} ({})", host, ip), errno));
  }
  sockaddr_in me{};
  socklen_t len = sizeof(me);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&me), &len) != 0) {
    throw_errno("transport: getsockname", errno);
  }
  return ntop(me.sin_addr);
}

std::string interface_address(const std::string& name) {
  std::vector<Interface> all = interfaces();
  for (const Interface& i : all) {
    if (i.name == name) return i.ip;
  }
  std::string names;
  for (const Interface& i : all) names += (names.empty() ? "" : ", ") + i.name + " (" + i.ip + ")";
  throw InvalidArgument(fmt::format(
      "transport: network interface '{}' has no IPv4 address or is not up (set by --interface or "
      "COHORT_SOCKET_IFNAME); this host has: {}",
      name, names.empty() ? "none" : names));
}

std::vector<std::string> interface_list() {
  std::vector<std::string> out;
  for (const Interface& i : interfaces()) out.push_back(i.name + "=" + i.ip);
  return out;
}

std::string network_namespace() {
  char buf[64] = {};
  ssize_t n = ::readlink("/proc/self/ns/net", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("net:unknown");
}

std::vector<std::string> advertised_addresses(const NetworkOptions& o) {
  if (!o.address.empty()) {
    in_addr a{};
    if (::inet_pton(AF_INET, o.address.c_str(), &a) != 1) {
      throw InvalidArgument(fmt::format(
          "transport: address '{}' (COHORT_ADDR) is not a dotted-quad IPv4 address", o.address));
    }
    return {o.address};
  }
  if (!o.interface.empty()) return {interface_address(o.interface)};
  std::vector<std::string> out;
  if (!o.master_addr.empty()) {
    const std::string route = route_address(o.master_addr, o.master_port);
    // A master on loopback means one host: loopback reaches every peer.
    if (is_loopback_ip(route)) return {route};
    out.push_back(route);
  }
  for (const Interface& i : interfaces()) {
    if (!i.loopback && std::find(out.begin(), out.end(), i.ip) == out.end()) out.push_back(i.ip);
  }
  // No master known and no network: a one-host job over loopback.
  if (out.empty()) out.push_back("127.0.0.1");
  return out;
}

}  // namespace cohort::transport
