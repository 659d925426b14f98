// File source benchmark (prints figures; run by hand: build/bench/file_source_bench [N...]).
//  - N manifests in one directory: time from start() to the first SET.
//  - One manifest rewritten (write a temp file, rename it over): time from the rename to the
//    emitted SET, p50/p99 over 200 changes, and the CPU the source's thread used per change.
//    Run at several N to show the cost of a change does not grow with the number of manifests.
//  - The same with PodConfig (incremental mode) downstream: rename to the emitted UPDATE/ADD.
//  - The periodic relist with nothing changed: CPU per relist and files read again, beside the
//    machine's floor for it (the directory listed and every entry stat'ed, nothing else).
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/heap.h"
#include "base/log.h"
#include "config/file_source.h"
#include "config/pod_config.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;

namespace {

std::string podYaml(const std::string& name, const std::string& image) {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\n  labels:\n    app: " + name +
         "\nspec:\n  containers:\n  - name: main\n    image: " + image +
         "\n    command: [\"sleep\", \"3600\"]\n    env:\n    - name: A\n      value: b\n";
}

double ms(SteadyClock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double threadCpuMs(pthread_t t) {
  clockid_t cid;
  if (pthread_getcpuclockid(t, &cid) != 0) return 0;
  timespec ts;
  clock_gettime(cid, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// The machine's floor for a relist of `dir`: listing it and stat'ing each entry relative to it,
// nothing else, on the calling thread (CPU ms per pass, the best of `passes`).
double listAndStatFloorMs(const fs::path& dir, int passes) {
  double best = 0;
  for (int i = 0; i < passes; ++i) {
    const double before = threadCpuMs(pthread_self());
    DIR* d = ::opendir(dir.c_str());
    if (!d) return 0;
    struct stat st;
    while (dirent* de = ::readdir(d))
      (void)::fstatat(::dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW);
    ::closedir(d);
    const double cpu = threadCpuMs(pthread_self()) - before;
    if (i == 0 || cpu < best) best = cpu;
  }
  return best;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  size_t i =
      std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

struct Recorder {
  std::mutex mu;
  std::condition_variable cv;
  size_t count = 0;
  SteadyClock::time_point last;
  size_t last_pods = 0;
  void record(size_t pods) {
    auto now = SteadyClock::now();
    {
      std::lock_guard lock(mu);
      ++count;
      last = now;
      last_pods = pods;
    }
    cv.notify_all();
  }
  bool waitFor(size_t n, std::chrono::seconds deadline) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, deadline, [&] { return count >= n; });
  }
};

void run(size_t n, bool with_pod_config) {
  testing::TempDir dir("file-source-bench");
  for (size_t i = 0; i < n; ++i) {
    auto name = "pod" + std::to_string(i);
    testing::writeFile(dir / (name + ".yaml"), podYaml(name, "busybox:1.36"));
  }

  asio::io_context ioc;
  auto guard = asio::make_work_guard(ioc);
  Recorder rec;
  std::unique_ptr<config::PodConfig> pod_config;
  config::PodUpdateSink sink;
  if (with_pod_config) {
    pod_config = std::make_unique<config::PodConfig>(
        ioc.get_executor(), base::realClock(),
        [&](api::PodUpdate u) {
          // A rewrite is REMOVE (old UID) then ADD (new UID): time the ADD.
          if (u.op == api::PodOperation::kAdd && !u.pods.empty()) rec.record(u.pods.size());
        },
        config::PodConfigOptions{});
    sink = pod_config->channel("file");
  } else {
    sink = [&](api::PodUpdate u) { rec.record(u.pods.size()); };
  }
  config::FileSourceOptions o;
  o.path = dir.path().string();
  o.node_name = "node1";
  o.check_frequency = 1h;
  config::FileSource source(ioc.get_executor(), base::realClock(), o, sink);
  std::thread runner([&] { ioc.run(); });

  const size_t heap_before = base::heapInUseBytes();
  auto t0 = SteadyClock::now();
  source.start();
  if (!rec.waitFor(1, 600s)) {
    std::printf("N=%zu: no first update\n", n);
    std::abort();
  }
  double first_ms = ms(rec.last - t0);
  double first_cpu = threadCpuMs(runner.native_handle());

  // FILE_SOURCE_BENCH_CHANGES: more changes for a profile of the change path (default 200).
  const char* changes_env = std::getenv("FILE_SOURCE_BENCH_CHANGES");
  const int kChanges = changes_env ? std::max(1, std::atoi(changes_env)) : 200;
  std::vector<double> latencies;
  double cpu_before = threadCpuMs(runner.native_handle());
  auto target = dir / "pod7.yaml";
  auto tmp = dir / "pod7.yaml.tmp";
  for (int i = 0; i < kChanges; ++i) {
    testing::writeFile(tmp, podYaml("pod7", "busybox:" + std::to_string(i + 2)));
    size_t before;
    {
      std::lock_guard lock(rec.mu);
      before = rec.count;
    }
    auto start = SteadyClock::now();
    fs::rename(tmp, target);
    if (!rec.waitFor(before + 1, 10s)) {
      std::printf("N=%zu: change %d produced no update\n", n, i);
      std::abort();
    }
    std::lock_guard lock(rec.mu);
    latencies.push_back(ms(rec.last - start));
  }
  double cpu_per_change = (threadCpuMs(runner.native_handle()) - cpu_before) / kChanges;

  // The periodic relist (--file-check-frequency) with nothing changed: its CPU, and the files it
  // read again (none should be: unchanged files are only stat'ed).
  constexpr int kRelists = 5;
  const uint64_t read_before = source.stats().files_read;
  const double relist_cpu0 = threadCpuMs(runner.native_handle());
  for (int i = 0; i < kRelists; ++i) {
    const uint64_t want = source.stats().relists + 1;
    source.relistForTest();
    while (source.stats().relists < want) std::this_thread::sleep_for(1ms);
  }
  const double cpu_per_relist = (threadCpuMs(runner.native_handle()) - relist_cpu0) / kRelists;
  const uint64_t reread = source.stats().files_read - read_before;
  const double floor_ms = listAndStatFloorMs(dir.path(), kRelists);
  // What the source (and PodConfig) hold for the directory's pods: the heap they took, and the
  // process's RSS with them (the first run's pods are gone by the second).
  const double heap_mib =
      (static_cast<double>(base::heapInUseBytes()) - static_cast<double>(heap_before)) /
      (1024.0 * 1024.0);

  std::printf(
      "%-22s N=%6zu  first SET %8.1f ms (cpu %8.1f ms)  change->update p50 %6.3f ms  p99 %6.3f "
      "ms  max %6.3f ms  cpu/change %6.3f ms  decoded=%llu  relist cpu %7.1f ms (files "
      "read again %llu; readdir + fstatat alone %.1f ms)  heap %+.0f MiB, RSS %ld MiB (%s)\n",
      with_pod_config ? "source+PodConfig" : "source", n, first_ms, first_cpu,
      percentile(latencies, 0.5), percentile(latencies, 0.99),
      *std::max_element(latencies.begin(), latencies.end()), cpu_per_change,
      static_cast<unsigned long long>(source.stats().manifests_decoded), cpu_per_relist,
      static_cast<unsigned long long>(reread), floor_ms, heap_mib,
      base::residentBytes() / (1024 * 1024), base::allocatorName());
  std::fflush(stdout);

  source.stop();
  guard.reset();
  asio::post(ioc, [&] { ioc.stop(); });
  runner.join();
}

}  // namespace

int main(int argc, char** argv) {
  base::tuneMalloc();  // as the daemon's main
  base::initLogging({.verbosity = 0, .quiet = true});
  std::vector<size_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(static_cast<size_t>(std::stoul(argv[i])));
  if (sizes.empty()) sizes = {100, 1000, 10000};
  // FILE_SOURCE_BENCH_ONLY=source or =podconfig runs one of the two halves.
  const std::string only =
      std::getenv("FILE_SOURCE_BENCH_ONLY") ? std::getenv("FILE_SOURCE_BENCH_ONLY") : "";
  if (only != "podconfig") {
    for (size_t n : sizes) run(n, false);
  }
  if (only != "source") {
    for (size_t n : sizes) run(n, true);
  }
  return 0;
}
