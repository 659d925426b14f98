// Three client ecosystems against one test-apiserver over HTTPS with token authentication, all
// through the kubeconfig the server writes, unchanged: the real kubectl (v1.32), the Debian
// python3-kubernetes client and the JavaScript client @kubernetes/client-node (installed into
// build/js-client by test/tools/install-js-client.sh, which test/run.sh calls). Each client sees
// what the others made. The scripts print JSON lines that the test asserts on; every child runs
// with a deadline and its stderr is shown when it fails.
//
// The server's clock is a fake one (ServerOptions::clock, set to the real time at start): a
// TokenRequest token is accepted by TokenReview, then refused once the clock has passed its
// expiry. The authenticator's own expiry rules (the minute of leeway, not-yet-valid tokens) are
// unit tests (test/unit/apiserver/service_account_token_test.cpp).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/test_api_server.h"
#include "test/integration/apiserver_test_util.h"
#include "test/support/fake_clock.h"
#include "test/support/skip.h"
#include "test/support/test_util.h"
#include "test/support/tls_cert.h"

using nlohmann::json;
using namespace nodeagent;
using namespace nodeagent::testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// Where install-js-client.sh put @kubernetes/client-node: $NODEAGENT_JS_CLIENT_DIR, else the
// build tree's js-client (test/run.sh installs it there).
fs::path jsClientDir() {
  if (const char* dir = std::getenv("NODEAGENT_JS_CLIENT_DIR"); dir && *dir) return dir;
  return binaryPath("js-client");
}

bool onPath(const std::string& tool) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (!dir.empty() && ::access((fs::path(dir) / tool).c_str(), X_OK) == 0) return true;
  }
  return false;
}

// Why the JavaScript client cannot run here; empty when it can.
std::string jsClientMissing(const fs::path& dir) {
  if (!onPath("node")) {
    return "no node on PATH: Node.js 20 or later is needed for @kubernetes/client-node "
           "(deploy/install-deps.sh installs Debian's nodejs and npm)";
  }
  if (!fs::exists(dir / "node_modules/@kubernetes/client-node/package.json")) {
    return "@kubernetes/client-node is not installed in " + dir.string() +
           " (test/tools/install-js-client.sh DIR installs it; test/run.sh runs it for "
           "BUILD_DIR/js-client and prints why it failed)";
  }
  return "";
}

// The JSON lines of a script's output (other lines are kept as strings).
std::vector<json> jsonLines(const std::string& out) {
  std::vector<json> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    json parsed = json::parse(line, nullptr, false);
    lines.push_back(parsed.is_discarded() ? json(line) : parsed);
  }
  return lines;
}

// The lines whose "step" is `step`, in order.
std::vector<json> steps(const std::vector<json>& lines, const std::string& step) {
  std::vector<json> out;
  for (const json& line : lines) {
    if (line.is_object() && line.value("step", "") == step) out.push_back(line);
  }
  return out;
}

// The first line whose "step" is `step`, or null.
json firstStep(const std::vector<json>& lines, const std::string& step) {
  auto all = steps(lines, step);
  return all.empty() ? json() : all.front();
}

// Shows the child's output when an assertion on it fails.
#define SHOW(result)                 \
  INFO("stdout:\n" << (result).out); \
  INFO("stderr:\n" << (result).err)

// python3-kubernetes, first run: lists pods, watches configmaps from the list while creating one,
// creates a Secret from stringData and reads it and kubectl's back, asks for a TokenRequest token
// and has TokenReview and a request with it accept it.
constexpr char kPythonClient[] = R"PY(
import base64, json, sys
from kubernetes import client, config, watch

def out(**kw):
    print(json.dumps(kw, default=str), flush=True)

config.load_kube_config(config_file=sys.argv[1])
v1 = client.CoreV1Api()
pods = v1.list_namespaced_pod("default")
out(step="pods", names=sorted(p.metadata.name for p in pods.items))

rv = v1.list_namespaced_config_map("default").metadata.resource_version
v1.create_namespaced_config_map("default", {"metadata": {"name": "py-cm"}, "data": {"k": "py"}})
w = watch.Watch()
for ev in w.stream(v1.list_namespaced_config_map, "default", resource_version=rv,
                   timeout_seconds=20):
    out(step="watch", type=ev["type"], name=ev["object"].metadata.name, data=ev["object"].data)
    if ev["object"].metadata.name == "py-cm":
        w.stop()

