// kubelet v1.18 pkg/kubelet/config/config_test.go, ported case by case, through PodConfig's entry
// points and output callback. Where kubelet's test passes only thanks to a race
// (TestInvalidPodFiltered), the real v1.18 behaviour is asserted.
#include <atomic>
#include <set>
#include <thread>

#include <catch2/catch.hpp>

#include "base/asio.h"
#include "config/pod_config.h"
#include "test/support/fake_clock.h"
#include "test/support/log_capture.h"
#include "test/support/test_util.h"
#include "test/unit/config/pod_config_test_helpers.h"

namespace nodeagent::config {
namespace {

using namespace testhelpers;
using api::PodOperation;
using Strings = std::vector<std::string>;

const std::string kTestSource = "test";

// kubelet's createPodConfigTester: a PodConfig with one source ("test") and its output.
struct PodConfigTester {
  explicit PodConfigTester(PodConfigNotificationMode mode, PodConfigOptions options = {})
      : config(
            ioc.get_executor(), clock,
            [this](api::PodUpdate u) { received.push_back(std::move(u)); },
            withMode(std::move(options), mode)),
        channel(config.channel(kTestSource)) {}

  static PodConfigOptions withMode(PodConfigOptions options, PodConfigNotificationMode mode) {
    options.mode = mode;
    return options;
  }

