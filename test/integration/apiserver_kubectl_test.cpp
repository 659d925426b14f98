// The real kubectl (v1.32) and the python3-kubernetes client against a spawned
// build/test-apiserver, through the kubeconfig it writes.
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/util.h"
#include "test/integration/apiserver_test_util.h"

using nlohmann::json;
using namespace nodeagent::testing;
using namespace std::chrono_literals;

namespace {

const char* kPodYaml = R"(apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: default
  labels:
    app: web
    tier: front
  annotations:
    example.com/note: "kept as is"
spec:
  nodeName: node1
  restartPolicy: OnFailure
  terminationGracePeriodSeconds: 5
  containers:
  - name: web
    image: nginx:1.25
    command: ["/bin/sh", "-c"]
    args: ["exec nginx -g 'daemon off;'"]
    env:
    - name: MODE
      value: test
    ports:
    - containerPort: 80
      name: http
    resources:
      limits:
        memory: 64Mi
)";

// True once the server counts `n` open watches.
bool watchesOpen(const SpawnedApiServer& server, size_t n) {
  httplib::Client client("127.0.0.1", server.port());
  auto r = client.Get("/_test/status");
  return r && r->status == 200 && json::parse(r->body)["watches"].get<size_t>() >= n;
}

// A self-signed certificate for 127.0.0.1 (cert.pem, key.pem in `dir`).
bool generateCert(const TempDir& dir) {
  auto gen =
      runCommand({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                  "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout",
                  (dir / "key.pem").string(), "-out", (dir / "cert.pem").string()},
                 dir);
  return gen.exit_code == 0;
}

json podJson(const std::string& name, const std::string& node) {
  json p = {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}}},
            {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
  if (!node.empty()) p["spec"]["nodeName"] = node;
  return p;
}

// The whitespace-separated words of each line of kubectl's table output.
std::vector<std::vector<std::string>> tableRows(const std::string& out) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::vector<std::string> row;
    for (std::string w; words >> w;) row.push_back(w);
    if (!row.empty()) rows.push_back(std::move(row));
  }
  return rows;
}

// The row whose first word is `first`, or an empty row.
std::vector<std::string> rowOf(const std::string& out, const std::string& first) {
  for (auto& row : tableRows(out)) {
    if (row[0] == first) return row;
  }
  return {};
}

using Words = std::vector<std::string>;

}  // namespace

TEST_CASE("kubectl: get, create, round trip, nodes, raw and api-resources",
          "[integration][apiserver]") {
  TempDir dir("apiserver-kubectl");
  SpawnedApiServer server(dir);
  REQUIRE(server.ok());
  CHECK(server.url().starts_with("http://127.0.0.1:"));
  Kubectl kubectl(dir, server);

  auto empty = kubectl.run({"get", "pods", "-A"});
  INFO(empty.err);
  CHECK(empty.exit_code == 0);
  CHECK(empty.err.find("No resources found") != std::string::npos);

  writeFile(dir / "pod.yaml", kPodYaml);
  auto created = kubectl.run({"create", "-f", (dir / "pod.yaml").string()});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  CHECK(created.out.find("pod/web created") != std::string::npos);

  auto table = kubectl.run({"get", "pods", "-A", "-o", "wide"});
  REQUIRE(table.exit_code == 0);
  CHECK(table.out.find("NAMESPACE   NAME   READY   STATUS    RESTARTS   AGE   IP       NODE") !=
        std::string::npos);
  CHECK(table.out.find("default     web    0/1     Pending   0") != std::string::npos);

  auto got = kubectl.run({"get", "pod", "web", "-o", "json"});
  REQUIRE(got.exit_code == 0);
  json pod = json::parse(got.out);
  CHECK(pod["kind"] == "Pod");
  CHECK(pod["metadata"]["labels"] == json({{"app", "web"}, {"tier", "front"}}));
  CHECK(pod["metadata"]["annotations"]["example.com/note"] == "kept as is");
  CHECK(pod["metadata"]["uid"].get<std::string>().size() == 36);
  CHECK_FALSE(pod["metadata"]["resourceVersion"].get<std::string>().empty());
  CHECK_FALSE(pod["metadata"]["creationTimestamp"].get<std::string>().empty());
  CHECK(pod["spec"]["nodeName"] == "node1");
  CHECK(pod["spec"]["restartPolicy"] == "OnFailure");
  CHECK(pod["spec"]["terminationGracePeriodSeconds"] == 5);
  const json& c = pod["spec"]["containers"][0];
  CHECK(c["command"] == json({"/bin/sh", "-c"}));
  CHECK(c["args"] == json({"exec nginx -g 'daemon off;'"}));
  CHECK(c["env"] == json::array({{{"name", "MODE"}, {"value", "test"}}}));
  CHECK(c["ports"][0]["containerPort"] == 80);
  CHECK(c["ports"][0]["name"] == "http");
  CHECK(c["resources"]["limits"]["memory"] == "64Mi");
  CHECK(pod["status"]["phase"] == "Pending");

  writeFile(dir / "node.json", json({{"apiVersion", "v1"},
                                     {"kind", "Node"},
                                     {"metadata", {{"name", "node1"}}},
                                     {"status",
                                      {{"conditions", {{{"type", "Ready"}, {"status", "True"}}}},
                                       {"nodeInfo", {{"kubeletVersion", "v1.30.0"}}}}}})
                                   .dump());
  REQUIRE(kubectl.run({"create", "-f", (dir / "node.json").string()}).exit_code == 0);
  auto nodes = kubectl.run({"get", "nodes"});
  REQUIRE(nodes.exit_code == 0);
  CHECK(nodes.out.find("NAME    STATUS   ROLES    AGE   VERSION") != std::string::npos);
  // Like kube-apiserver, a node keeps the status it was registered with.
  CHECK(nodes.out.find("node1   Ready    <none>") != std::string::npos);
  CHECK(nodes.out.find("v1.30.0") != std::string::npos);

  auto raw = kubectl.run({"get", "--raw", "/api/v1/namespaces/default/pods"});
  REQUIRE(raw.exit_code == 0);
  json list = json::parse(raw.out);
  CHECK(list["kind"] == "PodList");
  CHECK(list["items"].size() == 1);

  auto resources = kubectl.run({"api-resources"});
  INFO(resources.err);
  REQUIRE(resources.exit_code == 0);
  CHECK(resources.out.find("leases") != std::string::npos);
  CHECK(resources.out.find("coordination.k8s.io/v1") != std::string::npos);
  CHECK(resources.out.find("po           v1") != std::string::npos);

  auto ns = kubectl.run({"get", "ns"});
  CHECK(ns.out.find("kube-node-lease   Active") != std::string::npos);
  // `create namespace` is the one command that sends protobuf.
  auto create_ns = kubectl.run({"create", "namespace", "team-a"});
  INFO(create_ns.err);
  CHECK(create_ns.exit_code == 0);
  CHECK(kubectl.run({"get", "namespace", "team-a"}).out.find("team-a   Active") !=
        std::string::npos);

  auto missing = kubectl.run({"get", "pod", "nope"});
  CHECK(missing.exit_code != 0);
  CHECK(missing.err.find("pods \"nope\" not found") != std::string::npos);
}

