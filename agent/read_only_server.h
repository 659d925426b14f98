// The agent's read-only HTTP endpoints (kubelet's read-only port), on 127.0.0.1 by default:
// GET /pods (a PodList with live statuses), /healthz, /metrics (Prometheus text) and
// /manifest-errors (the current errors of the file and HTTP sources, as JSON). Served by
// cpp-httplib on its own threads; handlers only read thread-safe state.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "base/status.h"

namespace nodeagent::agent {

class Agent;
struct PodsText;

struct ReadOnlyServerOptions {
  std::string address = "127.0.0.1";
  int port = 10255;  // 0 picks a free port
  // Extra health checks (name -> ok?, reason) and metrics text appended by the daemon.
  std::function<std::string()> manifest_errors_json;
  std::function<std::string()> extra_metrics;
  std::function<bool(std::string* why)> extra_health;
};

class ReadOnlyServer {
 public:
  ReadOnlyServer(Agent& agent, ReadOnlyServerOptions options);
  ~ReadOnlyServer();

  // Binds and starts serving on a background thread.
  base::Status start();
  void stop();
  int port() const { return port_; }

 private:
  // The /pods answer: the last one while the agent's pods and statuses are unchanged, else
  // made anew (writing only the statuses that changed).
  std::shared_ptr<const PodsText> podsText();

  Agent& agent_;
  ReadOnlyServerOptions options_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
  int port_ = 0;
};

// The Prometheus text of the agent's own metrics.
std::string agentMetricsText(const Agent& agent);

}  // namespace nodeagent::agent
