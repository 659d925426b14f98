#include <catch2/catch.hpp>

#include "agent/runtime/runtime.h"

using namespace nodeagent;
using namespace nodeagent::runtime;

namespace {
api::Pod makePod() {
  api::Pod pod;
  pod.metadata.name = "web";
  pod.metadata.namespace_ = "prod";
  pod.metadata.uid = "uid-7";
  pod.metadata.labels = {{"app", "web"}};
  pod.metadata.annotations = {{"note", "hi"}};
  pod.spec->node_name = "node-1";
  pod.spec->service_account_name = "sa";
  return pod;
}

api::EnvVar value(std::string name, std::string v) {
  api::EnvVar e;
  e.name = std::move(name);
  e.value = std::move(v);
  return e;
}

api::EnvVar fieldRef(std::string name, std::string path) {
  api::EnvVar e;
  e.name = std::move(name);
  e.value_from_kind = "fieldRef";
  e.field_ref = api::ObjectFieldSelector{"v1", std::move(path)};
  return e;
}

using Env = std::vector<std::pair<std::string, std::string>>;
}  // namespace

TEST_CASE("env: values, fieldRefs and extra env in order, with a default PATH", "[unit][runtime]") {
  api::Pod pod = makePod();
  api::Container c;
  c.name = "main";
  c.env = {value("A", "1"),
           fieldRef("POD_NAME", "metadata.name"),
           fieldRef("POD_NS", "metadata.namespace"),
           fieldRef("POD_UID", "metadata.uid"),
           fieldRef("NODE", "spec.nodeName"),
           fieldRef("POD_IP", "status.podIP"),
           fieldRef("HOST_IP", "status.hostIP"),
           fieldRef("APP", "metadata.labels['app']"),
           fieldRef("NOTE", "metadata.annotations['note']"),
           fieldRef("SA", "spec.serviceAccountName")};
  StartContainerOptions options;
  options.pod_ip = "10.0.0.5";
  options.host_ip = "192.168.1.2";
  options.extra_env = {{"VOLUME_DATA", "/var/lib/nodeagent/pods/uid-7/volumes/data"}};
  auto env = buildContainerEnv(pod, c, options);
  REQUIRE(env.ok());
  CHECK(*env == Env{{"PATH", std::string(kDefaultPath)},
                    {"VOLUME_DATA", "/var/lib/nodeagent/pods/uid-7/volumes/data"},
                    {"A", "1"},
                    {"POD_NAME", "web"},
                    {"POD_NS", "prod"},
                    {"POD_UID", "uid-7"},
                    {"NODE", "node-1"},
                    {"POD_IP", "10.0.0.5"},
                    {"HOST_IP", "192.168.1.2"},
                    {"APP", "web"},
                    {"NOTE", "hi"},
                    {"SA", "sa"}});
}

TEST_CASE("env: the container's PATH and duplicates replace earlier values in place",
          "[unit][runtime]") {
  api::Pod pod = makePod();
  api::Container c;
  c.env = {value("X", "1"), value("PATH", "/opt/bin:$(PATH)"), value("X", "2")};
  auto env = buildContainerEnv(pod, c, {});
  REQUIRE(env.ok());
  CHECK(*env == Env{{"PATH", "/opt/bin:" + std::string(kDefaultPath)}, {"X", "2"}});
}

TEST_CASE("env: $(VAR) expansion follows kubelet's rules", "[unit][runtime]") {
  Env env{{"A", "alpha"}, {"B", "beta"}};
  CHECK(expandVars("$(A)-$(B)", env) == "alpha-beta");
  CHECK(expandVars("$(MISSING)", env) == "$(MISSING)");
  CHECK(expandVars("$$(A)", env) == "$(A)");
  CHECK(expandVars("cost: $5 $", env) == "cost: $5 $");
  CHECK(expandVars("$(A", env) == "$(A");
  CHECK(expandVars("$()", env) == "$()");

  api::Pod pod = makePod();
  api::Container c;
  c.env = {value("A", "x"), value("B", "$(A)y"), value("C", "$(D)"), value("D", "d")};
  auto built = buildContainerEnv(pod, c, {});
  REQUIRE(built.ok());
  // Only variables defined earlier expand.
  CHECK((*built)[2] == std::pair<std::string, std::string>{"B", "xy"});
  CHECK((*built)[3] == std::pair<std::string, std::string>{"C", "$(D)"});
}

TEST_CASE("env: unsupported sources are CreateContainerConfigError naming the variable",
          "[unit][runtime]") {
  api::Pod pod = makePod();
  api::Container c;
  c.name = "main";
  SECTION("secretKeyRef") {
    api::EnvVar e;
    e.name = "PASSWORD";
    e.value_from_kind = "secretKeyRef";
    c.env = {e};
    auto env = buildContainerEnv(pod, c, {});
    REQUIRE_FALSE(env.ok());
    CHECK(env.status().message().find("PASSWORD") != std::string::npos);
    CHECK(env.status().message().find("secretKeyRef") != std::string::npos);
    CHECK(startErrorReason(env.status()) == kCreateContainerConfigError);
  }
  SECTION("unknown fieldPath") {
    c.env = {fieldRef("X", "spec.nope")};
    auto env = buildContainerEnv(pod, c, {});
    REQUIRE_FALSE(env.ok());
    CHECK(env.status().message().find("spec.nope") != std::string::npos);
    CHECK(startErrorReason(env.status()) == kCreateContainerConfigError);
  }
  CHECK(startErrorReason(base::unknownError("exec failed")) == kRunContainerError);
}

