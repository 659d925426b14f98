// kubectl auth whoami and can-i against build/test-apiserver, the server's authorization of its
// own requests (--authorization-mode) and its x509 client certificate authentication, through
// the real kubectl over TLS.
#include <catch2/catch.hpp>

#include "test/integration/apiserver_test_util.h"
#include "test/support/tls_cert.h"

using namespace nodeagent::testing;

namespace {

const char* kPolicyPrefix =
    R"({"apiVersion":"abac.authorization.kubernetes.io/v1beta1","kind":"Policy","spec":)";

// admin is in system:masters; bob (group dev) may read pods in default and GET /metrics.
std::vector<std::string> authArgs(const TempDir& dir, bool with_policy) {
  writeFile(dir / "tokens.csv", "admin-token,admin,1,\"system:masters\"\nbob-token,bob,2,dev\n");
  writeFile(dir / "policy.jsonl",
            std::string(kPolicyPrefix) +
                R"({"user":"bob","namespace":"default","resource":"pods","apiGroup":"*",)"
                R"("readonly":true}})" +
                "\n" + kPolicyPrefix + R"({"group":"dev","nonResourcePath":"/metrics"}})" + "\n");
  std::vector<std::string> args = {"--cert-dir=" + (dir / "certs").string(),
                                   "--token-auth-file=" + (dir / "tokens.csv").string()};
  if (with_policy) args.push_back("--authorization-policy-file=" + (dir / "policy.jsonl").string());
  return args;
}

}  // namespace

TEST_CASE(
    "kubectl auth whoami and can-i answer for the token's user from the ABAC policy the "
    "server enforces on its own requests",
    "[integration][apiserver]") {
  TempDir dir("apiserver-auth-abac");
  SpawnedApiServer server(dir, authArgs(dir, /*with_policy=*/true));
  REQUIRE(server.ok());
  Kubectl kubectl(dir, server);
  const auto as_bob = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "--token=bob-token");
    return kubectl.run(std::move(args));
  };

  auto whoami = kubectl.run({"auth", "whoami"});
  INFO(whoami.err);
  CHECK(whoami.exit_code == 0);
  CHECK(whoami.out ==
        "ATTRIBUTE   VALUE\nUsername    admin\nUID         1\n"
        "Groups      [system:masters system:authenticated]\n");
  auto bob = as_bob({"auth", "whoami"});
  CHECK(bob.out ==
        "ATTRIBUTE   VALUE\nUsername    bob\nUID         2\n"
        "Groups      [dev system:authenticated]\n");

  CHECK(kubectl.run({"auth", "can-i", "create", "nodes"}).out == "yes\n");
  auto yes = as_bob({"auth", "can-i", "list", "pods"});
  CHECK(yes.exit_code == 0);
  CHECK(yes.out == "yes\n");
  auto no = as_bob({"auth", "can-i", "delete", "pods"});
  CHECK(no.exit_code == 1);
  CHECK(no.out == "no - No policy matched.\n");
  CHECK(as_bob({"auth", "can-i", "list", "pods", "-n", "kube-system"}).exit_code == 1);
  CHECK(as_bob({"auth", "can-i", "get", "/metrics"}).out == "yes\n");
  auto list = as_bob({"auth", "can-i", "--list"});
  INFO(list.err);
  CHECK(list.exit_code == 0);
  CHECK(list.out.find("pods.*") != std::string::npos);
  CHECK(list.out.find("[get list watch]") != std::string::npos);
  CHECK(list.out.find("[/metrics]") != std::string::npos);

  // What can-i said is what the server does.
  CHECK(as_bob({"get", "pods"}).exit_code == 0);
  auto nodes = as_bob({"get", "nodes"});
  CHECK(nodes.exit_code == 1);
  CHECK(nodes.err ==
        "Error from server (Forbidden): nodes is forbidden: User \"bob\" cannot list resource "
        "\"nodes\" in API group \"\" at the cluster scope: No policy matched.\n");
  auto create = as_bob({"create", "configmap", "cfg", "--from-literal=a=b"});
  CHECK(create.exit_code == 1);
  CHECK(create.err.find("configmaps is forbidden: User \"bob\" cannot create resource "
                        "\"configmaps\" in API group \"\" in the namespace \"default\"") !=
        std::string::npos);
  CHECK(kubectl.run({"create", "configmap", "cfg", "--from-literal=a=b"}).exit_code == 0);
  auto secret = as_bob({"get", "secrets", "-n", "kube-system"});
  CHECK(secret.exit_code == 1);
  CHECK(secret.err.find("(Forbidden)") != std::string::npos);
}

