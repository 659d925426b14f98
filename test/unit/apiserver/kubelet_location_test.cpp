// Where the test apiserver sends kubelet subresource requests: kube-apiserver's container
// defaulting, kubelet paths and queries, node addresses and the request head.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/kubelet_location.h"

using nlohmann::json;
using namespace nodeagent::testapiserver;

namespace {

json pod(const std::vector<std::string>& containers, const std::string& node = "n1",
         const std::vector<std::string>& inits = {}) {
  json p = {{"metadata", {{"name", "web"}, {"namespace", "default"}}},
            {"spec", {{"containers", json::array()}}}};
  for (const auto& c : containers) p["spec"]["containers"].push_back({{"name", c}});
  for (const auto& c : inits) p["spec"]["initContainers"].push_back({{"name", c}});
  if (!node.empty()) p["spec"]["nodeName"] = node;
  return p;
}

std::string ok(const nodeagent::base::StatusOr<std::string>& v) {
  INFO(v.status().message());
  REQUIRE(v.ok());
  return *v;
}

std::string error(const nodeagent::base::StatusOr<std::string>& v) {
  REQUIRE_FALSE(v.ok());
  return v.status().message();
}

}  // namespace

TEST_CASE("kubelet location: container defaulting and its errors", "[unit][apiserver]") {
  CHECK(ok(podContainer(pod({"app"}), "")) == "app");
  CHECK(ok(podContainer(pod({"a", "b"}, "n1", {"init"}), "init")) == "init");
  CHECK(error(podContainer(pod({"a", "b"}), "")) ==
        "a container name must be specified for pod web, choose one of: [a b]");
  CHECK(error(podContainer(pod({"a", "b"}, "n1", {"i"}), "")) ==
        "a container name must be specified for pod web, choose one of: [a b] or one of the "
        "init containers: [i]");
  CHECK(error(podContainer(pod({"a"}), "zz")) == "container zz is not valid for pod web");
  CHECK(error(podContainer(pod({}), "")) == "a container name must be specified for pod web");
}

TEST_CASE("kubelet location: pods/log options become the kubelet's sorted query",
          "[unit][apiserver]") {
  const QueryParams query = {{"tailLines", "10"},
                             {"follow", "true"},
                             {"container", "app"},
                             {"timestamps", "1"},
                             {"limitBytes", "500"}};
  CHECK(ok(podLogPath(pod({"app", "side"}), query)) ==
        "/containerLogs/default/web/app?follow=true&limitBytes=500&tailLines=10&timestamps=true");
  CHECK(ok(podLogPath(pod({"app"}), {{"sinceTime", "2024-05-01T12:00:00+02:00"}})) ==
        "/containerLogs/default/web/app?sinceTime=2024-05-01T10%3A00%3A00Z");
  CHECK(ok(podLogPath(pod({"app"}), {{"previous", "false"}})) == "/containerLogs/default/web/app");
  CHECK(ok(podLogPath(pod({"app"}, ""), {})).empty());  // no node: an empty log

  auto negative = podLogPath(pod({"app"}), {{"tailLines", "-1"}});
  REQUIRE_FALSE(negative.ok());
  CHECK(negative.status().code() == nodeagent::base::StatusCode::kFailedPrecondition);
  CHECK_THAT(negative.status().message(),
             Catch::Contains("PodLogOptions \"web\" is invalid: tailLines"));
  CHECK_THAT(error(podLogPath(pod({"app"}), {{"follow", "maybe"}})),
             Catch::Contains("follow: invalid boolean"));
  CHECK_THAT(error(podLogPath(pod({"app"}), {{"sinceSeconds", "5"}, {"sinceTime", "x"}})),
             Catch::Contains("at most one of"));
}

TEST_CASE("kubelet location: exec, attach and portforward as kube-apiserver's streamLocation",
          "[unit][apiserver]") {
  const QueryParams exec = {{"command", "sh"},    {"command", "-c"}, {"command", "echo a&b"},
                            {"container", "app"}, {"stdin", "true"}, {"stdout", "true"},
                            {"stderr", "false"},  {"tty", "true"}};
  CHECK(ok(podStreamPath("exec", pod({"app"}), exec)) ==
        "/exec/default/web/app?command=sh&command=-c&command=echo+a%26b&input=1&output=1&tty=1");
  CHECK(ok(podStreamPath("attach", pod({"app"}), exec)) ==
        "/attach/default/web/app?input=1&output=1&tty=1");
  CHECK(error(podStreamPath("exec", pod({"app"}, ""), exec)) ==
        "pod web does not have a host assigned");
  CHECK(ok(podPortForwardPath(pod({"app"}), {{"ports", "8080"}, {"ports", "9090"}})) ==
        "/portForward/default/web?port=8080%2C9090");
  CHECK(ok(podPortForwardPath(pod({"app"}), {})) == "/portForward/default/web");
  CHECK_FALSE(podPortForwardPath(pod({"app"}), {{"ports", "http"}}).ok());
}

