// The `api` source at node scale: 10,000 pods bound to the node in an in-process test-apiserver.
// Prints the time from start() to the first SET, and the latency from a pod modification in the
// apiserver to the source emitting its PodUpdate, and to PodConfig emitting the merged update the
// sync loop gets (p50/p99 over 1,000 sequential modifications with the 10,000 pods present), plus
// the CPU time per modification. Optional args: <pods> <modifications>.
#include <sys/resource.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/kubeconfig.h"
#include "api/pod_json.h"
#include "api/pod_update.h"
#include "api/rest_client.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/random.h"
#include "cmd/test-apiserver/test_api_server.h"
#include "config/apiserver_source.h"
#include "config/pod_config.h"
#include "test/support/test_util.h"

using namespace nodeagent;

namespace {

nlohmann::json podJson(int i) {
  std::string name = "pod-" + std::to_string(i);
  return {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", name}, {"namespace", "default"}, {"labels", {{"app", "bench"}, {"rev", "0"}}}}},
      {"spec",
       {{"nodeName", "n1"},
        {"restartPolicy", "Always"},
        {"containers",
         {{{"name", "main"},
           {"image", "busybox"},
           {"command", {"sleep", "3600"}},
           {"env", {{{"name", "INDEX"}, {"value", std::to_string(i)}}}},
           {"resources", {{"requests", {{"cpu", "10m"}, {"memory", "16Mi"}}}}}}}}}}};
}

double ms(base::Duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// User + system CPU time of the whole process, in ms.
double cpuMs() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto tv = [](const timeval& t) { return t.tv_sec * 1000.0 + t.tv_usec / 1000.0; };
  return tv(ru.ru_utime) + tv(ru.ru_stime);
}

bool isRevUpdate(const api::PodUpdate& u, const std::string& name, const std::string& rev) {
  return u.op == api::PodOperation::kUpdate && u.pods.size() == 1 &&
         u.pods[0]->metadata.name == name && u.pods[0]->metadata.labels.count("rev") &&
         u.pods[0]->metadata.labels.at("rev") == rev;
}

}  // namespace

