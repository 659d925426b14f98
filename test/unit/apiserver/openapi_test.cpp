// The served types' schema, the OpenAPI documents made of it and the field validation of request
// bodies (cmd/test-apiserver/openapi.h), the last also over HTTP against the in-process server.
#include "cmd/test-apiserver/openapi.h"

#include <httplib.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "api/yaml.h"
#include "cmd/test-apiserver/test_api_server.h"
#include "test/support/test_util.h"

using nlohmann::json;
using namespace nodeagent::testapiserver;
using Problems = std::vector<std::string>;

namespace {

// The named types a field type refers to ("[]core.v1.Container" -> "core.v1.Container").
std::string_view innerType(std::string_view type) {
  if (type.starts_with('!')) type.remove_prefix(1);
  while (type.starts_with("[]") || type.starts_with("map[")) {
    type = type.starts_with("[]") ? type.substr(2) : type.substr(4, type.size() - 5);
  }
  return type;
}

// Every "$ref" below `node`.
void collectRefs(const json& node, std::set<std::string>& refs) {
  if (node.is_object()) {
    for (const auto& [key, value] : node.items()) {
      if (key == "$ref" && value.is_string()) refs.insert(value.get<std::string>());
      collectRefs(value, refs);
    }
  } else if (node.is_array()) {
    for (const auto& value : node) collectRefs(value, refs);
  }
}

std::unique_ptr<TestApiServer> startServer() {
  auto server = TestApiServer::start({});
  REQUIRE(server.ok());
  return std::move(*server);
}

const char* kBadPod = R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},
  "spec":{"containers":[{"name":"c","image":"busybox","imagex":"x"}],"foo":1}})";

}  // namespace

TEST_CASE("openapi: every field type names a served type or a builtin", "[apiserver][openapi]") {
  const std::set<std::string_view> builtins = {"string",    "int32",  "int64",      "boolean",
                                               "number",    "byte",   "Quantity",   "Time",
                                               "MicroTime", "Object", "IntOrString"};
  const auto& types = servedTypes();
  REQUIRE(types.size() > 150);
  for (size_t i = 0; i < types.size(); ++i) {
    INFO(types[i].name);
    if (i > 0) CHECK(types[i - 1].name < types[i].name);  // findType searches a sorted table
    CHECK(findType(types[i].name) == &types[i]);
    std::set<std::string_view> names;
    for (const auto& f : types[i].fields) {
      INFO(f.name);
      CHECK(names.insert(f.name).second);
      std::string_view inner = innerType(f.type);
      CHECK((builtins.count(inner) == 1 || findType(inner) != nullptr));
    }
  }
  CHECK(findType("core.v1.Nope") == nullptr);
}

TEST_CASE("openapi: kube's names and the kinds of the served resources", "[apiserver][openapi]") {
  CHECK(openApiName("core.v1.Pod") == "io.k8s.api.core.v1.Pod");
  CHECK(openApiName("meta.v1.ObjectMeta") == "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta");
  CHECK(openApiName("coordination.v1.Lease") == "io.k8s.api.coordination.v1.Lease");
  CHECK(openApiName("Quantity") == "io.k8s.apimachinery.pkg.api.resource.Quantity");
  for (const auto& r : allResources()) {
    INFO(r.kind);
    CHECK_FALSE(kindTypeName(r).empty());
  }
  CHECK(kindTypeName(*findResource("leases")) == "coordination.v1.Lease");
  const SchemaType* container = findType("core.v1.Container");
  REQUIRE(container);
  REQUIRE(container->field("resizePolicy"));  // a field newer than the python client's models
  REQUIRE(container->field("restartPolicy"));
  CHECK(findType("core.v1.PodSpec")->field("containers")->patch == "merge:name");
  // Inline fields: an ephemeral container has a container's fields besides its own.
  const SchemaType* ephemeral = findType("core.v1.EphemeralContainer");
  REQUIRE(ephemeral);
  CHECK(ephemeral->field("image") == container->field("image"));
  CHECK(ephemeral->field("targetContainerName") != nullptr);
  CHECK(ephemeral->field("nope") == nullptr);
  CHECK(findType("core.v1.PodSpec")->field("containers")->type == "![]core.v1.Container");
}

