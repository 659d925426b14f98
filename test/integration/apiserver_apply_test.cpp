// Server-side apply (kubectl apply --server-side) and managedFields against build/test-apiserver,
// through the real kubectl.
#include <httplib.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test/integration/apiserver_test_util.h"

using nlohmann::json;
using namespace nodeagent::testing;

namespace {

std::string podYaml(const std::string& image) {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels:\n    app: web\n"
         "spec:\n  containers:\n  - name: web\n    image: " +
         image + "\n";
}

// "manager operation" of each managedFields entry, in order.
std::vector<std::string> managers(const Kubectl& kubectl, const std::string& what) {
  auto got = kubectl.run({"get", what, "-o", "json", "--show-managed-fields"});
  REQUIRE(got.exit_code == 0);
  std::vector<std::string> out;
  const json object = json::parse(got.out);
  for (const json& e : object["metadata"]["managedFields"]) {
    out.push_back(e["manager"].get<std::string>() + " " + e["operation"].get<std::string>());
  }
  return out;
}

}  // namespace

TEST_CASE(
    "kubectl apply --server-side: creates, names the conflicting manager, takes over with "
    "--force-conflicts, and removes what a manager stops applying",
    "[integration][apiserver]") {
  TempDir dir("apiserver-apply");
  SpawnedApiServer server(dir);
  REQUIRE(server.ok());
  Kubectl kubectl(dir, server);
  writeFile(dir / "v1.yaml", podYaml("nginx:1.25"));
  writeFile(dir / "v2.yaml", podYaml("nginx:1.26"));

  auto created = kubectl.run({"apply", "--server-side", "-f", (dir / "v1.yaml").string()});
  INFO(created.err);
  CHECK(created.exit_code == 0);
  CHECK(created.out == "pod/web serverside-applied\n");
  CHECK(managers(kubectl, "pod/web") == std::vector<std::string>{"kubectl Apply"});
  auto shown = kubectl.run({"get", "pod", "web", "-o", "yaml", "--show-managed-fields"});
  CHECK(shown.out.find("      f:spec:\n        f:containers: {}\n") != std::string::npos);

  auto conflict = kubectl.run(
      {"apply", "--server-side", "--field-manager=deployer", "-f", (dir / "v2.yaml").string()});
  CHECK(conflict.exit_code == 1);
  CHECK(conflict.err.starts_with(
      "error: Apply failed with 1 conflict: conflict with \"kubectl\": .spec.containers\n"));
  CHECK(conflict.err.find("--force-conflicts") != std::string::npos);
  auto image = [&] {
    return kubectl.run({"get", "pod", "web", "-o", "jsonpath={.spec.containers[0].image}"}).out;
  };
  CHECK(image() == "nginx:1.25");

  auto forced = kubectl.run({"apply", "--server-side", "--field-manager=deployer",
                             "--force-conflicts", "-f", (dir / "v2.yaml").string()});
  INFO(forced.err);
  CHECK(forced.exit_code == 0);
  CHECK(image() == "nginx:1.26");
  CHECK(managers(kubectl, "pod/web") ==
        std::vector<std::string>{"kubectl Apply", "deployer Apply"});

  // A label only kubectl applied goes when kubectl stops applying it... unless someone else set
  // it too.
  writeFile(dir / "v2-nolabel.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n"
            "  - name: web\n    image: nginx:1.26\n");
  CHECK(kubectl.run({"label", "pod", "web", "extra=1"}).exit_code == 0);
  CHECK(kubectl
            .run({"apply", "--server-side", "--field-manager=deployer", "-f",
                  (dir / "v2-nolabel.yaml").string()})
            .exit_code == 0);
  CHECK(
      kubectl.run({"apply", "--server-side", "-f", (dir / "v2-nolabel.yaml").string()}).exit_code ==
      0);
  CHECK(kubectl.run({"get", "pod", "web", "-o", "jsonpath={.metadata.labels}"}).out ==
        "{\"extra\":\"1\"}");
  CHECK(managers(kubectl, "pod/web") ==
        std::vector<std::string>{"kubectl Apply", "deployer Apply", "kubectl-label Update"});
}

