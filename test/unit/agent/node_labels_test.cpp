// kubelet's --node-labels rules: what a node may label itself with.
#include "agent/node_labels.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/node_status.h"

namespace nodeagent::agent {

TEST_CASE("node labels: kubelet's own and its namespaces are allowed", "[unit][agent]") {
  for (const char* key :
       {"kubernetes.io/hostname", "kubernetes.io/arch", "kubernetes.io/os",
        "beta.kubernetes.io/arch", "beta.kubernetes.io/os", "beta.kubernetes.io/instance-type",
        "failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/region", "topology.kubernetes.io/zone",
        "node.kubernetes.io/instance-type", "kubelet.kubernetes.io/anything",
        "node.kubernetes.io/role", "foo.node.kubernetes.io/x", "bar.kubelet.kubernetes.io/y"}) {
    INFO(key);
    CHECK(isKubeletLabel(key));
    CHECK(validateNodeLabels({{key, "v"}}).ok());
  }
  CHECK(validateNodeLabels({{"e2e", "yes"}, {"example.com/tier", "gold"}}).ok());
}

TEST_CASE("node labels: other kubernetes.io and k8s.io labels refuse to start", "[unit][agent]") {
  for (const char* key :
       {"node-role.kubernetes.io/worker", "foo.node-restriction.kubernetes.io/x",
        "node-restriction.kubernetes.io/x", "kubernetes.io/role", "app.kubernetes.io/name",
        "k8s.io/x", "sub.k8s.io/x", "topology.kubernetes.io/rack", "xnode.kubernetes.io/y"}) {
    INFO(key);
    CHECK(!isKubeletLabel(key));
    CHECK(!validateNodeLabels({{key, ""}}).ok());
  }
  auto st = validateNodeLabels(
      {{"node-role.kubernetes.io/worker", ""}, {"app.kubernetes.io/name", "x"}, {"ok", "1"}});
  CHECK(st.message() ==
        "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: "
        "[app.kubernetes.io/name node-role.kubernetes.io/worker]\n"
        "--node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix "
        "(kubelet.kubernetes.io, node.kubernetes.io) or be in the specifically allowed set "
        "(beta.kubernetes.io/arch, beta.kubernetes.io/instance-type, beta.kubernetes.io/os, "
        "failure-domain.beta.kubernetes.io/region, failure-domain.beta.kubernetes.io/zone, "
        "kubernetes.io/arch, kubernetes.io/hostname, kubernetes.io/os, "
        "node.kubernetes.io/instance-type, topology.kubernetes.io/region, "
        "topology.kubernetes.io/zone)");
}

TEST_CASE("node labels: malformed keys and values are invalid node labels", "[unit][agent]") {
  auto st = validateNodeLabels({{"bad key", "v"}});
  CHECK(st.message().starts_with("invalid node labels: 'bad key' - "));
  st = validateNodeLabels({{"k", "bad value!"}});
  CHECK(st.message().starts_with("invalid node labels: 'bad value!' - "));
}

TEST_CASE("node taints: --register-with-taints as kubelet parses it", "[unit][agent]") {
  auto taints = parseRegisterWithTaints(
      "dedicated=infra:NoSchedule,gpu:PreferNoSchedule,,"
      "example.com/drain=now:NoExecute");
  REQUIRE(taints.ok());
  REQUIRE(taints->size() == 3);
  CHECK((*taints)[0] == api::Taint{"dedicated", "infra", "NoSchedule", std::nullopt});
  CHECK((*taints)[1] == api::Taint{"gpu", "", "PreferNoSchedule", std::nullopt});
  CHECK((*taints)[2] == api::Taint{"example.com/drain", "now", "NoExecute", std::nullopt});
  CHECK(parseRegisterWithTaints("")->empty());
  for (const char* bad : {"dedicated=infra", "k=v:Sometimes", "bad key:NoSchedule",
                          "k=bad value:NoSchedule", "k:NoSchedule,k=v:NoSchedule"}) {
    INFO(bad);
    auto st = parseRegisterWithTaints(bad).status();
    CHECK(st.message().starts_with("--register-with-taints: invalid taint spec: "));
  }
}

TEST_CASE("node taints: the Node is created with them", "[unit][agent]") {
  NodeStatusOptions o;
  o.node_name = "n1";
  CHECK(buildNode(o)["spec"] == nlohmann::json::object());
  o.register_with_taints = {{"dedicated", "infra", "NoSchedule", std::nullopt},
                            {"gpu", "", "NoExecute", std::nullopt}};
  CHECK(buildNode(o)["spec"]["taints"] ==
        nlohmann::json::parse(R"([{"key":"dedicated","value":"infra","effect":"NoSchedule"},
                                  {"key":"gpu","effect":"NoExecute"}])"));
}

}  // namespace nodeagent::agent
