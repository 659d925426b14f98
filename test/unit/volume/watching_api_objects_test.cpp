// kubelet's Watch change detection strategy: the objects registered pods reference are watched
// one reflector each, served from the watch, and unwatched with their last pod.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/volume/watching_api_objects.h"
#include "api/api_errors.h"
#include "test/support/fake_clock.h"
#include "test/support/pod_builder.h"
#include "test/unit/apiclient/fake_lister_watcher.h"

using namespace nodeagent;
using agent::ApiObjectKind;
using agent::ApiObjectRef;

namespace {

// Reads from the apiserver (what is not watched yet) and counts them.
class DirectSource final : public agent::ApiObjectSource {
 public:
  std::vector<std::string> reads;
  nlohmann::json object = {{"metadata", {{"name", "direct"}}}, {"data", {{"k", "direct"}}}};
  base::StatusOr<std::shared_ptr<const nlohmann::json>> get(ApiObjectKind kind,
                                                            const std::string& ns,
                                                            const std::string& name,
                                                            const std::string&) override {
    reads.push_back(agent::apiObjectPath(kind, ns, name));
    return std::make_shared<const nlohmann::json>(object);
  }
};

struct Harness {
  asio::io_context ioc;
  testing::FakeClock clock;
  testing::FixedRandom random;
  std::shared_ptr<DirectSource> direct = std::make_shared<DirectSource>();
  // Each watched object's scripted ListerWatcher, by "path?field_selector".
  std::map<std::string, std::shared_ptr<testing::FakeListerWatcher>> watchers;
  agent::WatchingApiObjectSource source{
      ioc.get_executor(), clock, random,
      [this](const std::string& path, const std::string& selector) {
        auto lw = std::make_shared<testing::FakeListerWatcher>();
        watchers[path + "?" + selector] = lw;
        return lw;
      },
      direct};

  testing::FakeListerWatcher& watcher(const std::string& key) {
    auto it = watchers.find(key);
    REQUIRE(it != watchers.end());
    return *it->second;
  }
  void settle() {
    ioc.restart();
    ioc.poll();
  }
};

nlohmann::json configMap(const std::string& name, const std::string& value,
                         const std::string& rv = "5") {
  return {{"metadata", {{"name", name}, {"namespace", "ns"}, {"resourceVersion", rv}}},
          {"data", {{"k", value}}}};
}

api::PodPtr podUsing(const std::string& uid, const std::string& config_map) {
  return testing::PodBuilder()
      .name("web")
      .ns("ns")
      .uid(uid)
      .container("c")
      .edit([&](nlohmann::json& j) {
        j["spec"]["volumes"] = {{{"name", "cfg"}, {"configMap", {{"name", config_map}}}}};
      })
      .build();
}

}  // namespace

TEST_CASE("watching api objects: what a pod references, as kubelet visits it", "[unit][volume]") {
  auto pod =
      testing::PodBuilder()
          .name("web")
          .ns("ns")
          .container("c")
          .edit([](nlohmann::json& j) {
            j["spec"]["imagePullSecrets"] = {{{"name", "pull"}}, {{"name", ""}}};
            j["spec"]["initContainers"] = {
                {{"name", "init"},
                 {"image", "busybox"},
                 {"envFrom", {{{"configMapRef", {{"name", "init-env"}}}}}}}};
            auto& c = j["spec"]["containers"][0];
            c["envFrom"] = {{{"secretRef", {{"name", "app-secret-env"}}}, {"prefix", "S_"}}};
            c["env"] = {{{"name", "A"},
                         {"valueFrom", {{"configMapKeyRef", {{"name", "keys"}, {"key", "a"}}}}}},
                        {{"name", "B"},
                         {"valueFrom", {{"secretKeyRef", {{"name", "creds"}, {"key", "b"}}}}}},
                        {{"name", "C"}, {"value", "plain"}}};
            j["spec"]["volumes"] = {{{"name", "v1"}, {"configMap", {{"name", "files"}}}},
                                    {{"name", "v2"}, {"secret", {{"secretName", "tls"}}}},
                                    {{"name", "v3"},
                                     {"projected",
                                      {{"sources",
                                        {{{"configMap", {{"name", "p-cm"}}}},
                                         {{"secret", {{"name", "p-secret"}}}},
                                         {{"serviceAccountToken", {{"path", "token"}}}}}}}}},
                                    {{"name", "v4"}, {"emptyDir", nlohmann::json::object()}}};
          })
          .build();
  const std::set<ApiObjectRef> want = {{ApiObjectKind::kConfigMap, "ns", "files"},
                                       {ApiObjectKind::kConfigMap, "ns", "init-env"},
                                       {ApiObjectKind::kConfigMap, "ns", "keys"},
                                       {ApiObjectKind::kConfigMap, "ns", "p-cm"},
                                       {ApiObjectKind::kSecret, "ns", "app-secret-env"},
                                       {ApiObjectKind::kSecret, "ns", "creds"},
                                       {ApiObjectKind::kSecret, "ns", "p-secret"},
                                       {ApiObjectKind::kSecret, "ns", "pull"},
                                       {ApiObjectKind::kSecret, "ns", "tls"}};
  CHECK(agent::apiObjectReferences(*pod) == want);
  CHECK(agent::apiObjectReferences(
            *testing::PodBuilder().name("plain").ns("ns").container("c").build())
            .empty());
}