TEST_CASE("runtime types: grace period, hash hex and newest status lookup", "[unit][runtime]") {
  api::Pod pod = makePod();
  CHECK(podGracePeriodSeconds(pod) == 30);
  pod.spec->termination_grace_period_seconds = 10;
  CHECK(podGracePeriodSeconds(pod) == 10);
  pod.metadata.deletion_grace_period_seconds = 3;
  CHECK(podGracePeriodSeconds(pod) == 3);

  api::Hash128 h{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  CHECK(hashToHex(h) == "0123456789abcdeffedcba9876543210");
  CHECK(hashFromHex(hashToHex(h)) == h);

  PodStatus status;
  ContainerStatus newest;
  newest.name = "main";
  newest.restart_count = 2;
  newest.state = ContainerState::kRunning;
  ContainerStatus older = newest;
  older.restart_count = 1;
  older.state = ContainerState::kExited;
  status.container_statuses = {newest, older};
  REQUIRE(status.findContainerStatusByName("main"));
  CHECK(status.findContainerStatusByName("main")->restart_count == 2);
  CHECK(status.findContainerStatusByName("other") == nullptr);
  CHECK(status.runningContainerStatuses().size() == 1);
  CHECK(ContainerId{"process", "abc"}.toString() == "process://abc");
}

namespace {
api::EnvVar resourceRef(std::string name, std::string resource, std::string divisor = "",
                        std::string container = "") {
  api::EnvVar e;
  e.name = std::move(name);
  e.value_from_kind = "resourceFieldRef";
  api::ResourceFieldSelector s{std::move(container), std::move(resource), std::nullopt};
  if (!divisor.empty()) s.divisor = api::Quantity::parse(divisor).value();
  e.resource_field_ref = s;
  return e;
}

api::Quantity q(const char* text) { return api::Quantity::parse(text).value(); }
}  // namespace

TEST_CASE("env: resourceFieldRef reads requests and limits as kubelet rounds them",
          "[unit][runtime]") {
  api::Pod pod = makePod();
  api::Container c;
  c.name = "main";
  c.resources.requests = {{"cpu", q("250m")}, {"memory", q("64Mi")}};
  c.resources.limits = {{"cpu", q("1500m")}, {"ephemeral-storage", q("1G")}};
  api::Container side;
  side.name = "side";
  side.resources.limits = {{"memory", q("32Mi")}};
  pod.spec->containers = {c, side};
  c.env = {resourceRef("CPU_LIMIT", "limits.cpu"),               // 1.5 cores, rounded up: 2
           resourceRef("CPU_LIMIT_M", "limits.cpu", "1m"),       // 1500
           resourceRef("CPU_REQ_M", "requests.cpu", "1m"),       // 250
           resourceRef("MEM_REQ_MI", "requests.memory", "1Mi"),  // 64
           resourceRef("MEM_LIMIT", "limits.memory"),            // unset: the node's 8Gi
           resourceRef("DISK_LIMIT_K", "limits.ephemeral-storage", "1k"),
           resourceRef("DISK_REQ", "requests.ephemeral-storage"),  // the limit, as defaulted
           resourceRef("SIDE_MEM_REQ", "requests.memory", "1Mi", "side"),  // its limit: 32
           resourceRef("SIDE_CPU_REQ", "requests.cpu", "", "side")};       // none at all: 0
  StartContainerOptions options;
  options.node_allocatable = {4000, int64_t{8} << 30, 0};
  auto env = buildContainerEnv(pod, c, options);
  REQUIRE(env.ok());
  CHECK(*env == Env{{"PATH", std::string(kDefaultPath)},
                    {"CPU_LIMIT", "2"},
                    {"CPU_LIMIT_M", "1500"},
                    {"CPU_REQ_M", "250"},
                    {"MEM_REQ_MI", "64"},
                    {"MEM_LIMIT", std::to_string(int64_t{8} << 30)},
                    {"DISK_LIMIT_K", "1000000"},
                    {"DISK_REQ", "1000000000"},
                    {"SIDE_MEM_REQ", "32"},
                    {"SIDE_CPU_REQ", "0"}});

  SECTION("an unknown container or resource names the variable") {
    c.env = {resourceRef("X", "limits.cpu", "", "nope")};
    auto missing = buildContainerEnv(pod, c, options);
    REQUIRE_FALSE(missing.ok());
    CHECK(missing.status().message() ==
          "container \"main\": env X: resourceFieldRef: container nope not found in the pod");
    c.env = {resourceRef("Y", "limits.gpu")};
    auto unsupported = buildContainerEnv(pod, c, options);
    REQUIRE_FALSE(unsupported.ok());
    CHECK(unsupported.status().message() ==
          "container \"main\": env Y: unsupported container resource : limits.gpu");
  }
}
