// The agent's read-only HTTP endpoints (kubelet's read-only port), on 127.0.0.1 by default:
// GET /pods (a PodList with live statuses), /healthz, /metrics (Prometheus text),
// /manifest-errors (the current errors of the file and HTTP sources, as JSON) and /stats/summary
// (kubelet's stats/v1alpha1 Summary, from stats::SummaryProvider's last collection). Served by an
// HttpServer on the agent's io_context; handlers only read thread-safe state.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/agent_view.h"
#include "agent/health_checks.h"
#include "agent/server/http_server.h"
#include "base/asio.h"
#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::agent {

struct PodsText;

struct ReadOnlyServerOptions {
  // Address, port (0 picks a free one), limits and timeouts; `http.name` names the port in
  // errors.
  HttpServerOptions http = [] {
    HttpServerOptions o;
    o.name = "read-only";
    o.port = 10255;
    return o;
  }();
  // Metrics text appended by the daemon, and /manifest-errors.
  std::function<std::string()> manifest_errors_json;
  std::function<std::string()> extra_metrics;
  // /healthz checks after the server's own `ping` and the agent's `pleg`.
  std::vector<HealthCheck> health_checks;
  // /stats/summary: the last summary's JSON (stats::SummaryProvider::json). Must not block.
  // Unset: 404; "" (nothing collected yet): 503.
  std::function<std::string()> stats_summary_json;
  // Serve /healthz alone (kubelet's healthz port); everything else is 404.
  bool healthz_only = false;
};

class ReadOnlyServer {
 public:
  // Serves on `executor` (the agent's io_context); requests run on any of its threads.
  ReadOnlyServer(asio::any_io_executor executor, base::Clock& clock, const AgentView& agent,
                 ReadOnlyServerOptions options);
  ~ReadOnlyServer();

  // Binds (exclusively) and starts serving; an error names the address and port.
  base::Status start();
  // No request is answered once it returns. Any thread.
  void stop();
  int port() const { return server_.port(); }

  // The answer to `request` as this port gives it; the kubelet API serves these paths too
  // (after authenticating them), also when this port itself is not served.
  HttpResponse handle(const HttpRequest& request);

 private:
  // The /pods answer: the last one while the agent's pods and statuses are unchanged, else
  // made anew (writing only the statuses that changed).
  std::shared_ptr<const PodsText> podsText();

  const AgentView& agent_;
  ReadOnlyServerOptions options_;
  std::vector<HealthCheck> health_checks_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  HttpServer server_;
};

}  // namespace nodeagent::agent
