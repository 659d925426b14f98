// The test apiserver's field ownership (metadata.managedFields) and server-side apply.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/managed_fields.h"

using nlohmann::json;
using namespace nodeagent::testapiserver;

namespace {

FieldWrite writer(const std::string& manager, const std::string& time = "2026-01-01T00:00:00Z") {
  return {manager, "v1", "", time, true};
}

json pod(const std::string& image) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", "web"}, {"labels", {{"app", "web"}}}}},
          {"spec", {{"containers", {{{"name", "web"}, {"image", image}}}}}}};
}

// manager -> its fields, as strings.
std::map<std::string, std::set<std::string>> owners(const json& object) {
  std::map<std::string, std::set<std::string>> out;
  for (const json& e : object["metadata"].value("managedFields", json::array())) {
    for (const FieldPath& f : fromFieldsV1(e["fieldsV1"])) {
      out[e["manager"].get<std::string>() + "/" + e["operation"].get<std::string>()].insert(
          fieldPathString(f));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("managed fields: which fields an object sets, and FieldsV1 both ways",
          "[unit][apiserver]") {
  json object = pod("nginx");
  object["metadata"]["annotations"] = {{"a.io/x", "1"}};
  object["metadata"]["finalizers"] = {"f"};
  object["status"] = {{"phase", "Running"}};
  object["type"] = "Opaque";
  const FieldSet all = fieldsOf(object);
  std::set<std::string> names;
  for (const FieldPath& f : all) names.insert(fieldPathString(f));
  CHECK(names == std::set<std::string>{".metadata.labels.app", ".metadata.annotations.a.io/x",
                                       ".metadata.finalizers", ".spec.containers", ".status.phase",
                                       ".type"});
  CHECK(fieldsOf(object, /*status_only=*/true).size() == 1);
  CHECK(fieldsOf(object, false, /*skip_status=*/true).size() == 5);
  const json v1 = toFieldsV1(all);
  CHECK(v1["f:metadata"]["f:annotations"] == json{{"f:a.io/x", json::object()}});
  CHECK(v1["f:spec"] == json{{"f:containers", json::object()}});
  CHECK(fromFieldsV1(v1) == all);
}

TEST_CASE("managed fields: an update gives its writer what it changed and takes it from others",
          "[unit][apiserver]") {
  json created = pod("nginx");
  recordUpdate(nullptr, created, writer("kubectl-create"));
  CHECK(owners(created) ==
        std::map<std::string, std::set<std::string>>{
            {"kubectl-create/Update", {".metadata.labels.app", ".spec.containers"}}});
  CHECK(created["metadata"]["managedFields"][0]["apiVersion"] == "v1");
  CHECK(created["metadata"]["managedFields"][0]["fieldsType"] == "FieldsV1");

  json labeled = created;
  labeled["metadata"]["labels"]["tier"] = "front";
  labeled["spec"]["containers"][0]["image"] = "nginx:2";
  recordUpdate(&created, labeled, writer("kubectl-edit"));
  CHECK(owners(labeled) ==
        std::map<std::string, std::set<std::string>>{
            {"kubectl-create/Update", {".metadata.labels.app"}},
            {"kubectl-edit/Update", {".metadata.labels.tier", ".spec.containers"}}});

  // A removed field is no one's; an entry left with nothing goes.
  json unlabeled = labeled;
  unlabeled["metadata"]["labels"].erase("app");
  recordUpdate(&labeled, unlabeled, writer("kubectl-label"));
  CHECK(owners(unlabeled) ==
        std::map<std::string, std::set<std::string>>{
            {"kubectl-edit/Update", {".metadata.labels.tier", ".spec.containers"}}});

  // A client cannot write managedFields: they are recomputed from the stored ones; without a
  // manager nothing is recorded.
  json forged = unlabeled;
  forged["metadata"]["managedFields"] = json::array({{{"manager", "mallory"}}});
  recordUpdate(&unlabeled, forged, writer(""));
  CHECK(owners(forged) == owners(unlabeled));
}

TEST_CASE(
    "server-side apply: creates, co-owns equal values, conflicts on different ones, takes "
    "over with force and removes what it no longer applies",
    "[unit][apiserver]") {
  ApplyResult made = applyConfiguration(nullptr, pod("nginx:1"), writer("kubectl"), false);
  REQUIRE(made.conflicts.empty());
  CHECK(owners(made.object) ==
        std::map<std::string, std::set<std::string>>{
            {"kubectl/Apply", {".metadata.labels.app", ".spec.containers"}}});
  CHECK_FALSE(made.object["metadata"]["managedFields"][0].contains("subresource"));

  // Another manager applying the same values shares them; a different image conflicts.
  json same = pod("nginx:1");
  same["metadata"].erase("labels");
  ApplyResult shared = applyConfiguration(&made.object, same, writer("other"), false);
  REQUIRE(shared.conflicts.empty());
  CHECK(owners(shared.object)["other/Apply"] == std::set<std::string>{".spec.containers"});
  ApplyResult refused =
      applyConfiguration(&made.object, pod("nginx:2"), writer("other"), /*force=*/false);
  REQUIRE(refused.conflicts.size() == 1);
  CHECK(refused.conflicts[0].manager == "\"kubectl\"");
  CHECK(refused.conflicts[0].field == ".spec.containers");
  CHECK(refused.object.is_null());
  const json status = applyConflictStatus(refused.conflicts);
  CHECK(status["code"] == 409);
  CHECK(status["reason"] == "Conflict");
  CHECK(status["message"] ==
        "Apply failed with 1 conflict: conflict with \"kubectl\": .spec.containers");
  CHECK(status["details"]["causes"] == json::array({{{"reason", "FieldManagerConflict"},
                                                     {"message", "conflict with \"kubectl\""},
                                                     {"field", ".spec.containers"}}}));

  ApplyResult forced = applyConfiguration(&made.object, pod("nginx:2"), writer("other"), true);
  REQUIRE(forced.conflicts.empty());
  CHECK(forced.object["spec"]["containers"][0]["image"] == "nginx:2");
  CHECK(owners(forced.object) ==
        std::map<std::string, std::set<std::string>>{
            {"kubectl/Apply", {".metadata.labels.app"}},
            {"other/Apply", {".metadata.labels.app", ".spec.containers"}}});

  // kubectl applies without the label: other still owns it, so it stays; then other drops it
  // too and it goes.
  json no_label = pod("nginx:2");
  no_label["metadata"].erase("labels");
  ApplyResult kept = applyConfiguration(&forced.object, no_label, writer("kubectl"), false);
  REQUIRE(kept.conflicts.empty());
  CHECK(kept.object["metadata"]["labels"] == json{{"app", "web"}});
  ApplyResult dropped = applyConfiguration(&kept.object, no_label, writer("other"), false);
  REQUIRE(dropped.conflicts.empty());
  CHECK_FALSE(dropped.object["metadata"].contains("labels"));
}

TEST_CASE(
    "server-side apply: conflicts with update managers name their version and time, "
    "several are grouped by manager",
    "[unit][apiserver]") {
  json created = pod("nginx:1");
  recordUpdate(nullptr, created, writer("kubectl-create", "2026-02-03T04:05:06Z"));
  json applied = pod("nginx:2");
  applied["metadata"]["labels"]["app"] = "api";
  ApplyResult refused = applyConfiguration(&created, applied, writer("kubectl"), false);
  REQUIRE(refused.conflicts.size() == 2);
  CHECK(applyConflictStatus(refused.conflicts)["message"] ==
        "Apply failed with 2 conflicts: conflicts with \"kubectl-create\" using v1 at "
        "2026-02-03T04:05:06Z:\n- .metadata.labels.app\n- .spec.containers");

  // Through the status subresource only .status counts.
  FieldWrite status_write = writer("nodeagent");
  status_write.subresource = "status";
  json with_status = created;
  with_status["status"] = {{"phase", "Running"}};
  with_status["spec"]["containers"][0]["image"] = "ignored-here";
  recordUpdate(&created, with_status, status_write);
  CHECK(owners(with_status)["nodeagent/Update"] == std::set<std::string>{".status.phase"});
  CHECK(with_status["metadata"]["managedFields"][1]["subresource"] == "status");
}

TEST_CASE(
    "server-side apply lays the applied value over the live one: the server's defaults "
    "stay and applying what is there is no conflict",
    "[unit][apiserver]") {
  json live = pod("nginx:1");
  live["spec"]["containers"][0]["imagePullPolicy"] = "IfNotPresent";
  live["spec"]["containers"].push_back({{"name", "side"}, {"image", "busybox"}});
  recordUpdate(nullptr, live, writer("kubectl-create"));
  json applied = pod("nginx:1");
  applied["spec"]["containers"].push_back({{"name", "side"}, {"image", "busybox"}});
  ApplyResult same = applyConfiguration(&live, applied, writer("kubectl"), false);
  REQUIRE(same.conflicts.empty());
  CHECK(same.object["spec"] == live["spec"]);
  CHECK(owners(same.object)["kubectl/Apply"] ==
        std::set<std::string>{".metadata.labels.app", ".spec.containers"});

  // A new image keeps the container's defaults; a container left out goes.
  json changed = pod("nginx:2");
  ApplyResult forced = applyConfiguration(&same.object, changed, writer("kubectl"), true);
  REQUIRE(forced.conflicts.empty());
  CHECK(
      forced.object["spec"]["containers"] ==
      json::array({{{"name", "web"}, {"image", "nginx:2"}, {"imagePullPolicy", "IfNotPresent"}}}));
}
