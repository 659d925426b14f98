// CertificateSigningRequests against build/test-apiserver through the real kubectl: a node's
// client certificate request made with a bootstrap token is approved and signed by the cluster
// CA, and the certificate then authenticates the node (the TLS bootstrap loop); kubectl
// certificate approve and deny; no auto-approval when it is switched off.
#include <iterator>
#include <map>
#include <sstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/certificate/pki.h"
#include "cmd/test-apiserver/util.h"
#include "test/integration/apiserver_test_util.h"
#include "test/integration/joinable_cluster.h"

using nlohmann::json;
using namespace nodeagent::testing;
using nodeagent::certificate::CertificateRequest;
using nodeagent::certificate::KeyPair;

namespace {

// A CSR manifest for `subject` (its key written as `<name>.key`).
KeyPair writeCsr(const TempDir& dir, const std::string& name, const std::string& cn,
                 const std::vector<std::string>& orgs, const std::string& signer,
                 const std::string& usages) {
  CertificateRequest subject;
  subject.common_name = cn;
  subject.organizations = orgs;
  auto request = nodeagent::certificate::generateSigningRequest(subject);
  REQUIRE(request.ok());
  writeFile(dir / (name + ".key"), request->key_pem);
  writeFile(dir / (name + ".yaml"),
            "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n"
            "  name: " +
                name +
                "\nspec:\n  request: " + nodeagent::testapiserver::base64Encode(request->cert_pem) +
                "\n  signerName: " + signer + "\n  usages: [" + usages + "]\n");
  return *request;
}

std::string certificateOf(const Kubectl& kubectl, const std::string& name) {
  auto got = kubectl.run({"get", "csr", name, "-o", "jsonpath={.status.certificate}"});
  return nodeagent::testapiserver::base64Decode(got.out).value_or("");
}

}  // namespace

TEST_CASE(
    "CSR: a bootstrap token's node client request is approved and signed, and the "
    "certificate authenticates the node",
    "[integration][apiserver]") {
  TempDir dir("apiserver-csr");
  writeFile(dir / "tokens.csv", "admin-token,admin,1,\"system:masters\"\n");
  writeFile(dir / "policy.jsonl", kBootstrapperCsrPolicy);
  // The CA is made before the client CA file is read, so the signer's certificates are
  // accepted as client certificates.
  SpawnedApiServer server(dir, {"--cert-dir=" + (dir / "certs").string(),
                                "--token-auth-file=" + (dir / "tokens.csv").string(),
                                "--authorization-policy-file=" + (dir / "policy.jsonl").string(),
                                "--client-ca-file=" + (dir / "certs" / "ca.crt").string(),
                                "--enable-bootstrap-token-auth"});
  REQUIRE(server.ok());
  Kubectl kubectl(dir, server);
  REQUIRE(kubectl
              .run({"create", "secret", "generic", "bootstrap-token-abcdef", "-n", "kube-system",
                    "--type=bootstrap.kubernetes.io/token", "--from-literal=token-id=abcdef",
                    "--from-literal=token-secret=0123456789abcdef",
                    "--from-literal=usage-bootstrap-authentication=true"})
              .exit_code == 0);
  writeCsr(dir, "node-n1", "system:node:n1", {"system:nodes"},
           "kubernetes.io/kube-apiserver-client-kubelet", "digital signature, client auth");
  auto created = kubectl.run(
      {"--token=abcdef.0123456789abcdef", "create", "-f", (dir / "node-n1.yaml").string()});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  auto conditions = kubectl.run({"get", "csr", "node-n1", "-o",
                                 "jsonpath={.status.conditions[0].type} "
                                 "{.status.conditions[0].reason} {.spec.username}"});
  CHECK(conditions.out == "Approved AutoApproved system:bootstrap:abcdef");
  const std::string cert = certificateOf(kubectl, "node-n1");
  REQUIRE(cert.starts_with("-----BEGIN CERTIFICATE-----"));
  writeFile(dir / "node-n1.crt", cert);
  auto verified = runCommand({"openssl", "verify", "-CAfile", (dir / "certs" / "ca.crt").string(),
                              (dir / "node-n1.crt").string()},
                             dir);
  CHECK(verified.out.find(": OK") != std::string::npos);

  // The node authenticates with it (groups from its O).
  auto whoami = kubectl.run({"--token=", "--client-certificate=" + (dir / "node-n1.crt").string(),
                             "--client-key=" + (dir / "node-n1.key").string(), "auth", "whoami"});
  INFO(whoami.err);
  CHECK(whoami.out.find("Username    system:node:n1\n") != std::string::npos);
  CHECK(whoami.out.find("Groups      [system:nodes system:authenticated]") != std::string::npos);

  // Nobody else's request is auto-approved; a bootstrap token cannot ask for an admin's.
  writeCsr(dir, "sneaky", "admin", {"system:masters"},
           "kubernetes.io/kube-apiserver-client-kubelet", "digital signature, client auth");
  REQUIRE(
      kubectl
          .run({"--token=abcdef.0123456789abcdef", "create", "-f", (dir / "sneaky.yaml").string()})
          .exit_code == 0);
  CHECK(kubectl.run({"get", "csr", "sneaky", "-o", "jsonpath={.status}"}).out.empty());
}

