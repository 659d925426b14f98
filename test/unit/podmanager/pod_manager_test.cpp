#include <catch2/catch.hpp>

#include <algorithm>

#include "api/pod_update.h"
#include "base/asio.h"
#include "podmanager/mirror_client.h"
#include "podmanager/pod_manager.h"

using namespace nodeagent;
using podmanager::PodManager;

namespace {

api::PodPtr makePod(std::string uid, std::string name, std::string ns,
                    api::StringMap annotations = {}) {
  api::Pod pod;
  pod.metadata.uid = std::move(uid);
  pod.metadata.name = std::move(name);
  pod.metadata.namespace_ = std::move(ns);
  pod.metadata.annotations = std::move(annotations);
  return std::make_shared<const api::Pod>(std::move(pod));
}

api::PodPtr staticPod(std::string uid, std::string name, std::string hash = "h1") {
  return makePod(std::move(uid), std::move(name), "default",
                 {{std::string(api::kConfigSourceAnnotationKey), "file"},
                  {std::string(api::kConfigHashAnnotationKey), std::move(hash)}});
}

api::PodPtr mirrorPod(std::string uid, std::string name, std::string hash = "h1") {
  return makePod(std::move(uid), std::move(name), "default",
                 {{std::string(api::kConfigSourceAnnotationKey), "api"},
                  {std::string(api::kConfigMirrorAnnotationKey), std::move(hash)}});
}

std::vector<std::string> uids(const std::vector<api::PodPtr>& pods) {
  std::vector<std::string> out;
  for (const auto& p : pods) out.push_back(p->metadata.uid);
  std::sort(out.begin(), out.end());
  return out;
}

using Strings = std::vector<std::string>;

}  // namespace

// pod_manager_test.go TestGetSetPods
TEST_CASE("pod manager: setPods indexes pods, hides mirrors and translates mirror UIDs",
          "[unit][podmanager]") {
  podmanager::NoopMirrorClient mirror_client;
  PodManager manager(mirror_client);

  auto mirror = mirrorPod("mirror-uid", "bar");
  auto static_pod = staticPod("static-uid", "bar");
  auto normal = makePod("123456789", "foo", "default",
                        {{std::string(api::kConfigSourceAnnotationKey), "api"}});
  manager.setPods({normal, static_pod, mirror});

  CHECK(uids(manager.getPods()) == Strings{"123456789", "static-uid"});
  CHECK(manager.translatePodUID("mirror-uid") == "static-uid");
  CHECK(manager.getPodByFullName("bar_default") == static_pod);
  CHECK(manager.getPodByName("default", "bar") == static_pod);
  CHECK(manager.getPodByUID("mirror-uid") == nullptr);
  CHECK(manager.getPodByUID("static-uid") == static_pod);
  CHECK(manager.getMirrorPodByPod(*static_pod) == mirror);
  CHECK(manager.getPodByMirrorPod(*mirror) == static_pod);

  auto both = manager.getPodsAndMirrorPods();
  CHECK(uids(both.pods) == Strings{"123456789", "static-uid"});
  CHECK(uids(both.mirror_pods) == Strings{"mirror-uid"});

  SECTION("setPods replaces everything") {
    manager.setPods({normal});
    CHECK(uids(manager.getPods()) == Strings{"123456789"});
    CHECK(manager.translatePodUID("mirror-uid") == "mirror-uid");
    CHECK(manager.getMirrorPodByPod(*static_pod) == nullptr);
  }
}

// pod_manager_test.go TestDeletePods
TEST_CASE("pod manager: deleting a static pod leaves its mirror as the one orphan",
          "[unit][podmanager]") {
  podmanager::NoopMirrorClient mirror_client;
  PodManager manager(mirror_client);
  auto mirror = mirrorPod("mirror-uid", "mirror-static-pod-name");
  auto static_pod = staticPod("static-uid", "mirror-static-pod-name");
  auto normal = makePod("123456789", "foo", "default",
                        {{std::string(api::kConfigSourceAnnotationKey), "api"}});
  manager.setPods({normal, static_pod, mirror});
  CHECK(manager.getOrphanedMirrorPodNames().empty());

  manager.deletePod(static_pod);

  CHECK(manager.getPods().size() == 1);
  CHECK(manager.getOrphanedMirrorPodNames() == Strings{"mirror-static-pod-name_default"});
  // kubelet quirk: the translation survives until the mirror itself is deleted.
  CHECK(manager.translatePodUID("mirror-uid") == "static-uid");

  manager.deletePod(mirror);
  CHECK(manager.getOrphanedMirrorPodNames().empty());
  CHECK(manager.translatePodUID("mirror-uid") == "mirror-uid");
  CHECK(manager.getPodsAndMirrorPods().mirror_pods.empty());
}

