// ConfigMaps, Secrets and ServiceAccounts in the store: kube-apiserver's decoding, defaulting and
// validation (config_objects.h) through create, update and patch, and the default
// ServiceAccount of every namespace.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/api_status.h"
#include "cmd/test-apiserver/store.h"
#include "cmd/test-apiserver/util.h"
#include "test/support/fake_clock.h"

using nlohmann::json;
using namespace nodeagent::testapiserver;
using nodeagent::base::StatusCode;
using nodeagent::testing::FakeClock;

namespace {

StoreOptions fastOptions() {
  StoreOptions o;
  o.too_large_resource_version_wait = std::chrono::milliseconds(0);
  return o;
}

json secret(const std::string& name, json fields) {
  json s = {{"metadata", {{"name", name}}}};
  s.update(fields);
  return s;
}

// The message of a failed call, with its HTTP code checked.
template <typename T>
std::string failure(const nodeagent::base::StatusOr<T>& result, int http_code) {
  REQUIRE_FALSE(result.ok());
  CHECK(httpCodeFor(result.status().code()) == http_code);
  return result.status().message();
}

std::vector<std::string> names(Store& store, const char* resource, const char* ns) {
  auto list = store.list(resource, ns);
  REQUIRE(list.ok());
  std::vector<std::string> out;
  for (const auto& item : list->items) out.push_back((*item.object)["metadata"]["name"]);
  return out;
}

}  // namespace

TEST_CASE("secrets: type defaults to Opaque and stringData is folded into base64 data",
          "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  auto created = store.create(
      "secrets", "default",
      secret("s", {{"data", {{"a", "YQ=="}, {"k", "b2xk"}}}, {"stringData", {{"k", "v"}}}}));
  REQUIRE(created.ok());
  CHECK((*created)["kind"] == "Secret");
  CHECK((*created)["type"] == "Opaque");
  // stringData wins over data for the same key and is never stored.
  CHECK((*created)["data"] == json({{"a", "YQ=="}, {"k", "dg=="}}));
  CHECK_FALSE(created->contains("stringData"));
  auto got = store.get("secrets", "default", "s");
  REQUIRE(got.ok());
  CHECK_FALSE(got->contains("stringData"));
  CHECK((*got)["data"]["k"] == "dg==");

  // On patch too: the merge patch's stringData ends up in data.
  auto patched = store.patch("secrets", "default", "s", PatchType::kMergePatch,
                             json{{"stringData", {{"new", "hello"}}}});
  REQUIRE(patched.ok());
  CHECK((*patched)["data"]["new"] == base64Encode("hello"));
  CHECK_FALSE(patched->contains("stringData"));

  // And on update; data is stored canonically encoded (newlines dropped).
  json next = *patched;
  next["data"]["a"] = "Y\nQ==";
  next["stringData"] = {{"u", "w"}};
  auto updated = store.update("secrets", "default", "s", next);
  REQUIRE(updated.ok());
  CHECK((*updated)["data"]["a"] == "YQ==");
  CHECK((*updated)["data"]["u"] == "dw==");
  CHECK_FALSE(updated->contains("stringData"));
}

TEST_CASE("secrets and configmaps: data must be base64 and keys valid config keys",
          "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  CHECK(failure(store.create("secrets", "default", secret("s", {{"data", {{"k", "v"}}}})), 422) ==
        "Secret \"s\" is invalid: data[k]: Invalid value: \"<secret contents redacted>\": illegal "
        "base64 data at input byte 0");
  CHECK(failure(store.create("configmaps", "default",
                             secret("c", {{"binaryData", {{"bin", "AAE=x"}}}})),
                422)
            .starts_with("ConfigMap \"c\" is invalid: binaryData[bin]: Invalid value"));

  CHECK(failure(store.create("secrets", "default", secret("s", {{"stringData", {{"a b", "v"}}}})),
                422) ==
        "Secret \"s\" is invalid: data[a b]: Invalid value: \"a b\": a valid config key must "
        "consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or "
        "'key-name', regex used for validation is '[-._a-zA-Z0-9]+')");
  for (const char* bad : {".", "..", "..x"}) {
    INFO(bad);
    CHECK(failure(store.create("configmaps", "default", secret("c", {{"data", {{bad, "v"}}}})), 422)
              .find("data[" + std::string(bad) + "]: Invalid value") != std::string::npos);
  }
  CHECK(failure(store.create("configmaps", "default",
                             secret("c", {{"data", {{std::string(254, 'k'), "v"}}}})),
                422)
            .find("must be no more than 253 characters") != std::string::npos);
  CHECK(
      failure(store.create("configmaps", "default",
                           secret("c", {{"data", {{"k", "v"}}}, {"binaryData", {{"k", "dg=="}}}})),
              422) ==
      "ConfigMap \"c\" is invalid: data[k]: Invalid value: \"k\": duplicate of "
      "key present in binaryData");
  // A value of the wrong JSON type is a decoding error (400), as kube-apiserver's.
  CHECK(failure(store.create("configmaps", "default", secret("c", {{"data", {{"k", 1}}}})), 400) ==
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal "
        "number into Go struct field ConfigMap.data of type string");
  CHECK(store.list("configmaps", "default")->items.empty());

  auto ok =
      store.create("configmaps", "default",
                   secret("c", {{"data", {{"a.b_C-1", "x"}}}, {"binaryData", {{"b", "AAE="}}}}));
  REQUIRE(ok.ok());
  CHECK((*ok)["binaryData"]["b"] == "AAE=");
}

