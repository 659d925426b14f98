// kubelet's --node-labels rules: what a node may label itself with.
#include "agent/node_labels.h"

#include <catch2/catch.hpp>

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

}  // namespace nodeagent::agent