TEST_CASE("openapi: unknown fields are named by their path with list indexes and map keys",
          "[apiserver][openapi]") {
  CHECK(fieldProblems("core.v1.Pod", kBadPod) ==
        Problems{R"(unknown field "spec.containers[0].imagex")", R"(unknown field "spec.foo")"});
  // In document order; nothing below an unknown field; map keys are free.
  const char* pod = R"({"zzz":{"a":1},"metadata":{"labels":{"any/key":"v"},"annotations":{"k":"v"}},
    "spec":{"containers":[{"name":"a"},{"name":"b","env":[{"name":"E","valueFrom":{"fieldRef":
    {"fieldPath":"x","bogus":true}}}]}],"nodeSelector":{"k":"v"},
    "volumes":[{"name":"v","configMap":{"name":"c","itemz":[]}}],
    "overhead":{"cpu":"1"}}})";
  CHECK(fieldProblems("core.v1.Pod", pod) ==
        Problems{R"(unknown field "zzz")",
                 R"(unknown field "spec.containers[1].env[0].valueFrom.fieldRef.bogus")",
                 R"(unknown field "spec.volumes[0].configMap.itemz")"});
  CHECK(fieldProblems("core.v1.ConfigMap", R"({"data":{"a":"b"},"datax":{}})") ==
        Problems{R"(unknown field "datax")"});
  CHECK(fieldProblems("coordination.v1.Lease", R"({"spec":{"holderIdentity":"n","renewTime":
    "2024-01-01T00:00:00.000000Z","leaseDurationSeconds":40,"preferredHolder":"m"}})")
            .empty());
  CHECK(fieldProblems("coordination.v1.Lease", R"({"spec":{"holder":"n"}})") ==
        Problems{R"(unknown field "spec.holder")"});
  // Not a served type, not JSON: nothing to say.
  CHECK(fieldProblems("core.v1.Nope", kBadPod).empty());
  CHECK(fieldProblems("core.v1.Pod", "{not json").empty());
}

TEST_CASE("openapi: duplicate fields are reported once each", "[apiserver][openapi]") {
  const char* dup = R"({"metadata":{"name":"a","name":"b","labels":{"x":"1","x":"2"}},
    "spec":{"containers":[{"name":"c","q":1}],"containers":[{"name":"c","q":2}]}})";
  CHECK(fieldProblems("core.v1.Pod", dup) == Problems{R"(duplicate field "metadata.name")",
                                                      R"(duplicate field "metadata.labels.x")",
                                                      R"(unknown field "spec.containers[0].q")",
                                                      R"(duplicate field "spec.containers")"});
}

TEST_CASE("openapi: server-side apply names unknown fields by their list keys",
          "[apiserver][openapi]") {
  const json applied = json::parse(R"({"apiVersion":"v1","kind":"Pod",
    "metadata":{"name":"p","labels":{"a":"b"},"finalizers":["x"],"ownerz":1},
    "spec":{"containers":[{"name":"c","imagex":"i","ports":[{"containerPort":80,"foo":1},
    {"containerPort":53,"protocol":"UDP","bar":1}]}],"tolerations":[{"key":"k","baz":1}]}})");
  CHECK(applyProblems("core.v1.Pod", applied) ==
        Problems{R"(.metadata.ownerz: field not declared in schema)",
                 R"(.spec.containers[name="c"].imagex: field not declared in schema)",
                 R"(.spec.containers[name="c"].ports[containerPort=80,protocol="TCP"].foo: )"
                 R"(field not declared in schema)",
                 R"(.spec.containers[name="c"].ports[containerPort=53,protocol="UDP"].bar: )"
                 R"(field not declared in schema)",
                 R"(.spec.tolerations[0].baz: field not declared in schema)"});
  CHECK(applyProblems("core.v1.Pod", json::parse(kBadPod)).size() == 2);
  CHECK(applyProblems("core.v1.ConfigMap", {{"data", {{"k", "v"}}}}).empty());
}