TEST_CASE("kubectl: get pods -w sees create, modify and delete", "[integration][apiserver]") {
  TempDir dir("apiserver-watch");
  SpawnedApiServer server(dir);
  REQUIRE(server.ok());
  Kubectl kubectl(dir, server);
  ChildProcess watch(kubectl.argv({"get", "pods", "-w", "--output-watch-events"}), dir / "w.out",
                     dir / "w.err");
  httplib::Client client("127.0.0.1", server.port());
  // The watch is open once the server counts it; until then the create could race the list.
  REQUIRE(eventually([&] { return watchesOpen(server, 1); }));
  auto res =
      client.Post("/api/v1/namespaces/default/pods", podJson("w1", "").dump(), "application/json");
  REQUIRE(res);
  REQUIRE(res->status == 201);
  REQUIRE(eventually([&] { return watch.out().find("ADDED") != std::string::npos; }));
  res = client.Patch("/api/v1/namespaces/default/pods/w1/status",
                     R"({"status":{"phase":"Running"}})", "application/merge-patch+json");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  REQUIRE(eventually([&] { return watch.out().find("MODIFIED") != std::string::npos; }));
  res = client.Delete("/api/v1/namespaces/default/pods/w1");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  REQUIRE(eventually([&] { return watch.out().find("DELETED") != std::string::npos; }));
  const std::string out = watch.out();
  INFO(out);
  CHECK(out.find("EVENT      NAME   READY   STATUS    RESTARTS   AGE") != std::string::npos);
  CHECK(out.find("MODIFIED   w1     0/1     Running") != std::string::npos);
  CHECK(watch.running());
}

TEST_CASE("kubectl: delete --wait completes once the grace-0 delete arrives",
          "[integration][apiserver]") {
  TempDir dir("apiserver-delete");
  SpawnedApiServer server(dir);
  REQUIRE(server.ok());
  Kubectl kubectl(dir, server);
  httplib::Client client("127.0.0.1", server.port());
  auto res = client.Post("/api/v1/namespaces/default/pods", podJson("bound", "node1").dump(),
                         "application/json");
  REQUIRE(res);
  REQUIRE(res->status == 201);
  const std::string uid = json::parse(res->body)["metadata"]["uid"];

  ChildProcess del(kubectl.argv({"delete", "pod", "bound", "--wait=true", "--timeout=60s"}),
                   dir / "d.out", dir / "d.err");
  json pod;
  REQUIRE(eventually([&] {
    auto r = client.Get("/api/v1/namespaces/default/pods/bound");
    if (!r || r->status != 200) return false;
    pod = json::parse(r->body);
    return pod["metadata"].contains("deletionTimestamp");
  }));
  CHECK(pod["metadata"]["deletionGracePeriodSeconds"] == 30);
  // The pod is only marked: kubectl keeps waiting for the DELETED event.
  CHECK(del.running());

  // What the node agent sends once the containers stopped.
  json opts = {{"kind", "DeleteOptions"},
               {"apiVersion", "v1"},
               {"gracePeriodSeconds", 0},
               {"preconditions", {{"uid", uid}}}};
  res = client.Delete("/api/v1/namespaces/default/pods/bound", opts.dump(), "application/json");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(del.wait(30s) == 0);
  CHECK(del.out().find("pod \"bound\" deleted") != std::string::npos);
  auto gone = client.Get("/api/v1/namespaces/default/pods/bound");
  REQUIRE(gone);
  CHECK(gone->status == 404);
}