TEST_CASE(
    "without a policy every authenticated user may do everything (AlwaysAllow) and says "
    "so, and a policy file with --authorization-mode=AlwaysAllow stops the start",
    "[integration][apiserver]") {
  TempDir dir("apiserver-auth-allow");
  {
    SpawnedApiServer server(dir, authArgs(dir, /*with_policy=*/false));
    REQUIRE(server.ok());
    Kubectl kubectl(dir, server);
    auto can = kubectl.run({"--token=bob-token", "auth", "can-i", "create", "nodes"});
    CHECK(can.out == "yes\n");
    CHECK(kubectl.run({"--token=bob-token", "get", "nodes"}).exit_code == 0);
    // Authenticated, that is: a request without a token is refused.
    auto anonymous = runCommand(
        {"curl", "-sS", "--cacert", (dir / "certs/ca.crt").string(), server.url() + "/api/v1/pods"},
        dir);
    CHECK(anonymous.exit_code == 0);
    CHECK(anonymous.out.find("\"code\":401") != std::string::npos);
  }
  std::vector<std::string> args = authArgs(dir, /*with_policy=*/true);
  args.insert(args.begin(), {binaryPath("test-apiserver").string(), "--port=0",
                             "--authorization-mode=AlwaysAllow"});
  auto conflicting = runCommand(args, dir);
  CHECK(conflicting.exit_code == 1);
  CHECK(conflicting.err.find("--authorization-policy-file needs --authorization-mode=ABAC") !=
        std::string::npos);
  auto unknown = runCommand({binaryPath("test-apiserver").string(), "--port=0",
                             "--insecure-serve-http", "--authorization-mode=RBAC"},
                            dir);
  CHECK(unknown.exit_code == 1);
  CHECK(unknown.err.find("unknown mode \"RBAC\"") != std::string::npos);
}

TEST_CASE(
    "x509 client certificates from --client-ca-file authenticate their CN in their O "
    "groups beside tokens, and one from another CA is refused",
    "[integration][apiserver]") {
  TempDir dir("apiserver-auth-x509");
  TestPki pki(dir / "pki");
  TestPki other(dir / "other", "someone-else");
  const auto alice = pki.issueClient("alice", {"dev", "system:masters"});
  const auto mallory = other.issueClient("mallory", {"system:masters"});
  std::vector<std::string> args = authArgs(dir, /*with_policy=*/true);
  args.push_back("--client-ca-file=" + pki.caFile().string());
  SpawnedApiServer server(dir, args);
  REQUIRE(server.ok());
  Kubectl kubectl(dir, server);
  const auto with_cert = [&](const TestPki::Files& files, std::vector<std::string> args) {
    args.insert(args.begin(), {"--client-certificate=" + files.cert_file.string(),
                               "--client-key=" + files.key_file.string(), "--token="});
    return kubectl.run(std::move(args));
  };
  auto whoami = with_cert(alice, {"auth", "whoami"});
  INFO(whoami.err);
  CHECK(whoami.exit_code == 0);
  CHECK(whoami.out ==
        "ATTRIBUTE   VALUE\nUsername    alice\n"
        "Groups      [dev system:masters system:authenticated]\n");
  CHECK(with_cert(alice, {"get", "nodes"}).exit_code == 0);  // system:masters under ABAC
  // (curl: kubectl would ask for a user name on the terminal after a 401.)
  auto refused = runCommand({"curl", "-sS", "--cacert", (dir / "certs/ca.crt").string(), "--cert",
                             mallory.cert_file.string(), "--key", mallory.key_file.string(),
                             server.url() + "/api/v1/pods"},
                            dir);
  CHECK(refused.exit_code == 0);
  CHECK(refused.out.find("\"code\":401") != std::string::npos);
  // The token beside it still works.
  CHECK(kubectl.run({"auth", "whoami"}).out.find("Username    admin") != std::string::npos);

  auto plain = runCommand({binaryPath("test-apiserver").string(), "--port=0",
                           "--insecure-serve-http", "--client-ca-file=" + pki.caFile().string()},
                          dir);
  CHECK(plain.exit_code == 1);
  CHECK(plain.err.find("--client-ca-file needs TLS") != std::string::npos);
}

TEST_CASE(
    "bootstrap token auth (--enable-bootstrap-token-auth): a kubectl-made bootstrap token Secret "
    "lets its token "
    "in as system:bootstrap:<id> until the Secret is deleted",
    "[integration][apiserver]") {
  TempDir dir("apiserver-auth-bootstrap");
  std::vector<std::string> args = authArgs(dir, /*with_policy=*/false);
  args.push_back("--enable-bootstrap-token-auth");
  SpawnedApiServer server(dir, args);
  REQUIRE(server.ok());
  Kubectl kubectl(dir, server);
  auto made =
      kubectl.run({"create", "secret", "generic", "bootstrap-token-abcdef", "-n", "kube-system",
                   "--type=bootstrap.kubernetes.io/token", "--from-literal=token-id=abcdef",
                   "--from-literal=token-secret=0123456789abcdef",
                   "--from-literal=usage-bootstrap-authentication=true",
                   "--from-literal=auth-extra-groups=system:bootstrappers:worker"});
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  auto whoami = kubectl.run({"--token=abcdef.0123456789abcdef", "auth", "whoami"});
  INFO(whoami.err);
  CHECK(whoami.out ==
        "ATTRIBUTE   VALUE\nUsername    system:bootstrap:abcdef\n"
        "Groups      [system:bootstrappers system:bootstrappers:worker system:authenticated]\n");
  CHECK(
      kubectl.run({"delete", "secret", "bootstrap-token-abcdef", "-n", "kube-system"}).exit_code ==
      0);
  auto refused =
      runCommand({"curl", "-sS", "--cacert", (dir / "certs/ca.crt").string(), "-H",
                  "Authorization: Bearer abcdef.0123456789abcdef", server.url() + "/api/v1/pods"},
                 dir);
  CHECK(refused.out.find("\"code\":401") != std::string::npos);
}