TEST_CASE("openapi: managedFields and strategic merge patch directives pass",
          "[apiserver][openapi]") {
  const char* managed = R"({"metadata":{"managedFields":[{"manager":"kubectl","operation":"Apply",
    "apiVersion":"v1","time":"2024-01-01T00:00:00Z","fieldsType":"FieldsV1",
    "fieldsV1":{"f:spec":{"f:containers":{"k:{\"name\":\"c\"}":{".":{}}}}}}]}})";
  CHECK(fieldProblems("core.v1.Pod", managed).empty());
  const char* smp = R"({"metadata":{"$setElementOrder/finalizers":["a"]},"spec":{
    "$setElementOrder/containers":[{"name":"c"}],"containers":[{"name":"c","$patch":"delete"}],
    "$retainKeys":["x"]}})";
  CHECK(fieldProblems("core.v1.Pod", smp, true).empty());
  CHECK(fieldProblems("core.v1.Pod", smp, false).size() == 4);
}

TEST_CASE("openapi: the example pod manifests have no unknown field", "[apiserver][openapi]") {
  namespace fs = std::filesystem;
  const fs::path data = NODEAGENT_TEST_DATA_DIR;
  const std::vector<fs::path> dirs = {data / "manifests" / "good",
                                      data / ".." / ".." / "deploy" / "examples" / "manifests"};
  int checked = 0;
  for (const auto& dir : dirs) {
    REQUIRE(fs::is_directory(dir));
    for (const auto& entry : fs::directory_iterator(dir)) {
      INFO(entry.path().string());
      auto doc = nodeagent::api::yamlToJson(nodeagent::testing::readFile(entry.path()));
      REQUIRE(doc.ok());
      REQUIRE(doc->is_object());
      const std::string kind = doc->value("kind", "Pod");
      if (kind != "Pod") continue;
      CHECK(fieldProblems("core.v1.Pod", doc->dump()) == Problems{});
      ++checked;
    }
  }
  CHECK(checked >= 10);
}

TEST_CASE("openapi: fieldValidation values as kube-apiserver reads them", "[apiserver][openapi]") {
  CHECK(parseFieldValidation("") == FieldValidation::kWarn);
  CHECK(parseFieldValidation("Warn") == FieldValidation::kWarn);
  CHECK(parseFieldValidation("Strict") == FieldValidation::kStrict);
  CHECK(parseFieldValidation("Ignore") == FieldValidation::kIgnore);
  CHECK_FALSE(parseFieldValidation("strict"));
  json status = invalidFieldValidationStatus("foo", "CreateOptions");
  CHECK(status["code"] == 422);
  CHECK(status["reason"] == "Invalid");
  CHECK(status["message"] ==
        R"(CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "foo": )"
        R"(supported values: "", "Ignore", "Strict", "Warn")");
}