TEST_CASE("kubectl: token auth with the kubeconfig token, a second token and a wrong one (401)",
          "[integration][apiserver]") {
  TempDir dir("apiserver-auth");
  writeFile(dir / "tokens.csv", "s3cret,admin,uid1,\"system:masters,dev\"\nother,bob,uid2\n");
  // kubectl sends bearer tokens over TLS only (and without any token asks for a password), so
  // the in-process HTTP tests cover requests without a token, the 401 Status body, health checks
  // and the token file format.
  REQUIRE(generateCert(dir));
  SpawnedApiServer server(dir, {"--token-auth-file=" + (dir / "tokens.csv").string(),
                                "--tls-cert-file=" + (dir / "cert.pem").string(),
                                "--tls-private-key-file=" + (dir / "key.pem").string()});
  REQUIRE(server.ok());
  CHECK(readFile(server.kubeconfig()).find("    token: s3cret\n") != std::string::npos);
  Kubectl kubectl(dir, server);
  auto ok = kubectl.run({"get", "pods"});
  INFO(ok.err);
  CHECK(ok.exit_code == 0);
  // The second token of the file works as well.
  CHECK(kubectl.run({"get", "pods", "--token=other"}).exit_code == 0);
  auto wrong = kubectl.run({"get", "pods", "--token=nope"});
  CHECK(wrong.exit_code != 0);
  CHECK(wrong.err.find("must be logged in") != std::string::npos);
}

TEST_CASE("kubectl: TLS with the self-signed certificate as the kubeconfig's CA",
          "[integration][apiserver]") {
  TempDir dir("apiserver-tls");
  REQUIRE(generateCert(dir));
  writeFile(dir / "tokens.csv", "tls-token,admin,uid1\n");
  SpawnedApiServer server(dir, {"--tls-cert-file=" + (dir / "cert.pem").string(),
                                "--tls-private-key-file=" + (dir / "key.pem").string(),
                                "--token-auth-file=" + (dir / "tokens.csv").string()});
  REQUIRE(server.ok());
  CHECK(server.url().starts_with("https://127.0.0.1:"));
  const std::string kubeconfig = readFile(server.kubeconfig());
  CHECK(kubeconfig.find("certificate-authority-data: ") != std::string::npos);
  Kubectl kubectl(dir, server);
  auto ns = kubectl.run({"get", "namespaces"});
  INFO(ns.err);
  REQUIRE(ns.exit_code == 0);
  CHECK(ns.out.find("kube-system") != std::string::npos);
  writeFile(dir / "pod.yaml", kPodYaml);
  auto created = kubectl.run({"create", "-f", (dir / "pod.yaml").string()});
  INFO(created.err);
  CHECK(created.exit_code == 0);
  // Without the CA the same server is rejected.
  auto untrusted = runCommand({"kubectl", "--server=" + server.url(), "--token=tls-token",
                               "--cache-dir=" + (dir / "cache2").string(), "get", "pods"},
                              dir);
  CHECK(untrusted.exit_code != 0);
  CHECK(untrusted.err.find("certificate") != std::string::npos);
}