TEST_CASE("pod manager: translation is recorded whichever of static and mirror comes first",
          "[unit][podmanager]") {
  podmanager::NoopMirrorClient mirror_client;
  PodManager manager(mirror_client);
  auto static_pod = staticPod("s1", "etcd");
  auto mirror = mirrorPod("m1", "etcd");

  SECTION("mirror first") {
    manager.addPod(mirror);
    CHECK(manager.translatePodUID("m1") == "m1");
    manager.addPod(static_pod);
  }
  SECTION("static first") {
    manager.addPod(static_pod);
    manager.addPod(mirror);
  }
  CHECK(manager.translatePodUID("m1") == "s1");
  CHECK(manager.translatePodUID("s1") == "s1");
  CHECK(manager.translatePodUID("") == "");
  CHECK(manager.translatePodUID("unknown") == "unknown");

  auto t = manager.getUIDTranslations();
  CHECK(t.mirror_to_pod == std::map<std::string, std::string>{{"m1", "s1"}});
  CHECK(t.pod_to_mirror == std::map<std::string, std::string>{{"s1", "m1"}});
}

TEST_CASE("pod manager: getUIDTranslations lists static pods without mirrors as empty",
          "[unit][podmanager]") {
  podmanager::NoopMirrorClient mirror_client;
  PodManager manager(mirror_client);
  manager.addPod(staticPod("s1", "a"));
  manager.addPod(staticPod("s2", "b"));
  manager.addPod(mirrorPod("m2", "b"));
  manager.addPod(
      makePod("api-pod", "c", "default", {{std::string(api::kConfigSourceAnnotationKey), "api"}}));

  auto t = manager.getUIDTranslations();
  CHECK(t.pod_to_mirror == std::map<std::string, std::string>{{"s1", ""}, {"s2", "m2"}});
  CHECK(t.mirror_to_pod == std::map<std::string, std::string>{{"m2", "s2"}});
}

TEST_CASE("pod manager: a new UID under the same full name replaces the name entry only",
          "[unit][podmanager]") {
  podmanager::NoopMirrorClient mirror_client;
  PodManager manager(mirror_client);
  auto v1 = staticPod("uid-v1", "web", "h1");
  auto v2 = staticPod("uid-v2", "web", "h2");
  auto mirror = mirrorPod("m", "web", "h1");
  manager.addPod(v1);
  manager.addPod(mirror);

  SECTION("remove then add (PodConfig's order)") {
    manager.deletePod(v1);
    manager.addPod(v2);
  }
  SECTION("add then remove: the old UID's deletion keeps the new name entry") {
    manager.addPod(v2);
    // Both UIDs are indexed until the old one is deleted (kubelet: the maps can diverge).
    CHECK(uids(manager.getPods()) == Strings{"uid-v1", "uid-v2"});
    CHECK(manager.getPodByFullName("web_default") == v2);
    manager.deletePod(v1);
  }
  CHECK(uids(manager.getPods()) == Strings{"uid-v2"});
  CHECK(manager.getPodByFullName("web_default") == v2);
  CHECK(manager.translatePodUID("m") == "uid-v2");
  CHECK(manager.getOrphanedMirrorPodNames().empty());
}

TEST_CASE("pod manager: updatePod with the same UID replaces the stored pod",
          "[unit][podmanager]") {
  podmanager::NoopMirrorClient mirror_client;
  PodManager manager(mirror_client);
  auto first = makePod("u1", "app", "ns1", {{"k", "1"}});
  auto second = makePod("u1", "app", "ns1", {{"k", "2"}});
  manager.addPod(first);
  manager.updatePod(second);
  CHECK(manager.getPods().size() == 1);
  CHECK(manager.getPodByUID("u1") == second);
  CHECK(manager.getPodByName("ns1", "app") == second);
  CHECK(manager.getPodByName("default", "app") == nullptr);
  manager.addPod(nullptr);
  manager.deletePod(nullptr);
  CHECK(manager.getPods().size() == 1);
}

