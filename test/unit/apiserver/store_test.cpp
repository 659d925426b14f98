#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/store.h"
#include "cmd/test-apiserver/util.h"
#include "test/support/fake_clock.h"

using nlohmann::json;
using namespace nodeagent::testapiserver;
using nodeagent::base::StatusCode;
using nodeagent::testing::FakeClock;

namespace {

json pod(const std::string& name, const std::string& node = "node1", json labels = json::object()) {
  json p = {{"metadata", {{"name", name}, {"labels", labels}}},
            {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
  if (!node.empty()) p["spec"]["nodeName"] = node;
  return p;
}

StoreOptions fastOptions() {
  StoreOptions o;
  o.too_large_resource_version_wait = std::chrono::milliseconds(0);
  return o;
}

std::string rvOf(const json& obj) { return obj["metadata"]["resourceVersion"].get<std::string>(); }

std::vector<std::pair<std::string, std::string>> drain(Watcher& w) {
  std::vector<std::pair<std::string, std::string>> out;
  while (auto d = w.tryNext()) {
    if (!d->object.object) continue;
    out.emplace_back(watchEventTypeName(d->type),
                     (*d->object.object)["metadata"]["name"].get<std::string>());
  }
  return out;
}

WatchOptions watchFrom(std::string rv) {
  WatchOptions o;
  o.resource_version = std::move(rv);
  return o;
}
WatchOptions watchFields(std::string fields) {
  WatchOptions o;
  o.field_selector = std::move(fields);
  return o;
}
WatchOptions watchLabels(std::string labels) {
  WatchOptions o;
  o.label_selector = std::move(labels);
  return o;
}
ListOptions listFields(std::string fields) {
  ListOptions o;
  o.field_selector = std::move(fields);
  return o;
}
ListOptions listLabels(std::string labels) {
  ListOptions o;
  o.label_selector = std::move(labels);
  return o;
}
DeleteOptions grace(int64_t seconds, std::optional<std::string> uid = std::nullopt) {
  DeleteOptions o;
  o.grace_period_seconds = seconds;
  o.precondition_uid = std::move(uid);
  return o;
}

using Events = std::vector<std::pair<std::string, std::string>>;

}  // namespace

TEST_CASE("store: create fills uid, timestamps, resourceVersion and pod defaults",
          "[unit][apiserver]") {
  FakeClock clock;
  clock.setWallTime(nodeagent::base::SystemTime(std::chrono::seconds(1714564800)));
  Store store(clock, fastOptions());
  json with_status = pod("web");
  with_status["status"] = {{"phase", "Running"}};
  auto created = store.create("pods", "default", with_status);
  REQUIRE(created.ok());
  const json& p = *created;
  CHECK(p["kind"] == "Pod");
  CHECK(p["apiVersion"] == "v1");
  CHECK(p["metadata"]["namespace"] == "default");
  CHECK(p["metadata"]["uid"].get<std::string>().size() == 36);
  CHECK(p["metadata"]["creationTimestamp"] == "2024-05-01T12:00:00Z");
  CHECK(std::stoull(rvOf(p)) == store.resourceVersion());
  CHECK(p["spec"]["restartPolicy"] == "Always");
  CHECK(p["spec"]["terminationGracePeriodSeconds"] == 30);
  CHECK(p["spec"]["containers"][0]["imagePullPolicy"] == "Always");
  CHECK(p["status"]["phase"] == "Pending");
  auto got = store.get("pods", "default", "web");
  REQUIRE(got.ok());
  CHECK(*got == p);
}

TEST_CASE("store: create errors carry kube-apiserver's codes and messages", "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  REQUIRE(store.create("pods", "default", pod("web")).ok());
  auto dup = store.create("pods", "default", pod("web"));
  REQUIRE_FALSE(dup.ok());
  CHECK(dup.status().code() == StatusCode::kAlreadyExists);
  CHECK(dup.status().message() == "pods \"web\" already exists");

  json no_containers = {{"metadata", {{"name", "x"}}}, {"spec", json::object()}};
  auto invalid = store.create("pods", "default", no_containers);
  REQUIRE_FALSE(invalid.ok());
  CHECK(invalid.status().code() == StatusCode::kFailedPrecondition);
  CHECK(invalid.status().message() == "Pod \"x\" is invalid: spec.containers: Required value");

  auto no_ns = store.create("pods", "nope", pod("web"));
  REQUIRE_FALSE(no_ns.ok());
  CHECK(no_ns.status().code() == StatusCode::kNotFound);

  auto bad_name = store.create("pods", "default", pod("Web_1"));
  CHECK(bad_name.status().code() == StatusCode::kFailedPrecondition);
  auto no_name = store.create("nodes", "", json{{"metadata", json::object()}});
  CHECK(no_name.status().code() == StatusCode::kFailedPrecondition);
  CHECK(store.create("widgets", "", json::object()).status().code() == StatusCode::kNotFound);
}

TEST_CASE("store: certificate signing requests may have any name that is one path segment",
          "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  auto csr = [](const std::string& name) {
    return json{{"apiVersion", "certificates.k8s.io/v1"},
                {"kind", "CertificateSigningRequest"},
                {"metadata", {{"name", name}}},
                {"spec", {{"signerName", "example.com/x"}, {"request", "AA=="}}}};
  };
  // kubelet's names: node-csr- and a base64url digest.
  auto kubelet = store.create("certificatesigningrequests", "", csr("node-csr-Ab_9-Z"));
  INFO(kubelet.status().toString());
  CHECK(kubelet.ok());
  for (const char* bad : {"a/b", "a%b", "..", "."}) {
    auto refused = store.create("certificatesigningrequests", "", csr(bad));
    INFO(bad);
    CHECK(refused.status().code() == StatusCode::kFailedPrecondition);
    CHECK(refused.status().message().find("metadata.name: Invalid value") != std::string::npos);
  }
  // Other kinds still need a DNS subdomain.
  CHECK(store.create("pods", "default", pod("Ab_9")).status().code() ==
        StatusCode::kFailedPrecondition);
}

TEST_CASE("store: generateName gives a unique name with a random suffix", "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  json p = pod("");
  p["metadata"].erase("name");
  p["metadata"]["generateName"] = "web-";
  auto a = store.create("pods", "default", p);
  auto b = store.create("pods", "default", p);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const std::string na = (*a)["metadata"]["name"], nb = (*b)["metadata"]["name"];
  CHECK(na.starts_with("web-"));
  CHECK(na.size() == 9);
  CHECK(na != nb);
}

TEST_CASE("store: update checks resourceVersion and keeps status off the main resource",
          "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  json p = *store.create("pods", "default", pod("web"));
  json stale = p;
  p["metadata"]["labels"]["x"] = "1";
  p["status"]["phase"] = "Running";
  auto updated = store.update("pods", "default", "web", p);
  REQUIRE(updated.ok());
  CHECK((*updated)["metadata"]["labels"]["x"] == "1");
  CHECK((*updated)["status"]["phase"] == "Pending");
  CHECK(rvOf(*updated) != rvOf(stale));

  stale["metadata"]["labels"]["y"] = "2";
  auto conflict = store.update("pods", "default", "web", stale);
  REQUIRE_FALSE(conflict.ok());
  CHECK(conflict.status().code() == StatusCode::kAborted);
  CHECK(conflict.status().message().find("the object has been modified") != std::string::npos);

  json status_update = *updated;
  status_update["status"]["phase"] = "Running";
  status_update["metadata"]["labels"]["ignored"] = "yes";
  auto st = store.update("pods", "default", "web", status_update, "status");
  REQUIRE(st.ok());
  CHECK((*st)["status"]["phase"] == "Running");
  CHECK_FALSE((*st)["metadata"]["labels"].contains("ignored"));
}

TEST_CASE("store: a write that changes nothing keeps the resourceVersion and emits no event",
          "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  json p = *store.create("pods", "default", pod("web"));
  auto w = *store.watch("pods", "", watchFrom(rvOf(p)));
  auto same = store.patch("pods", "default", "web", PatchType::kMergePatch,
                          {{"metadata", {{"labels", json::object()}}}});
  REQUIRE(same.ok());
  CHECK(rvOf(*same) == rvOf(p));
  CHECK(drain(*w).empty());
}

TEST_CASE("store: status patch with a uid precondition", "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  json p = *store.create("pods", "default", pod("web"));
  const std::string uid = p["metadata"]["uid"];
  json patch = {
      {"metadata", {{"uid", uid}}},
      {"status", {{"phase", "Running"}, {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}},
      {"spec", {{"nodeName", "elsewhere"}}}};
  auto ok = store.patch("pods", "default", "web", PatchType::kStrategicMergePatch, patch, "status");
  REQUIRE(ok.ok());
  CHECK((*ok)["status"]["phase"] == "Running");
  CHECK((*ok)["spec"]["nodeName"] == "node1");  // the status subresource only writes status

  patch["metadata"]["uid"] = "other-uid";
  auto bad =
      store.patch("pods", "default", "web", PatchType::kStrategicMergePatch, patch, "status");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == StatusCode::kAborted);
  CHECK(bad.status().message() ==
        "Precondition failed: UID in precondition: other-uid, UID in object meta: " + uid);

  auto stale_rv = store.patch("pods", "default", "web", PatchType::kMergePatch,
                              {{"metadata", {{"resourceVersion", "1"}}}});
  CHECK(stale_rv.status().code() == StatusCode::kAborted);
  CHECK(store.patch("pods", "default", "nope", PatchType::kMergePatch, json::object())
            .status()
            .code() == StatusCode::kNotFound);
}

TEST_CASE("store: deleting a bound pod is graceful until a grace-0 delete", "[unit][apiserver]") {
  FakeClock clock;
  clock.setWallTime(nodeagent::base::SystemTime(std::chrono::seconds(1714564800)));
  Store store(clock, fastOptions());
  json p = *store.create("pods", "default", pod("web"));
  auto w = *store.watch("pods", "", watchFrom(rvOf(p)));

  auto first = store.remove("pods", "default", "web", {});
  REQUIRE(first.ok());
  CHECK_FALSE(first->removed);
  CHECK(first->object["metadata"]["deletionTimestamp"] == "2024-05-01T12:00:30Z");
  CHECK(first->object["metadata"]["deletionGracePeriodSeconds"] == 30);
  CHECK(store.get("pods", "default", "web").ok());

  // A second delete with a longer grace period changes nothing; a shorter one shortens it.
  auto again = store.remove("pods", "default", "web", grace(60));
  CHECK(rvOf(again->object) == rvOf(first->object));
  auto shorter = store.remove("pods", "default", "web", grace(5));
  CHECK(shorter->object["metadata"]["deletionGracePeriodSeconds"] == 5);

  auto wrong_uid = store.remove("pods", "default", "web", grace(0, "nope"));
  CHECK(wrong_uid.status().code() == StatusCode::kAborted);
  DeleteOptions stale_rv = grace(0);
  stale_rv.precondition_resource_version = rvOf(first->object);
  auto wrong_rv = store.remove("pods", "default", "web", stale_rv);
  CHECK(wrong_rv.status().code() == StatusCode::kAborted);
  CHECK(wrong_rv.status().message() ==
        "Precondition failed: ResourceVersion in precondition: " + rvOf(first->object) +
            ", ResourceVersion in object meta: " + rvOf(shorter->object));

  DeleteOptions preconditions = grace(0, p["metadata"]["uid"].get<std::string>());
  preconditions.precondition_resource_version = rvOf(shorter->object);
  auto final_delete = store.remove("pods", "default", "web", preconditions);
  REQUIRE(final_delete.ok());
  CHECK(final_delete->removed);
  CHECK(store.get("pods", "default", "web").status().code() == StatusCode::kNotFound);
  CHECK(drain(*w) == Events{{"MODIFIED", "web"}, {"MODIFIED", "web"}, {"DELETED", "web"}});
}

TEST_CASE("store: unbound and finished pods are removed at once", "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  REQUIRE(store.create("pods", "default", pod("unbound", "")).ok());
  auto r = store.remove("pods", "default", "unbound", {});
  REQUIRE(r.ok());
  CHECK(r->removed);

  REQUIRE(store.create("pods", "default", pod("done")).ok());
  REQUIRE(store
              .patch("pods", "default", "done", PatchType::kMergePatch,
                     {{"status", {{"phase", "Succeeded"}}}}, "status")
              .ok());
  CHECK(store.remove("pods", "default", "done", {})->removed);
}

TEST_CASE("store: finalizers hold a deleted object until the last one is removed",
          "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  json node = {{"metadata", {{"name", "n1"}, {"finalizers", {"example.com/hold"}}}}};
  REQUIRE(store.create("nodes", "", node).ok());
  auto r = store.remove("nodes", "", "n1", {});
  REQUIRE(r.ok());
  CHECK_FALSE(r->removed);
  CHECK(r->object["metadata"].contains("deletionTimestamp"));
  REQUIRE(store
              .patch("nodes", "", "n1", PatchType::kMergePatch,
                     {{"metadata", {{"finalizers", nullptr}}}})
              .ok());
  CHECK(store.get("nodes", "", "n1").status().code() == StatusCode::kNotFound);
}

TEST_CASE("store: list filters by namespace and selectors and pages with continue",
          "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  REQUIRE(store.create("namespaces", "", json{{"metadata", {{"name", "other"}}}}).ok());
  for (int i = 0; i < 5; ++i) {
    REQUIRE(store
                .create("pods", "default",
                        pod("p" + std::to_string(i), i % 2 ? "node1" : "node2",
                            {{"idx", std::to_string(i)}}))
                .ok());
  }
  REQUIRE(store.create("pods", "other", pod("q", "node1")).ok());

  CHECK(store.list("pods", "")->items.size() == 6);
  CHECK(store.list("pods", "default")->items.size() == 5);
  CHECK(store.list("pods", "", listFields("spec.nodeName=node1"))->items.size() == 3);
  CHECK(store.list("pods", "", listFields("spec.nodeName!=node1,metadata.namespace=default"))
            ->items.size() == 3);
  CHECK(store.list("pods", "", listLabels("idx in (1,2)"))->items.size() == 2);
  CHECK(store.list("pods", "", listLabels("idx notin (1,2),!missing"))->items.size() ==
        4);  // q has no idx
  CHECK(store.list("pods", "", listFields("metadata.name=q"))->items.size() == 1);
  CHECK(store.list("pods", "", listFields("metadata.name==p1,metadata.namespace==default"))
            ->items.size() == 1);
  REQUIRE(store
              .patch("pods", "default", "p3", PatchType::kMergePatch,
                     {{"status", {{"phase", "Running"}}}}, "status")
              .ok());
  CHECK(store.list("pods", "", listFields("status.phase=Running"))->items.size() == 1);
  CHECK(store.list("pods", "", listFields("status.phase!=Running,spec.nodeName=node1"))
            ->items.size() == 2);
  CHECK(store.list("nodes", "", listFields("metadata.namespace=default")).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(store.list("pods", "", listFields("spec.hostname=x")).status().code() ==
        StatusCode::kInvalidArgument);

  std::vector<std::string> names;
  ListOptions opts;
  opts.limit = 2;
  int pages = 0;
  uint64_t first_rv = 0;
  while (true) {
    auto page = store.list("pods", "default", opts);
    REQUIRE(page.ok());
    if (pages == 0) first_rv = page->resource_version;
    CHECK(page->resource_version == first_rv);
    ++pages;
    for (const auto& item : page->items) names.push_back((*item.object)["metadata"]["name"]);
    if (page->continue_token.empty()) break;
    CHECK(*page->remaining_item_count == 5 - static_cast<int64_t>(names.size()));
    opts.continue_token = page->continue_token;
  }
  CHECK(pages == 3);
  CHECK(names == std::vector<std::string>{"p0", "p1", "p2", "p3", "p4"});
  CHECK(store
            .list("pods", "",
                  [] {
                    ListOptions o;
                    o.continue_token = "garbage!";
                    return o;
                  }())
            .status()
            .code() == StatusCode::kInvalidArgument);
}

TEST_CASE("store: a list at a resourceVersion newer than the store fails with 504",
          "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  ListOptions newer;
  newer.resource_version = std::to_string(store.resourceVersion() + 10);
  auto r = store.list("pods", "", newer);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(r.status().message().starts_with("Too large resource version"));
  CHECK(store.watch("pods", "", watchFrom("999999")).status().code() ==
        StatusCode::kDeadlineExceeded);
}

TEST_CASE("watch: no resourceVersion starts with synthetic ADDED events, then changes",
          "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  REQUIRE(store.create("pods", "default", pod("a")).ok());
  REQUIRE(store.create("pods", "default", pod("b")).ok());
  for (const char* rv : {"", "0"}) {
    auto w = store.watch("pods", "", watchFrom(rv));
    REQUIRE(w.ok());
    CHECK(drain(**w) == Events{{"ADDED", "a"}, {"ADDED", "b"}});
    store.unwatch(*w);
  }
  auto w = *store.watch("pods", "", {});
  drain(*w);
  REQUIRE(store
              .patch("pods", "default", "a", PatchType::kMergePatch,
                     {{"metadata", {{"labels", {{"x", "1"}}}}}})
              .ok());
  REQUIRE(store.remove("pods", "default", "b", grace(0)).ok());
  CHECK(drain(*w) == Events{{"MODIFIED", "a"}, {"DELETED", "b"}});
}

TEST_CASE("watch: from resourceVersion N replays exactly the changes after N",
          "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  json a = *store.create("pods", "default", pod("a"));
  json b = *store.create("pods", "default", pod("b"));
  REQUIRE(store.create("nodes", "", json{{"metadata", {{"name", "n1"}}}}).ok());
  REQUIRE(store.remove("pods", "default", "a", grace(0)).ok());
  auto w = store.watch("pods", "", watchFrom(rvOf(a)));
  REQUIRE(w.ok());
  CHECK(drain(**w) == Events{{"ADDED", "b"}, {"DELETED", "a"}});
  auto latest = store.watch("pods", "", watchFrom(std::to_string(store.resourceVersion())));
  CHECK(drain(**latest).empty());
}

TEST_CASE("watch: the DELETED event carries the deletion's resourceVersion", "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  REQUIRE(store.create("pods", "default", pod("a", "")).ok());
  auto w = *store.watch("pods", "", watchFrom(std::to_string(store.resourceVersion())));
  REQUIRE(store.remove("pods", "default", "a", {}).ok());
  auto d = w->tryNext();
  REQUIRE(d);
  CHECK(d->type == WatchEvent::Type::kDeleted);
  CHECK(rvOf(*d->object.object) == std::to_string(store.resourceVersion()));
  CHECK(d->object.resource_version == store.resourceVersion());
}

TEST_CASE("watch: a resourceVersion older than the history is 410 Expired", "[unit][apiserver]") {
  FakeClock clock;
  StoreOptions opts = fastOptions();
  opts.history_window = 3;
  Store store(clock, opts);
  const std::string start = std::to_string(store.resourceVersion());
  for (int i = 0; i < 5; ++i)
    REQUIRE(store.create("pods", "default", pod("p" + std::to_string(i))).ok());
  auto old = store.watch("pods", "", watchFrom(start));
  REQUIRE_FALSE(old.ok());
  CHECK(old.status().code() == StatusCode::kOutOfRange);
  CHECK(old.status().message().starts_with("too old resource version: " + start));

  const std::string recent = std::to_string(store.resourceVersion() - 2);
  auto ok = store.watch("pods", "", watchFrom(recent));
  REQUIRE(ok.ok());
  CHECK(drain(**ok).size() == 2);

  store.compact();
  CHECK(store.watch("pods", "", watchFrom(recent)).status().code() == StatusCode::kOutOfRange);
  CHECK(store.watch("pods", "", watchFrom(std::to_string(store.resourceVersion()))).ok());
}

TEST_CASE("store: a store started at a later resourceVersion serves nothing older",
          "[unit][apiserver]") {
  FakeClock clock;
  StoreOptions opts = fastOptions();
  opts.initial_resource_version = 1000;
  Store store(clock, opts);
  CHECK(store.resourceVersion() > 1000);  // the default namespaces come after it
  auto created = store.create("pods", "default", pod("p"));
  REQUIRE(created.ok());
  CHECK(std::stoull(rvOf(*created)) > 1000);
  auto old = store.watch("pods", "", watchFrom("6"));
  REQUIRE_FALSE(old.ok());
  CHECK(old.status().code() == StatusCode::kOutOfRange);
  CHECK(store.watch("pods", "", watchFrom(std::to_string(store.resourceVersion()))).ok());
}

TEST_CASE("watch: objects entering or leaving a selector arrive as ADDED or DELETED",
          "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  REQUIRE(store.create("pods", "default", pod("a", "")).ok());
  auto w = *store.watch("pods", "", watchFields("spec.nodeName=node1"));
  CHECK(drain(*w).empty());
  // Binding the pod to node1 makes it appear; a label change is a MODIFIED.
  REQUIRE(store
              .patch("pods", "default", "a", PatchType::kMergePatch,
                     {{"spec", {{"nodeName", "node1"}}}})
              .ok());
  REQUIRE(store
              .patch("pods", "default", "a", PatchType::kMergePatch,
                     {{"metadata", {{"labels", {{"x", "1"}}}}}})
              .ok());
  REQUIRE(store
              .patch("pods", "default", "a", PatchType::kMergePatch,
                     {{"spec", {{"nodeName", "node2"}}}})
              .ok());
  CHECK(drain(*w) == Events{{"ADDED", "a"}, {"MODIFIED", "a"}, {"DELETED", "a"}});

  auto by_label = *store.watch("pods", "default", watchLabels("x=2"));
  REQUIRE(store.create("pods", "default", pod("b", "node1", {{"x", "2"}})).ok());
  REQUIRE(store.create("pods", "default", pod("c", "node1", {{"x", "3"}})).ok());
  CHECK(drain(*by_label) == Events{{"ADDED", "b"}});
}

TEST_CASE("watch: a watcher that falls too far behind is closed, others keep going",
          "[unit][apiserver]") {
  FakeClock clock;
  StoreOptions opts = fastOptions();
  opts.watcher_queue_capacity = 3;
  Store store(clock, opts);
  auto slow = *store.watch("pods", "", watchFrom(std::to_string(store.resourceVersion())));
  auto fast = *store.watch("pods", "", watchFrom(std::to_string(store.resourceVersion())));
  for (int i = 0; i < 5; ++i) {
    REQUIRE(store.create("pods", "default", pod("p" + std::to_string(i))).ok());
    CHECK(fast->tryNext().has_value());
  }
  CHECK(slow->closed());
  CHECK_FALSE(slow->tryNext().has_value());
  CHECK(slow->closeReason() == "watcher fell too far behind");
  CHECK_FALSE(fast->closed());
  CHECK(store.watcherCount() == 1);
}

TEST_CASE("watch: bookmarks carry the store's resourceVersion once the queue is drained",
          "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  auto w = *store.watch("pods", "", watchFrom(std::to_string(store.resourceVersion())));
  REQUIRE(store.create("nodes", "", json{{"metadata", {{"name", "n1"}}}}).ok());
  REQUIRE(store.create("pods", "default", pod("a")).ok());
  CHECK_FALSE(store.bookmarkResourceVersion(*w).has_value());
  drain(*w);
  CHECK(store.bookmarkResourceVersion(*w) == store.resourceVersion());
}

TEST_CASE("watch: closeAllWatches ends every watch", "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  auto a = *store.watch("pods", "", {});
  auto b = *store.watch("nodes", "", {});
  CHECK(store.watcherCount() == 2);
  store.closeAllWatches("test");
  CHECK(a->closed());
  CHECK(b->closed());
  CHECK(store.watcherCount() == 0);
}

TEST_CASE("store: deleting a namespace deletes what is in it, default is protected",
          "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock, fastOptions());
  REQUIRE(store.create("namespaces", "", json{{"metadata", {{"name", "tmp"}}}}).ok());
  REQUIRE(store.create("pods", "tmp", pod("a")).ok());
  REQUIRE(store.remove("namespaces", "", "tmp", {}).ok());
  CHECK(store.get("pods", "tmp", "a").status().code() == StatusCode::kNotFound);
  CHECK(store.remove("namespaces", "", "default", {}).status().code() ==
        StatusCode::kPermissionDenied);
  auto namespaces = store.list("namespaces", "");
  REQUIRE(namespaces.ok());
  std::vector<std::string> names;
  for (const auto& ns : namespaces->items) {
    names.push_back((*ns.object)["metadata"]["name"]);
  }
  CHECK(names ==
        std::vector<std::string>{"default", "kube-node-lease", "kube-public", "kube-system"});
}