TEST_CASE("python3-kubernetes: list_namespaced_pod and a watch stream",
          "[integration][apiserver]") {
  TempDir dir("apiserver-python");
  SpawnedApiServer server(dir);
  REQUIRE(server.ok());
  writeFile(dir / "client.py", R"PY(
import sys
from kubernetes import client, config, watch
config.load_kube_config(config_file=sys.argv[1])
v1 = client.CoreV1Api()
pods = v1.list_namespaced_pod("default")
print("LIST", len(pods.items), flush=True)
rv = pods.metadata.resource_version
body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "py", "labels": {"a": "b"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
v1.create_namespaced_pod("default", body)
v1.patch_namespaced_pod("py", "default", {"metadata": {"labels": {"a": "c"}}})
v1.delete_namespaced_pod("py", "default")
print("SELECTED", len(v1.list_namespaced_pod("default", label_selector="a=c").items), flush=True)
w = watch.Watch()
for ev in w.stream(v1.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=20):
    print("EVENT", ev["type"], ev["object"].metadata.name, ev["object"].metadata.labels.get("a"), flush=True)
    if ev["type"] == "DELETED":
        w.stop()
)PY");
  auto result = runCommand(
      {"/usr/bin/python3", (dir / "client.py").string(), server.kubeconfig().string()}, dir, 60s);
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  CHECK(result.out.find("LIST 0\n") != std::string::npos);
  CHECK(result.out.find("SELECTED 0\n") != std::string::npos);
  CHECK(result.out.find("EVENT ADDED py b\nEVENT MODIFIED py c\nEVENT DELETED py c\n") !=
        std::string::npos);
}

TEST_CASE("test-apiserver: SIGTERM exits cleanly while a watch is open",
          "[integration][apiserver]") {
  TempDir dir("apiserver-sigterm");
  SpawnedApiServer server(dir);
  REQUIRE(server.ok());
  Kubectl kubectl(dir, server);
  ChildProcess watch(kubectl.argv({"get", "pods", "-w"}), dir / "w.out", dir / "w.err");
  REQUIRE(eventually([&] { return watchesOpen(server, 1); }));
  server.process().signal(SIGTERM);
  CHECK(server.process().wait(10s) == 0);
}

TEST_CASE("test-apiserver: bad flags and unreadable files fail with a message",
          "[integration][apiserver]") {
  TempDir dir("apiserver-flags");
  auto bad = runCommand({binaryPath("test-apiserver").string(), "--nope=1"}, dir);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("unknown flag --nope") != std::string::npos);
  auto missing = runCommand({binaryPath("test-apiserver").string(), "--port=0",
                             "--token-auth-file=" + (dir / "missing.csv").string()},
                            dir);
  CHECK(missing.exit_code == 1);
  CHECK(missing.err.find("missing.csv") != std::string::npos);
}

TEST_CASE("test-apiserver: --bind-address, a fixed --port and --history-window",
          "[integration][apiserver]") {
  TempDir dir("apiserver-flags-ok");
  // A port that is listened on already: the server names the address and exits 1.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(listen(fd, 1) == 0);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  auto busy = runCommand({binaryPath("test-apiserver").string(), "--bind-address=127.0.0.1",
                          "--port=" + port, "--insecure-serve-http"},
                         dir);
  CHECK(busy.exit_code == 1);
  CHECK(busy.err.find("cannot listen on 127.0.0.1:" + port) != std::string::npos);
  close(fd);

  // The same port once it is free, and a history of two events.
  SpawnedApiServer server(dir,
                          {"--bind-address=127.0.0.1", "--port=" + port, "--history-window=2"});
  REQUIRE(server.ok());
  const std::string out = server.process().out();
  CHECK(out.substr(0, out.find('\n') + 1) == "listening on http://127.0.0.1:" + port + "\n");
  const std::string kubeconfig = readFile(server.kubeconfig());
  CHECK(kubeconfig.find("    server: http://127.0.0.1:" + port + "\n") != std::string::npos);
  CHECK(kubeconfig.find("token:") == std::string::npos);
  CHECK(kubeconfig.find("certificate-authority") == std::string::npos);

  httplib::Client client("127.0.0.1", server.port());
  auto status = client.Get("/_test/status");
  REQUIRE(status);
  const std::string rv = json::parse(status->body)["resourceVersion"];
  for (const char* name : {"a", "b"}) {
    auto res = client.Post("/api/v1/namespaces/default/pods", podJson(name, "").dump(),
                           "application/json");
    REQUIRE(res);
    REQUIRE(res->status == 201);
  }
  // Two events after rv are still in the history; a third pushes the first one out.
  auto kept =
      client.Get(("/api/v1/pods?watch=true&timeoutSeconds=1&resourceVersion=" + rv).c_str());
  REQUIRE(kept);
  CHECK(kept->body.find("\"type\":\"ADDED\"") != std::string::npos);
  CHECK(kept->body.find("\"ERROR\"") == std::string::npos);
  REQUIRE(
      client.Post("/api/v1/namespaces/default/pods", podJson("c", "").dump(), "application/json")
          ->status == 201);
  auto expired = client.Get(("/api/v1/pods?watch=true&resourceVersion=" + rv).c_str());
  REQUIRE(expired);
  CHECK(expired->status == 200);
  json ev = json::parse(expired->body.substr(0, expired->body.find('\n')));
  CHECK(ev["type"] == "ERROR");
  CHECK(ev["object"]["code"] == 410);
  CHECK(ev["object"]["reason"] == "Expired");
}

TEST_CASE("test-apiserver: listens with a backlog for a burst of watchers connecting at once",
          "[integration][apiserver]") {
  TempDir dir("apiserver-backlog");
  SpawnedApiServer server(dir);
  REQUIRE(server.ok());
  // For a listening socket, ss reports the backlog as its Send-Q.
  auto ss = runCommand({"ss", "-Hltn", "sport = :" + std::to_string(server.port())}, dir);
  REQUIRE(ss.exit_code == 0);
  INFO(ss.out);
  std::istringstream fields(ss.out);
  std::string state, recv_q, send_q;
  fields >> state >> recv_q >> send_q;
  CHECK(state == "LISTEN");
  CHECK(std::stoi(send_q) >= 128);
}