v1.create_namespaced_secret("default", {"metadata": {"name": "py-secret"},
                                        "stringData": {"password": "hunter2"}})
s = v1.read_namespaced_secret("py-secret", "default")
out(step="secret", type=s.type, data=s.data, stringData=s.string_data)
k = v1.read_namespaced_secret("kc-secret", "default")
out(step="kubectl-secret", type=k.type,
    decoded={key: base64.b64decode(v).decode() for key, v in k.data.items()})

tr = v1.create_namespaced_service_account_token(
    "default", "default", {"spec": {"audiences": [], "expirationSeconds": 600}})
out(step="tokenrequest", token=tr.status.token,
    expirationTimestamp=tr.status.expiration_timestamp.strftime("%Y-%m-%dT%H:%M:%SZ"))
review = client.AuthenticationV1Api().create_token_review({"spec": {"token": tr.status.token}})
out(step="tokenreview", authenticated=review.status.authenticated,
    username=review.status.user.username if review.status.user else None,
    groups=review.status.user.groups if review.status.user else None, error=review.status.error)

as_sa = client.Configuration()
config.load_kube_config(config_file=sys.argv[1], client_configuration=as_sa)
as_sa.api_key = {"authorization": "Bearer " + tr.status.token}
try:
    n = len(client.CoreV1Api(client.ApiClient(as_sa)).list_namespaced_pod("default").items)
    out(step="as-token", status=200, pods=n)
except client.ApiException as e:
    out(step="as-token", status=e.status)
)PY";

// python3-kubernetes, second run: TokenReview of the token in argv[2], and a request with it.
constexpr char kPythonReview[] = R"PY(
import json, sys
from kubernetes import client, config

def out(**kw):
    print(json.dumps(kw, default=str), flush=True)

config.load_kube_config(config_file=sys.argv[1])
review = client.AuthenticationV1Api().create_token_review({"spec": {"token": sys.argv[2]}})
out(step="tokenreview", authenticated=review.status.authenticated, error=review.status.error)
as_sa = client.Configuration()
config.load_kube_config(config_file=sys.argv[1], client_configuration=as_sa)
as_sa.api_key = {"authorization": "Bearer " + sys.argv[2]}
try:
    client.CoreV1Api(client.ApiClient(as_sa)).list_namespaced_pod("default")
    out(step="as-token", status=200)
except client.ApiException as e:
    out(step="as-token", status=e.status)
out(step="admin", pods=len(client.CoreV1Api().list_namespaced_pod("default").items))
)PY";

// @kubernetes/client-node (argv: its install dir, the kubeconfig): lists, watches pods while it
// creates, patches and deletes one, creates a ConfigMap, and runs a ConfigMap informer through an
// add, an update and a delete. Every wait has a deadline; any failure exits 1 with the error on
// stderr.
constexpr char kNodeClient[] = R"JS(
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [, , moduleDir, kubeconfig] = process.argv;
const k8s = await import(pathToFileURL(
    path.join(moduleDir, 'node_modules/@kubernetes/client-node/dist/index.js')).href);
const out = (o) => console.log(JSON.stringify(o));
const fail = (err) => {
  console.error('client-node script failed:', err?.stack ?? err, err?.body ?? '');
  process.exit(1);
};
process.on('unhandledRejection', fail);
// Resolves with `p` or rejects after `ms` naming `what`.
const within = (p, ms, what) => Promise.race([p, new Promise((_, reject) =>
    setTimeout(() => reject(new Error('timed out waiting for ' + what)), ms).unref())]);
const signal = () => { let resolve; const p = new Promise((r) => (resolve = r)); return [p, resolve]; };

