// Benches that start processes or make cgroups clean up when they are interrupted.
#pragma once

#include <functional>
#include <string>

namespace nodeagent::testing {

// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread (and so in every thread it starts
// later: call it first in main) and takes them on a thread of its own, which prints
// "<name>: signal N, <doing>" to stderr, runs `cleanup` and exits with 128 + N.
void cleanUpOnSignal(const std::string& name, const std::string& doing,
                     std::function<void()> cleanup);

}  // namespace nodeagent::testing