TEST_CASE("kubectl: create configmap and secret generic, get them as kube-apiserver shows them",
          "[integration][apiserver]") {
  TempDir dir("apiserver-config");
  SpawnedApiServer server(dir);
  REQUIRE(server.ok());
  Kubectl kubectl(dir, server);

  // kubectl's create subcommands send protobuf.
  auto cm = kubectl.run({"create", "configmap", "x", "--from-literal=a=b"});
  INFO(cm.err);
  REQUIRE(cm.exit_code == 0);
  CHECK(cm.out.find("configmap/x created") != std::string::npos);
  auto yaml = kubectl.run({"get", "cm", "x", "-o", "yaml"});
  REQUIRE(yaml.exit_code == 0);
  CHECK(yaml.out.find("kind: ConfigMap") != std::string::npos);
  CHECK(yaml.out.find("data:\n  a: b\n") != std::string::npos);
  auto cms = kubectl.run({"get", "configmaps"});
  REQUIRE(cms.exit_code == 0);
  CHECK(tableRows(cms.out).at(0) == Words{"NAME", "DATA", "AGE"});
  CHECK(rowOf(cms.out, "x").at(1) == "1");

  auto sec = kubectl.run({"create", "secret", "generic", "s", "--from-literal=k=v"});
  INFO(sec.err);
  REQUIRE(sec.exit_code == 0);
  CHECK(sec.out.find("secret/s created") != std::string::npos);
  auto data = kubectl.run({"get", "secret", "s", "-o", "jsonpath={.data.k}"});
  REQUIRE(data.exit_code == 0);
  CHECK(data.out == "dg==");
  json stored = json::parse(kubectl.run({"get", "secret", "s", "-o", "json"}).out);
  CHECK(stored["type"] == "Opaque");
  CHECK_FALSE(stored.contains("stringData"));
  auto tls = kubectl.run({"create", "secret", "generic", "t", "--type=kubernetes.io/tls",
                          "--from-literal=tls.crt=c", "--from-literal=tls.key=k"});
  INFO(tls.err);
  REQUIRE(tls.exit_code == 0);
  auto secrets = kubectl.run({"get", "secrets"});
  REQUIRE(secrets.exit_code == 0);
  CHECK(tableRows(secrets.out).at(0) == Words{"NAME", "TYPE", "DATA", "AGE"});
  CHECK((rowOf(secrets.out, "s") == Words{"s", "Opaque", "1", rowOf(secrets.out, "s").back()}));
  CHECK(rowOf(secrets.out, "t").at(1) == "kubernetes.io/tls");
  CHECK(rowOf(secrets.out, "t").at(2) == "2");
  auto by_type =
      kubectl.run({"get", "secrets", "--field-selector=type=kubernetes.io/tls", "-o", "name"});
  CHECK(by_type.out == "secret/t\n");

  // A type-specific check, a type change and immutability, as kube-apiserver words them.
  auto no_key = kubectl.run({"create", "secret", "generic", "half", "--type=kubernetes.io/tls",
                             "--from-literal=tls.crt=c"});
  CHECK(no_key.exit_code != 0);
  CHECK(no_key.err.find("Secret \"half\" is invalid: data[tls.key]: Required value") !=
        std::string::npos);
  auto retype =
      kubectl.run({"patch", "secret", "s", "--type=merge", "-p", R"({"type":"example.com/x"})"});
  CHECK(retype.exit_code != 0);
  CHECK(retype.err.find("type: Invalid value: \"example.com/x\": field is immutable") !=
        std::string::npos);
  REQUIRE(kubectl.run({"patch", "secret", "s", "-p", R"({"immutable":true})"}).exit_code == 0);
  auto frozen = kubectl.run({"patch", "secret", "s", "-p", R"({"stringData":{"k":"w"}})"});
  CHECK(frozen.exit_code != 0);
  CHECK(frozen.err.find("data: Forbidden: field is immutable when `immutable` is set") !=
        std::string::npos);
  CHECK(kubectl.run({"get", "secret", "s", "-o", "jsonpath={.data.k}"}).out == "dg==");

  writeFile(dir / "bad.json", json({{"apiVersion", "v1"},
                                    {"kind", "Secret"},
                                    {"metadata", {{"name", "bad"}}},
                                    {"data", {{"k", "not base64!"}}}})
                                  .dump());
  auto bad = kubectl.run({"create", "-f", (dir / "bad.json").string()});
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("data[k]: Invalid value") != std::string::npos);

  // Label selectors and delete, as for pods.
  REQUIRE(kubectl.run({"label", "cm", "x", "app=web"}).exit_code == 0);
  CHECK(kubectl.run({"get", "cm", "-l", "app=web", "-o", "name"}).out == "configmap/x\n");
  CHECK(kubectl.run({"get", "cm", "-l", "app!=web", "-o", "name"}).out.empty());
  auto del = kubectl.run({"delete", "cm", "x"});
  CHECK(del.exit_code == 0);
  CHECK(del.out.find("configmap \"x\" deleted") != std::string::npos);

  auto resources = kubectl.run({"api-resources", "--api-group="});
  INFO(resources.err);
  REQUIRE(resources.exit_code == 0);
  CHECK(
      (rowOf(resources.out, "configmaps") == Words{"configmaps", "cm", "v1", "true", "ConfigMap"}));
  CHECK((rowOf(resources.out, "secrets") == Words{"secrets", "v1", "true", "Secret"}));
  CHECK((rowOf(resources.out, "serviceaccounts") ==
         Words{"serviceaccounts", "sa", "v1", "true", "ServiceAccount"}));
}