TEST_CASE("openapi: v3 documents have the patch operations kubectl looks for",
          "[apiserver][openapi]") {
  const json& index = openApiV3Index();
  for (const char* gv : {"api/v1", "apis/coordination.k8s.io/v1", "apis/authentication.k8s.io/v1",
                         "apis/authorization.k8s.io/v1"}) {
    INFO(gv);
    REQUIRE(index["paths"].contains(gv));
    CHECK(index["paths"][gv]["serverRelativeURL"] ==
          "/openapi/v3/" + std::string(gv) + "?hash=" + openApiV3Hash(gv));
    const json* doc = openApiV3Document(gv);
    REQUIRE(doc);
    std::set<std::string> refs;
    collectRefs(*doc, refs);
    for (const auto& ref : refs) {
      INFO(ref);
      CHECK((*doc)["components"]["schemas"].contains(ref.substr(ref.rfind('/') + 1)));
    }
  }
  CHECK(openApiV3Document("apis/apps/v1") == nullptr);
  const json& pods =
      (*openApiV3Document("api/v1"))["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"];
  const json& patch = pods["patch"];
  CHECK(patch["x-kubernetes-group-version-kind"] ==
        json({{"group", ""}, {"kind", "Pod"}, {"version", "v1"}}));
  CHECK(patch["requestBody"]["content"].contains("application/strategic-merge-patch+json"));
  CHECK(patch["requestBody"]["content"].contains("application/apply-patch+yaml"));
  bool field_validation = false;
  for (const auto& p : patch["parameters"]) {
    field_validation |= p["name"] == "fieldValidation" && p["in"] == "query";
  }
  CHECK(field_validation);
  const json& lease = (*openApiV3Document(
      "apis/coordination.k8s.io/v1"))["components"]["schemas"]["io.k8s.api.coordination.v1.Lease"];
  CHECK(lease["x-kubernetes-group-version-kind"][0] ==
        json({{"group", "coordination.k8s.io"}, {"kind", "Lease"}, {"version", "v1"}}));
  const json& containers = (*openApiV3Document(
      "api/v1"))["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
  CHECK(containers["x-kubernetes-patch-merge-key"] == "name");
  CHECK(containers["items"]["$ref"] == "#/components/schemas/io.k8s.api.core.v1.Container");
  const json& pull =
      (*openApiV3Document("api/v1"))["components"]["schemas"]["io.k8s.api.core.v1.Container"]
                                    ["properties"]["imagePullPolicy"];
  CHECK(pull["enum"] == json({"Always", "IfNotPresent", "Never"}));
}

TEST_CASE("openapi: the v2 document resolves every reference", "[apiserver][openapi]") {
  const json& doc = openApiV2Document();
  CHECK(doc["swagger"] == "2.0");
  std::set<std::string> refs;
  collectRefs(doc, refs);
  CHECK(refs.size() > 100);
  for (const auto& ref : refs) {
    INFO(ref);
    CHECK(ref.starts_with("#/definitions/"));
    CHECK(doc["definitions"].contains(ref.substr(ref.rfind('/') + 1)));
  }
  CHECK(
      doc["definitions"]["io.k8s.api.core.v1.Pod"]["x-kubernetes-group-version-kind"][0]["kind"] ==
      "Pod");
  CHECK(doc["paths"].contains("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"));
}

TEST_CASE("openapi: the server validates fields as fieldValidation asks", "[apiserver][openapi]") {
  auto server = startServer();
  httplib::Client client("127.0.0.1", server->port());
  const std::string pods = "/api/v1/namespaces/default/pods";

  auto strict =
      client.Post((pods + "?fieldValidation=Strict").c_str(), kBadPod, "application/json");
  REQUIRE(strict);
  CHECK(strict->status == 400);
  CHECK(json::parse(strict->body)["message"] ==
        R"(Pod in version "v1" cannot be handled as a Pod: strict decoding error: )"
        R"(unknown field "spec.containers[0].imagex", unknown field "spec.foo")");

  auto bad_mode =
      client.Post((pods + "?fieldValidation=Loose").c_str(), kBadPod, "application/json");
  REQUIRE(bad_mode);
  CHECK(bad_mode->status == 422);

  auto warned = client.Post(pods.c_str(), kBadPod, "application/json");  // Warn by default
  REQUIRE(warned);
  CHECK(warned->status == 201);
  std::vector<std::string> warnings;
  for (const auto& [name, value] : warned->headers) {
    if (name == "Warning") warnings.push_back(value);
  }
  std::sort(warnings.begin(), warnings.end());
  CHECK(warnings ==
        std::vector<std::string>{R"(299 - "unknown field \"spec.containers[0].imagex\"")",
                                 R"(299 - "unknown field \"spec.foo\"")"});

  auto patched = client.Patch((pods + "/p?fieldValidation=Strict").c_str(),
                              R"({"metadata":{"labelz":{}}})", "application/merge-patch+json");
  REQUIRE(patched);
  CHECK(patched->status == 400);
  CHECK(json::parse(patched->body)["message"] ==
        R"(strict decoding error: unknown field "metadata.labelz")");

  auto ignored = client.Patch((pods + "/p?fieldValidation=Ignore").c_str(),
                              R"({"metadata":{"labels":{"a":"b"}},"spec":{"x":1}})",
                              "application/strategic-merge-patch+json");
  REQUIRE(ignored);
  CHECK(ignored->status == 200);
  CHECK_FALSE(ignored->has_header("Warning"));
}

TEST_CASE("openapi: server-side apply of an unknown field is refused", "[apiserver][openapi]") {
  auto server = startServer();
  httplib::Client client("127.0.0.1", server->port());
  const std::string pod = "/api/v1/namespaces/default/pods/p?fieldManager=m";
  const std::string typo =
      R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"nodeNamex":"n"}})";
  auto applied = client.Patch(pod.c_str(), typo, "application/apply-patch+yaml");
  REQUIRE(applied);
  CHECK(applied->status == 500);
  json status = json::parse(applied->body);
  CHECK_FALSE(status.contains("reason"));
  CHECK(status["message"] ==
        "failed to create typed patch object (default/p; /v1, Kind=Pod): "
        ".spec.nodeNamex: field not declared in schema");
  CHECK(client.Get("/api/v1/namespaces/default/pods/p")->status == 404);
  const std::string fixed =
      R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"nodeName":"n",)"
      R"("containers":[{"name":"c","image":"i"}]}})";
  CHECK(client.Patch(pod.c_str(), fixed, "application/apply-patch+yaml")->status == 201);
}

