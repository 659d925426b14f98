// kube-apiserver's Node authorizer and NodeRestriction admission in build/test-apiserver
// (--authorization-mode=Node), driven by the real kubectl and curl as a kubelet would be: an x509
// client certificate for system:node:n1 (group system:nodes) from the --cert-dir CA.
#include <functional>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/integration/apiserver_test_util.h"

using nlohmann::json;
using namespace nodeagent::testing;

namespace {

// n1's client certificate and key, written as n1.crt and n1.key, and a kubeconfig for them,
// n1.kubeconfig.
void writeNodeCredentials(const TempDir& dir, const std::string& url) {
  auto issued = issueNodeCertificate(dir / "certs", "n1");
  REQUIRE(issued.ok());
  writeFile(dir / "n1.crt", issued->cert_pem);
  writeFile(dir / "n1.key", issued->key_pem);
  writeFile(dir / "n1.kubeconfig",
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: " + url +
                "\n    certificate-authority: " + (dir / "certs" / "ca.crt").string() +
                "\nusers:\n- name: n1\n  user:\n    client-certificate: " +
                (dir / "n1.crt").string() + "\n    client-key: " + (dir / "n1.key").string() +
                "\ncontexts:\n- name: n1\n  context: {cluster: c, user: n1, namespace: default}\n"
                "current-context: n1\n");
}

std::string mirrorPod(const std::string& name, const std::string& node, const std::string& uid) {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\n  namespace: default\n  annotations:\n    kubernetes.io/config.mirror: abc\n"
         "  ownerReferences:\n  - {apiVersion: v1, kind: Node, name: " +
         node + ", uid: " + uid + ", controller: true}\nspec:\n  nodeName: " + node +
         "\n  containers:\n  - {name: c, image: busybox}\n";
}

// The objects an administrator made: nodes n1 and n2, pod web bound to n1 using secret
// web-secret, secret other-secret used by no pod on n1.
void seedCluster(const Kubectl& admin, const TempDir& dir) {
  writeFile(dir / "seed.yaml",
            "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\n"
            "apiVersion: v1\nkind: Node\nmetadata: {name: n2}\n---\n"
            "apiVersion: v1\nkind: Secret\nmetadata: {name: web-secret, namespace: default}\n"
            "stringData: {k: v}\n---\n"
            "apiVersion: v1\nkind: Secret\nmetadata: {name: other-secret, namespace: default}\n"
            "stringData: {k: v}\n---\n"
            "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\n"
            "spec:\n  nodeName: n1\n  containers:\n  - name: c\n    image: busybox\n"
            "    envFrom: [{secretRef: {name: web-secret}}]\n");
  auto seeded = admin.run({"create", "-f", (dir / "seed.yaml").string()});
  INFO(seeded.err);
  REQUIRE(seeded.exit_code == 0);
}

// kubectl as n1.
using AsNode = std::function<RunResult(std::vector<std::string>)>;

// curl as n1 (a kubelet's own requests: kubectl would first GET nodes/NAME/status, which a node
// may not): the HTTP code, then the body.
RunResult curlAsNode(const TempDir& dir, const std::string& url, const std::string& method,
                     const std::string& body = "") {
  std::vector<std::string> argv = {"curl",     "-sS",
                                   "-w",       "\n%{http_code}",
                                   "-X",       method,
                                   "--cacert", (dir / "certs" / "ca.crt").string(),
                                   "--cert",   (dir / "n1.crt").string(),
                                   "--key",    (dir / "n1.key").string()};
  if (!body.empty()) {
    argv.insert(argv.end(), {"-H", "Content-Type: application/merge-patch+json", "-d", body});
  }
  argv.push_back(url);
  return runCommand(argv, dir);
}

// n1 writes its own Node's status and mirror pods; another node's, a role label and a mirror pod
// bound elsewhere are refused.
void checkWrites(const AsNode& as_n1, const Kubectl& admin, const TempDir& dir,
                 const std::string& url) {
  const std::string ready = R"({"status":{"conditions":[{"type":"Ready","status":"True"}]}})";
  auto own_status = curlAsNode(dir, url + "/api/v1/nodes/n1/status", "PATCH", ready);
  CHECK(own_status.out.ends_with("\n200"));
  auto other_status = curlAsNode(dir, url + "/api/v1/nodes/n2/status", "PATCH", ready);
  CHECK(other_status.out.ends_with("\n403"));
  const json refusal =
      json::parse(other_status.out.substr(0, other_status.out.rfind('\n')), nullptr, false);
  REQUIRE(refusal.is_object());
  CHECK(refusal["message"] ==
        "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\"");
  CHECK(refusal["reason"] == "Forbidden");
  CHECK(as_n1({"label", "node", "n1", "node-role.kubernetes.io/control-plane="}).err ==
        "Error from server (Forbidden): nodes \"n1\" is forbidden: is not allowed to modify "
        "labels: node-role.kubernetes.io/control-plane\n");
  const std::string n1_uid = admin.run({"get", "node", "n1", "-o", "jsonpath={.metadata.uid}"}).out;
  REQUIRE_FALSE(n1_uid.empty());
  writeFile(dir / "mirror-n1.yaml", mirrorPod("static-n1", "n1", n1_uid));
  writeFile(dir / "mirror-n2.yaml", mirrorPod("static-n2", "n2", n1_uid));
  auto own_mirror = as_n1({"create", "-f", (dir / "mirror-n1.yaml").string()});
  INFO(own_mirror.err);
  CHECK(own_mirror.exit_code == 0);
  CHECK(as_n1({"create", "-f", (dir / "mirror-n2.yaml").string()}).err ==
        "Error from server (Forbidden): error when creating \"" +
            (dir / "mirror-n2.yaml").string() +
            "\": pods \"static-n2\" is forbidden: node \"n1\" can only create pods with "
            "spec.nodeName set to itself\n");
}

// n1 reads its Node, its pods and the secret its pod uses; another Node, every pod and another
// secret are refused with the Node authorizer's reasons.
void checkReads(const AsNode& as_n1) {
  CHECK(as_n1({"get", "node", "n2"}).err ==
        "Error from server (Forbidden): nodes \"n2\" is forbidden: User \"system:node:n1\" cannot "
        "get resource \"nodes\" in API group \"\" at the cluster scope: node 'n1' cannot read "
        "'n2', only its own Node object\n");
  auto used = as_n1({"get", "secret", "web-secret", "-o", "jsonpath={.data.k}"});
  INFO(used.err);
  CHECK(used.out == "dg==");
  CHECK(as_n1({"get", "secret", "other-secret"}).err ==
        "Error from server (Forbidden): secrets \"other-secret\" is forbidden: User "
        "\"system:node:n1\" cannot get resource \"secrets\" in API group \"\" in the namespace "
        "\"default\": no relationship found between node 'n1' and this object\n");
  CHECK(as_n1({"get", "pods", "-A", "--field-selector=spec.nodeName=n1", "-o", "name"}).out ==
        "pod/static-n1\npod/web\n");
  CHECK(as_n1({"get", "pods", "-A"})
            .err.find(
                "cannot list resource \"pods\" in API group \"\" at the cluster scope: can only "
                "list/watch pods with spec.nodeName field selector") != std::string::npos);
  CHECK(as_n1({"auth", "can-i", "get", "secret/web-secret"}).out == "yes\n");
  CHECK(as_n1({"auth", "can-i", "get", "secret/other-secret"}).out ==
        "no - no relationship found between node 'n1' and this object\n");
}

}  // namespace