  void send(PodOperation op, std::vector<api::PodPtr> pods) {
    channel(makeUpdate(op, kTestSource, std::move(pods)));
  }
  // Everything emitted so far (runs the queued merges first).
  std::vector<api::PodUpdate> take() {
    ioc.poll();
    std::vector<api::PodUpdate> out = std::move(received);
    received.clear();
    return out;
  }

  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> guard{ioc.get_executor()};
  testing::FakeClock clock;
  std::vector<api::PodUpdate> received;
  PodConfig config;
  PodUpdateSink channel;
};

// kubelet's expectPodUpdate with one expected update (and nothing else pending).
void expectPodUpdate(PodConfigTester& t, PodOperation op, const std::string& source,
                     std::vector<api::PodPtr> pods) {
  auto got = t.take();
  REQUIRE(got.size() == 1);
  checkUpdate(got[0], op, source, std::move(pods));
}

void expectNoPodUpdate(PodConfigTester& t) {
  auto got = t.take();
  INFO("unexpected updates: " << ::Catch::Detail::stringify(opNames(got)));
  CHECK(got.empty());
}

TEST_CASE("TestNewPodAdded: an ADD is emitted as ADD and Sync sends a SET of every pod",
          "[unit][config][podconfig]") {
  PodConfigTester t(PodConfigNotificationMode::kIncremental);
  t.send(PodOperation::kAdd, {validPod("foo", "new")});
  expectPodUpdate(t, PodOperation::kAdd, kTestSource, {validPod("foo", "new")});
  t.config.sync();
  expectPodUpdate(t, PodOperation::kSet, std::string(api::kAllSource), {validPod("foo", "new")});
}

TEST_CASE("TestNewPodAddedInvalidNamespace: a pod with an empty namespace passes through",
          "[unit][config][podconfig]") {
  PodConfigTester t(PodConfigNotificationMode::kIncremental);
  t.send(PodOperation::kAdd, {validPod("foo", "")});
  expectPodUpdate(t, PodOperation::kAdd, kTestSource, {validPod("foo", "")});
  t.config.sync();
  expectPodUpdate(t, PodOperation::kSet, std::string(api::kAllSource), {validPod("foo", "")});
}

TEST_CASE("TestNewPodAddedDefaultNamespace: a pod in the default namespace is added",
          "[unit][config][podconfig]") {
  PodConfigTester t(PodConfigNotificationMode::kIncremental);
  t.send(PodOperation::kAdd, {validPod("foo", "default")});
  expectPodUpdate(t, PodOperation::kAdd, kTestSource, {validPod("foo", "default")});
  t.config.sync();
  expectPodUpdate(t, PodOperation::kSet, std::string(api::kAllSource),
                  {validPod("foo", "default")});
}

TEST_CASE("TestNewPodAddedDifferentNamespaces: the same name in two namespaces is two pods",
          "[unit][config][podconfig]") {
  PodConfigTester t(PodConfigNotificationMode::kIncremental);
  t.send(PodOperation::kAdd, {validPod("foo", "default")});
  expectPodUpdate(t, PodOperation::kAdd, kTestSource, {validPod("foo", "default")});
  t.send(PodOperation::kAdd, {validPod("foo", "new")});
  expectPodUpdate(t, PodOperation::kAdd, kTestSource, {validPod("foo", "new")});
  t.config.sync();
  expectPodUpdate(t, PodOperation::kSet, std::string(api::kAllSource),
                  {validPod("foo", "default"), validPod("foo", "new")});
}

TEST_CASE("TestInvalidPodFiltered: PodConfig does not validate, a bare pod is added (v1.18)",
          "[unit][config][podconfig]") {
  // kubelet's test expects nothing here, but only because its non-blocking check runs before the
  // mux goroutine merges; the v1.18 merge itself ADDs the pod (UID "").
  PodConfigTester t(PodConfigNotificationMode::kIncremental);
  t.send(PodOperation::kAdd, {validPod("foo", "new")});
  expectPodUpdate(t, PodOperation::kAdd, kTestSource, {validPod("foo", "new")});
  auto bare = podFrom(json{{"metadata", {{"name", "foo"}}}});
  t.send(PodOperation::kUpdate, {bare});
  auto got = t.take();
  REQUIRE(got.size() == 1);
  CHECK(got[0].op == PodOperation::kAdd);
  REQUIRE(got[0].pods.size() == 1);
  CHECK(got[0].pods[0]->metadata.uid.empty());
  CHECK(got[0].pods[0]->metadata.name == "foo");
}

TEST_CASE("TestNewPodAddedSnapshotAndUpdates: SET for additions, UPDATE for changes",
          "[unit][config][podconfig]") {
  PodConfigTester t(PodConfigNotificationMode::kSnapshotAndUpdates);
  t.send(PodOperation::kAdd, {validPod("foo", "new")});
  expectPodUpdate(t, PodOperation::kSet, kTestSource, {validPod("foo", "new")});
  t.config.sync();
  expectPodUpdate(t, PodOperation::kSet, std::string(api::kAllSource), {validPod("foo", "new")});
  auto changed = validPodWith("foo", "new", changeContainers);
  t.send(PodOperation::kAdd, {changed});
  expectPodUpdate(t, PodOperation::kUpdate, kTestSource, {changed});
}

TEST_CASE("TestNewPodAddedSnapshot: every change is a SET of the merged state",
          "[unit][config][podconfig]") {
  PodConfigTester t(PodConfigNotificationMode::kSnapshot);
  t.send(PodOperation::kAdd, {validPod("foo", "new")});
  expectPodUpdate(t, PodOperation::kSet, kTestSource, {validPod("foo", "new")});
  t.config.sync();
  expectPodUpdate(t, PodOperation::kSet, std::string(api::kAllSource), {validPod("foo", "new")});
  auto changed = validPodWith("foo", "new", changeContainers);
  t.send(PodOperation::kAdd, {changed});
  expectPodUpdate(t, PodOperation::kSet, kTestSource, {changed});
}

TEST_CASE(
    "TestNewPodAddedUpdatedRemoved: ADD, identical ADD ignored, changed ADD is UPDATE, REMOVE",
    "[unit][config][podconfig]") {
  PodConfigTester t(PodConfigNotificationMode::kIncremental);
  t.send(PodOperation::kAdd, {validPod("foo", "new")});
  expectPodUpdate(t, PodOperation::kAdd, kTestSource, {validPod("foo", "new")});

  t.send(PodOperation::kAdd, {validPod("foo", "new")});
  expectNoPodUpdate(t);

  auto changed = validPodWith("foo", "new", changeContainers);
  t.send(PodOperation::kAdd, {changed});
  expectPodUpdate(t, PodOperation::kUpdate, kTestSource, {changed});

  t.send(PodOperation::kRemove, {validPod("foo", "new")});
  auto got = t.take();
  REQUIRE(got.size() == 1);
  // The REMOVE carries the stored pod, which has the update applied.
  checkUpdate(got[0], PodOperation::kRemove, kTestSource, {changed});
}

TEST_CASE("TestNewPodAddedDelete: a DELETE with deletionTimestamp set emits one DELETE",
          "[unit][config][podconfig]") {
  PodConfigTester t(PodConfigNotificationMode::kIncremental);
  auto added = validPod("foo", "new");
  t.send(PodOperation::kAdd, {added});
  expectPodUpdate(t, PodOperation::kAdd, kTestSource, {added});

  auto deleted = validPodWith(
      "foo", "new", [](json& j) { j["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:10Z"; });
  t.send(PodOperation::kDelete, {deleted});
  auto got = t.take();
  REQUIRE(got.size() == 1);
  checkUpdate(got[0], PodOperation::kDelete, kTestSource, {deleted});
  CHECK(got[0].pods[0]->metadata.deletion_timestamp.has_value());
}

TEST_CASE("TestNewPodAddedUpdatedSet: a SET becomes REMOVE, ADD, UPDATE in that order",
          "[unit][config][podconfig]") {
  PodConfigTester t(PodConfigNotificationMode::kIncremental);
  t.send(PodOperation::kAdd,
         {validPod("foo", "new"), validPod("foo2", "new"), validPod("foo3", "new")});
  expectPodUpdate(t, PodOperation::kAdd, kTestSource,
                  {validPod("foo", "new"), validPod("foo2", "new"), validPod("foo3", "new")});
  expectNoPodUpdate(t);

  auto foo2 = validPodWith("foo2", "new", changeContainers);
  t.send(PodOperation::kSet, {foo2, validPod("foo3", "new"), validPod("foo4", "new")});
  auto got = t.take();
  REQUIRE(got.size() == 3);
  checkUpdate(got[0], PodOperation::kRemove, kTestSource, {validPod("foo", "new")});
  checkUpdate(got[1], PodOperation::kAdd, kTestSource, {validPod("foo4", "new")});
  checkUpdate(got[2], PodOperation::kUpdate, kTestSource, {foo2});
}

TEST_CASE(
    "TestNewPodAddedSetReconciled: status-only change is RECONCILE, with a spec change UPDATE",
    "[unit][config][podconfig]") {
  int counter = 0;
  // kubelet's newTestPods: three pods, the first optionally touched.
  auto newTestPods = [&](bool touch_status, bool touch_spec) {
    ++counter;
    auto first = validPodWith("changeable-pod-0", "new", [&](json& j) {
      if (touch_status) j["status"] = {{"message", std::to_string(counter)}};
      if (touch_spec) j["spec"]["containers"][0]["name"] = "ctr" + std::to_string(counter);
    });
    return std::vector<api::PodPtr>{first, validPod("constant-pod-1", "new"),
                                    validPod("constant-pod-2", "new")};
  };
  for (PodOperation op : {PodOperation::kAdd, PodOperation::kSet}) {
    INFO("op " << api::podOperationName(op));
    PodConfigTester t(PodConfigNotificationMode::kIncremental);
    auto pods = newTestPods(false, false);
    t.send(PodOperation::kSet, pods);
    expectPodUpdate(t, PodOperation::kAdd, kTestSource, pods);

    t.send(op, pods);
    expectNoPodUpdate(t);

    pods = newTestPods(true, false);
    t.send(op, pods);
    expectPodUpdate(t, PodOperation::kReconcile, kTestSource, {pods[0]});

    pods = newTestPods(true, true);
    t.send(op, pods);
    expectPodUpdate(t, PodOperation::kUpdate, kTestSource, {pods[0]});
  }
}

TEST_CASE("TestInitialEmptySet: the first empty SET is announced once, in every mode",
          "[unit][config][podconfig]") {
  struct Case {
    PodConfigNotificationMode mode;
    PodOperation op;
  };
  for (const Case& c : {Case{PodConfigNotificationMode::kIncremental, PodOperation::kAdd},
                        Case{PodConfigNotificationMode::kSnapshot, PodOperation::kSet},
                        Case{PodConfigNotificationMode::kSnapshotAndUpdates, PodOperation::kSet}}) {
    INFO("expected op " << api::podOperationName(c.op));
    PodConfigTester t(c.mode);
    t.send(PodOperation::kSet, {});
    expectPodUpdate(t, c.op, kTestSource, {});

    t.send(PodOperation::kSet, {});
    t.send(PodOperation::kAdd, {validPod("foo", "new")});
    expectPodUpdate(t, c.op, kTestSource, {validPod("foo", "new")});
  }
}

TEST_CASE("TestPodUpdateAnnotations: changing, adding or removing an annotation is an UPDATE",
          "[unit][config][podconfig]") {
  PodConfigTester t(PodConfigNotificationMode::kIncremental);
  json annotations = {{"kubernetes.io/blah", "blah"}};
  auto foo2 = [&] {
    return validPodWith("foo2", "new",
                        [&](json& j) { j["metadata"]["annotations"] = annotations; });
  };
  auto pod = foo2();
  t.send(PodOperation::kSet, {validPod("foo1", "new"), pod, validPod("foo3", "new")});
  expectPodUpdate(t, PodOperation::kAdd, kTestSource,
                  {validPod("foo1", "new"), pod, validPod("foo3", "new")});

  annotations["kubernetes.io/blah"] = "superblah";
  pod = foo2();
  t.send(PodOperation::kSet, {validPod("foo1", "new"), pod, validPod("foo3", "new")});
  expectPodUpdate(t, PodOperation::kUpdate, kTestSource, {pod});

  annotations["kubernetes.io/otherblah"] = "doh";
  pod = foo2();
  t.send(PodOperation::kSet, {validPod("foo1", "new"), pod, validPod("foo3", "new")});
  expectPodUpdate(t, PodOperation::kUpdate, kTestSource, {pod});

  annotations.erase("kubernetes.io/blah");
  pod = foo2();
  t.send(PodOperation::kSet, {validPod("foo1", "new"), pod, validPod("foo3", "new")});
  expectPodUpdate(t, PodOperation::kUpdate, kTestSource, {pod});
  CHECK(t.take().empty());
}

TEST_CASE("TestPodUpdateLabels: a label value change is an UPDATE", "[unit][config][podconfig]") {
  PodConfigTester t(PodConfigNotificationMode::kIncremental);
  auto pod = validPodWith("foo2", "new", [](json& j) {
    j["metadata"]["labels"] = {{"key", "value"}};
  });
  t.send(PodOperation::kSet, {pod});
  expectPodUpdate(t, PodOperation::kAdd, kTestSource, {pod});

  auto relabeled = validPodWith("foo2", "new", [](json& j) {
    j["metadata"]["labels"] = {{"key", "newValue"}};
  });
  t.send(PodOperation::kSet, {relabeled});
  expectPodUpdate(t, PodOperation::kUpdate, kTestSource, {relabeled});
}

TEST_CASE("TestPodRestore: checkpointed pods are restored once as RESTORE on the api source",
          "[unit][config][podconfig][checkpoint]") {
  testing::TempDir dir("podconfig-restore");
  auto pod = validPodWith("api-server", "kube-default", [](json& j) {
    j["metadata"]["annotations"] = {{"kubernetes.io/config.source", "api"},
                                    {"node.kubernetes.io/bootstrap-checkpoint", "true"}};
  });
  CheckpointManager writer(dir.path());
  REQUIRE(writer.writePod(*pod).ok());

  PodConfigOptions options;
  options.checkpoint_dir = dir.path();
  PodConfigTester t(PodConfigNotificationMode::kIncremental, options);
  auto restored = t.config.restore();
  REQUIRE(restored.ok());
  CHECK(restored->errors.empty());
  expectPodUpdate(t, PodOperation::kRestore, std::string(api::kApiserverSource), {pod});

  auto again = t.config.restore();
  REQUIRE(again.ok());
  CHECK(again->pods.empty());
  expectNoPodUpdate(t);
}

TEST_CASE("TestPodConfigRace: sources configured while readiness is queried are all counted",
          "[unit][config][podconfig]") {
  // kubelet's test calls Channel() and SeenAllSources() from two goroutines at once; so does
  // this (the sanitizer build checks the locking). No source sends anything, so none is seen.
  PodConfigTester t(PodConfigNotificationMode::kIncremental);
  std::set<std::string> all = {kTestSource};
  for (int i = 0; i < 200; ++i) all.insert("source-" + std::to_string(i));
  std::atomic<bool> done{false};
  std::atomic<int> ready_answers{0};
  std::thread reader([&] {
    while (!done.load()) {
      if (t.config.seenAllSources(all)) ++ready_answers;
      (void)t.config.sources();
    }
  });
  std::vector<PodUpdateSink> sinks;
  for (int i = 0; i < 200; ++i) sinks.push_back(t.config.channel("source-" + std::to_string(i)));
  done = true;
  reader.join();
  CHECK(ready_answers == 0);
  CHECK(t.config.sources() == all);
  CHECK_FALSE(t.config.seenAllSources(all));
}

TEST_CASE("PodConfig: readiness needs a SET from every configured source and their handling",
          "[unit][config][podconfig]") {
  PodConfigTester t(PodConfigNotificationMode::kIncremental);
  auto file = t.config.channel("file");
  CHECK(t.config.sources() == std::set<std::string>{"file", kTestSource});
  const std::set<std::string> both = {"file", kTestSource};
  CHECK_FALSE(t.config.seenAllSources(both));

  // An ADD does not make a source seen; a SET does, even an empty one.
  t.send(PodOperation::kAdd, {validPod("a", "ns")});
  t.take();
  CHECK_FALSE(t.config.sourceSeen(kTestSource));
  t.send(PodOperation::kSet, {validPod("a", "ns")});
  auto got = t.take();
  REQUIRE(opNames(got) == Strings{"ADD"});  // the empty readiness ADD
  CHECK(got[0].pods.empty());
  CHECK(t.config.sourceSeen(kTestSource));
  CHECK_FALSE(t.config.sourceSeen("file"));
  CHECK_FALSE(t.config.seenAllSources(both));

  file(makeUpdate(PodOperation::kSet, "file", {}));
  t.take();
  CHECK(t.config.sourceSeen("file"));
  CHECK(t.config.seenAllSources(both));
  // The consumer must also have handled an update of every source.
  CHECK_FALSE(t.config.seenAllSources({"file"}));
  // A source configured later makes the node not ready again.
  auto http = t.config.channel("http");
  CHECK_FALSE(t.config.seenAllSources({"file", kTestSource, "http"}));
}

TEST_CASE("PodConfig: an incomplete SET delivers its pods but does not make the source seen",
          "[unit][config][podconfig]") {
  PodConfigTester t(PodConfigNotificationMode::kIncremental);
  auto file = t.config.channel("file");
  auto incomplete = makeUpdate(PodOperation::kSet, "file", {validPod("f", "ns")});
  incomplete.complete = false;
  incomplete.incomplete_reason = "manifest /m/b.yaml does not parse";
  testing::LogCapture logs;
  file(incomplete);
  auto got = t.take();
  // The warning says why.
  auto warned = logs.lines("Source not seen yet");
  REQUIRE(warned.size() == 1);
  CHECK_THAT(warned[0], Catch::Contains("reason=\"manifest /m/b.yaml does not parse\""));
  REQUIRE(opNames(got) == Strings{"ADD"});
  CHECK(uids(got[0].pods) == Strings{"fns"});
  auto st = t.config.sourceState("file");
  CHECK(st.answered);
  CHECK_FALSE(st.seen);
  CHECK(st.reason == "manifest /m/b.yaml does not parse");
  CHECK_FALSE(t.config.sourceSeen("file"));

  // The same set, complete: nothing changes but the source is now seen (the readiness ADD).
  file(makeUpdate(PodOperation::kSet, "file", {validPod("f", "ns")}));
  got = t.take();
  REQUIRE(opNames(got) == Strings{"ADD"});
  CHECK(got[0].pods.empty());
  st = t.config.sourceState("file");
  CHECK(st.seen);
  CHECK(st.reason.empty());

  // Seen stays seen (kubelet's sourcesSeen never forgets).
  file(incomplete);
  t.take();
  CHECK(t.config.sourceSeen("file"));
  CHECK_FALSE(t.config.sourceState(kTestSource).answered);
}

TEST_CASE("PodConfig: updates are merged and delivered in the order they were pushed",
          "[unit][config][podconfig]") {
  PodConfigTester t(PodConfigNotificationMode::kIncremental);
  auto file = t.config.channel("file");
  t.send(PodOperation::kAdd, {validPod("a", "ns")});
  file(makeUpdate(PodOperation::kSet, "file", {validPod("f", "ns")}));
  t.send(PodOperation::kUpdate, {validPodWith("a", "ns", changeContainers)});
  t.send(PodOperation::kRemove, {validPod("a", "ns")});
  t.config.sync();
  auto got = t.take();
  REQUIRE(opNames(got) == Strings{"ADD", "ADD", "UPDATE", "REMOVE", "SET"});
  CHECK(got[0].source == kTestSource);
  CHECK(got[1].source == "file");
  CHECK(got[4].source == "*");
  CHECK(uids(got[4].pods) == Strings{"fns"});
}

TEST_CASE("PodConfig: the entry point's source wins over the update's source field",
          "[unit][config][podconfig]") {
  PodConfigTester t(PodConfigNotificationMode::kIncremental);
  t.channel(makeUpdate(PodOperation::kSet, "api", {validPod("a", "ns")}));
  auto got = t.take();
  REQUIRE(got.size() == 1);
  CHECK(got[0].source == kTestSource);
  CHECK(annotation(*got[0].pods[0], api::kConfigSourceAnnotationKey) == kTestSource);
  CHECK(t.config.sourceSeen(kTestSource));
  CHECK_FALSE(t.config.sourceSeen("api"));
}

TEST_CASE("PodConfig: duplicate names are queryable per source until a clean update",
          "[unit][config][podconfig]") {
  PodConfigTester t(PodConfigNotificationMode::kIncremental);
  auto dup = validPodWith("a", "ns", [](json& j) { j["metadata"]["uid"] = "other-uid"; });
  t.send(PodOperation::kSet, {validPod("a", "ns"), dup});
  auto got = t.take();
  REQUIRE(got.size() == 1);
  CHECK(uids(got[0].pods) == Strings{"ans"});
  auto errors = t.config.sourceErrors(kTestSource);
  REQUIRE(errors.size() == 1);
  CHECK_THAT(errors[0].message(), Catch::Contains("other-uid"));
  t.send(PodOperation::kSet, {validPod("a", "ns")});
  t.take();
  CHECK(t.config.sourceErrors(kTestSource).empty());
}

TEST_CASE("PodConfig: entry points do nothing once the PodConfig is gone",
          "[unit][config][podconfig]") {
  asio::io_context ioc;
  auto guard = asio::make_work_guard(ioc);
  testing::FakeClock clock;
  int delivered = 0;
  PodUpdateSink sink;
  {
    PodConfig config(ioc.get_executor(), clock, [&](api::PodUpdate) { ++delivered; });
    sink = config.channel("file");
    sink(makeUpdate(PodOperation::kSet, "file", {validPod("a", "ns")}));  // queued, not merged
  }
  sink(makeUpdate(PodOperation::kSet, "file", {validPod("b", "ns")}));
  ioc.poll();
  CHECK(delivered == 0);
}

}  // namespace
}  // namespace nodeagent::config