TEST_CASE("kubelet location: the node's preferred address and kubelet port", "[unit][apiserver]") {
  json node = {{"metadata", {{"name", "n1"}, {"labels", {{"kubernetes.io/hostname", "h1"}}}}},
               {"status",
                {{"addresses",
                  {{{"type", "Hostname"}, {"address", "node-1"}},
                   {{"type", "InternalIP"}, {"address", "127.0.0.2"}}}},
                 {"daemonEndpoints", {{"kubeletEndpoint", {{"Port", 10251}}}}}}}};
  CHECK(ok(preferredNodeAddress(node, defaultPreferredAddressTypes())) == "127.0.0.2");
  CHECK(ok(preferredNodeAddress(node, {"Hostname", "InternalIP"})) == "node-1");
  CHECK(kubeletPort(node) == 10251);
  node["status"]["addresses"] = {{{"type", "ExternalIP"}, {"address", "192.0.2.1"}}};
  CHECK(ok(preferredNodeAddress(node, {"InternalIP", "Hostname"})) == "h1");  // the label
  CHECK(error(preferredNodeAddress(node, {"InternalIP"})) ==
        "no preferred addresses found; known addresses: [{ExternalIP 192.0.2.1}]");
  CHECK(kubeletPort(json{{"metadata", {{"name", "x"}}}}) == kDefaultKubeletPort);

  auto types = parsePreferredAddressTypes("Hostname,InternalIP");
  REQUIRE(types.ok());
  CHECK(*types == std::vector<std::string>{"Hostname", "InternalIP"});
  CHECK_FALSE(parsePreferredAddressTypes("InternalIP,LegacyHostIP").ok());
  CHECK_FALSE(parsePreferredAddressTypes("").ok());
}

TEST_CASE("kubelet location: nodes/proxy ids and paths", "[unit][apiserver]") {
  auto plain = parseNodeProxyId("n1");
  REQUIRE(plain.ok());
  CHECK((plain->name == "n1" && plain->port.empty()));
  auto full = parseNodeProxyId("https:n1:10250");
  REQUIRE(full.ok());
  CHECK((full->scheme == "https" && full->name == "n1" && full->port == "10250"));
  CHECK_FALSE(parseNodeProxyId("n1:http").ok());
  CHECK_FALSE(parseNodeProxyId("ftp:n1:21").ok());
  CHECK_FALSE(parseNodeProxyId(":10250").ok());

  CHECK(nodeProxyPath("/pods", "") == "/pods");
  CHECK(nodeProxyPath("/stats/summary", "only_cpu_and_memory=true") ==
        "/stats/summary?only_cpu_and_memory=true");
  CHECK(nodeProxyPath("/logs/", "") == "/logs/");
  CHECK(nodeProxyPath("/", "") == "/");
  CHECK(nodeProxyPath("/a/./b/../../../etc//x", "") == "/etc/x");
}

TEST_CASE("kubelet location: the request head sent to the kubelet", "[unit][apiserver]") {
  const HeaderList plain = {{"Host", "apiserver:6443"},     {"Authorization", "Bearer secret"},
                            {"Accept", "text/plain"},       {"Connection", "keep-alive"},
                            {"REMOTE_ADDR", "127.0.0.1"},   {"Content-Length", "3"},
                            {"X-Forwarded-For", "10.9.9.9"}};
  const std::string head =
      kubeletRequestHead("GET", "/pods", "127.0.0.1:10250", plain, 0, "127.0.0.5");
  CHECK(head ==
        "GET /pods HTTP/1.1\r\nHost: 127.0.0.1:10250\r\nAccept: text/plain\r\n"
        "X-Forwarded-For: 10.9.9.9, 127.0.0.5\r\nConnection: close\r\n\r\n");
  CHECK_FALSE(isUpgradeRequest(plain));

  const HeaderList upgrade = {{"connection", "Upgrade"},
                              {"Upgrade", "SPDY/3.1"},
                              {"X-Stream-Protocol-Version", "v4.channel.k8s.io"}};
  REQUIRE(isUpgradeRequest(upgrade));
  CHECK(kubeletRequestHead("POST", "/exec/a/b/c?command=ls", "h:1", upgrade, 0, "::1") ==
        "POST /exec/a/b/c?command=ls HTTP/1.1\r\nHost: h:1\r\nconnection: Upgrade\r\n"
        "Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n"
        "X-Forwarded-For: ::1\r\nContent-Length: 0\r\n\r\n");
}
