// The agent's /healthz answer from named checks, in the Kubernetes healthz format: `ok` when all
// pass, and with `?verbose` (or on failure) one line per check, `[+]name ok` or
// `[-]name failed: reason`, then `healthz check passed|failed`. Informational checks (the pod
// sources' state) are listed but never fail the answer: restarting the agent would not make a
// source answer, and a liveness probe must not turn a source problem into a restart loop.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace nodeagent::agent {

struct HealthCheck {
  std::string name;
  // True when healthy; otherwise `why` gets the reason. Any thread, must not block.
  std::function<bool(std::string* why)> check;
  bool informational = false;
};

struct HealthzAnswer {
  int status = 200;  // 200, or 500 when a (non-informational) check fails
  std::string body;
};

HealthzAnswer healthzAnswer(const std::vector<HealthCheck>& checks, bool verbose);

}  // namespace nodeagent::agent
