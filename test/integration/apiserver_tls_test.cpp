// build/test-apiserver serves HTTPS by default, as kube-apiserver: a CA kept under --cert-dir,
// a serving certificate issued from it at each start, and the written kubeconfig carrying the CA
// and a token, used unchanged by kubectl and python3-kubernetes.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "test/integration/apiserver_test_util.h"

using namespace nodeagent::testing;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> secureArgs(const TempDir& dir) {
  writeFile(dir / "tokens.csv", "admin-token,admin,1,\"system:masters\"\n");
  return {"--cert-dir=" + (dir / "certs").string(),
          "--token-auth-file=" + (dir / "tokens.csv").string()};
}

mode_t fileMode(const std::filesystem::path& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// The python3-kubernetes client (Debian's, under /usr/bin/python3) lists namespaces with the
// kubeconfig as written.
RunResult pythonListNamespaces(const TempDir& dir, const std::filesystem::path& kubeconfig) {
  return runCommand({"/usr/bin/python3", "-c",
                     "from kubernetes import client, config\n"
                     "config.load_kube_config(config_file='" +
                         kubeconfig.string() +
                         "')\n"
                         "print(' '.join(sorted(n.metadata.name for n in "
                         "client.CoreV1Api().list_namespace().items)))\n"},
                    dir);
}

}  // namespace

TEST_CASE(
    "test-apiserver: HTTPS by default with a CA made under --cert-dir that kubectl and "
    "python3-kubernetes trust through the written kubeconfig",
    "[integration][apiserver]") {
  TempDir dir("apiserver-tls-default");
  std::string first_ca;
  {
    SpawnedApiServer server(dir, secureArgs(dir));
    REQUIRE(server.ok());
    CHECK(server.url().starts_with("https://127.0.0.1:"));
    for (const char* name : {"ca.crt", "ca.key", "apiserver.crt", "apiserver.key"}) {
      INFO(name);
      CHECK(std::filesystem::exists(dir / "certs" / name));
    }
    CHECK(fileMode(dir / "certs" / "ca.key") == 0600);
    CHECK(fileMode(dir / "certs" / "apiserver.key") == 0600);
    CHECK(fileMode(dir / "certs") == 0700);
    const std::string kubeconfig = readFile(server.kubeconfig());
    CHECK(kubeconfig.find("certificate-authority-data: ") != std::string::npos);
    CHECK(kubeconfig.find("token: admin-token") != std::string::npos);
    first_ca = readFile(dir / "certs" / "ca.crt");

    Kubectl kubectl(dir, server);
    auto ns = kubectl.run({"get", "namespaces", "-o", "name"});
    INFO(ns.err);
    CHECK(ns.exit_code == 0);
    CHECK(ns.out.find("namespace/default") != std::string::npos);
    auto python = pythonListNamespaces(dir, server.kubeconfig());
    INFO(python.err);
    CHECK(python.exit_code == 0);
    CHECK(python.out == "default kube-node-lease kube-public kube-system\n");

    // The serving certificate names the loopback addresses and localhost.
    auto sans = runCommand({"openssl", "x509", "-in", (dir / "certs" / "apiserver.crt").string(),
                            "-noout", "-ext", "subjectAltName"},
                           dir);
    CHECK(sans.out.find("IP Address:127.0.0.1") != std::string::npos);
    CHECK(sans.out.find("IP Address:0:0:0:0:0:0:0:1") != std::string::npos);
    CHECK(sans.out.find("DNS:localhost") != std::string::npos);
    // Without the CA a client refuses the server.
    auto untrusted = runCommand({"kubectl", "--server=" + server.url(), "--token=admin-token",
                                 "--cache-dir=" + (dir / "cache2").string(), "get", "ns"},
                                dir);
    CHECK(untrusted.exit_code != 0);
    CHECK(untrusted.err.find("certificate") != std::string::npos);
  }
  // A second start keeps the CA: kubeconfigs written before still work.
  const std::string old_kubeconfig = readFile(dir / "kubeconfig");
  SpawnedApiServer again(dir, secureArgs(dir));
  REQUIRE(again.ok());
  CHECK(readFile(dir / "certs" / "ca.crt") == first_ca);
  const std::string new_kubeconfig = readFile(dir / "kubeconfig");
  const auto ca_line = [](const std::string& text) {
    const auto at = text.find("certificate-authority-data: ");
    return text.substr(at, text.find('\n', at) - at);
  };
  CHECK(ca_line(new_kubeconfig) == ca_line(old_kubeconfig));
  Kubectl kubectl(dir, again);
  CHECK(kubectl.run({"get", "namespaces"}).exit_code == 0);
}

TEST_CASE(
    "test-apiserver: --insecure-serve-http serves plain HTTP and excludes the TLS flags, a "
    "broken or half CA under --cert-dir stops the start naming the file",
    "[integration][apiserver]") {
  TempDir dir("apiserver-tls-flags");
  SpawnedApiServer plain(dir);  // --insecure-serve-http
  REQUIRE(plain.ok());
  CHECK(plain.url().starts_with("http://127.0.0.1:"));
  CHECK(readFile(plain.kubeconfig()).find("certificate-authority-data") == std::string::npos);

  const std::string binary = binaryPath("test-apiserver").string();
  auto both = runCommand(
      {binary, "--port=0", "--insecure-serve-http", "--cert-dir=" + (dir / "c").string()}, dir);
  CHECK(both.exit_code == 2);
  CHECK(both.err.find("--insecure-serve-http cannot be combined with --cert-dir") !=
        std::string::npos);

  std::filesystem::create_directories(dir / "broken");
  writeFile(dir / "broken" / "ca.crt", "not a certificate\n");
  writeFile(dir / "broken" / "ca.key", "not a key\n");
  auto broken = runCommand({binary, "--port=0", "--cert-dir=" + (dir / "broken").string()}, dir);
  CHECK(broken.exit_code == 1);
  CHECK(broken.err.find((dir / "broken" / "ca.crt").string()) != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "broken" / "apiserver.crt"));

  // Half a CA (its key gone) is not silently replaced by a new one.
  std::filesystem::create_directories(dir / "half");
  {
    SpawnedApiServer first(dir, {"--cert-dir=" + (dir / "half").string()});
    REQUIRE(first.ok());
  }
  std::filesystem::remove(dir / "half" / "ca.key");
  const std::string ca = readFile(dir / "half" / "ca.crt");
  auto half = runCommand({binary, "--port=0", "--cert-dir=" + (dir / "half").string()}, dir);
  CHECK(half.exit_code == 1);
  CHECK(half.err.find("the CA under --cert-dir is half there") != std::string::npos);
  CHECK(readFile(dir / "half" / "ca.crt") == ca);
}
