// Bootstrap checkpoints: the CheckpointManager's files, and PodConfig keeping them in step with
// the api source and restoring them at start-up.
#include <sys/stat.h>

#include <filesystem>

#include <catch2/catch.hpp>

#include "base/asio.h"
#include "config/checkpoint.h"
#include "config/pod_config.h"
#include "test/support/fake_clock.h"
#include "test/support/test_util.h"
#include "test/unit/config/pod_config_test_helpers.h"

namespace nodeagent::config {
namespace {

namespace fs = std::filesystem;
using namespace testhelpers;
using api::PodOperation;
using Strings = std::vector<std::string>;

api::PodPtr checkpointed(const std::string& name, const std::function<void(json&)>& more = {}) {
  return validPodWith(name, "kube-system", [&](json& j) {
    j["metadata"]["annotations"] = {{"node.kubernetes.io/bootstrap-checkpoint", "true"}};
    if (more) more(j);
  });
}

Strings filesIn(const fs::path& dir) {
  Strings names;
  if (!fs::exists(dir)) return names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST_CASE("CheckpointManager: an annotated pod is written as its JSON under its UID",
          "[unit][config][checkpoint]") {
  testing::TempDir tmp("checkpoint");
  const fs::path dir = tmp / "pod-checkpoints";
  CheckpointManager manager(dir);
  auto pod = checkpointed("etcd");
  REQUIRE(manager.writePod(*pod).ok());
  CHECK(filesIn(dir) == Strings{"Pod_etcdkube-system.json"});
  auto decoded = api::decodePodJson(testing::readFile(dir / "Pod_etcdkube-system.json"));
  REQUIRE(decoded.ok());
  CHECK(*decoded->raw == *pod->raw);
  CHECK((fs::status(dir).permissions() & fs::perms::others_all) == fs::perms::none);

  // Written again: through a temporary file renamed over the old one (a new inode, never the old
  // file truncated in place), and no temporary left behind.
  struct stat before;
  REQUIRE(::stat((dir / "Pod_etcdkube-system.json").c_str(), &before) == 0);
  auto changed = checkpointed("etcd", changeContainers);
  REQUIRE(manager.writePod(*changed).ok());
  CHECK(filesIn(dir) == Strings{"Pod_etcdkube-system.json"});
  struct stat after;
  REQUIRE(::stat((dir / "Pod_etcdkube-system.json").c_str(), &after) == 0);
  CHECK(after.st_ino != before.st_ino);
  CHECK(testing::readFile(dir / "Pod_etcdkube-system.json") == changed->raw->str() + "\n");
  CHECK((after.st_mode & 0777) == 0600);
}

TEST_CASE("CheckpointManager: the checkpoint goes when the annotation does or on delete",
          "[unit][config][checkpoint]") {
  testing::TempDir tmp("checkpoint");
  CheckpointManager manager(tmp.path());
  REQUIRE(manager.writePod(*checkpointed("a")).ok());
  REQUIRE(manager.writePod(*checkpointed("b")).ok());
  CHECK(filesIn(tmp.path()).size() == 2);
  // Annotation removed ("false" is not "true").
  auto plain = validPodWith("a", "kube-system", [](json& j) {
    j["metadata"]["annotations"] = {{"node.kubernetes.io/bootstrap-checkpoint", "false"}};
  });
  REQUIRE(manager.writePod(*plain).ok());
  CHECK(filesIn(tmp.path()) == Strings{"Pod_bkube-system.json"});
  REQUIRE(manager.deletePod("bkube-system").ok());
  CHECK(filesIn(tmp.path()).empty());
  CHECK(manager.deletePod("never-written").ok());
  CHECK(manager.writePod(*validPod("plain", "ns")).ok());  // nothing to remove
}

TEST_CASE("CheckpointManager: a UID that cannot name a file is an error",
          "[unit][config][checkpoint]") {
  testing::TempDir tmp("checkpoint");
  CheckpointManager manager(tmp.path());
  auto bad = checkpointed("x", [](json& j) { j["metadata"]["uid"] = "../../etc/passwd"; });
  auto s = manager.writePod(*bad);
  CHECK(s.code() == base::StatusCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("metadata.uid"));
  CHECK(filesIn(tmp.path()).empty());
}

TEST_CASE("CheckpointManager: loading skips and reports corrupt files",
          "[unit][config][checkpoint]") {
  testing::TempDir tmp("checkpoint");
  CheckpointManager manager(tmp.path());
  REQUIRE(manager.writePod(*checkpointed("good")).ok());
  testing::writeFile(tmp / "Pod_broken.json", "{\"metadata\": {\"name\": ");
  testing::writeFile(tmp / "Pod_renamed.json", checkpointed("other")->raw->str());
  testing::writeFile(tmp / ".Pod_half.json.tmp", "{");
  testing::writeFile(tmp / "README", "not a checkpoint");

  auto load = CheckpointManager(tmp.path()).loadPods();
  REQUIRE(load.ok());
  REQUIRE(load->pods.size() == 1);
  CHECK(load->pods[0]->metadata.uid == "goodkube-system");
  REQUIRE(load->errors.size() == 2);
  CHECK(load->errors[0].code() == base::StatusCode::kDataLoss);
  CHECK_THAT(load->errors[0].message(), Catch::Contains("Pod_broken.json"));
  CHECK_THAT(load->errors[1].message(),
             Catch::Contains("Pod_renamed.json") && Catch::Contains("metadata.uid"));
  // The interrupted write is cleaned up; files that are not ours are left alone.
  CHECK(filesIn(tmp.path()) ==
        Strings{"Pod_broken.json", "Pod_goodkube-system.json", "Pod_renamed.json", "README"});
}

TEST_CASE("CheckpointManager: loading creates a missing folder and finds nothing",
          "[unit][config][checkpoint]") {
  testing::TempDir tmp("checkpoint");
  auto load = CheckpointManager(tmp / "root" / "pod-checkpoints").loadPods();
  REQUIRE(load.ok());
  CHECK(load->pods.empty());
  CHECK(fs::is_directory(tmp / "root" / "pod-checkpoints"));

  testing::writeFile(tmp / "file", "x");
  CHECK_FALSE(CheckpointManager(tmp / "file" / "sub").loadPods().ok());
}

// A PodConfig with checkpoints, fed through the api entry point.
struct CheckpointTester {
  explicit CheckpointTester(bool use_blocking_pool = false)
      : config(
            ioc.get_executor(), clock,
            [this](api::PodUpdate u) { received.push_back(std::move(u)); },
            options(use_blocking_pool)),
        api_sink(config.channel("api")) {}

  PodConfigOptions options(bool use_blocking_pool) {
    PodConfigOptions o;
    o.checkpoint_dir = dir();
    if (use_blocking_pool) o.blocking_executor = blocking.get_executor();
    return o;
  }
  fs::path dir() const { return tmp / "pod-checkpoints"; }
  void sendApi(PodOperation op, std::vector<api::PodPtr> pods) {
    api_sink(makeUpdate(op, "api", std::move(pods)));
    ioc.poll();
  }
  Strings files() const { return filesIn(dir()); }

  testing::TempDir tmp{"podconfig-checkpoint"};
  // Declared before `ioc`: handlers left in `ioc` may own the strand that points into it.
  asio::io_context blocking;
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> blocking_guard{
      blocking.get_executor()};
  asio::executor_work_guard<asio::io_context::executor_type> guard{ioc.get_executor()};
  testing::FakeClock clock;
  std::vector<api::PodUpdate> received;
  PodConfig config;
  PodUpdateSink api_sink;
};

TEST_CASE("PodConfig: annotated api pods are checkpointed and the checkpoint follows the pod",
          "[unit][config][checkpoint]") {
  CheckpointTester t;
  t.sendApi(PodOperation::kSet, {checkpointed("etcd"), validPod("plain", "kube-system")});
  CHECK(t.files() == Strings{"Pod_etcdkube-system.json"});
  // The written pod is the stored one, with the local annotations.
  auto load = CheckpointManager(t.dir()).loadPods();
  REQUIRE(load.ok());
  REQUIRE(load->pods.size() == 1);
  CHECK(annotation(*load->pods[0], api::kConfigSourceAnnotationKey) == "api");

  // An update is written too.
  t.sendApi(PodOperation::kSet,
            {checkpointed("etcd", changeContainers), validPod("plain", "kube-system")});
  load = CheckpointManager(t.dir()).loadPods();
  REQUIRE(load.ok());
  REQUIRE(load->pods.size() == 1);
  CHECK(load->pods[0]->spec->containers.at(0).name == "bar");

  // Annotation removed: the checkpoint goes.
  t.sendApi(PodOperation::kSet, {validPod("etcd", "kube-system")});
  CHECK(t.files().empty());

  // Back, then the pod is removed from the api source.
  t.sendApi(PodOperation::kSet, {checkpointed("etcd")});
  CHECK(t.files() == Strings{"Pod_etcdkube-system.json"});
  t.sendApi(PodOperation::kSet, {});
  CHECK(t.files().empty());
}

TEST_CASE("PodConfig: only api pods are checkpointed", "[unit][config][checkpoint]") {
  CheckpointTester t;
  auto file_sink = t.config.channel("file");
  file_sink(makeUpdate(PodOperation::kSet, "file", {checkpointed("static")}));
  t.ioc.poll();
  REQUIRE(t.received.size() == 1);
  CHECK(t.files().empty());
}

TEST_CASE("PodConfig: checkpoint files are written on the blocking pool when one is given",
          "[unit][config][checkpoint]") {
  CheckpointTester t(/*use_blocking_pool=*/true);
  t.sendApi(PodOperation::kSet, {checkpointed("etcd")});
  CHECK(t.received.size() == 1);  // delivered without waiting for the file
  CHECK(t.files().empty());
  t.blocking.poll();
  CHECK(t.files() == Strings{"Pod_etcdkube-system.json"});
  // A write then a removal stay in order.
  t.sendApi(PodOperation::kSet, {checkpointed("etcd", changeContainers)});
  t.sendApi(PodOperation::kSet, {});
  t.blocking.poll();
  CHECK(t.files().empty());
}

TEST_CASE("PodConfig: restore sends checkpoints as RESTORE on api, once, and reports corrupt ones",
          "[unit][config][checkpoint]") {
  CheckpointTester t;
  {
    CheckpointManager writer(t.dir());
    REQUIRE(writer.writePod(*checkpointed("etcd")).ok());
    REQUIRE(writer.writePod(*checkpointed("apiserver")).ok());
  }
  testing::writeFile(t.dir() / "Pod_garbage.json", "not json");

  auto restored = t.config.restore();
  REQUIRE(restored.ok());
  CHECK(restored->pods.size() == 2);
  REQUIRE(restored->errors.size() == 1);
  CHECK_THAT(restored->errors[0].message(), Catch::Contains("Pod_garbage.json"));
  t.ioc.poll();
  REQUIRE(t.received.size() == 1);
  CHECK(t.received[0].op == PodOperation::kRestore);
  CHECK(t.received[0].source == "api");
  CHECK(sortedUids(t.received[0].pods) == Strings{"apiserverkube-system", "etcdkube-system"});
  CHECK(t.config.sources() == std::set<std::string>{"api"});
  CHECK_FALSE(t.config.sourceSeen("api"));  // RESTORE does not make the source ready

  auto again = t.config.restore();
  REQUIRE(again.ok());
  CHECK(again->pods.empty());
  t.ioc.poll();
  CHECK(t.received.size() == 1);

  // The apiserver's first SET: still-present pods are ADDed, the checkpoints of pods it no longer
  // has are dropped (they were deleted while the agent was down), and so is the corrupt one.
  t.received.clear();
  t.sendApi(PodOperation::kSet, {checkpointed("etcd")});
  REQUIRE(opNames(t.received) == Strings{"ADD"});
  CHECK(t.config.sourceSeen("api"));
  CHECK(t.files() == Strings{"Pod_etcdkube-system.json"});
}

TEST_CASE("PodConfig: restore without a checkpoint folder is an error",
          "[unit][config][checkpoint]") {
  asio::io_context ioc;
  testing::FakeClock clock;
  PodConfig config(ioc.get_executor(), clock, [](api::PodUpdate) {});
  auto r = config.restore();
  CHECK(r.status().code() == base::StatusCode::kFailedPrecondition);
  CHECK(config.sources().empty());
}

}  // namespace
}  // namespace nodeagent::config