TEST_CASE("openapi: the server serves the documents as asked", "[apiserver][openapi]") {
  auto server = startServer();
  httplib::Client client("127.0.0.1", server->port());
  auto index = client.Get("/openapi/v3");
  REQUIRE(index);
  CHECK(index->status == 200);
  CHECK(json::parse(index->body) == openApiV3Index());
  const std::string url = openApiV3Index()["paths"]["api/v1"]["serverRelativeURL"];
  auto pinned = client.Get(url.c_str());
  REQUIRE(pinned);
  CHECK(pinned->status == 200);
  CHECK(pinned->get_header_value("Cache-Control") == "public, immutable");
  auto stale = client.Get("/openapi/v3/api/v1?hash=0123");
  REQUIRE(stale);
  CHECK(stale->status == 301);
  CHECK(stale->get_header_value("Location") == url);
  CHECK(client.Get("/openapi/v3/apis/apps/v1")->status == 404);
  auto v3 = client.Get("/openapi/v3/api/v1");
  REQUIRE(v3);
  CHECK(v3->status == 200);
  CHECK(v3->get_header_value("ETag") == "\"" + openApiV3Hash("api/v1") + "\"");
  auto v2_proto = client.Get(
      "/openapi/v2", {{"Accept", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"}});
  REQUIRE(v2_proto);
  CHECK(v2_proto->status == 200);
  CHECK(v2_proto->get_header_value("Content-Type") ==
        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf");
  CHECK(v2_proto->body == openApiV2Protobuf());
  auto v2_xml = client.Get("/openapi/v2", {{"Accept", "application/xml"}});
  REQUIRE(v2_xml);
  CHECK(v2_xml->status == 406);
  auto v2 = client.Get("/openapi/v2", {{"Accept", "application/json"}});
  REQUIRE(v2);
  CHECK(v2->status == 200);
}