TEST_CASE("kubectl: every namespace has a default serviceaccount, recreated when deleted",
          "[integration][apiserver]") {
  TempDir dir("apiserver-sa");
  SpawnedApiServer server(dir);
  REQUIRE(server.ok());
  Kubectl kubectl(dir, server);
  auto sas = kubectl.run({"get", "sa"});
  INFO(sas.err);
  REQUIRE(sas.exit_code == 0);
  CHECK(tableRows(sas.out).at(0) == Words{"NAME", "SECRETS", "AGE"});
  CHECK(rowOf(sas.out, "default").at(1) == "0");
  auto all = kubectl.run({"get", "sa", "-A", "-o", "jsonpath={.items[*].metadata.namespace}"});
  CHECK(all.out == "default kube-node-lease kube-public kube-system");

  REQUIRE(kubectl.run({"create", "namespace", "team-a"}).exit_code == 0);
  REQUIRE(eventually([&] {
    return kubectl.run({"get", "sa", "default", "-n", "team-a"}).exit_code == 0;
  }));
  const std::string uid =
      kubectl.run({"get", "sa", "default", "-o", "jsonpath={.metadata.uid}"}).out;
  REQUIRE_FALSE(uid.empty());
  REQUIRE(kubectl.run({"delete", "sa", "default"}).exit_code == 0);
  const std::string again =
      kubectl.run({"get", "sa", "default", "-o", "jsonpath={.metadata.uid}"}).out;
  CHECK_FALSE(again.empty());
  CHECK(again != uid);

  auto created = kubectl.run({"create", "serviceaccount", "builder"});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  REQUIRE(kubectl
              .run({"patch", "sa", "builder", "-p",
                    R"({"secrets":[{"name":"tok"}],"automountServiceAccountToken":false})"})
              .exit_code == 0);
  json builder = json::parse(kubectl.run({"get", "sa", "builder", "-o", "json"}).out);
  CHECK(builder["secrets"] == json::array({{{"name", "tok"}}}));
  CHECK(builder["automountServiceAccountToken"] == false);
  CHECK(rowOf(kubectl.run({"get", "sa"}).out, "builder").at(1) == "1");
}

TEST_CASE("kubectl: get events shows LAST SEEN, TYPE, REASON, OBJECT and MESSAGE",
          "[integration][apiserver]") {
  TempDir dir("apiserver-events");
  SpawnedApiServer server(dir);
  REQUIRE(server.ok());
  Kubectl kubectl(dir, server);
  httplib::Client client("127.0.0.1", server.port());
  json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"name", "web.1"}}},
                {"involvedObject", {{"kind", "Pod"}, {"name", "web"}, {"namespace", "default"}}},
                {"reason", "Started"},
                {"message", "Started container web"},
                {"type", "Normal"},
                {"source", {{"component", "kubelet"}, {"host", "node1"}}},
                {"count", 2}};
  auto res = client.Post("/api/v1/namespaces/default/events", event.dump(), "application/json");
  REQUIRE(res);
  REQUIRE(res->status == 201);
  auto events = kubectl.run({"get", "events"});
  INFO(events.err);
  REQUIRE(events.exit_code == 0);
  INFO(events.out);
  CHECK(tableRows(events.out).at(0) ==
        Words{"LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"});
  // No timestamps: LAST SEEN is <unknown>, as kubectl shows such an event.
  CHECK((tableRows(events.out).at(1) ==
         Words{"<unknown>", "Normal", "Started", "pod/web", "Started", "container", "web"}));
  auto wide = kubectl.run({"get", "events", "-o", "wide"});
  REQUIRE(wide.exit_code == 0);
  CHECK(wide.out.find("SUBOBJECT") != std::string::npos);
  CHECK(wide.out.find("kubelet, node1") != std::string::npos);
}