TEST_CASE("secrets and configmaps: at most 1 MiB of data", "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  const std::string half(512 * 1024, 'x');
  auto fits =
      store.create("configmaps", "default", secret("c", {{"data", {{"a", half}, {"b", half}}}}));
  CHECK(fits.ok());
  auto over = store.create("configmaps", "default",
                           secret("d", {{"data", {{"a", half}, {"b", half + "x"}}}}));
  CHECK(failure(over, 422) ==
        "ConfigMap \"d\" is invalid: []: Too long: may not be more than 1048576 bytes");
  auto secret_over = store.create("secrets", "default",
                                  secret("s", {{"stringData", {{"a", half}, {"b", half + "x"}}}}));
  CHECK(failure(secret_over, 422) ==
        "Secret \"s\" is invalid: data: Too long: may not be more than 1048576 bytes");
  // The Status names the field as a cause.
  json status = statusFromError(secret_over.status());
  CHECK(status["details"]["causes"][0]["field"] == "data");
  CHECK(status["details"]["causes"][0]["reason"] == "FieldValueTooLong");
}

TEST_CASE("secrets: type cannot change and immutable freezes data", "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  REQUIRE(store.create("secrets", "default", secret("s", {{"stringData", {{"k", "v"}}}})).ok());
  auto retype = store.patch("secrets", "default", "s", PatchType::kMergePatch,
                            json{{"type", "example.com/custom"}});
  CHECK(failure(retype, 422) ==
        "Secret \"s\" is invalid: type: Invalid value: "
        "\"example.com/custom\": field is immutable");
  // A PUT without a type is defaulted to Opaque, which is the stored type: no change.
  json put = *store.get("secrets", "default", "s");
  put.erase("type");
  put["data"]["k2"] = "dg==";
  REQUIRE(store.update("secrets", "default", "s", put).ok());

  REQUIRE(store.patch("secrets", "default", "s", PatchType::kMergePatch, json{{"immutable", true}})
              .ok());
  auto change = store.patch("secrets", "default", "s", PatchType::kMergePatch,
                            json{{"stringData", {{"k", "other"}}}});
  const std::string message = failure(change, 422);
  CHECK(message ==
        "Secret \"s\" is invalid: data: Forbidden: field is immutable when "
        "`immutable` is set");
  json status = statusFromError(change.status());
  CHECK(status["reason"] == "Invalid");
  CHECK(status["details"]["kind"] == "Secret");
  CHECK(status["details"]["name"] == "s");
  CHECK(status["details"]["causes"][0]["reason"] == "FieldValueForbidden");
  CHECK(failure(store.patch("secrets", "default", "s", PatchType::kMergePatch,
                            json{{"immutable", false}}),
                422) ==
        "Secret \"s\" is invalid: immutable: Forbidden: field is immutable when "
        "`immutable` is set");
  CHECK(failure(store.patch("secrets", "default", "s", PatchType::kMergePatch,
                            json{{"immutable", nullptr}}),
                422)
            .find("immutable: Forbidden") != std::string::npos);
  // Metadata stays writable; writing the same data is no change.
  auto labelled =
      store.patch("secrets", "default", "s", PatchType::kMergePatch,
                  json{{"metadata", {{"labels", {{"a", "b"}}}}}, {"stringData", {{"k", "v"}}}});
  REQUIRE(labelled.ok());
  CHECK((*labelled)["metadata"]["labels"]["a"] == "b");
  CHECK((*labelled)["data"]["k"] == "dg==");
}

