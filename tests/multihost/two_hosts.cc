#include "tests/multihost/two_hosts.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace cohort::test {
namespace {

constexpr const char* kPrefix = "cohorth";  // namespaces: cohorth<pid>x<n><a|b>
constexpr const char* kLinkPrefix = "coh";  // veth ends: coh<pid>x<n % 100><a|b>

// Names in `command`'s output (one per line, up to the first space, ':' or
// '@') that start with prefix<pid>x and whose pid is gone.
std::vector<std::string> stale(const std::string& command, const std::string& prefix) {
  std::vector<std::string> out;
  std::FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return out;
  char line[512];
  while (std::fgets(line, sizeof(line), p) != nullptr) {
    std::string name(line);
    name = name.substr(0, name.find_first_of(" :@\n"));
    if (name.rfind(prefix, 0) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (pid > 0 && *end == 'x' && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      out.push_back(name);
  }
  ::pclose(p);
  return out;
}

// What a killed earlier run left: its namespaces (their veth ends go with
// them) and a veth pair created but not yet moved into them.
void remove_stale() {
  for (const std::string& ns : stale("ip netns list 2>/dev/null", kPrefix))
    std::system(("ip netns del " + ns + " 2>/dev/null").c_str());
  for (const std::string& link : stale("ip -o link show 2>/dev/null | cut -d' ' -f2", kLinkPrefix))
    std::system(("ip link del " + link + " 2>/dev/null").c_str());
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
    // Interface names have at most 15 characters: "coh" + 7-digit pid + "x" + 2 + 1.
    link_[h] = std::string(kLinkPrefix) + std::to_string(::getpid()) + "x" +
               std::to_string(n % 100) + (h == 0 ? "a" : "b");
  }
  try {
    sh("ip netns add " + ns_[0] + " && ip netns add " + ns_[1]);
    sh("ip link add " + link_[0] + " type veth peer name " + link_[1]);
    for (int h = 0; h < 2; ++h) {
      sh("ip link set " + link_[h] + " netns " + ns_[h]);
      sh("ip -n " + ns_[h] + " addr add " + ip_[h] + "/24 dev " + link_[h]);
      sh("ip -n " + ns_[h] + " link set lo up && ip -n " + ns_[h] + " link set " + link_[h] +
         " up");
    }
  } catch (...) {
    // The destructor does not run for a half-built fixture.
    remove();
    throw;
  }
}

TwoHosts::~TwoHosts() { remove(); }

void TwoHosts::remove() noexcept {
  for (int h = 0; h < 2; ++h) std::system(("ip netns del " + ns_[h] + " 2>/dev/null").c_str());
  // Only there when the pair was never moved into the namespaces.
  std::system(("ip link del " + link_[0] + " 2>/dev/null").c_str());
}

std::vector<std::string> TwoHosts::in(int host, const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {"/usr/sbin/ip", "netns", "exec", ns_[host]};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::vector<std::string> TwoHosts::cohort_run(int host, const std::string& cohort, int port,
                                              int nproc) const {
  return {cohort,
          "run",
          "--nnodes",
          "2",
          "--node-rank",
          std::to_string(host),
          "--nproc-per-node",
          std::to_string(nproc),
          "--master-addr",
          ip_[0],
          "--master-port",
          std::to_string(port)};
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