TEST_CASE("kubectl: get configmaps -w sees an update", "[integration][apiserver]") {
  TempDir dir("apiserver-cm-watch");
  SpawnedApiServer server(dir);
  REQUIRE(server.ok());
  Kubectl kubectl(dir, server);
  REQUIRE(kubectl.run({"create", "configmap", "w", "--from-literal=a=1"}).exit_code == 0);
  ChildProcess watch(kubectl.argv({"get", "cm", "-w", "--output-watch-events"}), dir / "w.out",
                     dir / "w.err");
  REQUIRE(eventually([&] { return watchesOpen(server, 1); }));
  REQUIRE(eventually([&] { return watch.out().find("ADDED") != std::string::npos; }));
  auto patched = kubectl.run({"patch", "cm", "w", "-p", R"({"data":{"b":"2"}})"});
  INFO(patched.err);
  REQUIRE(patched.exit_code == 0);
  REQUIRE(eventually([&] { return watch.out().find("MODIFIED") != std::string::npos; }));
  const std::string out = watch.out();
  INFO(out);
  CHECK(tableRows(out).at(0) == Words{"EVENT", "NAME", "DATA", "AGE"});
  CHECK(rowOf(out, "MODIFIED").at(1) == "w");
  CHECK(rowOf(out, "MODIFIED").at(2) == "2");
  CHECK(watch.running());
}

namespace {

// A TLS server with a token file (kubectl sends bearer tokens over TLS only).
std::vector<std::string> secureServerArgs(const TempDir& dir) {
  writeFile(dir / "tokens.csv", "s3cret,admin,uid1,\"system:masters\"\n");
  REQUIRE(generateCert(dir));
  return {"--token-auth-file=" + (dir / "tokens.csv").string(),
          "--tls-cert-file=" + (dir / "cert.pem").string(),
          "--tls-private-key-file=" + (dir / "key.pem").string()};
}

// `kubectl create token ARGS...`'s token (empty when it failed).
std::string createToken(const Kubectl& kubectl, std::vector<std::string> args) {
  args.insert(args.begin(), {"create", "token"});
  auto r = kubectl.run(args);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  std::string token = r.out;
  while (!token.empty() && token.back() == '\n') token.pop_back();
  return token;
}

// The decoded header (part 0) or claims (part 1) of a JWT.
json jwtPart(const std::string& token, int part) {
  std::istringstream parts(token);
  std::string text;
  for (int i = 0; i <= part; ++i) std::getline(parts, text, '.');
  auto decoded = nodeagent::testapiserver::base64UrlDecode(text);
  REQUIRE(decoded.has_value());
  return json::parse(*decoded);
}

// The status of a TokenReview of `token`, posted as the token file's admin over TLS (kubectl's
// create --raw sends no Content-Length, and create -f would want the OpenAPI document).
json tokenReviewStatus(const TempDir& dir, const SpawnedApiServer& server,
                       const std::string& token) {
  httplib::SSLClient client("127.0.0.1", server.port());
  client.set_ca_cert_path((dir / "cert.pem").c_str());
  client.set_bearer_token_auth("s3cret");
  const json review = {{"apiVersion", "authentication.k8s.io/v1"},
                       {"kind", "TokenReview"},
                       {"spec", {{"token", token}}}};
  auto r =
      client.Post("/apis/authentication.k8s.io/v1/tokenreviews", review.dump(), "application/json");
  REQUIRE(r);
  INFO(r->body);
  REQUIRE(r->status == 201);
  return json::parse(r->body)["status"];
}

}  // namespace

