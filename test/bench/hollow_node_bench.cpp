// Hollow node benchmark (prints figures; run by hand: build/bench/hollow_node_bench [N] [samples]).
// The daemon's wiring in-process (file source -> PodConfig -> Agent -> FakeRuntime, real clock,
// real inotify, two io threads, the daemon's malloc settings and heap trimmer) with N static pods
// in one manifest directory (default 50,000):
//  - time from start until every pod's container runs (FakeRuntime running count reaches N),
//  - RSS after that (VmRSS and VmHWM from /proc/self/status), after the idle window below, and
//    at the end (just after the new pods below started); with jemalloc, its own account too,
//  - CPU used per second while idle afterwards (getrusage over HOLLOW_IDLE_SECONDS, default 90 s:
//    one full --sync-frequency period of 60 s plus its 50% jitter, so every pod's periodic resync
//    is in the figure), after HOLLOW_SETTLE_SECONDS (default 2 s); with 95 s or more every pod has
//    had its first resync, and the window shows the steady state (settled resyncs); with 50 s or
//    more, the CPU of a window in the settle time before any resync is due (25 s to 50 s after
//    the start) is printed too, and the idle window's CPU above that rate per periodic syncPod,
//  - delay from a new manifest's rename into the directory to its container start, p50/p99 over
//    `samples` new pods with the N pods present,
//  - the machine's floor for the idle figure: with the agent stopped and its memory kept, the CPU
//    of one timer wakeup a second on the two io threads (over HOLLOW_FLOOR_SECONDS, default 20;
//    0 skips it).
// The manifests go to $TMPDIR (default /dev/shm). HOLLOW_PROGRESS=1 prints the running count
// every second while starting. HOLLOW_HEAP_PROFILE=<file> writes jemalloc's heap profile there at
// the end (run with MALLOC_CONF=prof:true; read with jeprof). HOLLOW_LOG=<v> shows the agent's
// log at verbosity v (stderr).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "agent/runtime/fake_runtime.h"
#include "agent/status/status_manager.h"
#include "api/pod_update.h"
#include "base/asio.h"
#include "base/heap.h"
#include "base/log.h"
#include "config/file_source.h"
#include "config/manifest_errors.h"
#include "config/pod_config.h"
#include "podmanager/mirror_client.h"
#include "podmanager/pod_manager.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;

namespace {

std::string podYaml(const std::string& name) {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\n  labels:\n    app: " + name +
         "\nspec:\n  containers:\n  - name: main\n    image: debian:12\n"
         "    command: [\"sleep\", \"3600\"]\n    env:\n    - name: A\n      value: b\n";
}

double ms(SteadyClock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  size_t i =
      std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

long statusKb(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0)
      return std::strtol(line.c_str() + key.size() + 1, nullptr, 10);
  }
  return 0;
}

double heapInUseMiB() { return static_cast<double>(base::heapInUseBytes()) / (1024.0 * 1024.0); }

// RSS, heap in use and (under jemalloc) the allocator's own account, labelled `when`.
void printMemory(const char* when) {
  std::printf("hollow node: RSS %s %ld MiB, heap in use %.0f MiB\n", when, statusKb("VmRSS") / 1024,
              heapInUseMiB());
  if (const base::HeapStats h = base::heapStats(); h.resident > 0) {
    constexpr double kMiB = 1024.0 * 1024.0;
    std::printf(
        "hollow node: allocator %s: %.0f MiB allocated (%.1f MiB of it in thread caches) in "
        "%.0f MiB of pages, %.0f MiB metadata, %.0f MiB resident (%.1f MiB of it dirty)\n",
        when, static_cast<double>(h.allocated) / kMiB, static_cast<double>(h.thread_caches) / kMiB,
        static_cast<double>(h.active) / kMiB, static_cast<double>(h.metadata) / kMiB,
        static_cast<double>(h.resident) / kMiB, static_cast<double>(h.dirty) / kMiB);
  }
}

double cpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

