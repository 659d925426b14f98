// test-apiserver figures: full list time with 10,000 pods stored, watch delivery latency with 100
// concurrent watchers over 1,000 pod updates, and write throughput with and without them.
// Run: build/bench/apiserver_bench   (prints one figure per line)
#include <httplib.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/test_api_server.h"

using nlohmann::json;
using nodeagent::testapiserver::ServerOptions;
using nodeagent::testapiserver::TestApiServer;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kPods = 10000;
constexpr int kWatchers = 100;
constexpr int kUpdates = 1000;

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

json benchPod(int i) {
  return {{"metadata",
           {{"name", "pod-" + std::to_string(i)},
            {"labels", {{"app", "bench"}, {"shard", std::to_string(i % 10)}}}}},
          {"spec",
           {{"nodeName", "node-" + std::to_string(i % 50)},
            {"containers",
             {{{"name", "main"},
               {"image", "registry.example.com/app:1.2.3"},
               {"command", {"/bin/app", "--port=8080"}},
               {"env", {{{"name", "MODE"}, {"value", "bench"}}}},
               {"ports", {{{"containerPort", 8080}}}}}}}}}};
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t idx = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[idx];
}

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// CPU time (user + system) of the whole process so far, in ms: server and bench clients alike
// (wall-clock figures on a shared machine are noisy).
double cpuMs() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto tv = [](const timeval& t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; };
  return tv(ru.ru_utime) + tv(ru.ru_stime);
}