TEST_CASE(
    "watching api objects: a registered pod's object is listed and watched by name, then "
    "served from the watch",
    "[unit][volume]") {
  Harness h;
  h.source.registerPod(*podUsing("uid-1", "app"));
  h.settle();
  auto& lw = h.watcher("/api/v1/namespaces/ns/configmaps?metadata.name=app");
  REQUIRE(lw.calls.size() == 1);
  CHECK_FALSE(lw.last().watch);

  // Not listed yet: read from the apiserver.
  auto before = h.source.get(ApiObjectKind::kConfigMap, "ns", "app", "uid-1");
  REQUIRE(before.ok());
  CHECK((**before)["data"]["k"] == "direct");
  CHECK(h.direct->reads.size() == 1);

  lw.completeListWith({configMap("app", "v1")}, "5");
  h.settle();
  auto listed = h.source.get(ApiObjectKind::kConfigMap, "ns", "app", "uid-1");
  REQUIRE(listed.ok());
  CHECK((**listed)["data"]["k"] == "v1");
  REQUIRE(lw.last().watch);
  CHECK(lw.last().request.resource_version == "5");

  lw.eventWith(api::WatchEventType::kModified, configMap("app", "v2", "6"));
  h.settle();
  auto changed = h.source.get(ApiObjectKind::kConfigMap, "ns", "app", "uid-1");
  REQUIRE(changed.ok());
  CHECK((**changed)["data"]["k"] == "v2");

  lw.eventWith(api::WatchEventType::kDeleted, configMap("app", "v2", "7"));
  h.settle();
  auto gone = h.source.get(ApiObjectKind::kConfigMap, "ns", "app", "uid-1");
  REQUIRE_FALSE(gone.ok());
  CHECK(gone.status().code() == base::StatusCode::kNotFound);
  CHECK(gone.status().message() == "configmap \"app\" not found");
  // Every read after the list came from the watch.
  CHECK(h.direct->reads.size() == 1);
}

TEST_CASE("watching api objects: an object the apiserver does not have is NotFound once listed",
          "[unit][volume]") {
  Harness h;
  h.source.registerPod(*podUsing("uid-1", "missing"));
  h.settle();
  h.watcher("/api/v1/namespaces/ns/configmaps?metadata.name=missing").completeListWith({}, "3");
  h.settle();
  auto got = h.source.get(ApiObjectKind::kConfigMap, "ns", "missing", "uid-1");
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == base::StatusCode::kNotFound);
  CHECK(h.direct->reads.empty());
}

TEST_CASE(
    "watching api objects: one watch per object however many pods reference it, ended with "
    "the last of them",
    "[unit][volume]") {
  Harness h;
  h.source.registerPod(*podUsing("uid-1", "shared"));
  h.source.registerPod(*podUsing("uid-2", "shared"));
  h.source.registerPod(*podUsing("uid-1", "shared"));  // an update with the same references
  h.settle();
  CHECK(h.watchers.size() == 1);
  const ApiObjectRef shared{ApiObjectKind::kConfigMap, "ns", "shared"};
  CHECK(h.source.watched() == std::set<ApiObjectRef>{shared});
  auto& lw = h.watcher("/api/v1/namespaces/ns/configmaps?metadata.name=shared");

  h.source.unregisterPod("uid-1");
  h.settle();
  CHECK(h.source.watched() == std::set<ApiObjectRef>{shared});
  CHECK(lw.cancels == 0);

  h.source.unregisterPod("uid-2");
  h.settle();
  CHECK(h.source.watched().empty());
  CHECK(lw.cancels >= 1);
  // Unwatched: read from the apiserver again.
  REQUIRE(h.source.get(ApiObjectKind::kConfigMap, "ns", "shared", "uid-3").ok());
  CHECK(h.direct->reads.size() == 1);
}

TEST_CASE("watching api objects: an updated pod watches its new object and drops the old one",
          "[unit][volume]") {
  Harness h;
  h.source.registerPod(*podUsing("uid-1", "old"));
  h.settle();
  h.source.registerPod(*podUsing("uid-1", "new"));
  h.settle();
  CHECK(h.source.watched() == std::set<ApiObjectRef>{{ApiObjectKind::kConfigMap, "ns", "new"}});
  CHECK(h.watcher("/api/v1/namespaces/ns/configmaps?metadata.name=old").cancels >= 1);
  CHECK(h.watcher("/api/v1/namespaces/ns/configmaps?metadata.name=new").cancels == 0);

  // An update that references nothing any more unwatches everything.
  h.source.registerPod(
      *testing::PodBuilder().name("web").ns("ns").uid("uid-1").container("c").build());
  h.settle();
  CHECK(h.source.watched().empty());
}

TEST_CASE("watching api objects: stop ends every watch and later pods watch nothing",
          "[unit][volume]") {
  Harness h;
  h.source.registerPod(*podUsing("uid-1", "a"));
  h.settle();
  h.source.stop();
  h.settle();
  CHECK(h.watcher("/api/v1/namespaces/ns/configmaps?metadata.name=a").cancels >= 1);
  h.source.registerPod(*podUsing("uid-2", "b"));
  h.settle();
  CHECK(h.source.watched().empty());
  CHECK(h.watchers.size() == 1);
}