void writeManifest(const fs::path& dir, const std::string& file, const std::string& content) {
  auto tmp = dir / ("." + file + ".tmp");
  testing::writeFile(tmp, content);
  fs::rename(tmp, dir / file);
}

}  // namespace

int main(int argc, char** argv) {
  base::tuneMalloc();  // as the daemon's main
  const size_t n = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 50000;
  const size_t samples = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 100;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // tmpfs by default: writing and removing 50,000 files on a busy disk takes minutes, and that
  // is not what is measured (inotify works the same on tmpfs).
  setenv("TMPDIR", "/dev/shm", 0);
  // HOLLOW_LOG=<v> shows the agent's log at that verbosity (to see where the start's time goes).
  const char* log_env = getenv("HOLLOW_LOG");
  base::initLogging({.verbosity = log_env ? std::atoi(log_env) : 0, .quiet = log_env == nullptr});

  testing::TempDir dir("nodeagent-hollow");
  const fs::path manifests = dir / "manifests";
  fs::create_directories(manifests);
  auto t0 = SteadyClock::now();
  for (size_t i = 0; i < n; ++i) {
    testing::writeFile(manifests / ("pod-" + std::to_string(i) + ".yaml"),
                       podYaml("pod-" + std::to_string(i)));
  }
  std::printf("hollow node: %zu manifests written in %.0f ms (allocator: %s)\n", n,
              ms(SteadyClock::now() - t0), base::allocatorName());

  asio::io_context ioc;
  auto guard = asio::make_work_guard(ioc);
  asio::thread_pool blocking(2);  // as the daemon's
  base::Clock& clock = base::realClock();
  runtime::FakeRuntime rt(asio::make_strand(ioc), clock);
  rt.setRecordActions(false);
  podmanager::NoopMirrorClient mirror_client;
  podmanager::PodManager pod_manager(mirror_client);
  agent::StatusManager status_manager(clock, pod_manager);
  config::ManifestErrors errors;
  std::shared_ptr<agent::Agent> the_agent;
  config::PodConfigOptions pco;
  pco.blocking_executor = blocking.get_executor();
  config::PodConfig pod_config(
      ioc.get_executor(), clock,
      [&the_agent](api::PodUpdate u) {
        if (auto a = std::atomic_load(&the_agent)) a->onPodUpdate(std::move(u));
      },
      pco);
  agent::AgentOptions ao;
  ao.node_name = "hollow";
  ao.node_ip = "127.0.0.1";
  ao.root_dir = dir / "root";
  ao.allocatable = {.node_name = "hollow",
                    .cpu_milli = 1 << 30,
                    .memory_bytes = int64_t{1} << 50,
                    .pods = static_cast<int64_t>(n + samples + 10)};
  ao.blocking_executor = blocking.get_executor();  // as the daemon gives its blocking pool
  std::atomic_store(
      &the_agent,
      std::make_shared<agent::Agent>(
          ioc.get_executor(), clock, base::defaultRandom(), rt, pod_manager, status_manager,
          [&pod_config](const std::string& s) { return pod_config.sourceSeen(s); },
          [&pod_config] { return pod_config.seenAllSources(pod_config.sources()); }, ao));
  config::FileSourceOptions fo;
  fo.path = manifests.string();
  fo.node_name = "hollow";
  fo.errors = &errors;
  auto source = config::makeFileSource(ioc.get_executor(), clock, fo,
                                       pod_config.channel(std::string(api::kFileSource)));
  auto trimmer_strand = asio::make_strand(ioc);
  base::HeapTrimmer trimmer(trimmer_strand, clock);
  trimmer.start();
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) threads.emplace_back([&ioc] { ioc.run(); });

  const double cpu0 = cpuSeconds();
  t0 = SteadyClock::now();
  the_agent->start();
  source->start();
  // Counting running containers walks every pod under the runtime's lock: only once each pod had
  // its first sync (a counter), so the count does not slow down the start it measures.
  auto all_running = [&] {
    return the_agent->metrics().sync_pod_total >= n && rt.runningContainerCount() >= n;
  };
  for (auto last_print = SteadyClock::now(); !all_running();) {
    std::this_thread::sleep_for(20ms);
    if (getenv("HOLLOW_PROGRESS") && SteadyClock::now() - last_print > 1s) {
      last_print = SteadyClock::now();
      std::printf("  %.0f ms: %zu running\n", ms(last_print - t0), rt.runningContainerCount());
    }
  }
  const auto start_time = SteadyClock::now() - t0;
  std::printf("hollow node: %zu pods running after %.0f ms (CPU %.1f s)\n", n, ms(start_time),
              cpuSeconds() - cpu0);
  std::printf("hollow node: RSS %ld MiB (peak %ld MiB), heap in use %.0f MiB\n",
              statusKb("VmRSS") / 1024, statusKb("VmHWM") / 1024, heapInUseMiB());

  // Idle: let the start settle a little, then measure.
  const char* idle_env = getenv("HOLLOW_IDLE_SECONDS");
  const long idle_seconds = idle_env ? std::max(1L, std::strtol(idle_env, nullptr, 10)) : 90;
  const char* settle_env = getenv("HOLLOW_SETTLE_SECONDS");
  const long settle_seconds = settle_env ? std::max(0L, std::strtol(settle_env, nullptr, 10)) : 2;
  // The background (relists, housekeeping, timers) without resyncs: a window early in the settle
  // time, before the first periodic resync of any pod is due (--sync-frequency, 60 s, after each
  // pod's first sync). What the idle window costs above this rate is the resyncs' cost.
  double background_rate = -1;  // CPU seconds per second; < 0: not measured
  uint64_t background_syncs = 0;
  long settled_for = 0;
  if (settle_seconds >= 50) {
    // From 25 s after the start (its own aftermath is over) to 50 s (every pod's first sync was
    // before the start ended, so none is due again before 55 s).
    constexpr long kBackgroundFrom = 25;
    constexpr long kBackgroundSeconds = 25;
    std::this_thread::sleep_for(std::chrono::seconds(kBackgroundFrom));
    const double cpu_before = cpuSeconds();
    const uint64_t syncs_before = the_agent->metrics().sync_pod_total;
    std::this_thread::sleep_for(std::chrono::seconds(kBackgroundSeconds));
    background_rate = (cpuSeconds() - cpu_before) / kBackgroundSeconds;
    background_syncs = the_agent->metrics().sync_pod_total - syncs_before;
    settled_for = kBackgroundFrom + kBackgroundSeconds;
  }
  std::this_thread::sleep_for(std::chrono::seconds(settle_seconds - settled_for));
  const double idle0 = cpuSeconds();
  const uint64_t syncs0 = the_agent->metrics().sync_pod_total;
  const uint64_t unchanged0 = the_agent->metrics().sync_pod_unchanged;
  const uint64_t pleg0 = the_agent->pleg().eventCount();
  const uint64_t relists0 = the_agent->pleg().relistCount();
  std::this_thread::sleep_for(std::chrono::seconds(idle_seconds));
  const double idle_cpu = cpuSeconds() - idle0;
  const auto idle_syncs = the_agent->metrics().sync_pod_total - syncs0;
  const auto idle_unchanged = the_agent->metrics().sync_pod_unchanged - unchanged0;
  std::printf("hollow node: PLEG while idle: %lu relists, %lu events\n",
              static_cast<unsigned long>(the_agent->pleg().relistCount() - relists0),
              static_cast<unsigned long>(the_agent->pleg().eventCount() - pleg0));
  std::printf(
      "hollow node: idle CPU %.1f ms/s (%.2f%% of one core) with %zu pods over %ld s "
      "(%lu periodic syncPod calls, %lu of them skipped as unchanged; %.1f us CPU per call if all "
      "of it were syncPod)\n",
      idle_cpu * 1000 / static_cast<double>(idle_seconds),
      idle_cpu * 100 / static_cast<double>(idle_seconds), n, idle_seconds,
      static_cast<unsigned long>(idle_syncs), static_cast<unsigned long>(idle_unchanged),
      idle_syncs ? idle_cpu * 1e6 / static_cast<double>(idle_syncs) : 0.0);
  if (background_rate >= 0) {
    const double resync_cpu = idle_cpu - background_rate * static_cast<double>(idle_seconds);
    std::printf(
        "hollow node: background CPU before any resync was due %.2f ms/s (%lu syncPod calls in "
        "that window); CPU per periodic syncPod above it: %.1f us\n",
        background_rate * 1000, static_cast<unsigned long>(background_syncs),
        idle_syncs ? resync_cpu * 1e6 / static_cast<double>(idle_syncs) : 0.0);
  }
  // The steady state: after the idle window, before the new pods below.
  printMemory("after idle");

  std::vector<double> lat;
  for (size_t i = 0; i < samples; ++i) {
    const std::string name = "new-" + std::to_string(i);
    auto t = SteadyClock::now();
    writeManifest(manifests, name + ".yaml", podYaml(name));
    auto deadline = t + 60s;
    // Cheap lookups only (counting running containers walks all 50,000 pods).
    auto started = [&] {
      auto pod = pod_manager.getPodByFullName(name + "-hollow_default");
      if (!pod) return false;
      auto cs = rt.containerStatus(pod->metadata.uid, "main");
      return cs && cs->state == runtime::ContainerState::kRunning;
    };
    while (!started() && SteadyClock::now() < deadline) std::this_thread::sleep_for(200us);
    lat.push_back(ms(SteadyClock::now() - t));
  }
  std::printf(
      "hollow node: new manifest -> container start with %zu pods: p50 %.1f ms, p99 %.1f ms, "
      "max %.1f ms (%zu samples)\n",
      n, percentile(lat, 0.5), percentile(lat, 0.99), *std::max_element(lat.begin(), lat.end()),
      samples);
  printMemory("at the end");
  if (const char* prof = getenv("HOLLOW_HEAP_PROFILE")) {
    std::printf(
        "hollow node: heap profile %s %s\n", prof,
        base::dumpHeapProfile(prof) ? "written" : "NOT written (needs MALLOC_CONF=prof:true)");
  }

  source->stop();
  asio::post(trimmer_strand, [&trimmer] { trimmer.stop(); });
  std::promise<void> idle;
  the_agent->stop([&idle] { idle.set_value(); });
  idle.get_future().wait_for(30s);

  // The machine's floor for the idle figure: the same process (its memory kept, the agent
  // stopped) with only a timer waking the same two io threads once a second, as the sync loop's
  // tick does. On a VM whose address-space switches cost in proportion to the memory mapped,
  // this is far from zero at this RSS.
  const char* floor_env = getenv("HOLLOW_FLOOR_SECONDS");
  const long floor_seconds = floor_env ? std::max(0L, std::strtol(floor_env, nullptr, 10)) : 20;
  if (floor_seconds > 0) {
    auto timer_strand = asio::make_strand(ioc);
    auto timer = clock.makeTimer(timer_strand);
    std::function<void()> rearm = [&] { timer->asyncWaitFor(1s, rearm); };
    asio::post(timer_strand, rearm);
    const double floor0 = cpuSeconds();
    std::this_thread::sleep_for(std::chrono::seconds(floor_seconds));
    const double floor_cpu = cpuSeconds() - floor0;
    std::promise<void> cancelled;
    asio::post(timer_strand, [&] {  // timers are cancelled and destroyed on their strand
      timer->cancel();
      timer.reset();
      cancelled.set_value();
    });
    cancelled.get_future().wait();
    std::printf(
        "hollow node: floor with the agent stopped (RSS %ld MiB, one wakeup a second of the two "
        "io threads): %.1f ms/s over %ld s\n",
        statusKb("VmRSS") / 1024, floor_cpu * 1000 / static_cast<double>(floor_seconds),
        floor_seconds);
  }
  guard.reset();
  ioc.stop();
  for (auto& t : threads) t.join();
  blocking.stop();
  blocking.join();
  return 0;
}