TEST_CASE(
    "node authorization: a node writes its own Node status and mirror pods and reads what its "
    "pods use but nothing of another node",
    "[integration][apiserver]") {
  TempDir dir("apiserver-node-authz");
  SpawnedApiServer server(dir, nodeAuthorizedServerArgs(dir));
  REQUIRE(server.ok());
  Kubectl admin(dir, server);
  seedCluster(admin, dir);
  writeNodeCredentials(dir, server.url());
  const AsNode as_n1 = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"kubectl", "--kubeconfig=" + (dir / "n1.kubeconfig").string(),
                               "--cache-dir=" + (dir / "kube-cache").string()});
    return runCommand(args, dir);
  };
  checkWrites(as_n1, admin, dir, server.url());
  checkReads(as_n1);

  // A read refused on the wire: kube-apiserver's 403 Status naming the object.
  auto wire =
      curlAsNode(dir, server.url() + "/api/v1/namespaces/default/secrets/other-secret", "GET");
  CHECK(wire.out.ends_with("\n403"));
  const json status = json::parse(wire.out.substr(0, wire.out.rfind('\n')), nullptr, false);
  REQUIRE(status.is_object());
  CHECK(status["details"]["name"] == "other-secret");
  CHECK(status["details"]["kind"] == "secrets");
}
