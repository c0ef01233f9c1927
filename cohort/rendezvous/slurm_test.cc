#include "cohort/rendezvous/slurm.h"

#include <gtest/gtest.h>

#include "cohort/base/error.h"

namespace cohort::rendezvous::slurm {
namespace {

using Hosts = std::vector<std::string>;

// The message of the InvalidArgument that fn throws ("" when none).
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(SlurmHostlist, FirstHostOfEachForm) {
  EXPECT_EQ(first_host("localhost"), "localhost");
  EXPECT_EQ(first_host("node[01-04,07]"), "node01");
  EXPECT_EQ(first_host("node[07,01-04]"), "node07");  // Slurm's order, not sorted
  EXPECT_EQ(first_host("n[08-11]"), "n08");
  EXPECT_EQ(first_host("n[8-11]"), "n8");
  EXPECT_EQ(first_host("gpu3,node[1-2]"), "gpu3");
  EXPECT_EQ(first_host("node[1-2],gpu3"), "node1");
  EXPECT_EQ(first_host("rack[2-3]-n[5-6]"), "rack2-n5");
  EXPECT_EQ(first_host("c[001-100]-ib"), "c001-ib");
  EXPECT_EQ(first_host("node-1.cluster.example"), "node-1.cluster.example");
  EXPECT_EQ(first_host("10.0.0.[5-9]"), "10.0.0.5");
}

TEST(SlurmHostlist, ExpandsInSlurmsOrder) {
  EXPECT_EQ(expand_hostlist("node[01-03,07],gpu3"),
            (Hosts{"node01", "node02", "node03", "node07", "gpu3"}));
  EXPECT_EQ(expand_hostlist("r[1-2]n[8-9]"), (Hosts{"r1n8", "r1n9", "r2n8", "r2n9"}));
  EXPECT_EQ(expand_hostlist("n[098-101]"), (Hosts{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand_hostlist("a,b"), (Hosts{"a", "b"}));
}

TEST(SlurmHostlist, TooManyHostsIsRefusedBeforeExpanding) {
  EXPECT_EQ(expand_hostlist("n[1-4]", 4).size(), 4u);
  std::string e = error_of([] { expand_hostlist("n[1-4],m", 4); });
  EXPECT_NE(e.find("more than 4 hosts"), std::string::npos) << e;
  e = error_of([] { expand_hostlist("n[0-999999999999999999]"); });
  EXPECT_NE(e.find("more than 65536 hosts"), std::string::npos) << e;
  std::string huge = "n[";  // more hosts than 64 bits count
  for (int i = 0; i < 40; ++i) huge += (i ? "," : "") + std::string("0-999999999999999999");
  e = error_of([&] { expand_hostlist(huge + "]x[" + huge.substr(2) + "]"); });
  EXPECT_NE(e.find("more than 65536 hosts"), std::string::npos) << e.substr(0, 200);
  // The first host needs no expansion, however long the list.
  EXPECT_EQ(first_host("n[0-999999999999999999]"), "n0");
}

TEST(SlurmHostlist, MalformedListsNameTheFaultAndItsPosition) {
  struct Case {
    const char* list;
    const char* says;
  };
  for (const Case& c : {Case{"", "is empty"}, Case{"node[01-04", "an unclosed '[' at position 4"},
                        Case{"node[1[2]]", "an unclosed '[' at position 4"},
                        Case{"node]1", "a ']' without '[' at position 4"},
                        Case{"node[]", "an empty '[]' at position 4"},
                        Case{"node[4-1]", "a range 4-1 that runs backwards at position 7"},
                        Case{"node[a-b]", "'a' where a number belongs at position 5"},
                        Case{"node[1-]", "a missing number at position 7"},
                        Case{"node[1,,2]", "',' where a number belongs at position 7"},
                        Case{"node[1;2]", "';' inside '[...]' at position 6"},
                        Case{"node[1-3:2]", "':' inside '[...]' at position 8"},
                        Case{"a,,b", "an empty host name at position 2"},
                        Case{"a,", "an empty host name at position 2"},
                        Case{",a", "an empty host name at position 0"},
                        Case{"a b", "a space or control character at position 1"},
                        Case{"n[1234567890123456789]", "more than 18 digits at position 2"}}) {
    std::string e = error_of([&] { first_host(c.list); });
    EXPECT_NE(e.find(c.says), std::string::npos) << "'" << c.list << "': " << e;
    if (*c.list != '\0') {
      EXPECT_NE(e.find(std::string("'") + c.list + "'"), std::string::npos) << e;
    }
  }
}

TEST(SlurmTasksPerNode, CountsOfEachNode) {
  EXPECT_EQ(tasks_on_node("2", 0), 2);
  EXPECT_EQ(tasks_on_node("2(x3),1", 0), 2);
  EXPECT_EQ(tasks_on_node("2(x3),1", 2), 2);
  EXPECT_EQ(tasks_on_node("2(x3),1", 3), 1);
  EXPECT_EQ(tasks_on_node("4,3,1(x2)", 1), 3);
  EXPECT_EQ(tasks_on_node("4,3,1(x2)", 3), 1);
}

TEST(SlurmTasksPerNode, MalformedOrShortListsAreErrors) {
  EXPECT_NE(
      error_of([] { tasks_on_node("2(x3),1", 4); }).find("describes 4 nodes; there is no node 4"),
      std::string::npos);
  for (const char* bad : {"", "x", "2(x", "2(x0)", "2(x3", "2,", "2;3", "2(y3)", "2,x"}) {
    // The whole list is checked, not only up to the node asked for.
    std::string e = error_of([&] { tasks_on_node(bad, 0); });
    EXPECT_NE(e.find(std::string("'") + bad + "'"), std::string::npos) << "'" << bad << "': " << e;
  }
  EXPECT_FALSE(error_of([] { tasks_on_node("2", -1); }).empty());
}

TEST(SlurmPort, DerivedFromTheJobId) {
  EXPECT_EQ(port_for_job(0), 10000);
  EXPECT_EQ(port_for_job(1234), 11234);
  EXPECT_EQ(port_for_job(49999), 59999);
  EXPECT_EQ(port_for_job(50000), 10000);
  EXPECT_EQ(port_for_job(1234567), 10000 + 1234567 % 50000);
  EXPECT_FALSE(error_of([] { port_for_job(-1); }).empty());
}

}  // namespace
}  // namespace cohort::rendezvous::slurm
