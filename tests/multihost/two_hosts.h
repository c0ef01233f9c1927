// TwoHosts: two network namespaces joined by a veth pair, standing in for two
// hosts in tests. Both keep this machine's host name and boot id, as
// containers on one machine do: the trap that made cohort decide two hosts
// were one. Addresses are on a private /24 of their own (10.231.N.1 and .2),
// so test traffic never touches the machine's real interfaces.
//
// Needs root and `ip` (iproute2); unavailable() says why not, and the tests
// skip with that reason. The destructor deletes the namespaces (the veth pair
// goes with them); namespaces and veth ends left by a killed run are removed
// by the next fixture when their creator's pid is gone. Not thread-safe: one
// thread creates, uses and destroys a fixture.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace cohort::test {

class TwoHosts {
 public:
  static std::optional<std::string> unavailable();

  TwoHosts();
  ~TwoHosts();
  TwoHosts(const TwoHosts&) = delete;
  TwoHosts& operator=(const TwoHosts&) = delete;

  // host 0 or 1
  const std::string& ns(int host) const { return ns_[host]; }
  const std::string& ip(int host) const { return ip_[host]; }
  const std::string& link(int host) const { return link_[host]; }
  // `<cohort> run` for node `host` of a 2-node job with `nproc` workers per
  // node, its store on host 0 at `port` (launcher options and the program follow).
  std::vector<std::string> cohort_run(int host, const std::string& cohort, int port,
                                      int nproc = 1) const;
  // argv run inside host's namespace.
  std::vector<std::string> in(int host, const std::vector<std::string>& argv) const;
  // Runs a shell command; throws std::runtime_error when it fails.
  static void sh(const std::string& command);
  void set_link(int host, bool up) const;
  // `tc qdisc add dev <link> root <args>` on both ends ("netem delay 5ms").
  void qdisc(const std::string& args) const;
  // Why netem cannot be used here (a kernel without sch_netem), or nullopt.
  std::optional<std::string> netem_unavailable() const;

 private:
  void remove() noexcept;

  std::string ns_[2], ip_[2], link_[2];
};

}  // namespace cohort::test