TEST_CASE("configmaps: immutable freezes data and binaryData", "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  REQUIRE(store
              .create("configmaps", "default",
                      secret("c", {{"data", {{"a", "1"}}}, {"immutable", true}}))
              .ok());
  CHECK(failure(store.patch("configmaps", "default", "c", PatchType::kMergePatch,
                            json{{"data", {{"a", "2"}}}}),
                422) ==
        "ConfigMap \"c\" is invalid: data: Forbidden: field is immutable when "
        "`immutable` is set");
  CHECK(failure(store.patch("configmaps", "default", "c", PatchType::kMergePatch,
                            json{{"binaryData", {{"b", "AAE="}}}}),
                422)
            .find("binaryData: Forbidden: field is immutable") != std::string::npos);
  CHECK(failure(store.patch("configmaps", "default", "c", PatchType::kMergePatch,
                            json{{"immutable", false}}),
                422)
            .find("immutable: Forbidden") != std::string::npos);
  CHECK((*store.get("configmaps", "default", "c"))["data"]["a"] == "1");
  // Deleting an immutable ConfigMap is allowed.
  CHECK(store.remove("configmaps", "default", "c").ok());
}

TEST_CASE("secrets: the types kube-apiserver checks need their keys", "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  struct Case {
    const char* type;
    json fields;
    const char* error;  // nullptr: valid
  };
  const std::string cfg = base64Encode(R"({"auths":{}})");
  const std::vector<Case> cases = {
      {"kubernetes.io/tls", {{"data", {{"tls.crt", "YQ=="}}}}, "data[tls.key]: Required value"},
      {"kubernetes.io/tls", {{"data", {{"tls.crt", "YQ=="}, {"tls.key", "YQ=="}}}}, nullptr},
      {"kubernetes.io/dockerconfigjson", json::object(), "data[.dockerconfigjson]: Required value"},
      {"kubernetes.io/dockerconfigjson",
       {{"stringData", {{".dockerconfigjson", "{nope"}}}},
       "data[.dockerconfigjson]: Invalid value"},
      {"kubernetes.io/dockerconfigjson", {{"data", {{".dockerconfigjson", cfg}}}}, nullptr},
      {"kubernetes.io/basic-auth", json::object(), "data[username]: Required value"},
      {"kubernetes.io/basic-auth", {{"stringData", {{"password", ""}}}}, nullptr},
      {"kubernetes.io/ssh-auth",
       {{"data", {{"ssh-privatekey", ""}}}},
       "data[ssh-privatekey]: Required value"},
      {"kubernetes.io/service-account-token", json::object(),
       "metadata.annotations[kubernetes.io/service-account.name]: Required value"},
      {"kubernetes.io/service-account-token",
       {{"metadata",
         {{"name", "x"}, {"annotations", {{"kubernetes.io/service-account.name", "default"}}}}}},
       nullptr},
      {"bootstrap.kubernetes.io/token", json::object(), nullptr},
  };
  for (const auto& c : cases) {
    json s = secret("x", c.fields);
    s["metadata"]["name"] = "x";
    s["type"] = c.type;
    INFO(c.type << " " << c.fields.dump());
    auto created = store.create("secrets", "default", s);
    if (c.error) {
      CHECK(failure(created, 422).find(std::string("Secret \"x\" is invalid: ") + c.error) == 0);
    } else {
      CHECK(created.ok());
      CHECK(store.remove("secrets", "default", "x").ok());
    }
  }
}

