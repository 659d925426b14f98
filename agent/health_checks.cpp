#include "agent/health_checks.h"

namespace nodeagent::agent {

HealthzAnswer healthzAnswer(const std::vector<HealthCheck>& checks, bool verbose) {
  HealthzAnswer answer;
  std::string lines;
  bool failed = false;
  for (const auto& c : checks) {
    std::string why;
    const bool ok = !c.check || c.check(&why);
    if (ok) {
      lines += "[+]" + c.name + " ok\n";
    } else if (c.informational) {
      lines += "[-]" + c.name + " " + (why.empty() ? "not ok" : why) +
               " (informational: does not fail this check)\n";
    } else {
      failed = true;
      lines += "[-]" + c.name + " failed: " + (why.empty() ? "reason unknown" : why) + "\n";
    }
  }
  answer.status = failed ? 500 : 200;
  if (!failed && !verbose) {
    answer.body = "ok";
  } else {
    answer.body = lines + (failed ? "healthz check failed\n" : "healthz check passed\n");
  }
  return answer;
}

}  // namespace nodeagent::agent
