// The /healthz answer: Kubernetes' healthz format, informational checks never failing it.
#include <catch2/catch.hpp>

#include "agent/health_checks.h"

using namespace nodeagent::agent;

namespace {

HealthCheck passing(std::string name) {
  return {std::move(name), [](std::string*) { return true; }};
}
HealthCheck failing(std::string name, std::string reason, bool informational = false) {
  return {std::move(name),
          [reason](std::string* why) {
            *why = reason;
            return false;
          },
          informational};
}

}  // namespace

TEST_CASE("healthz: ok when every check passes, one line per check when verbose",
          "[unit][agent][healthz]") {
  std::vector<HealthCheck> checks{{"ping", nullptr}, passing("pleg")};
  auto plain = healthzAnswer(checks, false);
  CHECK(plain.status == 200);
  CHECK(plain.body == "ok");
  auto verbose = healthzAnswer(checks, true);
  CHECK(verbose.status == 200);
  CHECK(verbose.body == "[+]ping ok\n[+]pleg ok\nhealthz check passed\n");
}

TEST_CASE("healthz: a failing check fails the answer and names its reason",
          "[unit][agent][healthz]") {
  std::vector<HealthCheck> checks{passing("ping"), failing("syncloop", "stuck for 5m")};
  auto answer = healthzAnswer(checks, false);
  CHECK(answer.status == 500);
  CHECK(answer.body == "[+]ping ok\n[-]syncloop failed: stuck for 5m\nhealthz check failed\n");
}

TEST_CASE("healthz: an informational check is listed but never fails the answer",
          "[unit][agent][healthz]") {
  std::vector<HealthCheck> checks{passing("ping"),
                                  failing("source/api", "not seen: no answer yet", true)};
  auto plain = healthzAnswer(checks, false);
  CHECK(plain.status == 200);
  CHECK(plain.body == "ok");
  auto verbose = healthzAnswer(checks, true);
  CHECK(verbose.status == 200);
  CHECK_THAT(verbose.body, Catch::Contains("[-]source/api not seen: no answer yet (informational"));
  CHECK_THAT(verbose.body, Catch::EndsWith("healthz check passed\n"));
}
