// kubelet's authenticated API (port 10250, HTTPS): the read-only endpoints (/pods, /healthz,
// /metrics, /stats/summary) behind authentication and authorization, and what an operator's
// kubectl reaches through the apiserver: /containerLogs, /exec, /attach (WebSocket, kubelet's
// v5/v4 channel protocols), /portForward (WebSocket, v4 port-forward protocol), and /runningpods/,
// /spec/, /configz. Every request is authenticated and authorized first (KubeletAuth); 401 and
// 403 answers are Status objects. Served by an HttpServer (coroutine handlers) on the agent's
// io_context.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "agent/agent_view.h"
#include "agent/runtime/runtime.h"
#include "agent/server/http_server.h"
#include "agent/server/kubelet_auth.h"
#include "base/asio.h"
#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::agent {

struct KubeletServerOptions {
  HttpServerOptions http = [] {
    HttpServerOptions o;
    o.name = "kubelet";
    o.address = "0.0.0.0";
    o.port = 10250;
    return o;
  }();
  AuthOptions auth;
  // The answers of the paths the read-only port also serves (/pods, /healthz, /metrics,
  // /stats/summary).
  HttpHandler read_only;
  // /configz: the effective configuration as kubelet's {"kubeletconfig": {...}}.
  std::function<std::string()> configz_json;
  // /spec/: the machine (cAdvisor's MachineInfo subset).
  std::function<std::string()> spec_json;
  // File reads of /containerLogs.
  asio::any_io_executor file_pool;
};

class KubeletServer {
 public:
  // `client` (for the webhooks) may be null when neither is enabled; everything given must
  // outlive the server.
  KubeletServer(asio::any_io_executor executor, base::Clock& clock, const AgentView& agent,
                runtime::Runtime& runtime, const api::AsyncRestClient* client,
                KubeletServerOptions options);
  ~KubeletServer();

  // Binds (exclusively) and starts serving; an error names the address, port or file.
  base::Status start();
  // Accepts no more requests and closes every connection: streams in progress end as their
  // handlers see it (activeCalls() falls to 0; the io_context must run). Any thread.
  void stop();
  size_t activeCalls() const;
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nodeagent::agent
