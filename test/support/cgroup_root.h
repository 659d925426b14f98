// A cgroup root of its own for each agent a test starts (--cgroup-root): agents on one cgroup
// root refuse to start (they would take each other's pod cgroups for orphans), and a test's pod
// cgroups must not land among the machine's. The root is "/nodeagent-test-<pid>-<n>"; when the
// test process exits, whatever still runs in it is killed and it is removed from every
// hierarchy.
#pragma once

#include <string>

namespace nodeagent::testing {

std::string isolatedCgroupRoot();
// "--cgroup-root=" + isolatedCgroupRoot().
std::string cgroupRootFlag();
// Kills what runs under the cgroup `root` and removes it in every hierarchy (best effort).
void removeCgroupTree(const std::string& root);

}  // namespace nodeagent::testing
