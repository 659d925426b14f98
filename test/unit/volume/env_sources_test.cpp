// Environment variables from ConfigMaps and Secrets (kubelet's makeEnvironmentVariables).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "agent/runtime/runtime.h"
#include "agent/volume/env_sources.h"
#include "test/support/pod_builder.h"
#include "test/unit/volume/fake_api_objects.h"

using namespace nodeagent;
using agent::ApiObjectKind;
using nlohmann::json;

namespace {

api::PodPtr podWith(json env, json env_from = nullptr) {
  return testing::PodBuilder()
      .name("web")
      .ns("ns")
      .uid("uid-1")
      .annotation("kubernetes.io/config.source", "api")
      .container("c", {"sh", "-c", "echo $(FROM_CM)"})
      .edit([&](json& j) {
        j["spec"]["containers"][0]["env"] = env;
        if (!env_from.is_null()) j["spec"]["containers"][0]["envFrom"] = env_from;
      })
      .build();
}

testing::FakeApiObjects objects() {
  testing::FakeApiObjects o;
  o.put(ApiObjectKind::kConfigMap, "ns", "app",
        {{"data", {{"MODE", "fast"}, {"COST", "$(HOME)"}, {"bad key", "x"}, {"1st", "y"}}}});
  o.put(ApiObjectKind::kSecret, "ns", "creds", {{"data", {{"password", "czNjcjN0"}}}});
  return o;
}

std::string envValue(const std::vector<std::pair<std::string, std::string>>& env,
                     const std::string& name) {
  for (const auto& [k, v] : env) {
    if (k == name) return v;
  }
  return "<unset>";
}

}  // namespace

TEST_CASE("env sources: keyRefs become literal values in their place", "[unit][volume]") {
  auto o = objects();
  auto pod = podWith({{{"name", "FROM_CM"},
                       {"valueFrom", {{"configMapKeyRef", {{"name", "app"}, {"key", "COST"}}}}}},
                      {{"name", "PW"},
                       {"valueFrom", {{"secretKeyRef", {{"name", "creds"}, {"key", "password"}}}}}},
                      {{"name", "BOTH"}, {"value", "$(PW)-x"}}});
  const auto& c = pod->spec->containers[0];
  REQUIRE(agent::needsEnvSources(*pod, c));
  auto sources = agent::resolveEnvSources(*pod, c, &o);
  REQUIRE(sources.ok());
  // The runtime's environment: a value from a ConfigMap is not expanded, later ones may use it.
  runtime::StartContainerOptions options;
  auto env = runtime::buildContainerEnv(*pod, sources->container, options);
  REQUIRE(env.ok());
  CHECK(envValue(*env, "FROM_CM") == "$(HOME)");
  CHECK(envValue(*env, "PW") == "s3cr3t");
  CHECK(envValue(*env, "BOTH") == "s3cr3t-x");
  // The container's hash is the pod's, so a resolved value never looks like a spec change.
  CHECK(sources->container.hash == c.hash);
}

TEST_CASE("env sources: envFrom with a prefix, invalid names skipped with kubelet's message",
          "[unit][volume]") {
  auto o = objects();
  auto pod = podWith(json::array({{{"name", "MODE"}, {"value", "slow"}}}),
                     {{{"configMapRef", {{"name", "app"}}}},
                      {{"prefix", "S_"}, {"secretRef", {{"name", "creds"}}}}});
  const auto& c = pod->spec->containers[0];
  REQUIRE(agent::needsEnvSources(*pod, c));
  auto sources = agent::resolveEnvSources(*pod, c, &o);
  REQUIRE(sources.ok());
  CHECK(envValue(sources->env_from, "MODE") == "fast");
  CHECK(envValue(sources->env_from, "S_password") == "s3cr3t");
  CHECK(envValue(sources->env_from, "bad key") == "<unset>");
  REQUIRE(sources->skipped_keys.size() == 1);
  CHECK(sources->skipped_keys[0] ==
        "Keys [1st, bad key] from the EnvFrom configMap ns/app were skipped since they are "
        "considered invalid environment variable names.");
  // The container's own env comes after envFrom and wins.
  runtime::StartContainerOptions options;
  options.extra_env = sources->env_from;
  auto env = runtime::buildContainerEnv(*pod, sources->container, options);
  REQUIRE(env.ok());
  CHECK(envValue(*env, "MODE") == "slow");
}

TEST_CASE("env sources: missing objects and keys as kubelet reports them, optional ones unset",
          "[unit][volume]") {
  auto o = objects();
  auto missing_key = podWith(
      {{{"name", "X"}, {"valueFrom", {{"configMapKeyRef", {{"name", "app"}, {"key", "nope"}}}}}}});
  auto r = agent::resolveEnvSources(*missing_key, missing_key->spec->containers[0], &o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == base::StatusCode::kInvalidArgument);
  CHECK(r.status().message() == "couldn't find key nope in ConfigMap ns/app");
  CHECK(runtime::startErrorReason(r.status()) == runtime::kCreateContainerConfigError);

  auto missing_secret = podWith(
      {{{"name", "X"}, {"valueFrom", {{"secretKeyRef", {{"name", "gone"}, {"key", "k"}}}}}}});
  r = agent::resolveEnvSources(*missing_secret, missing_secret->spec->containers[0], &o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() == "secret \"gone\" not found");

  auto missing_from = podWith(json::array(), {{{"configMapRef", {{"name", "gone"}}}}});
  r = agent::resolveEnvSources(*missing_from, missing_from->spec->containers[0], &o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() == "configmap \"gone\" not found");

  auto optional = podWith(
      {{{"name", "X"},
        {"valueFrom", {{"configMapKeyRef", {{"name", "gone"}, {"key", "k"}, {"optional", true}}}}}},
       {{"name", "Y"},
        {"valueFrom",
         {{"configMapKeyRef", {{"name", "app"}, {"key", "nope"}, {"optional", true}}}}}}},
      {{{"configMapRef", {{"name", "gone"}, {"optional", true}}}}});
  r = agent::resolveEnvSources(*optional, optional->spec->containers[0], &o);
  REQUIRE(r.ok());
  CHECK(r->container.env.empty());
  CHECK(r->env_from.empty());
}

TEST_CASE("env sources: a container with only plain and fieldRef variables needs nothing",
          "[unit][volume]") {
  auto pod =
      podWith({{{"name", "A"}, {"value", "1"}},
               {{"name", "B"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.name"}}}}}}});
  CHECK_FALSE(agent::needsEnvSources(*pod, pod->spec->containers[0]));
}