TEST_CASE(
    "kubectl create then apply --server-side conflicts with the creator, client-side "
    "apply keeps working, and apply options are checked as kube-apiserver's",
    "[integration][apiserver]") {
  TempDir dir("apiserver-apply-update");
  SpawnedApiServer server(dir);
  REQUIRE(server.ok());
  Kubectl kubectl(dir, server);
  writeFile(dir / "v1.yaml", podYaml("nginx:1.25"));
  writeFile(dir / "v2.yaml", podYaml("nginx:1.26"));

  CHECK(kubectl.run({"create", "-f", (dir / "v1.yaml").string()}).exit_code == 0);
  CHECK(managers(kubectl, "pod/web") == std::vector<std::string>{"kubectl-create Update"});
  auto conflict = kubectl.run({"apply", "--server-side", "-f", (dir / "v2.yaml").string()});
  CHECK(conflict.exit_code == 1);
  CHECK(conflict.err.find("error: Apply failed with 1 conflict: conflict with \"kubectl-create\" "
                          "using v1 at ") == 0);
  CHECK(conflict.err.find(": .spec.containers\n") != std::string::npos);
  // The same values are no conflict: kubectl becomes a co-owner.
  auto same = kubectl.run({"apply", "--server-side", "-f", (dir / "v1.yaml").string()});
  INFO(same.err);
  CHECK(same.exit_code == 0);

  // Client-side apply: create, then configure through its last-applied annotation.
  writeFile(dir / "cm1.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n"
            "data:\n  a: \"1\"\n  b: \"2\"\n");
  writeFile(dir / "cm2.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: \"3\"\n");
  CHECK(kubectl.run({"apply", "-f", (dir / "cm1.yaml").string()}).out == "configmap/cfg created\n");
  CHECK(kubectl.run({"apply", "-f", (dir / "cm2.yaml").string()}).out ==
        "configmap/cfg configured\n");
  CHECK(kubectl.run({"get", "cm", "cfg", "-o", "jsonpath={.data}"}).out == "{\"a\":\"3\"}");
  CHECK(managers(kubectl, "configmap/cfg") ==
        std::vector<std::string>{"kubectl-client-side-apply Update"});

  httplib::Client client("127.0.0.1", server.port());
  const std::string path = "/api/v1/namespaces/default/configmaps/cfg";
  auto no_manager = client.Patch(path.c_str(), R"({"apiVersion":"v1","kind":"ConfigMap"})",
                                 "application/apply-patch+yaml");
  REQUIRE(no_manager);
  CHECK(no_manager->status == 422);
  CHECK(json::parse(no_manager->body)["message"] ==
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for "
        "apply patch");
  auto forced_merge = client.Patch((path + "?force=true").c_str(), R"({"data":{"a":"4"}})",
                                   "application/merge-patch+json");
  REQUIRE(forced_merge);
  CHECK(forced_merge->status == 422);
  auto wrong_kind = client.Patch((path + "?fieldManager=x").c_str(),
                                 "apiVersion: v1\nkind: Secret\n", "application/apply-patch+yaml");
  REQUIRE(wrong_kind);
  CHECK(wrong_kind->status == 400);
}

TEST_CASE(
    "apply and bodies that could hurt the server: no namespace in the path, a status "
    "apply, a no-op apply, bad metadata and a body nested 200000 deep",
    "[integration][apiserver]") {
  TempDir dir("apiserver-apply-edges");
  SpawnedApiServer server(dir);
  REQUIRE(server.ok());
  httplib::Client client("127.0.0.1", server.port());
  const auto apply = [&](const std::string& path, const std::string& manager, const json& body) {
    auto res = client.Patch((path + "?fieldManager=" + manager).c_str(), body.dump(),
                            "application/apply-patch+yaml");
    REQUIRE(res);
    INFO(res->body);
    return std::make_pair(res->status, json::parse(res->body));
  };
  const json cm = {{"apiVersion", "v1"},
                   {"kind", "ConfigMap"},
                   {"metadata", {{"name", "cfg"}, {"namespace", "kube-system"}}},
                   {"data", {{"a", "1"}}}};
  // A namespaced object is not applied through the cluster-wide path.
  CHECK(apply("/api/v1/configmaps/cfg", "m", cm).first == 404);
  CHECK(client.Get("/api/v1/namespaces/kube-system/configmaps/cfg")->status == 404);

  const std::string path = "/api/v1/namespaces/default/configmaps/cfg";
  json in_default = cm;
  in_default["metadata"]["namespace"] = "default";
  auto [code, first] = apply(path, "m", in_default);
  CHECK(code == 201);
  auto [again_code, again] = apply(path, "m", in_default);
  CHECK(again_code == 200);
  CHECK(again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]);

  json bad_meta = in_default;
  bad_meta["metadata"] = 5;
  CHECK(apply(path, "m", bad_meta).first == 400);

  // Through the status subresource the applier's ownership is kept: another one conflicts.
  const json pod = {{"apiVersion", "v1"},
                    {"kind", "Pod"},
                    {"metadata", {{"name", "p"}}},
                    {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
  REQUIRE(client.Post("/api/v1/namespaces/default/pods", pod.dump(), "application/json")->status ==
          201);
  const std::string status_path = "/api/v1/namespaces/default/pods/p/status";
  json status = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"status", {{"message", "hi"}}}};
  CHECK(apply(status_path, "s1", status).first == 200);
  status["status"]["message"] = "other";
  auto [conflict_code, conflict] = apply(status_path, "s2", status);
  CHECK(conflict_code == 409);
  CHECK(conflict["message"] ==
        "Apply failed with 1 conflict: conflict with \"s1\" with subresource \"status\": "
        ".status.message");

  // A body nested deeper than the server prints is refused, and the server lives on.
  const std::string deep = R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"d"},"x":)" +
                           std::string(200000, '[') + std::string(200000, ']') + "}";
  auto refused = client.Post("/api/v1/namespaces/default/configmaps", deep, "application/json");
  REQUIRE(refused);
  CHECK(refused->status == 400);
  CHECK(json::parse(refused->body)["message"] ==
        "the body of the request nests deeper than 1000 levels");
  auto merge = client.Patch(path.c_str(), deep, "application/merge-patch+json");
  REQUIRE(merge);
  CHECK(merge->status == 400);
  auto health = client.Get("/healthz");
  REQUIRE(health);
  CHECK(health->status == 200);
}