try {
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(kubeconfig);
  out({ step: 'config', server: kc.getCurrentCluster().server, user: kc.getCurrentUser().name });
  const core = kc.makeApiClient(k8s.CoreV1Api);

  const before = await core.listNamespacedPod({ namespace: 'default' });
  out({ step: 'list', pods: before.items.map((p) => p.metadata.name).sort() });

  // A watch from the list's resourceVersion while a pod is created, relabelled and deleted.
  const [deleted, onDeleted] = signal();
  let watchAborted = false;
  const watch = new k8s.Watch(kc);
  const controller = await watch.watch('/api/v1/namespaces/default/pods',
      { resourceVersion: before.metadata.resourceVersion, allowWatchBookmarks: true },
      (type, obj) => {
        if (type === 'BOOKMARK') return;
        out({ step: 'watch', type, name: obj.metadata.name, labels: obj.metadata.labels ?? {} });
        if (type === 'DELETED' && obj.metadata.name === 'js-pod') onDeleted();
      },
      (err) => { if (!watchAborted) fail(err ?? new Error('the watch ended early')); });
  const pod = await core.createNamespacedPod({ namespace: 'default', body: {
    metadata: { name: 'js-pod', labels: { app: 'js' } },
    spec: { containers: [{ name: 'c', image: 'busybox' }] } } });
  out({ step: 'created', kind: 'Pod', name: pod.metadata.name, uid: pod.metadata.uid });
  const listed = await core.listNamespacedPod({ namespace: 'default', labelSelector: 'app=js' });
  out({ step: 'list-selected', pods: listed.items.map((p) => p.metadata.name) });
  await core.patchNamespacedPod(
      { name: 'js-pod', namespace: 'default', body: { metadata: { labels: { app: 'js2' } } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch));
  await core.deleteNamespacedPod({ name: 'js-pod', namespace: 'default' });
  await within(deleted, 20000, 'the watch to see js-pod DELETED');
  watchAborted = true;
  controller.abort();

  const cm = await core.createNamespacedConfigMap({ namespace: 'default', body: {
    metadata: { name: 'js-cm' }, data: { from: 'client-node' } } });
  out({ step: 'created', kind: 'ConfigMap', name: cm.metadata.name, data: cm.data });
  const cms = await core.listNamespacedConfigMap({ namespace: 'default' });
  out({ step: 'list-configmaps', names: cms.items.map((c) => c.metadata.name).sort() });

  // An informer on ConfigMaps: the listed ones as adds, then an add, an update and a delete.
  const informer = k8s.makeInformer(kc, '/api/v1/namespaces/default/configmaps',
      () => core.listNamespacedConfigMap({ namespace: 'default' }));
  const [informed, onInformed] = signal();
  let stopping = false;
  for (const ev of ['add', 'update', 'delete']) {
    informer.on(ev, (obj) => {
      out({ step: 'informer', ev, name: obj.metadata.name, data: obj.data ?? {} });
      if (ev === 'delete' && obj.metadata.name === 'informed') onInformed();
    });
  }
  informer.on('error', (err) => { if (!stopping) fail(err); });
  await within(informer.start(), 20000, 'the informer to start');
  out({ step: 'informer-started' });
  await core.createNamespacedConfigMap({ namespace: 'default', body: {
    metadata: { name: 'informed' }, data: { v: '1' } } });
  await core.replaceNamespacedConfigMap({ name: 'informed', namespace: 'default', body: {
    metadata: { name: 'informed' }, data: { v: '2' } } });
  await core.deleteNamespacedConfigMap({ name: 'informed', namespace: 'default' });
  await within(informed, 20000, 'the informer to see informed deleted');
  stopping = true;
  await informer.stop();
  out({ step: 'done' });
  process.exit(0);
} catch (err) {
  fail(err);
}
)JS";

}  // namespace

