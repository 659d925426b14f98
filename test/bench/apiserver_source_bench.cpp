// The `api` source at node scale: 10,000 pods bound to the node in an in-process test-apiserver.
// Prints the time from start() to the first SET, and the latency from a pod modification in the
// apiserver to the source emitting its PodUpdate (p50/p99 over 1,000 sequential modifications
// with the 10,000 pods present). Optional args: <pods> <modifications>.
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
#include "test/support/test_util.h"

using namespace nodeagent;

namespace {

nlohmann::json podJson(int i) {
  std::string name = "pod-" + std::to_string(i);
  return {{"apiVersion", "v1"},
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

  asio::io_context ioc;
  auto guard = asio::make_work_guard(ioc);
  std::thread io([&] { ioc.run(); });
  config::ApiserverSourceOptions opts;
  opts.kubeconfig = dir / "kubeconfig";
  opts.node_name = "n1";
  opts.kube_api_qps = 0;  // measure the pipeline, not the client-side limiter
  auto source = config::makeApiserverSource(
      ioc.get_executor(), clock, base::defaultRandom(), opts, [&](api::PodUpdate u) {
        auto now = clock.now();
        std::lock_guard lock(mu);
        if (u.op == api::PodOperation::kSet && first_set_at == base::MonotonicTime{}) {
          first_set_at = now;
          first_set_size = u.pods.size();
        } else if (u.op == api::PodOperation::kUpdate && u.pods.size() == 1 &&
                   u.pods[0]->metadata.name == waiting_for &&
                   u.pods[0]->metadata.labels.count("rev") &&
                   u.pods[0]->metadata.labels.at("rev") == waiting_rev) {
          update_at = now;
          update_seen = true;
        }
        cv.notify_all();
      });
  if (!source.ok()) {
    std::fprintf(stderr, "source: %s\n", source.status().toString().c_str());
    return 1;
  }
  auto start = clock.now();
  (*source)->start();
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return first_set_at != base::MonotonicTime{}; });
  }
  std::printf("pods on node: %d\n", pods);
  std::printf("start -> first SET: %.1f ms (SET carried %zu pods)\n", ms(first_set_at - start),
              first_set_size);
  // Let the watch open before modifying.
  testing::eventually([&] { return (*server)->openWatches() >= 1; });

  std::vector<double> lat;
  lat.reserve(static_cast<size_t>(mods));
  for (int m = 0; m < mods; ++m) {
    const int i = (m * 7919) % pods;
    const std::string name = "pod-" + std::to_string(i);
    const std::string rev = std::to_string(m + 1);
    {
      std::lock_guard lock(mu);
      waiting_for = name;
      waiting_rev = rev;
      update_seen = false;
    }
    auto t0 = clock.now();
    auto st = store.patch("pods", "default", name, testapiserver::PatchType::kMergePatch,
                          {{"metadata", {{"labels", {{"rev", rev}}}}}});
    if (!st.ok()) {
      std::fprintf(stderr, "patch failed: %s\n", st.status().toString().c_str());
      return 1;
    }
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return update_seen; })) {
      std::fprintf(stderr, "no UPDATE for %s within 10s\n", name.c_str());
      return 1;
    }
    lat.push_back(ms(update_at - t0));
  }
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double p) { return lat[std::min(lat.size() - 1, static_cast<size_t>(p * lat.size()))]; };
  std::printf("watch event -> PodUpdate over %d modifications: p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
              mods, pct(0.50), pct(0.99), lat.back());

  (*source)->stop();
  guard.reset();
  ioc.stop();
  io.join();
  (*server)->stop();
  return 0;
}
