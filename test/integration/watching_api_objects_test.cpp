// kubelet's Watch change detection strategy against build/test-apiserver with
// --authorization-mode=Node, as a node's kubelet meets a kubeadm cluster: the agent's client
// certificate is system:node:n1's, it may list and watch (by name) only the objects its pods
// use, and the watches run on one io_context thread (config::AsyncListerWatcher).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/volume/watching_api_objects.h"
#include "api/api_errors.h"
#include "api/kubeconfig.h"
#include "api/rest_client.h"
#include "base/random.h"
#include "config/reflector.h"
#include "test/integration/apiserver_test_util.h"
#include "test/support/pod_builder.h"

using nlohmann::json;
using namespace nodeagent;
using namespace nodeagent::testing;
using agent::ApiObjectKind;

namespace {

// Reads that the watches did not serve, from the apiserver (as the Get strategy).
class CountingDirect final : public agent::ApiObjectSource {
 public:
  explicit CountingDirect(api::RestClient& client) : client_(client) {}
  std::atomic<int> reads{0};
  base::StatusOr<std::shared_ptr<const json>> get(ApiObjectKind kind, const std::string& ns,
                                                  const std::string& name,
                                                  const std::string&) override {
    ++reads;
    auto got = client_.getJson(agent::apiObjectPath(kind, ns, name));
    if (!got.ok()) return got.status();
    return std::make_shared<const json>(std::move(*got));
  }

 private:
  api::RestClient& client_;
};

std::string secretValue(const base::StatusOr<std::shared_ptr<const json>>& secret) {
  if (!secret.ok()) return "error: " + secret.status().toString();
  auto decoded = api::decodeBase64((**secret)["data"].value("k", ""));
  return decoded.ok() ? *decoded : "undecodable";
}

}  // namespace

TEST_CASE(
    "watching api objects: a node watches the Secret its pod uses by name under Node "
    "authorization, sees it change, and is refused what no pod of its uses",
    "[integration][apiserver][volume]") {
  TempDir dir("watching-api-objects");
  SpawnedApiServer server(dir, nodeAuthorizedServerArgs(dir));
  REQUIRE(server.ok());
  Kubectl admin(dir, server);
  writeFile(dir / "seed.yaml",
            "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\n"
            "apiVersion: v1\nkind: Secret\nmetadata: {name: web-secret, namespace: default}\n"
            "stringData: {k: v1}\n---\n"
            "apiVersion: v1\nkind: Secret\nmetadata: {name: other-secret, namespace: default}\n"
            "stringData: {k: v}\n---\n"
            "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\n"
            "spec:\n  nodeName: n1\n  containers:\n  - name: c\n    image: busybox\n"
            "    envFrom: [{secretRef: {name: web-secret}}]\n");
  auto seeded = admin.run({"create", "-f", (dir / "seed.yaml").string()});
  INFO(seeded.err);
  REQUIRE(seeded.exit_code == 0);
  auto web_json = admin.run({"get", "pod", "web", "-n", "default", "-o", "json"});
  REQUIRE(web_json.exit_code == 0);

  auto issued = issueNodeCertificate(dir / "certs", "n1");
  REQUIRE(issued.ok());
  api::RestConfig config;
  config.server = server.url();
  config.ca_pem = readFile(dir / "certs" / "ca.crt");
  config.client_cert_pem = issued->cert_pem;
  config.client_key_pem = issued->key_pem;
  auto client = api::RestClient::create(config, {}, base::realClock());
  REQUIRE(client.ok());

  asio::io_context ioc(1);
  auto work = asio::make_work_guard(ioc);
  std::thread io_thread([&] { ioc.run(); });
  asio::thread_pool pool(1);
  auto direct = std::make_shared<CountingDirect>(**client);
  auto source = std::make_shared<agent::WatchingApiObjectSource>(
      ioc.get_executor(), base::realClock(), base::defaultRandom(),
      [&](const std::string& path, const std::string& selector) {
        return std::make_shared<config::AsyncListerWatcher>(**client, ioc.get_executor(),
                                                            pool.get_executor(), path, selector);
      },
      direct);
  struct Teardown {
    std::function<void()> fn;
    ~Teardown() { fn(); }
  } teardown{[&] {
    source->stop();
    (*client)->shutdown();
    work.reset();
    io_thread.join();
    pool.join();
  }};

  const api::PodPtr web = podFromJson(web_json.out);
  source->registerPod(*web);
  // Served by the watch once it listed: the direct reads stop.
  REQUIRE(eventually([&] {
    const int before = direct->reads;
    auto got = source->get(ApiObjectKind::kSecret, "default", "web-secret", web->metadata.uid);
    return secretValue(got) == "v1" && direct->reads == before;
  }));

  auto patched = admin.run({"patch", "secret", "web-secret", "-n", "default", "--type=merge", "-p",
                            R"({"stringData":{"k":"v2"}})"});
  INFO(patched.err);
  REQUIRE(patched.exit_code == 0);
  const int reads = direct->reads;
  CHECK(eventually([&] {
    return secretValue(source->get(ApiObjectKind::kSecret, "default", "web-secret",
                                   web->metadata.uid)) == "v2";
  }));
  CHECK(direct->reads == reads);

  // A pod the apiserver does not have on n1 referencing another Secret: the node authorizer
  // refuses the watch, and the read falls back to a GET, refused too.
  auto stranger =
      PodBuilder()
          .name("stranger")
          .ns("default")
          .uid("uid-stranger")
          .container("c")
          .edit([](json& j) {
            j["spec"]["volumes"] = {{{"name", "s"}, {"secret", {{"secretName", "other-secret"}}}}};
          })
          .build();
  source->registerPod(*stranger);
  auto refused = source->get(ApiObjectKind::kSecret, "default", "other-secret", "uid-stranger");
  REQUIRE_FALSE(refused.ok());
  CHECK(api::apiErrorOf(refused.status()));
  CHECK(api::apiErrorOf(refused.status())->http_code == 403);

  // The pod gone, its watch ends; a read is a GET again.
  source->unregisterPod(web->metadata.uid);
  CHECK(source->watched() ==
        std::set<agent::ApiObjectRef>{{ApiObjectKind::kSecret, "default", "other-secret"}});
  const int before_unwatched = direct->reads;
  CHECK(secretValue(source->get(ApiObjectKind::kSecret, "default", "web-secret",
                                web->metadata.uid)) == "v2");
  CHECK(direct->reads == before_unwatched + 1);
}