// Sequential merge patches of pods 0..updates-1 over HTTP; returns writes per second.
double runWrites(int port, int updates, int writers) {
  std::atomic<int> next{0};
  auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int w = 0; w < writers; ++w) {
    threads.emplace_back([&, port] {
      httplib::Client client("127.0.0.1", port);
      client.set_keep_alive(true);
      client.set_tcp_nodelay(true);
      for (int i = next++; i < updates; i = next++) {
        json patch = {{"metadata", {{"annotations", {{"bench/sent", std::to_string(nowNs())}}}}}};
        auto res = client.Patch(
            ("/api/v1/namespaces/default/pods/pod-" + std::to_string(i % kPods)).c_str(),
            patch.dump(), "application/merge-patch+json");
        if (!res || res->status != 200) std::fprintf(stderr, "patch failed\n");
      }
    });
  }
  for (auto& t : threads) t.join();
  return updates / std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main() {
  ServerOptions opts;
  opts.threads = 256;
  auto started = TestApiServer::start(opts);
  if (!started.ok()) {
    std::fprintf(stderr, "start failed: %s\n", started.status().toString().c_str());
    return 1;
  }
  auto server = std::move(*started);
  const int port = server->port();

  auto t0 = Clock::now();
  for (int i = 0; i < kPods; ++i) {
    auto r = server->store().create("pods", "default", benchPod(i));
    if (!r.ok()) {
      std::fprintf(stderr, "create failed: %s\n", r.status().toString().c_str());
      return 1;
    }
  }
  std::printf("store: create %d pods in-process: %.1f ms (%.0f creates/s)\n", kPods,
              ms(Clock::now() - t0),
              kPods / std::chrono::duration<double>(Clock::now() - t0).count());

  {
    httplib::Client client("127.0.0.1", port);
    std::vector<double> times;
    size_t bytes = 0;
    const double cpu_list_start = cpuMs();
    for (int i = 0; i < 5; ++i) {
      auto s = Clock::now();
      auto res = client.Get("/api/v1/pods");
      times.push_back(ms(Clock::now() - s));
      if (!res || res->status != 200) return 1;
      bytes = res->body.size();
    }
    const double cpu_list = (cpuMs() - cpu_list_start) / 5;
    std::printf(
        "list: GET /api/v1/pods, %d pods, %.1f MB: median %.1f ms, min %.1f ms, "
        "cpu %.1f ms per list (server + client)\n",
        kPods, bytes / 1e6, percentile(times, 0.5), percentile(times, 0.0), cpu_list);
    times.clear();
    for (int i = 0; i < 5; ++i) {
      auto s = Clock::now();
      auto res = client.Get("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-7");
      times.push_back(ms(Clock::now() - s));
      if (!res || res->status != 200) return 1;
    }
    std::printf("list: fieldSelector spec.nodeName (200 of %d pods): median %.1f ms\n", kPods,
                percentile(times, 0.5));
    times.clear();
    httplib::Headers table = {
        {"Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}};
    for (int i = 0; i < 3; ++i) {
      auto s = Clock::now();
      auto res = client.Get("/api/v1/pods", table);
      times.push_back(ms(Clock::now() - s));
      if (!res || res->status != 200) return 1;
    }
    std::printf("list: as=Table, %d pods: median %.1f ms\n", kPods, percentile(times, 0.5));
  }

  const double cpu_base_start = cpuMs();
  const double baseline = runWrites(port, kUpdates, 1);
  const double cpu_base = cpuMs() - cpu_base_start;
  std::printf("writes: %d merge patches over HTTP, 1 client, no watchers: %.0f writes/s\n",
              kUpdates, baseline);

  // Watchers: every event's latency = receive time - the time stamped into the patch.
  std::mutex mu;
  std::vector<double> latencies;
  std::atomic<int> events{0};
  std::vector<std::unique_ptr<httplib::Client>> clients;
  std::vector<std::thread> watchers;
  const std::string rv = std::to_string(server->store().resourceVersion());
  for (int w = 0; w < kWatchers; ++w) {
    clients.push_back(std::make_unique<httplib::Client>("127.0.0.1", port));
    httplib::Client* client = clients.back().get();
    client->set_read_timeout(300, 0);
    client->set_tcp_nodelay(true);
    watchers.emplace_back([&, client] {
      std::string buffer;
      std::vector<double> mine;
      auto res = client->Get(("/api/v1/pods?watch=true&resourceVersion=" + rv).c_str(),
                             [&](const char* data, size_t len) {
                               const int64_t now = nowNs();
                               buffer.append(data, len);
                               size_t nl;
                               while ((nl = buffer.find('\n')) != std::string::npos) {
                                 auto pos = buffer.find("\"bench/sent\":\"");
                                 if (pos != std::string::npos && pos < nl) {
                                   int64_t sent = std::stoll(buffer.substr(pos + 14));
                                   mine.push_back((now - sent) / 1e6);
                                   ++events;
                                 }
                                 buffer.erase(0, nl + 1);
                               }
                               return true;
                             });
      if (!res) std::fprintf(stderr, "watch failed: %s\n", httplib::to_string(res.error()).c_str());
      std::lock_guard lock(mu);
      latencies.insert(latencies.end(), mine.begin(), mine.end());
    });
  }
  const auto connect_start = Clock::now();
  while (server->openWatches() < kWatchers &&
         Clock::now() - connect_start < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::printf("watch: %zu of %d watchers open after %.1f ms\n", server->openWatches(), kWatchers,
              ms(Clock::now() - connect_start));
  if (server->openWatches() < kWatchers) {
    server->stop();
    for (auto& t : watchers) t.join();
    return 1;
  }

  const double cpu_watch_start = cpuMs();
  const double with_watchers = runWrites(port, kUpdates, 1);
  const auto wait_start = Clock::now();
  while (events < kWatchers * kUpdates && Clock::now() - wait_start < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double cpu_watch = cpuMs() - cpu_watch_start;
  const int delivered_first = events;
  const double with_watchers_4 = runWrites(port, kUpdates, 4);
  while (events < 2 * kWatchers * kUpdates &&
         Clock::now() - wait_start < std::chrono::seconds(120)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  server->closeWatches();
  for (auto& t : watchers) t.join();
  std::printf("writes: %d merge patches over HTTP, 1 client, %d watchers attached: %.0f writes/s\n",
              kUpdates, kWatchers, with_watchers);
  std::printf(
      "writes: %d merge patches over HTTP, 4 clients, %d watchers attached: %.0f writes/s\n",
      kUpdates, kWatchers, with_watchers_4);
  std::printf("cpu: %d writes, no watchers: %.1f ms (%.1f us/write, server + client)\n", kUpdates,
              cpu_base, cpu_base * 1e3 / kUpdates);
  std::printf(
      "cpu: %d writes delivered to %d watchers: %.1f ms (%.1f us/write, %.1f us/event, "
      "server + clients)\n",
      kUpdates, kWatchers, cpu_watch, cpu_watch * 1e3 / kUpdates,
      cpu_watch * 1e3 / (static_cast<double>(kUpdates) * kWatchers));
  std::printf("watch: %d watchers x %d updates: delivered %d + %d of %d events\n", kWatchers,
              kUpdates, delivered_first, static_cast<int>(events) - delivered_first,
              2 * kWatchers * kUpdates);
  std::printf("watch: delivery latency p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
              percentile(latencies, 0.5), percentile(latencies, 0.99), percentile(latencies, 1.0));
  server->stop();
  return 0;
}