TEST_CASE(
    "kubectl: create token default gives a JWT that authenticates kubectl and TokenReview "
    "as the service account",
    "[integration][apiserver]") {
  TempDir dir("apiserver-sa-token");
  SpawnedApiServer server(dir, secureServerArgs(dir));
  REQUIRE(server.ok());
  Kubectl kubectl(dir, server);

  const std::string token = createToken(kubectl, {"default"});
  REQUIRE(std::count(token.begin(), token.end(), '.') == 2);
  CHECK(jwtPart(token, 0)["alg"] == "ES256");
  const json claims = jwtPart(token, 1);
  CHECK(claims["iss"] == "https://kubernetes.default.svc.cluster.local");
  CHECK(claims["sub"] == "system:serviceaccount:default:default");
  CHECK(claims["exp"].get<int64_t>() - claims["iat"].get<int64_t>() == 3600);

  // The server authenticates kubectl with it (and lets every authenticated user in)...
  auto pods = kubectl.run({"get", "pods", "--token=" + token});
  INFO(pods.err);
  CHECK(pods.exit_code == 0);
  // ... but not with a token whose signature is broken.
  auto forged = kubectl.run({"get", "pods", "--token=" + token + "x"});
  CHECK(forged.exit_code != 0);
  CHECK(forged.err.find("must be logged in") != std::string::npos);

  const json status = tokenReviewStatus(dir, server, token);
  CHECK(status["authenticated"] == true);
  CHECK(status["user"]["username"] == "system:serviceaccount:default:default");
  CHECK(status["user"]["groups"] ==
        json{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"});
  auto uid = kubectl.run({"get", "serviceaccount", "default", "-o", "jsonpath={.metadata.uid}"});
  CHECK(status["user"]["uid"] == uid.out);
  CHECK(status["audiences"] == json{"https://kubernetes.default.svc.cluster.local"});

  // Another audience: a token for someone else, not for this server.
  const std::string vault = createToken(kubectl, {"default", "--audience=vault"});
  CHECK(jwtPart(vault, 1)["aud"] == "vault");
  CHECK(kubectl.run({"get", "pods", "--token=" + vault}).exit_code != 0);
  CHECK(tokenReviewStatus(dir, server, vault)["authenticated"] == false);

  auto missing = kubectl.run({"create", "token", "nope"});
  CHECK(missing.exit_code != 0);
  CHECK(missing.err.find("serviceaccounts \"nope\" not found") != std::string::npos);
  auto short_lived = kubectl.run({"create", "token", "default", "--duration=5m"});
  CHECK(short_lived.exit_code != 0);
  CHECK(short_lived.err.find("TokenRequest.authentication.k8s.io \"\" is invalid: "
                             "spec.expirationSeconds: Invalid value: 300: may not specify a "
                             "duration less than 10 minutes") != std::string::npos);
  const std::string long_lived = createToken(kubectl, {"default", "--duration=2h"});
  const json long_claims = jwtPart(long_lived, 1);
  CHECK(long_claims["exp"].get<int64_t>() - long_claims["iat"].get<int64_t>() == 7200);

  auto discovery = kubectl.run({"get", "--raw", "/api/v1"});
  REQUIRE(discovery.exit_code == 0);
  const json resources = json::parse(discovery.out)["resources"];
  json entry;
  for (const json& r : resources) {
    if (r["name"] == "serviceaccounts/token") entry = r;
  }
  CHECK(entry["kind"] == "TokenRequest");
  CHECK(entry["group"] == "authentication.k8s.io");
  CHECK(entry["verbs"] == json{"create"});
}

TEST_CASE(
    "kubectl: create token bound to a pod names the pod, and the pod's deletion "
    "invalidates it",
    "[integration][apiserver]") {
  TempDir dir("apiserver-sa-bound");
  auto args = secureServerArgs(dir);
  // An RSA signing key of the user's, and another issuer.
  REQUIRE(
      runCommand({"openssl", "genrsa", "-out", (dir / "sa.key").string(), "2048"}, dir).exit_code ==
      0);
  args.push_back("--service-account-signing-key-file=" + (dir / "sa.key").string());
  args.push_back("--service-account-issuer=https://issuer.example");
  SpawnedApiServer server(dir, args);
  REQUIRE(server.ok());
  Kubectl kubectl(dir, server);
  REQUIRE(kubectl.run({"run", "x", "--image=busybox", "--restart=Never"}).exit_code == 0);
  const std::string pod_uid =
      kubectl.run({"get", "pod", "x", "-o", "jsonpath={.metadata.uid}"}).out;
  REQUIRE_FALSE(pod_uid.empty());

  const std::string token =
      createToken(kubectl, {"default", "--bound-object-kind", "Pod", "--bound-object-name", "x"});
  CHECK(jwtPart(token, 0)["alg"] == "RS256");
  const json claims = jwtPart(token, 1);
  CHECK(claims["iss"] == "https://issuer.example");
  CHECK(claims["aud"] == "https://issuer.example");
  CHECK(claims["kubernetes.io"]["pod"] == json{{"name", "x"}, {"uid", pod_uid}});
  json status = tokenReviewStatus(dir, server, token);
  CHECK(status["authenticated"] == true);
  CHECK(status["user"]["extra"]["authentication.kubernetes.io/pod-name"] == json{"x"});
  CHECK(status["user"]["extra"]["authentication.kubernetes.io/pod-uid"] == json{pod_uid});
  CHECK(kubectl.run({"get", "pods", "--token=" + token}).exit_code == 0);

  auto no_pod = kubectl.run(
      {"create", "token", "default", "--bound-object-kind", "Pod", "--bound-object-name", "y"});
  CHECK(no_pod.exit_code != 0);
  CHECK(no_pod.err.find("pods \"y\" not found") != std::string::npos);
  auto wrong_uid = kubectl.run({"create", "token", "default", "--bound-object-kind", "Pod",
                                "--bound-object-name", "x", "--bound-object-uid", "0000"});
  CHECK(wrong_uid.exit_code != 0);
  CHECK(wrong_uid.err.find("Operation cannot be fulfilled on Pod \"x\": the UID in the bound "
                           "object reference (0000) does not match") != std::string::npos);

  // A pod without a node is gone at once: its token no longer authenticates.
  REQUIRE(kubectl.run({"delete", "pod", "x"}).exit_code == 0);
  status = tokenReviewStatus(dir, server, token);
  CHECK(status["authenticated"] == false);
  CHECK(status["error"] == "service account token has been invalidated");
  auto refused = kubectl.run({"get", "pods", "--token=" + token});
  CHECK(refused.exit_code != 0);
  CHECK(refused.err.find("must be logged in") != std::string::npos);
}