TEST_CASE(
    "CSR: kubectl certificate approve and deny, and --csr-auto-approve=false leaves node "
    "requests pending",
    "[integration][apiserver]") {
  TempDir dir("apiserver-csr-manual");
  SpawnedApiServer server(dir,
                          {"--cert-dir=" + (dir / "certs").string(), "--csr-auto-approve=false"});
  REQUIRE(server.ok());
  Kubectl kubectl(dir, server);
  // Without a token file the kubeconfig carries an admin client certificate from the CA.
  CHECK(kubectl.run({"auth", "whoami"}).out.find("Username    kubernetes-admin\n") !=
        std::string::npos);
  for (const char* name : {"alice", "bob"}) {
    writeCsr(dir, name, name, {}, "kubernetes.io/kube-apiserver-client", "client auth");
    auto created = kubectl.run({"create", "-f", (dir / (std::string(name) + ".yaml")).string()});
    INFO(created.err);
    REQUIRE(created.exit_code == 0);
  }
  writeCsr(dir, "node-n2", "system:node:n2", {"system:nodes"},
           "kubernetes.io/kube-apiserver-client-kubelet", "digital signature, client auth");
  REQUIRE(kubectl.run({"create", "-f", (dir / "node-n2.yaml").string()}).exit_code == 0);
  CHECK(certificateOf(kubectl, "alice").empty());
  CHECK(certificateOf(kubectl, "node-n2").empty());  // pending: auto-approval is off

  auto approved = kubectl.run({"certificate", "approve", "alice"});
  INFO(approved.err);
  CHECK(approved.out == "certificatesigningrequest.certificates.k8s.io/alice approved\n");
  const std::string cert = certificateOf(kubectl, "alice");
  REQUIRE(cert.starts_with("-----BEGIN CERTIFICATE-----"));
  writeFile(dir / "alice.crt", cert);
  auto subject = runCommand(
      {"openssl", "x509", "-in", (dir / "alice.crt").string(), "-noout", "-subject"}, dir);
  CHECK(subject.out == "subject=CN = alice\n");

  CHECK(kubectl.run({"certificate", "deny", "bob"}).exit_code == 0);
  // kube-apiserver's columns.
  auto table = kubectl.run({"get", "csr", "--sort-by=.metadata.name"});
  INFO(table.out);
  CHECK(table.out.find("NAME      AGE   SIGNERNAME") == 0);
  CHECK(table.out.find("REQUESTOR          REQUESTEDDURATION   CONDITION\n") != std::string::npos);
  // Each row's cells, the age left out.
  std::map<std::string, std::vector<std::string>> rows;
  std::istringstream lines(table.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream cells(line);
    std::vector<std::string> row{std::istream_iterator<std::string>(cells), {}};
    if (row.size() == 6) rows[row[0]] = {row[2], row[3], row[4], row[5]};
  }
  const std::string client = "kubernetes.io/kube-apiserver-client";
  CHECK(rows["alice"] ==
        std::vector<std::string>{client, "kubernetes-admin", "<none>", "Approved,Issued"});
  CHECK(rows["bob"] == std::vector<std::string>{client, "kubernetes-admin", "<none>", "Denied"});
  CHECK(rows["node-n2"] == std::vector<std::string>{"kubernetes.io/kube-apiserver-client-kubelet",
                                                    "kubernetes-admin", "<none>", "Pending"});
  CHECK(kubectl.run({"get", "csr", "bob", "-o", "jsonpath={.status.conditions[0].type}"}).out ==
        "Denied");
  CHECK(certificateOf(kubectl, "bob").empty());
}