int main(int argc, char** argv) {
  const int pods = argc > 1 ? std::atoi(argv[1]) : 10000;
  const int mods = argc > 2 ? std::atoi(argv[2]) : 1000;
  base::initLogging({.verbosity = 0, .quiet = true});
  base::Clock& clock = base::realClock();

  auto server = testapiserver::TestApiServer::start({});
  if (!server.ok()) {
    std::fprintf(stderr, "test-apiserver: %s\n", server.status().toString().c_str());
    return 1;
  }
  auto& store = (*server)->store();
  for (int i = 0; i < pods; ++i) {
    if (!store.create("pods", "default", podJson(i)).ok()) {
      std::fprintf(stderr, "create pod %d failed\n", i);
      return 1;
    }
  }
  testing::TempDir dir("apiserver-source-bench");
  if (!(*server)->writeKubeconfig(dir / "kubeconfig").ok()) return 1;

  // Breakdown: the bare LIST (HTTP + JSON parse) and the decode of every item.
  {
    auto cfg = api::loadKubeconfig(dir / "kubeconfig");
    api::RestClientOptions copts;
    copts.qps = 0;
    auto client = api::RestClient::create(*cfg, copts, clock);
    api::ListOptions lo;
    lo.field_selector = "spec.nodeName=n1";
    lo.resource_version = "0";
    auto t0 = clock.now();
    auto list = (*client)->list(api::podsPath(), lo);
    auto t1 = clock.now();
    if (!list.ok()) return 1;
    size_t decoded = 0;
    for (const auto& item : (*list)["items"]) decoded += api::decodePodPtr(item).ok() ? 1 : 0;
    auto t2 = clock.now();
    std::printf("breakdown: LIST over HTTP + parse %.1f ms, decode %zu pods %.1f ms\n", ms(t1 - t0),
                decoded, ms(t2 - t1));
  }

  std::mutex mu;
  std::condition_variable cv;
  base::MonotonicTime first_set_at{};
  size_t first_set_size = 0;
  std::string waiting_for;  // the pod name whose UPDATE ends the current measurement
  std::string waiting_rev;
  base::MonotonicTime update_at{};
  bool update_seen = false;
  base::MonotonicTime merged_first_at{};  // PodConfig's ADD of the listed pods
  size_t merged_first_size = 0;
  base::MonotonicTime merged_at{};
  bool merged_seen = false;

  asio::io_context ioc;
  auto guard = asio::make_work_guard(ioc);
  std::thread io([&] { ioc.run(); });
  // PodConfig as in the daemon (incremental mode, its own strand), without checkpoints.
  config::PodConfig pod_config(asio::make_strand(ioc), clock, [&](api::PodUpdate u) {
    auto now = clock.now();
    std::lock_guard lock(mu);
    if (u.op == api::PodOperation::kAdd && merged_first_at == base::MonotonicTime{}) {
      merged_first_at = now;
      merged_first_size = u.pods.size();
    } else if (isRevUpdate(u, waiting_for, waiting_rev)) {
      merged_at = now;
      merged_seen = true;
    }
    cv.notify_all();
  });
  auto api_sink = pod_config.channel(std::string(api::kApiserverSource));
  config::ApiserverSourceOptions opts;
  opts.kubeconfig = dir / "kubeconfig";
  opts.node_name = "n1";
  opts.kube_api_qps = 0;  // measure the pipeline, not the client-side limiter
  auto source = config::makeApiserverSource(
      ioc.get_executor(), clock, base::defaultRandom(), opts, [&](api::PodUpdate u) {
        auto now = clock.now();
        {
          std::lock_guard lock(mu);
          if (u.op == api::PodOperation::kSet && first_set_at == base::MonotonicTime{}) {
            first_set_at = now;
            first_set_size = u.pods.size();
          } else if (isRevUpdate(u, waiting_for, waiting_rev)) {
            update_at = now;
            update_seen = true;
          }
          cv.notify_all();
        }
        api_sink(std::move(u));
      });
  if (!source.ok()) {
    std::fprintf(stderr, "source: %s\n", source.status().toString().c_str());
    return 1;
  }
  auto start = clock.now();
  (*source)->start();
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] {
      return first_set_at != base::MonotonicTime{} && merged_first_at != base::MonotonicTime{};
    });
  }
  std::printf("pods on node: %d\n", pods);
  std::printf("start -> first SET from the source: %.1f ms (SET carried %zu pods)\n",
              ms(first_set_at - start), first_set_size);
  std::printf("start -> PodConfig's ADD of the listed pods: %.1f ms (ADD carried %zu pods)\n",
              ms(merged_first_at - start), merged_first_size);
  // Let the watch open before modifying.
  testing::eventually([&] { return (*server)->openWatches() >= 1; });

  std::vector<double> lat;
  std::vector<double> merged_lat;
  lat.reserve(static_cast<size_t>(mods));
  merged_lat.reserve(static_cast<size_t>(mods));
  const double cpu_before = cpuMs();
  for (int m = 0; m < mods; ++m) {
    const int i = (m * 7919) % pods;
    const std::string name = "pod-" + std::to_string(i);
    const std::string rev = std::to_string(m + 1);
    {
      std::lock_guard lock(mu);
      waiting_for = name;
      waiting_rev = rev;
      update_seen = false;
      merged_seen = false;
    }
    auto t0 = clock.now();
    auto st = store.patch("pods", "default", name, testapiserver::PatchType::kMergePatch,
                          {{"metadata", {{"labels", {{"rev", rev}}}}}});
    if (!st.ok()) {
      std::fprintf(stderr, "patch failed: %s\n", st.status().toString().c_str());
      return 1;
    }
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return update_seen && merged_seen; })) {
      std::fprintf(stderr, "no UPDATE for %s within 10s\n", name.c_str());
      return 1;
    }
    lat.push_back(ms(update_at - t0));
    merged_lat.push_back(ms(merged_at - t0));
  }
  const double cpu_per_mod = (cpuMs() - cpu_before) / mods;
  auto report = [&](const char* what, std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    auto pct = [&](double p) {
      return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
    };
    std::printf("modification -> %s over %d modifications: p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
                what, mods, pct(0.50), pct(0.99), v.back());
  };
  report("source's PodUpdate", lat);
  report("PodConfig's UPDATE", merged_lat);
  std::printf("CPU per modification (apiserver + agent, whole process): %.3f ms\n", cpu_per_mod);

  (*source)->stop();
  guard.reset();
  ioc.stop();
  io.join();
  source->reset();  // closes its kept-alive connections, which the server's stop would wait for
  (*server)->stop();
  return 0;
}
