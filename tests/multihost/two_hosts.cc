#include "tests/multihost/two_hosts.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace cohort::test {
namespace {

constexpr const char* kPrefix = "cohorth";  // cohorth<pid>x<n><a|b>

// Namespaces of earlier runs whose process is gone.
void remove_stale() {
  std::FILE* p = ::popen("ip netns list 2>/dev/null", "r");
  if (p == nullptr) return;
  char line[256];
  while (std::fgets(line, sizeof(line), p) != nullptr) {
    std::string name(line);
    name = name.substr(0, name.find_first_of(" \n"));
    if (name.rfind(kPrefix, 0) != 0) continue;
    const long pid = std::atol(name.c_str() + std::string(kPrefix).size());
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0) {
      std::system(("ip netns del " + name + " 2>/dev/null").c_str());
    }
  }
  ::pclose(p);
}

}  // namespace

std::optional<std::string> TwoHosts::unavailable() {
  if (::geteuid() != 0) return "needs root to create network namespaces";
  if (std::system("command -v ip >/dev/null 2>&1") != 0) return "needs `ip` (Debian's iproute2)";
  const std::string probe = std::string(kPrefix) + std::to_string(::getpid()) + "probe";
  if (std::system(("ip netns add " + probe + " 2>/dev/null").c_str()) != 0)
    return "cannot create a network namespace here (`ip netns add` failed)";
  std::system(("ip netns del " + probe).c_str());
  return std::nullopt;
}

TwoHosts::TwoHosts() {
  static std::atomic<int> counter{0};
  remove_stale();
  const int n = counter++;
  const std::string base =
      std::string(kPrefix) + std::to_string(::getpid()) + "x" + std::to_string(n);
  // A /24 per fixture: tests of several processes run side by side.
  const int subnet = static_cast<int>((::getpid() * 7 + n) % 250) + 1;
  for (int h = 0; h < 2; ++h) {
    ns_[h] = base + (h == 0 ? "a" : "b");
    ip_[h] = "10.231." + std::to_string(subnet) + "." + std::to_string(h + 1);
    // Interface names have at most 15 characters.
    link_[h] = "ch" + std::to_string((::getpid() % 100000) * 10 + n % 10) + (h == 0 ? "a" : "b");
  }
  sh("ip netns add " + ns_[0] + " && ip netns add " + ns_[1]);
  sh("ip link add " + link_[0] + " type veth peer name " + link_[1]);
  for (int h = 0; h < 2; ++h) {
    sh("ip link set " + link_[h] + " netns " + ns_[h]);
    sh("ip -n " + ns_[h] + " addr add " + ip_[h] + "/24 dev " + link_[h]);
    sh("ip -n " + ns_[h] + " link set lo up && ip -n " + ns_[h] + " link set " + link_[h] + " up");
  }
}

TwoHosts::~TwoHosts() {
  for (int h = 0; h < 2; ++h) std::system(("ip netns del " + ns_[h] + " 2>/dev/null").c_str());
}

std::vector<std::string> TwoHosts::in(int host, const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {"/usr/sbin/ip", "netns", "exec", ns_[host]};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

void TwoHosts::sh(const std::string& command) {
  if (std::system(command.c_str()) != 0) throw std::runtime_error("failed: " + command);
}

void TwoHosts::set_link(int host, bool up) const {
  sh("ip -n " + ns_[host] + " link set " + link_[host] + (up ? " up" : " down"));
}

void TwoHosts::qdisc(const std::string& args) const {
  for (int h = 0; h < 2; ++h)
    sh("ip netns exec " + ns_[h] + " tc qdisc add dev " + link_[h] + " root " + args);
}

}  // namespace cohort::test

namespace cohort::test {

std::optional<std::string> TwoHosts::netem_unavailable() const {
  const std::string probe = "ip netns exec " + ns_[0] + " tc qdisc add dev " + link_[0] +
                            " root netem delay 1ms 2>/dev/null";
  if (std::system("command -v tc >/dev/null 2>&1") != 0) return "needs `tc` (iproute2)";
  if (std::system(probe.c_str()) != 0)
    return "this kernel has no netem queueing discipline (sch_netem; modprobe sch_netem)";
  std::system(("ip netns exec " + ns_[0] + " tc qdisc del dev " + link_[0] + " root").c_str());
  return std::nullopt;
}

}  // namespace cohort::test
