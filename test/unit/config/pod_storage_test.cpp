// PodStorage (kubelet v1.18 podStorage.Merge) driven directly: emission order, the op-is-a-hint
// rules, semantic comparison, annotations, duplicates, readiness and the snapshot modes.
#include <chrono>

#include <catch2/catch.hpp>

#include "config/pod_storage.h"
#include "test/support/fake_clock.h"
#include "test/unit/config/pod_config_test_helpers.h"

namespace nodeagent::config {
namespace {

using namespace testhelpers;
using api::PodOperation;
using Strings = std::vector<std::string>;

const std::string kSrc = "test";

struct StorageTester {
  explicit StorageTester(PodConfigNotificationMode mode = PodConfigNotificationMode::kIncremental)
      : storage(mode, clock) {}
  std::vector<api::PodUpdate> merge(PodOperation op, std::vector<api::PodPtr> pods,
                                    const std::string& source = kSrc) {
    return storage.merge(source, makeUpdate(op, source, std::move(pods)));
  }
  testing::FakeClock clock;
  PodStorage storage;
};

api::PodPtr withStatusMessage(const std::string& name, const std::string& message) {
  return validPodWith(name, "ns", [&](json& j) { j["status"] = {{"message", message}}; });
}

api::PodPtr deleting(const std::string& name, const std::function<void(json&)>& more = {}) {
  return validPodWith(name, "ns", [&](json& j) {
    j["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:10Z";
    j["metadata"]["deletionGracePeriodSeconds"] = 30;
    if (more) more(j);
  });
}

TEST_CASE("merge: one SET emits REMOVE, ADD, UPDATE, DELETE, RECONCILE in that order",
          "[unit][config][podstorage]") {
  StorageTester t;
  t.merge(PodOperation::kSet,
          {validPod("a", "ns"), validPod("b", "ns"), validPod("c", "ns"), validPod("d", "ns")});
  auto b = validPodWith("b", "ns", changeContainers);
  auto c = deleting("c");
  auto d = withStatusMessage("d", "hello");
  auto e = validPod("e", "ns");
  auto out = t.merge(PodOperation::kSet, {d, c, b, e});
  REQUIRE(opNames(out) == Strings{"REMOVE", "ADD", "UPDATE", "DELETE", "RECONCILE"});
  CHECK(uids(out[0].pods) == Strings{"ans"});
  CHECK(uids(out[1].pods) == Strings{"ens"});
  CHECK(uids(out[2].pods) == Strings{"bns"});
  CHECK(uids(out[3].pods) == Strings{"cns"});
  CHECK(uids(out[4].pods) == Strings{"dns"});
  for (const auto& u : out) CHECK(u.source == kSrc);
  CHECK(out[4].pods[0]->status->message == "hello");
}

TEST_CASE("merge: pods within one emitted update keep the input order",
          "[unit][config][podstorage]") {
  StorageTester t;
  auto out =
      t.merge(PodOperation::kAdd, {validPod("z", "ns"), validPod("a", "ns"), validPod("m", "ns")});
  REQUIRE(out.size() == 1);
  CHECK(uids(out[0].pods) == Strings{"zns", "ans", "mns"});
}

TEST_CASE(
    "merge: the first SET that adds nothing emits an empty ADD after REMOVE, before RECONCILE",
    "[unit][config][podstorage]") {
  SECTION("removals only") {
    StorageTester t;
    t.merge(PodOperation::kAdd, {validPod("a", "ns")});
    CHECK_FALSE(t.storage.sourceSeen(kSrc));
    auto out = t.merge(PodOperation::kSet, {});
    REQUIRE(opNames(out) == Strings{"REMOVE", "ADD"});
    CHECK(out[1].pods.empty());
    CHECK(t.storage.sourceSeen(kSrc));
  }
  SECTION("reconciles only") {
    StorageTester t;
    t.merge(PodOperation::kAdd, {validPod("a", "ns")});
    auto out = t.merge(PodOperation::kSet, {withStatusMessage("a", "changed")});
    REQUIRE(opNames(out) == Strings{"ADD", "RECONCILE"});
    CHECK(out[0].pods.empty());
  }
  SECTION("an update suppresses it") {
    StorageTester t;
    t.merge(PodOperation::kAdd, {validPod("a", "ns")});
    auto out = t.merge(PodOperation::kSet, {validPodWith("a", "ns", changeContainers)});
    CHECK(opNames(out) == Strings{"UPDATE"});
  }
  SECTION("a delete suppresses it") {
    StorageTester t;
    t.merge(PodOperation::kAdd, {validPod("a", "ns")});
    auto out = t.merge(PodOperation::kSet, {deleting("a")});
    CHECK(opNames(out) == Strings{"DELETE"});
  }
  SECTION("only the first SET") {
    StorageTester t;
    CHECK(opNames(t.merge(PodOperation::kSet, {})) == Strings{"ADD"});
    CHECK(t.merge(PodOperation::kSet, {}).empty());
  }
}

TEST_CASE("merge: the incoming op is only a hint", "[unit][config][podstorage]") {
  StorageTester t;
  SECTION("UPDATE and DELETE of unknown pods are ADDs, even with a deletionTimestamp") {
    CHECK(opNames(t.merge(PodOperation::kUpdate, {validPod("a", "ns")})) == Strings{"ADD"});
    auto out = t.merge(PodOperation::kDelete, {deleting("b")});
    REQUIRE(opNames(out) == Strings{"ADD"});
    CHECK(out[0].pods[0]->metadata.deletion_timestamp.has_value());
  }
  SECTION("ADD of a known, changed pod is UPDATE; unchanged is nothing") {
    t.merge(PodOperation::kAdd, {validPod("a", "ns")});
    CHECK(t.merge(PodOperation::kAdd, {validPod("a", "ns")}).empty());
    CHECK(opNames(t.merge(PodOperation::kAdd, {validPodWith("a", "ns", changeContainers)})) ==
          Strings{"UPDATE"});
  }
  SECTION("ADD/UPDATE/DELETE never remove; REMOVE of an unknown pod is nothing") {
    t.merge(PodOperation::kAdd, {validPod("a", "ns")});
    CHECK(t.merge(PodOperation::kUpdate, {validPod("b", "ns")}).size() == 1);
    CHECK(t.storage.pods(kSrc).size() == 2);
    CHECK(t.merge(PodOperation::kRemove, {validPod("zz", "ns")}).empty());
    CHECK(t.storage.pods(kSrc).size() == 2);
  }
  SECTION("only SET marks the source seen") {
    t.merge(PodOperation::kAdd, {validPod("a", "ns")});
    t.merge(PodOperation::kRemove, {validPod("a", "ns")});
    t.merge(PodOperation::kRestore, {validPod("r", "ns")});
    CHECK_FALSE(t.storage.sourceSeen(kSrc));
    t.merge(PodOperation::kSet, {});
    CHECK(t.storage.sourceSeen(kSrc));
    CHECK(t.storage.sourcesSeen() == std::set<std::string>{kSrc});
  }
  SECTION("an op that is not an input op emits nothing") {
    CHECK(t.merge(PodOperation::kReconcile, {validPod("a", "ns")}).empty());
    CHECK(t.storage.pods(kSrc).empty());
  }
}

TEST_CASE("merge: a deleting pod never produces UPDATE", "[unit][config][podstorage]") {
  StorageTester t;
  t.merge(PodOperation::kSet, {validPod("a", "ns")});
  CHECK(opNames(t.merge(PodOperation::kSet, {deleting("a")})) == Strings{"DELETE"});
  // The same deleting pod again: nothing.
  CHECK(t.merge(PodOperation::kSet, {deleting("a")}).empty());
  // A spec change while deleting: DELETE again.
  CHECK(opNames(t.merge(PodOperation::kSet, {deleting("a", changeContainers)})) ==
        Strings{"DELETE"});
  // A status-only change while deleting: RECONCILE (nothing compared changed).
  auto out = t.merge(PodOperation::kSet, {deleting("a", [](json& j) {
                       changeContainers(j);
                       j["status"] = {{"phase", "Running"}};
                     })});
  CHECK(opNames(out) == Strings{"RECONCILE"});
  // deletionGracePeriodSeconds is compared.
  CHECK(opNames(t.merge(PodOperation::kSet, {deleting("a", [](json& j) {
                          changeContainers(j);
                          j["status"] = {{"phase", "Running"}};
                          j["metadata"]["deletionGracePeriodSeconds"] = 0;
                        })})) == Strings{"DELETE"});
}

TEST_CASE("merge: status plus spec change is UPDATE only, and the status is taken",
          "[unit][config][podstorage]") {
  StorageTester t;
  t.merge(PodOperation::kSet, {validPod("a", "ns")});
  auto changed = validPodWith("a", "ns", [](json& j) {
    changeContainers(j);
    j["status"] = {{"phase", "Running"}};
  });
  auto out = t.merge(PodOperation::kSet, {changed});
  REQUIRE(opNames(out) == Strings{"UPDATE"});
  CHECK(out[0].pods[0]->status->phase == "Running");
  CHECK(out[0].pods[0]->spec->containers.at(0).name == "bar");
}

TEST_CASE("merge: a status change outside the typed model is a RECONCILE",
          "[unit][config][podstorage]") {
  StorageTester t;
  t.merge(PodOperation::kSet, {validPod("a", "ns")});
  auto nominated = validPodWith("a", "ns", [](json& j) {
    j["status"] = {{"nominatedNodeName", "node-1"}};
  });
  auto out = t.merge(PodOperation::kSet, {nominated});
  REQUIRE(opNames(out) == Strings{"RECONCILE"});
  CHECK_FALSE(podStatusesDiffer(*out[0].pods[0], *nominated));
  CHECK(t.merge(PodOperation::kSet, {nominated}).empty());
}

TEST_CASE("podsDifferSemantically: which fields count", "[unit][config][podstorage]") {
  auto base = validPod("a", "ns");
  auto differs = [&](const std::function<void(json&)>& edit) {
    return podsDifferSemantically(*base, *validPodWith("a", "ns", edit));
  };
  CHECK_FALSE(differs([](json&) {}));
  // Spec fields the typed model does not cover count (spec hash of the canonical JSON).
  CHECK(differs([](json& j) { j["spec"]["hostname"] = "h1"; }));
  CHECK(differs([](json& j) { j["spec"]["containers"][0]["image"] = "other"; }));
  CHECK(differs([](json& j) { j["metadata"]["labels"] = {{"k", "v"}}; }));
  CHECK(differs([](json& j) { j["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:10Z"; }));
  CHECK(differs([](json& j) { j["metadata"]["deletionGracePeriodSeconds"] = 5; }));
  CHECK(differs([](json& j) { j["metadata"]["annotations"] = {{"x", "y"}}; }));
  CHECK(differs([](json& j) {
    j["metadata"]["annotations"] = {{"kubernetes.io/config.hash", "h"}};
  }));
  // The local annotations, the rest of the metadata and the status do not.
  CHECK_FALSE(differs([](json& j) {
    j["metadata"]["annotations"] = {{"kubernetes.io/config.source", "api"},
                                    {"kubernetes.io/config.mirror", "m"},
                                    {"kubernetes.io/config.seen", "2020-01-01T00:00:00Z"}};
  }));
  CHECK_FALSE(differs([](json& j) {
    j["metadata"]["resourceVersion"] = "42";
    j["metadata"]["generation"] = 3;
    j["metadata"]["finalizers"] = json::array({"f"});
    j["metadata"]["ownerReferences"] =
        json::array({{{"apiVersion", "v1"}, {"kind", "Node"}, {"name", "n"}, {"uid", "u"}}});
  }));
  CHECK_FALSE(differs([](json& j) { j["status"] = {{"phase", "Running"}}; }));
}

TEST_CASE("merge: a source that annotated its pods itself has them stored and emitted as they are",
          "[unit][config][podstorage]") {
  StorageTester t;
  auto annotated = [](const std::string& name, const std::string& source) {
    return validPodWith(name, "ns", [&](json& j) {
      j["metadata"]["annotations"] = {{"kubernetes.io/config.source", source},
                                      {"kubernetes.io/config.seen", "2026-01-01T00:00:00Z"}};
    });
  };
  auto own = annotated("a", kSrc);
  auto other = annotated("b", "elsewhere");  // the wrong source: annotated afresh
  auto bare = validPod("c", "ns");           // nothing to keep: annotated
  auto update = makeUpdate(PodOperation::kSet, kSrc, {own, other, bare});
  update.source_annotated = true;
  auto out = t.storage.merge(kSrc, update);
  REQUIRE(opNames(out) == Strings{"ADD"});
  REQUIRE(out[0].pods.size() == 3);
  CHECK(out[0].pods[0] == own);  // the same object: no copy
  CHECK(out[0].pods[1] != other);
  CHECK(annotation(*out[0].pods[1], "kubernetes.io/config.source") == kSrc);
  CHECK(annotation(*out[0].pods[2], "kubernetes.io/config.source") == kSrc);

  // Without the flag the source's annotations are overwritten, as kubelet does.
  StorageTester plain;
  auto mine = annotated("a", kSrc);
  plain.clock.advance(std::chrono::hours(1));
  out = plain.merge(PodOperation::kSet, {mine});
  REQUIRE(opNames(out) == Strings{"ADD"});
  CHECK(out[0].pods[0] != mine);
  CHECK(annotation(*out[0].pods[0], "kubernetes.io/config.seen") != "2026-01-01T00:00:00Z");
}

TEST_CASE("annotationsEqualIgnoringLocal: kubelet's isAnnotationMapEqual",
          "[unit][config][podstorage]") {
  const std::string src(api::kConfigSourceAnnotationKey);
  const std::string seen(api::kConfigFirstSeenAnnotationKey);
  CHECK(annotationsEqualIgnoringLocal({}, {}));
  CHECK(annotationsEqualIgnoringLocal({{src, "file"}, {seen, "t"}}, {}));
  CHECK(annotationsEqualIgnoringLocal({}, {{src, "file"}}));
  CHECK(annotationsEqualIgnoringLocal({{"a", "1"}, {src, "x"}}, {{"a", "1"}, {seen, "y"}}));
  CHECK_FALSE(annotationsEqualIgnoringLocal({{"a", "1"}}, {{"a", "2"}}));
  CHECK_FALSE(annotationsEqualIgnoringLocal({{"a", "1"}}, {}));
  CHECK_FALSE(annotationsEqualIgnoringLocal({}, {{"a", "1"}}));
  CHECK_FALSE(annotationsEqualIgnoringLocal({{"a", "1"}}, {{"b", "1"}}));
}

TEST_CASE("merge: config.source and first-seen config.seen annotations",
          "[unit][config][podstorage]") {
  StorageTester t;
  t.clock.setWallTime(base::SystemTime(std::chrono::seconds(1767225600)) +
                      std::chrono::nanoseconds(123456789));
  auto input = validPodWith("a", "ns", [](json& j) {
    j["metadata"]["annotations"] = {{"kubernetes.io/config.seen", "1999-01-01T00:00:00Z"},
                                    {"kubernetes.io/config.source", "other"}};
  });
  auto out = t.merge(PodOperation::kSet, {input}, "file");
  REQUIRE(out.size() == 1);
  const auto& added = *out[0].pods[0];
  CHECK(annotation(added, api::kConfigSourceAnnotationKey) == "file");
  CHECK(annotation(added, api::kConfigFirstSeenAnnotationKey) == "2026-01-01T00:00:00.123456789Z");
  // The input pod is untouched (pods are immutable).
  CHECK(annotation(*input, api::kConfigSourceAnnotationKey) == "other");

  // An update keeps the first-seen time.
  t.clock.setWallTime(base::SystemTime(std::chrono::seconds(1767225700)));
  auto changed = validPodWith("a", "ns", changeContainers);
  out = t.merge(PodOperation::kSet, {changed}, "file");
  REQUIRE(opNames(out) == Strings{"UPDATE"});
  CHECK(annotation(*out[0].pods[0], api::kConfigFirstSeenAnnotationKey) ==
        "2026-01-01T00:00:00.123456789Z");
  CHECK(annotation(*out[0].pods[0], api::kConfigSourceAnnotationKey) == "file");
  CHECK(annotation(*changed, api::kConfigSourceAnnotationKey) == "<none>");
}

TEST_CASE("merge: an update copies only the compared fields and the status into the stored pod",
          "[unit][config][podstorage]") {
  StorageTester t;
  auto first = validPodWith("a", "ns", [](json& j) {
    j["metadata"]["resourceVersion"] = "1";
    j["metadata"]["labels"] = {{"old", "x"}};
    j["metadata"]["annotations"] = {{"kubernetes.io/config.mirror", "m1"}, {"keep", "no"}};
  });
  t.merge(PodOperation::kSet, {first});
  auto second = validPodWith("a", "ns", [](json& j) {
    j["metadata"]["resourceVersion"] = "2";
    j["metadata"]["labels"] = {{"new", "y"}};
    j["metadata"]["annotations"] = {{"kubernetes.io/config.mirror", "m2"}, {"other", "yes"}};
    j["status"] = {{"phase", "Pending"}};
  });
  auto out = t.merge(PodOperation::kSet, {second});
  REQUIRE(opNames(out) == Strings{"UPDATE"});
  const auto& stored = *out[0].pods[0];
  CHECK(stored.metadata.resource_version == "1");  // not compared, not copied
  CHECK(stored.metadata.labels == api::StringMap{{"new", "y"}});
  CHECK(annotation(stored, "other") == "yes");
  CHECK(annotation(stored, "keep") == "<none>");
  CHECK(annotation(stored, api::kConfigMirrorAnnotationKey) == "m1");  // local: the stored one wins
  CHECK(stored.status->phase == "Pending");
  CHECK(t.storage.pod(kSrc, "ans") == out[0].pods[0]);

  // A metadata-only change is ignored entirely.
  auto third = validPodWith("a", "ns", [](json& j) {
    j["metadata"]["resourceVersion"] = "3";
    j["metadata"]["labels"] = {{"new", "y"}};
    j["metadata"]["annotations"] = {{"other", "yes"}};
    j["status"] = {{"phase", "Pending"}};
  });
  CHECK(t.merge(PodOperation::kSet, {third}).empty());
  CHECK(t.storage.pod(kSrc, "ans")->metadata.resource_version == "1");
}

TEST_CASE("merge: duplicate full names in one update, the first wins and the rest are reported",
          "[unit][config][podstorage]") {
  StorageTester t;
  auto first = validPodWith("web", "ns", [](json& j) { j["metadata"]["uid"] = "uid-1"; });
  auto second = validPodWith("web", "ns", [](json& j) { j["metadata"]["uid"] = "uid-2"; });
  auto out = t.merge(PodOperation::kSet, {first, second, validPod("other", "ns")}, "file");
  REQUIRE(opNames(out) == Strings{"ADD"});
  CHECK(uids(out[0].pods) == Strings{"uid-1", "otherns"});
  auto errors = t.storage.sourceErrors("file");
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].code() == base::StatusCode::kAlreadyExists);
  CHECK_THAT(errors[0].message(), Catch::Contains("ns/web") && Catch::Contains("uid-2") &&
                                      Catch::Contains("duplicate pod name \"web\"") &&
                                      Catch::Contains("file"));
  CHECK(t.storage.sourceErrors("http").empty());

  // The same name in another namespace is not a duplicate; a clean update clears the errors.
  auto elsewhere = validPodWith("web", "ns2", [](json& j) { j["metadata"]["uid"] = "uid-3"; });
  out = t.merge(PodOperation::kSet, {first, elsewhere, validPod("other", "ns")}, "file");
  CHECK(opNames(out) == Strings{"ADD"});
  CHECK(t.storage.sourceErrors("file").empty());

  // A stored pod that becomes the losing duplicate is gone from the source: REMOVE.
  out = t.merge(PodOperation::kSet, {second, first, validPod("other", "ns"), elsewhere}, "file");
  REQUIRE(opNames(out) == Strings{"REMOVE", "ADD"});
  CHECK(uids(out[0].pods) == Strings{"uid-1"});
  CHECK(uids(out[1].pods) == Strings{"uid-2"});
  CHECK(t.storage.sourceErrors("file").size() == 1);
}

TEST_CASE("merge: sources are stored separately and the same UID is tracked per source",
          "[unit][config][podstorage]") {
  StorageTester t;
  CHECK(opNames(t.merge(PodOperation::kSet, {validPod("a", "ns")}, "file")) == Strings{"ADD"});
  CHECK(opNames(t.merge(PodOperation::kSet, {validPod("a", "ns")}, "api")) == Strings{"ADD"});
  CHECK(t.storage.mergedState().size() == 2);
  // A SET from one source never removes another source's pods.
  CHECK(opNames(t.merge(PodOperation::kSet, {}, "api")) == Strings{"REMOVE"});
  CHECK(t.storage.pods("file").size() == 1);
  auto sync = t.storage.sync();
  CHECK(sync.op == PodOperation::kSet);
  CHECK(sync.source == "*");
  CHECK(uids(sync.pods) == Strings{"ans"});
}

TEST_CASE("merge: RESTORE is passed on, not stored, and emitted after DELETE's place",
          "[unit][config][podstorage]") {
  StorageTester t;
  auto restored = validPod("r", "ns");
  auto out = t.merge(PodOperation::kRestore, {restored}, "api");
  REQUIRE(opNames(out) == Strings{"RESTORE"});
  CHECK(out[0].pods[0] == restored);
  CHECK(out[0].source == "api");
  CHECK(t.storage.pods("api").empty());
  CHECK_FALSE(t.storage.sourceSeen("api"));
  // The apiserver's first SET then ADDs it (kubelet 1.18 did the same).
  CHECK(opNames(t.merge(PodOperation::kSet, {restored}, "api")) == Strings{"ADD"});
  CHECK(t.merge(PodOperation::kRestore, {}, "api").empty());
}

TEST_CASE("merge: an identical object sent again is recognised without any change",
          "[unit][config][podstorage]") {
  StorageTester t;
  auto a = validPod("a", "ns");
  t.merge(PodOperation::kSet, {a});
  auto stored = t.storage.pod(kSrc, "ans");
  CHECK(t.merge(PodOperation::kSet, {a}).empty());
  CHECK(t.merge(PodOperation::kSet, {validPod("a", "ns")}).empty());
  CHECK(t.storage.pod(kSrc, "ans") == stored);  // the stored object is kept, not rebuilt
}

TEST_CASE("SnapshotAndUpdates mode: SET for additions and removals, UPDATE and DELETE for changes",
          "[unit][config][podstorage]") {
  StorageTester t(PodConfigNotificationMode::kSnapshotAndUpdates);
  t.merge(PodOperation::kSet, {validPod("x", "ns")}, "file");
  auto out = t.merge(PodOperation::kSet, {validPod("a", "ns"), validPod("b", "ns")});
  REQUIRE(opNames(out) == Strings{"SET"});
  CHECK(out[0].source == kSrc);
  CHECK(sortedUids(out[0].pods) == Strings{"ans", "bns", "xns"});  // every source's pods

  out = t.merge(PodOperation::kSet, {validPodWith("a", "ns", changeContainers), deleting("b")});
  REQUIRE(opNames(out) == Strings{"UPDATE", "DELETE"});
  CHECK(uids(out[0].pods) == Strings{"ans"});
  CHECK(uids(out[1].pods) == Strings{"bns"});

  // Status-only changes are dropped in this mode.
  CHECK(t.merge(PodOperation::kSet, {validPodWith("a", "ns",
                                                  [](json& j) {
                                                    changeContainers(j);
                                                    j["status"] = {{"message", "m"}};
                                                  }),
                                     deleting("b")})
            .empty());
  // A removal together with an update: the SET first.
  out = t.merge(PodOperation::kSet, {validPod("a", "ns")});
  CHECK(opNames(out) == Strings{"SET", "UPDATE"});
  CHECK(sortedUids(out[0].pods) == Strings{"ans", "xns"});
  // RESTORE is dropped.
  CHECK(t.merge(PodOperation::kRestore, {validPod("r", "ns")}).empty());
}

TEST_CASE("Snapshot mode: any change is one SET of the merged state",
          "[unit][config][podstorage]") {
  StorageTester t(PodConfigNotificationMode::kSnapshot);
  auto out = t.merge(PodOperation::kSet, {validPod("a", "ns")});
  REQUIRE(opNames(out) == Strings{"SET"});
  out =
      t.merge(PodOperation::kSet, {validPodWith("a", "ns", changeContainers), validPod("b", "ns")});
  REQUIRE(opNames(out) == Strings{"SET"});
  CHECK(sortedUids(out[0].pods) == Strings{"ans", "bns"});
  CHECK(out[0].pods[0]->spec->containers.at(0).name == "bar");
  CHECK(opNames(t.merge(PodOperation::kSet, {deleting("a")})) == Strings{"SET"});
  // Reconciles and restores are dropped.
  CHECK(t.merge(PodOperation::kSet, {deleting("a",
                                              [](json& j) {
                                                j["status"] = {{"message", "m"}};
                                              })})
            .empty());
  CHECK(t.merge(PodOperation::kRestore, {validPod("r", "ns")}).empty());
  CHECK(opNames(t.merge(PodOperation::kRemove, {validPod("a", "ns")})) == Strings{"SET"});
}

TEST_CASE("merge: the classification is reported whatever the mode", "[unit][config][podstorage]") {
  StorageTester t(PodConfigNotificationMode::kSnapshot);
  MergeChanges changes;
  t.storage.merge(kSrc, makeUpdate(PodOperation::kSet, kSrc, {validPod("a", "ns")}), &changes);
  CHECK(changes.first_set);
  CHECK(uids(changes.adds) == Strings{"ans"});
  t.storage.merge(kSrc, makeUpdate(PodOperation::kSet, kSrc, {withStatusMessage("a", "m")}),
                  &changes);
  CHECK_FALSE(changes.first_set);
  CHECK(changes.adds.empty());
  CHECK(uids(changes.reconciles) == Strings{"ans"});
}

TEST_CASE("merge: the per-source index stays right through many adds and removals",
          "[unit][config][podstorage]") {
  // Checks the storage's own hash index (growth, backward-shift deletion, long UIDs) against a
  // plain std::set, with a fixed pseudo-random sequence.
  StorageTester t;
  std::set<std::string> model;
  auto uidOf = [](int i) {
    // Every fifth UID is longer than the inline buffer.
    return i % 5 == 0 ? "long-" + std::string(60, 'x') + std::to_string(i)
                      : "u" + std::to_string(i);
  };
  auto podOf = [&](int i) {
    return validPodWith("p" + std::to_string(i), "ns",
                        [&](json& j) { j["metadata"]["uid"] = uidOf(i); });
  };
  uint32_t state = 12345;
  auto next = [&] {
    state = state * 1103515245u + 12345u;
    return (state >> 8) % 300;
  };
  std::vector<api::PodPtr> pods;
  for (int i = 0; i < 300; ++i) pods.push_back(podOf(i));
  for (int round = 0; round < 400; ++round) {
    const int i = static_cast<int>(next());
    if (round % 3 == 2) {
      t.merge(PodOperation::kRemove, {pods[i]});
      model.erase(uidOf(i));
    } else {
      t.merge(PodOperation::kAdd, {pods[i]});
      model.insert(uidOf(i));
    }
  }
  auto stored = t.storage.pods(kSrc);
  CHECK(sortedUids(stored) == Strings(model.begin(), model.end()));
  for (int i = 0; i < 300; ++i) {
    CHECK((t.storage.pod(kSrc, uidOf(i)) != nullptr) == (model.count(uidOf(i)) > 0));
  }
  // A SET of half of them removes the rest, in UID order.
  std::vector<api::PodPtr> half;
  std::set<std::string> kept;
  for (int i = 0; i < 300; i += 2) {
    if (model.count(uidOf(i))) {
      half.push_back(pods[i]);
      kept.insert(uidOf(i));
    }
  }
  auto out = t.merge(PodOperation::kSet, half);
  std::set<std::string> removed_expected;
  for (const auto& uid : model) {
    if (!kept.count(uid)) removed_expected.insert(uid);
  }
  REQUIRE_FALSE(out.empty());
  CHECK(out[0].op == PodOperation::kRemove);
  CHECK(uids(out[0].pods) == Strings(removed_expected.begin(), removed_expected.end()));
  CHECK(sortedUids(t.storage.pods(kSrc)) == Strings(kept.begin(), kept.end()));
}

TEST_CASE("merge: a SET repeating most objects of the previous one gives what a full merge gives",
          "[unit][config][podstorage]") {
  // Storage `reused` gets SETs that keep the previous SET's objects where nothing changed (as the
  // file source sends them), so most are merged position by position; storage `fresh` gets a new
  // copy of every pod each time, so every SET is merged in full. Both must emit the same updates
  // and keep the same pods, through spec, status, deletion and name changes, UIDs moving between
  // positions, duplicates, growing and shrinking sets and other ops in between. The set is edited
  // in place as the file source edits its own, so consecutive SETs share their unchanged chunks,
  // and with several chunks an insert and a later removal leave their boundaries misaligned.
  const int initial = GENERATE(64, 600);
  testing::FakeClock clock;
  clock.setWallTime(base::SystemTime(std::chrono::seconds(1767225600)));
  PodStorage reused(PodConfigNotificationMode::kIncremental, clock);
  PodStorage fresh(PodConfigNotificationMode::kIncremental, clock);
  auto copyAll = [](const std::vector<api::PodPtr>& pods) {
    std::vector<api::PodPtr> out;
    for (const auto& p : pods) out.push_back(std::make_shared<const api::Pod>(*p));
    return out;
  };
  auto describe = [](const std::vector<api::PodUpdate>& updates) {
    std::vector<std::string> out;
    for (const auto& u : updates) {
      std::string line = std::string(api::podOperationName(u.op)) + ":";
      for (const auto& p : u.pods)
        line += " " + p->metadata.uid + "=" + (p->raw ? p->raw->str() : "");
      out.push_back(line);
    }
    return out;
  };
  uint32_t state = 777;
  auto next = [&](uint32_t n) {
    state = state * 1103515245u + 12345u;
    return (state >> 8) % n;
  };
  int version = 0;
  auto podNamed = [&](int name, int uid, const std::function<void(json&)>& more = {}) {
    return validPodWith("p" + std::to_string(name), "ns", [&](json& j) {
      j["metadata"]["uid"] = "u" + std::to_string(uid);
      if (more) more(j);
    });
  };
  api::ChunkedPods set;
  for (int i = 0; i < initial; ++i) set.push_back(podNamed(i, i));
  int next_uid = 1000;
  bool has_dup = false;
  for (int round = 0; round < 300; ++round) {
    INFO("round " << round);
    const uint32_t kind = next(14);
    const size_t pos = next(static_cast<uint32_t>(set.size()));
    const int name = std::stoi(set[pos]->metadata.name.substr(1));
    ++version;
    if (kind <= 2) {  // a changed manifest: new content, new UID (as a static pod's)
      set.set(pos, podNamed(name, next_uid++, [&](json& j) {
                j["spec"]["containers"][0]["image"] = "v" + std::to_string(version);
              }));
    } else if (kind == 3) {  // the same UID, new spec
      set.set(pos, podNamed(name, std::stoi(set[pos]->metadata.uid.substr(1)), [&](json& j) {
                j["spec"]["containers"][0]["image"] = "w" + std::to_string(version);
              }));
    } else if (kind == 4) {  // status only
      set.set(pos, podNamed(name, std::stoi(set[pos]->metadata.uid.substr(1)), [&](json& j) {
                j["status"] = {{"message", std::to_string(version)}};
              }));
    } else if (kind == 5) {  // deleting
      set.set(pos, podNamed(name, std::stoi(set[pos]->metadata.uid.substr(1)), [&](json& j) {
                j["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:10Z";
                j["metadata"]["deletionGracePeriodSeconds"] = version % 30;
              }));
    } else if (kind == 6) {  // another pod name at this position
      set.set(pos, podNamed(5000 + version, next_uid++));
    } else if (kind == 7) {  // two positions swap their objects
      const size_t other = next(static_cast<uint32_t>(set.size()));
      const api::PodPtr a = set[pos];
      set.set(pos, set[other]);
      set.set(other, a);
    } else if (kind == 8) {  // a duplicate full name at the end (the first wins), then its removal
      if (has_dup) {
        set.erase(set.size() - 1);
      } else {
        set.push_back(podNamed(name, next_uid++));
      }
      has_dup = !has_dup;
    } else if (kind == 9 && set.size() > 8 && !has_dup) {  // a manifest deleted
      set.erase(pos);
    } else if (kind == 10) {  // an ADD between SETs
      auto pod = podNamed(9000 + version, next_uid++);
      auto a = reused.merge(kSrc, makeUpdate(PodOperation::kAdd, kSrc, {pod}));
      auto b = fresh.merge(kSrc, makeUpdate(PodOperation::kAdd, kSrc, copyAll({pod})));
      CHECK(describe(a) == describe(b));
    } else if (kind == 11) {  // the same content in new objects at one position
      set.set(pos, std::make_shared<const api::Pod>(*set[pos]));
    } else if (kind == 12 && !has_dup) {  // a manifest added among the others
      set.insert(pos, podNamed(7000 + version, next_uid++));
    } else if (kind == 13 && !has_dup) {
      // A renamed manifest: its pod (a new UID, as the file's path is hashed into it) leaves its
      // position and comes back at another in one SET of the same length, shifting the chunks
      // between the two by one.
      const size_t to = next(static_cast<uint32_t>(set.size()));
      set.erase(pos);
      set.insert(to, podNamed(name, next_uid++));
    }
    auto a = reused.merge(kSrc, api::PodUpdate{set, PodOperation::kSet, kSrc});
    auto b = fresh.merge(kSrc, makeUpdate(PodOperation::kSet, kSrc, copyAll(set.toVector())));
    REQUIRE(describe(a) == describe(b));
    REQUIRE(describe({reused.sync()}) == describe({fresh.sync()}));
    CHECK(reused.sourceErrors(kSrc).size() == fresh.sourceErrors(kSrc).size());
  }
  CHECK(fresh.setsMergedByPosition() == 0);
  CHECK(reused.setsMergedByPosition() > 50);
}

}  // namespace
}  // namespace nodeagent::config