TEST_CASE(
    "client ecosystems: kubectl and python3-kubernetes and @kubernetes/client-node against "
    "one test-apiserver over HTTPS with token auth",
    "[e2e][apiserver]") {
  const fs::path js_dir = jsClientDir();
  const std::string js_missing = jsClientMissing(js_dir);
  {
    TempDir dir("nodeagent-e2e-clients");
    writeSelfSignedCert(dir.path());
    writeFile(dir / "tokens.csv", "s3cret,admin,uid1,\"system:masters\"\n");
    FakeClock clock;
    clock.setWallTime(std::chrono::system_clock::now());
    testapiserver::ServerOptions options;
    options.tls_cert_file = (dir / "cert.pem").string();
    options.tls_private_key_file = (dir / "key.pem").string();
    options.token_auth_file = (dir / "tokens.csv").string();
    options.clock = &clock;
    auto started = testapiserver::TestApiServer::start(options);
    REQUIRE(started.ok());
    auto& server = **started;
    REQUIRE(server.url().starts_with("https://127.0.0.1:"));
    const fs::path kubeconfig = dir / "kubeconfig";
    REQUIRE(server.writeKubeconfig(kubeconfig).ok());
    const std::string kubeconfig_text = readFile(kubeconfig);
    CHECK(kubeconfig_text.find("certificate-authority-data:") != std::string::npos);
    CHECK(kubeconfig_text.find("token: s3cret") != std::string::npos);

    auto kubectl = [&](std::vector<std::string> args) {
      std::vector<std::string> argv = {"kubectl", "--kubeconfig=" + kubeconfig.string(),
                                       "--cache-dir=" + (dir / "kube-cache").string()};
      argv.insert(argv.end(), args.begin(), args.end());
      return runCommand(argv, dir, 30s);
    };

    // kubectl: a pod, a ConfigMap and a Secret for the other clients to find; the default
    // service account; a TokenRequest token.
    {
      auto run = kubectl({"run", "kc-pod", "--image=busybox", "--restart=Never"});
      SHOW(run);
      REQUIRE(run.exit_code == 0);
      auto cm = kubectl({"create", "configmap", "kc-cm", "--from-literal=k=kubectl"});
      SHOW(cm);
      REQUIRE(cm.exit_code == 0);
      CHECK(cm.out == "configmap/kc-cm created\n");
      auto secret =
          kubectl({"create", "secret", "generic", "kc-secret", "--from-literal=password=kc-pw"});
      SHOW(secret);
      REQUIRE(secret.exit_code == 0);
      CHECK(secret.out == "secret/kc-secret created\n");
      auto got = kubectl({"get", "configmap", "kc-cm", "-o", "json"});
      SHOW(got);
      REQUIRE(got.exit_code == 0);
      CHECK(json::parse(got.out)["data"] == json{{"k", "kubectl"}});
      auto accounts = kubectl({"get", "serviceaccounts"});
      SHOW(accounts);
      REQUIRE(accounts.exit_code == 0);
      CHECK(accounts.out.starts_with("NAME      "));
      CHECK(accounts.out.find("\ndefault   ") != std::string::npos);
      auto token = kubectl({"create", "token", "default"});
      SHOW(token);
      REQUIRE(token.exit_code == 0);
      CHECK(std::count(token.out.begin(), token.out.end(), '.') == 2);
    }

    // python3-kubernetes.
    std::string sa_token;
    std::string sa_token_expiry;
    {
      writeFile(dir / "client.py", kPythonClient);
      auto py = runCommand({"/usr/bin/python3", (dir / "client.py").string(), kubeconfig.string()},
                           dir, 60s);
      SHOW(py);
      REQUIRE(py.exit_code == 0);
      const auto lines = jsonLines(py.out);
      CHECK(firstStep(lines, "pods")["names"] == json{"kc-pod"});
      const auto watched = steps(lines, "watch");
      REQUIRE(watched.size() == 1);
      CHECK(watched[0]["type"] == "ADDED");
      CHECK(watched[0]["name"] == "py-cm");
      CHECK(watched[0]["data"] == json{{"k", "py"}});
      const json secret = firstStep(lines, "secret");
      CHECK(secret["type"] == "Opaque");
      CHECK(secret["data"] == json{{"password", "aHVudGVyMg=="}});  // base64("hunter2")
      CHECK(secret["stringData"].is_null());
      CHECK(firstStep(lines, "kubectl-secret")["decoded"] == json{{"password", "kc-pw"}});
      const json request = firstStep(lines, "tokenrequest");
      REQUIRE(request["token"].is_string());
      sa_token = request["token"];
      sa_token_expiry = request["expirationTimestamp"];
      const json review = firstStep(lines, "tokenreview");
      CHECK(review["authenticated"] == true);
      CHECK(review["username"] == "system:serviceaccount:default:default");
      CHECK(review["groups"] == json{"system:serviceaccounts", "system:serviceaccounts:default",
                                     "system:authenticated"});
      CHECK(firstStep(lines, "as-token") ==
            json{{"step", "as-token"}, {"status", 200}, {"pods", 1}});
    }

    // @kubernetes/client-node.
    if (js_missing.empty()) {
      writeFile(dir / "client.mjs", kNodeClient);
      auto js = runCommand(
          {"node", (dir / "client.mjs").string(), js_dir.string(), kubeconfig.string()}, dir, 60s);
      SHOW(js);
      REQUIRE(js.exit_code == 0);
      const auto lines = jsonLines(js.out);
      CHECK(firstStep(lines, "config")["server"] == server.url());
      CHECK(firstStep(lines, "list")["pods"] == json{"kc-pod"});
      CHECK(firstStep(lines, "list-selected")["pods"] == json{"js-pod"});
      json watched = json::array();
      for (const json& w : steps(lines, "watch")) {
        watched.push_back({w["type"], w["name"], w["labels"]["app"]});
      }
      CHECK(watched == json{{"ADDED", "js-pod", "js"},
                            {"MODIFIED", "js-pod", "js2"},
                            {"DELETED", "js-pod", "js2"}});
      // The ConfigMaps of the three clients (and any the server makes of its own).
      const json names = firstStep(lines, "list-configmaps")["names"];
      for (const char* name : {"js-cm", "kc-cm", "py-cm"}) {
        CHECK(std::find(names.begin(), names.end(), name) != names.end());
      }
      // The informer: the listed ConfigMaps as adds, then the add, update and delete of one.
      json listed = json::array();
      json changes = json::array();
      for (const json& i : steps(lines, "informer")) {
        if (i["name"] == "informed") {
          changes.push_back({i["ev"], i["data"]});
        } else {
          CHECK(i["ev"] == "add");
          listed.push_back(i["name"]);
        }
      }
      std::sort(listed.begin(), listed.end());
      CHECK(listed == names);
      CHECK(changes == json::array({json::array({"add", json::object({{"v", "1"}})}),
                                    json::array({"update", json::object({{"v", "2"}})}),
                                    json::array({"delete", json::object({{"v", "2"}})})}));
      CHECK(firstStep(lines, "done").is_object());
    }

    // kubectl sees what the others left and deletes the ConfigMaps and Secrets.
    {
      auto pods = kubectl({"get", "pods", "-o", "name"});
      SHOW(pods);
      CHECK(pods.out == "pod/kc-pod\n");
      auto del = kubectl({"delete", "configmap", "kc-cm", "py-cm"});
      SHOW(del);
      CHECK(del.exit_code == 0);
      auto del_secrets = kubectl({"delete", "secret", "kc-secret", "py-secret"});
      SHOW(del_secrets);
      CHECK(del_secrets.exit_code == 0);
      auto gone = kubectl({"get", "configmap", "kc-cm"});
      CHECK(gone.exit_code != 0);
      CHECK(gone.err.find("configmaps \"kc-cm\" not found") != std::string::npos);
    }

    // The TokenRequest token (600 s) once the server's clock is past its expiry and go-jose's
    // minute of leeway: TokenReview refuses it, and so does every request.
    {
      clock.advance(600s + 61s);
      writeFile(dir / "review.py", kPythonReview);
      auto py = runCommand(
          {"/usr/bin/python3", (dir / "review.py").string(), kubeconfig.string(), sa_token}, dir,
          60s);
      SHOW(py);
      INFO("token expiry: " << sa_token_expiry);
      REQUIRE(py.exit_code == 0);
      const auto lines = jsonLines(py.out);
      CHECK(firstStep(lines, "tokenreview") ==
            json{{"step", "tokenreview"},
                 {"authenticated", false},
                 {"error", "service account token has expired"}});
      CHECK(firstStep(lines, "as-token")["status"] == 401);
      CHECK(firstStep(lines, "admin")["pods"] == 1);
    }
    server.stop();
  }
  // The JavaScript client's part could not run: said loudly, never a silent pass (the other
  // clients' failures, if any, are reported as failures all the same).
  if (!js_missing.empty()) skipTest(js_missing);
}
