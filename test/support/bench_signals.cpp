#include "test/support/bench_signals.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

namespace nodeagent::testing {

void cleanUpOnSignal(const std::string& name, const std::string& doing,
                     std::function<void()> cleanup) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set, name, doing, cleanup = std::move(cleanup)] {
    int sig = 0;
    sigwait(&set, &sig);
    std::fprintf(stderr, "%s: signal %d, %s\n", name.c_str(), sig, doing.c_str());
    cleanup();
    std::_Exit(128 + sig);
  }).detach();
}

}  // namespace nodeagent::testing