TEST_CASE("secrets: field selector on type and label selectors", "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  json tls = secret(
      "t", {{"type", "kubernetes.io/tls"}, {"stringData", {{"tls.crt", "c"}, {"tls.key", "k"}}}});
  tls["metadata"]["labels"] = {{"app", "web"}};
  REQUIRE(store.create("secrets", "default", tls).ok());
  REQUIRE(store.create("secrets", "default", secret("o", json::object())).ok());
  ListOptions by_type;
  by_type.field_selector = "type=kubernetes.io/tls";
  auto list = store.list("secrets", "", by_type);
  REQUIRE(list.ok());
  REQUIRE(list->items.size() == 1);
  CHECK((*list->items[0].object)["metadata"]["name"] == "t");
  ListOptions by_label;
  by_label.label_selector = "app!=web";
  list = store.list("secrets", "default", by_label);
  REQUIRE(list.ok());
  REQUIRE(list->items.size() == 1);
  CHECK((*list->items[0].object)["metadata"]["name"] == "o");
  ListOptions unsupported;
  unsupported.field_selector = "spec.nodeName=x";
  CHECK(store.list("configmaps", "", unsupported).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("serviceaccounts: every namespace has a default one, recreated when deleted",
          "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  for (const char* ns : {"default", "kube-system", "kube-public", "kube-node-lease"}) {
    INFO(ns);
    CHECK(names(store, "serviceaccounts", ns) == std::vector<std::string>{"default"});
  }
  REQUIRE(store.create("namespaces", "", json{{"metadata", {{"name", "team-a"}}}}).ok());
  auto sa = store.get("serviceaccounts", "team-a", "default");
  REQUIRE(sa.ok());
  CHECK((*sa)["kind"] == "ServiceAccount");
  CHECK((*sa)["apiVersion"] == "v1");
  const std::string uid = (*sa)["metadata"]["uid"];

  WatchOptions from_now;
  from_now.resource_version = std::to_string(store.resourceVersion());
  auto watcher = store.watch("serviceaccounts", "team-a", from_now);
  REQUIRE(watcher.ok());
  REQUIRE(store.remove("serviceaccounts", "team-a", "default").ok());
  auto again = store.get("serviceaccounts", "team-a", "default");
  REQUIRE(again.ok());
  CHECK((*again)["metadata"]["uid"] != uid);
  auto deleted = (*watcher)->tryNext();
  REQUIRE(deleted);
  CHECK(deleted->type == WatchEvent::Type::kDeleted);
  auto added = (*watcher)->tryNext();
  REQUIRE(added);
  CHECK(added->type == WatchEvent::Type::kAdded);
  CHECK((*added->object.object)["metadata"]["uid"] == (*again)["metadata"]["uid"]);
  store.unwatch(*watcher);

  // Other service accounts keep what they are given and are not recreated.
  json custom = {{"metadata", {{"name", "builder"}}},
                 {"secrets", {{{"name", "tok"}}}},
                 {"imagePullSecrets", {{{"name", "reg"}}}},
                 {"automountServiceAccountToken", false}};
  auto created = store.create("serviceaccounts", "team-a", custom);
  REQUIRE(created.ok());
  CHECK((*created)["secrets"] == custom["secrets"]);
  CHECK((*created)["imagePullSecrets"] == custom["imagePullSecrets"]);
  CHECK((*created)["automountServiceAccountToken"] == false);
  REQUIRE(store.remove("serviceaccounts", "team-a", "builder").ok());
  CHECK(names(store, "serviceaccounts", "team-a") == std::vector<std::string>{"default"});

  // A deleted namespace takes its service accounts along, and none comes back.
  REQUIRE(store.remove("namespaces", "", "team-a").ok());
  CHECK(store.get("serviceaccounts", "team-a", "default").status().code() == StatusCode::kNotFound);
}

TEST_CASE("serviceaccounts: no default ones when the option is off", "[unit][apiserver]") {
  FakeClock clock;
  StoreOptions options = fastOptions();
  options.default_service_accounts = false;
  Store store(clock, options);
  CHECK(names(store, "serviceaccounts", "").empty());
}

TEST_CASE("base64: Go's StdEncoding rules and error offsets", "[unit][apiserver]") {
  CHECK(*base64DecodeStd("dg==") == "v");
  CHECK(*base64DecodeStd("aGVsbG8=") == "hello");
  CHECK(*base64DecodeStd("aGVs\r\nbG8=\n") == "hello");
  CHECK(*base64DecodeStd("") == "");
  CHECK(base64DecodeStd("dg").status().message() == "illegal base64 data at input byte 0");
  CHECK(base64DecodeStd("dg=").status().message() == "illegal base64 data at input byte 3");
  CHECK(base64DecodeStd("dg==x").status().message() == "illegal base64 data at input byte 4");
  CHECK(base64DecodeStd("d-g=").status().message() == "illegal base64 data at input byte 1");
  CHECK(base64DecodeStd("d===").status().message() == "illegal base64 data at input byte 1");
  CHECK(base64DecodeStd("dg=x").status().message() == "illegal base64 data at input byte 2");
}