TEST_CASE("pod manager: version moves with every change, additions and mirror pods included",
          "[unit][podmanager]") {
  podmanager::NoopMirrorClient mirror_client;
  PodManager manager(mirror_client);
  auto moved = [&, last = manager.version()]() mutable {
    const bool changed = manager.version() != last;
    last = manager.version();
    return changed;
  };
  auto pod = staticPod("u1", "app");
  manager.addPod(pod);
  CHECK(moved());
  CHECK(manager.generation() == 0);  // an addition leaves the generation alone, not the version
  manager.updatePod(staticPod("u1", "app", "h2"));
  CHECK(moved());
  manager.addPod(mirrorPod("m1", "app"));
  CHECK(moved());
  CHECK_FALSE(moved());  // nothing happened
  manager.addPod(nullptr);
  CHECK_FALSE(moved());
  manager.deletePod(pod);
  CHECK(moved());
  manager.setPods({staticPod("u2", "other")});
  CHECK(moved());
}

TEST_CASE("pod manager: isMirrorPodOf needs the same name and config.mirror == config.hash",
          "[unit][podmanager]") {
  auto pod = staticPod("s", "etcd", "abc");
  CHECK(PodManager::isMirrorPodOf(*mirrorPod("m", "etcd", "abc"), *pod));
  CHECK_FALSE(PodManager::isMirrorPodOf(*mirrorPod("m", "etcd", "old"), *pod));
  CHECK_FALSE(PodManager::isMirrorPodOf(*mirrorPod("m", "other", "abc"), *pod));
  CHECK_FALSE(PodManager::isMirrorPodOf(*makePod("m", "etcd", "default"), *pod));
  auto other_ns =
      makePod("m", "etcd", "kube-system", {{std::string(api::kConfigMirrorAnnotationKey), "abc"}});
  CHECK_FALSE(PodManager::isMirrorPodOf(*other_ns, *pod));
}

TEST_CASE("mirror client: the no-op client creates and deletes nothing", "[unit][podmanager]") {
  asio::io_context ioc;
  podmanager::NoopMirrorClient client;
  PodManager manager(client);
  base::Status created = base::internalError("not run");
  base::StatusOr<bool> deleted = base::internalError("not run");
  base::StatusOr<bool> bad = base::internalError("not run");
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        created = co_await manager.mirrorClient().createMirrorPod(staticPod("s", "etcd"));
        deleted = co_await manager.mirrorClient().deleteMirrorPod("etcd_default", "m");
        bad = co_await manager.mirrorClient().deleteMirrorPod("no-namespace", std::nullopt);
      },
      asio::detached);
  ioc.run();
  CHECK(created.ok());
  REQUIRE(deleted.ok());
  CHECK(*deleted == false);
  CHECK_FALSE(bad.ok());
  CHECK(bad.status().code() == base::StatusCode::kInvalidArgument);
}

TEST_CASE("pod manager: full names are matched as the joined strings they stand for",
          "[unit][podmanager]") {
  // "a_b" in "c" and "a" in "b_c" are both "a_b_c": one full name, as a string-keyed map had it.
  const auto first = makePod("u1", "a_b", "c");
  const auto second = makePod("u2", "a", "b_c");
  api::PodsByFullName pods;
  CHECK_FALSE(api::putByFullName(pods, first));
  CHECK(api::PodFullNameHash{}(first) == api::PodFullNameHash{}("a_b_c"));
  CHECK(api::PodFullNameHash{}(second) == api::PodFullNameHash{}("a_b_c"));
  CHECK(api::findByFullName(pods, std::string_view("a_b_c")) == first);
  CHECK(api::findByFullName(pods, second) == first);
  CHECK(api::putByFullName(pods, second) == first);  // replaced in place
  CHECK(pods.size() == 1);
  CHECK(api::findByFullName(pods, std::string_view("a_b_c")) == second);
  CHECK_FALSE(api::findByFullName(pods, std::string_view("a_b_")));
  CHECK_FALSE(api::findByFullName(pods, std::string_view("a_bXc")));
  CHECK_FALSE(api::findByFullName(pods, makePod("u3", "a_b", "d")));

  podmanager::NoopMirrorClient mirror_client;
  PodManager pm(mirror_client);
  pm.addPod(first);
  CHECK(pm.getPodByFullName("a_b_c") == first);
  CHECK(pm.getPodByName("b_c", "a") == first);
  pm.addPod(second);  // another UID under the same full name takes the name entry
  CHECK(pm.getPodByFullName("a_b_c") == second);
  pm.deletePod(first);  // no longer the name's pod: the entry stays
  CHECK(pm.getPodByFullName("a_b_c") == second);
  pm.deletePod(second);
  CHECK_FALSE(pm.getPodByFullName("a_b_c"));
}
