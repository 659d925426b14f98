#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "api/pod_update.h"
#include "config/apiserver_source.h"
#include "test/support/fake_clock.h"
#include "test/unit/apiclient/fake_lister_watcher.h"

using namespace std::chrono_literals;
using nodeagent::api::PodOperation;
using nodeagent::api::PodUpdate;
using nodeagent::api::WatchEventType;
using nodeagent::testing::FakeListerWatcher;
using nodeagent::testing::FixedRandom;
namespace base = nodeagent::base;
namespace config = nodeagent::config;
namespace asio = boost::asio;

namespace {

nlohmann::json pod(const std::string& name, const std::string& node, const std::string& rv,
                   const std::string& uid = "") {
  return {{"kind", "Pod"},
          {"apiVersion", "v1"},
          {"metadata",
           {{"name", name},
            {"namespace", "default"},
            {"uid", uid.empty() ? "uid-" + name : uid},
            {"resourceVersion", rv}}},
          {"spec", {{"nodeName", node}, {"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
}

struct Fixture {
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(ioc);
  nodeagent::testing::FakeClock clock;
  FixedRandom random;
  std::shared_ptr<FakeListerWatcher> lw = std::make_shared<FakeListerWatcher>();
  std::vector<PodUpdate> updates;
  config::ManifestErrors errors;
  std::vector<config::ManifestError> announced;
  std::unique_ptr<config::PodSource> source;

  Fixture() {
    errors.setListener([this](const config::ManifestError& e) { announced.push_back(e); });
    config::ApiserverSourceOptions opts;
    opts.node_name = "n1";
    opts.errors = &errors;
    source = config::makeApiserverSource(ioc.get_executor(), clock, random, lw, opts,
                                         [this](PodUpdate u) { updates.push_back(std::move(u)); });
    source->start();
    ioc.poll();
  }
  ~Fixture() {
    source->stop();
    ioc.poll();
  }
  void poll() { ioc.poll(); }

  // "SET:a,b" / "ADD:c" ...
  std::vector<std::string> ops() const {
    std::vector<std::string> out;
    for (const auto& u : updates) {
      std::string s = std::string(nodeagent::api::podOperationName(u.op)) + ":";
      std::vector<std::string> names;
      for (const auto& p : u.pods) names.push_back(p->metadata.name);
      std::sort(names.begin(), names.end());
      for (size_t i = 0; i < names.size(); ++i) s += (i ? "," : "") + names[i];
      out.push_back(s);
      CHECK(u.source == "api");
    }
    return out;
  }
};

}  // namespace

TEST_CASE("apiserver source: the list is one SET, an empty list is an empty SET",
          "[unit][apiclient]") {
  Fixture f;
  REQUIRE(f.lw->calls.size() == 1);
  CHECK(f.lw->calls[0].rv == "0");
  SECTION("empty") {
    f.lw->completeListWith({}, "5");
    f.poll();
    CHECK(f.ops() == std::vector<std::string>{"SET:"});
  }
  SECTION("non-empty, other nodes and undecodable pods skipped") {
    auto broken = pod("broken", "n1", "3");
    broken["metadata"]["name"] = 17;
    f.lw->completeListWith(
        {pod("a", "n1", "1"), pod("other", "n2", "2"), broken, pod("b", "n1", "4")}, "5");
    f.poll();
    CHECK(f.ops() == std::vector<std::string>{"SET:a,b"});
  }
}

TEST_CASE("apiserver source: watch events become incremental ADD/UPDATE/REMOVE",
          "[unit][apiclient]") {
  Fixture f;
  f.lw->completeListWith({pod("a", "n1", "1")}, "5");
  f.poll();
  f.lw->eventWith(WatchEventType::kAdded, pod("b", "n1", "6"));
  f.lw->eventWith(WatchEventType::kModified, pod("a", "n1", "7"));
  f.lw->eventWith(WatchEventType::kModified, pod("c", "n1", "8"));  // unseen UID -> ADD
  f.lw->eventWith(WatchEventType::kAdded, pod("x", "n2", "9"));     // another node: ignored
  f.lw->eventWith(WatchEventType::kDeleted, pod("x", "n2", "10"));  // unknown: ignored
  f.lw->eventWith(WatchEventType::kDeleted, pod("b", "n1", "11"));
  f.lw->eventWith(WatchEventType::kAdded, pod("b", "n1", "12", "uid-b2"));  // recreated: new UID
  f.poll();
  CHECK(f.ops() ==
        std::vector<std::string>{"SET:a", "ADD:b", "UPDATE:a", "ADD:c", "REMOVE:b", "ADD:b"});
  CHECK(f.updates[4].pods[0]->metadata.uid == "uid-b");
  CHECK(f.updates[5].pods[0]->metadata.uid == "uid-b2");
}

TEST_CASE("apiserver source: a relist replaces the whole set", "[unit][apiclient]") {
  Fixture f;
  f.lw->completeListWith({pod("a", "n1", "1"), pod("b", "n1", "2")}, "5");
  f.poll();
  f.lw->endWatch(base::dataLossError("watch stream: malformed event"));
  f.poll();
  f.clock.advance(800ms);
  f.poll();
  REQUIRE_FALSE(f.lw->last().watch);
  // b was deleted and c created while the watch was down.
  f.lw->completeListWith({pod("a", "n1", "1"), pod("c", "n1", "9")}, "9");
  f.poll();
  CHECK(f.ops() == std::vector<std::string>{"SET:a,b", "SET:a,c"});
  // Later events are relative to the new set: b is unknown now.
  f.lw->eventWith(WatchEventType::kDeleted, pod("b", "n1", "10"));
  f.lw->eventWith(WatchEventType::kModified, pod("c", "n1", "11"));
  f.poll();
  CHECK(f.ops().back() == "UPDATE:c");
  CHECK(f.updates.size() == 3);
}

TEST_CASE("apiserver source: a known pod that moves to another node is removed",
          "[unit][apiclient]") {
  Fixture f;
  f.lw->completeListWith({pod("a", "n1", "1")}, "5");
  f.poll();
  f.lw->eventWith(WatchEventType::kModified, pod("a", "n2", "6"));
  f.poll();
  CHECK(f.ops() == std::vector<std::string>{"SET:a", "REMOVE:a"});
}

TEST_CASE("apiserver source: nothing is pushed after stop", "[unit][apiclient]") {
  Fixture f;
  f.lw->completeListWith({pod("a", "n1", "1")}, "5");
  f.poll();
  auto watch = f.lw->last();
  f.source->stop();
  watch.on_event(nodeagent::api::RawWatchEvent{
      WatchEventType::kAdded, std::make_shared<nlohmann::json>(pod("b", "n1", "6"))});
  f.poll();
  CHECK(f.updates.size() == 1);
  CHECK(f.lw->cancels == 1);
}

TEST_CASE("apiserver source: node name resolution lower-cases and trims", "[unit][apiclient]") {
  CHECK(config::resolveNodeName(" Node-1 ") == "node-1");
  CHECK_FALSE(config::resolveNodeName("").empty());
}

TEST_CASE("apiserver source: pods with names kube-apiserver refuses never reach PodConfig",
          "[unit][apiclient]") {
  Fixture f;
  auto escape = pod("escape", "n1", "2");
  escape["spec"]["containers"][0]["name"] = "../../../../tmp/x";
  auto volume = pod("volume", "n1", "3");
  volume["spec"]["volumes"] = {{{"name", "/tmp/y/z"}, {"emptyDir", nlohmann::json::object()}}};
  auto uid = pod("uid", "n1", "4", "../../../../tmp/u");
  f.lw->completeListWith({pod("a", "n1", "1"), escape, volume, uid}, "5");
  f.poll();
  CHECK(f.ops() == std::vector<std::string>{"SET:a"});

  auto listed = f.errors.list("api");
  REQUIRE(listed.size() == 3);
  CHECK(listed[0].location == "default/escape");
  CHECK(listed[0].invalid.starts_with(
      "spec.containers[0].name: Invalid value: \"../../../../tmp/x\": a lowercase RFC 1123 label"));
  CHECK(listed[1].location == "default/uid");
  CHECK(listed[1].invalid.starts_with("metadata.uid: Invalid value: \"../../../../tmp/u\""));
  CHECK(listed[2].location == "default/volume");
  CHECK(listed[2].invalid.starts_with("spec.volumes[0].name: Invalid value: \"/tmp/y/z\""));
  // Each refusal is announced once (a FailedValidation event): about the pod when its metadata
  // is valid, about the node when the metadata itself is bad.
  REQUIRE(f.announced.size() == 3);
  CHECK(f.announced[0].pod.name == "escape");
  CHECK(f.announced[0].pod.uid == "uid-escape");
  CHECK(f.announced[1].pod.name == "volume");
  CHECK(f.announced[2].pod.name.empty());

  // A watch event about a refused pod is refused too and announced no more; its deletion
  // clears the report.
  auto escape2 = escape;
  escape2["metadata"]["resourceVersion"] = "6";
  f.lw->eventWith(WatchEventType::kModified, escape2);
  // A deletion carries a newer resourceVersion (an older one means the apiserver lost its state).
  auto volume_deleted = volume;
  volume_deleted["metadata"]["resourceVersion"] = "7";
  f.lw->eventWith(WatchEventType::kDeleted, volume_deleted);
  f.poll();
  CHECK(f.ops() == std::vector<std::string>{"SET:a"});
  CHECK(f.announced.size() == 3);
  CHECK(f.errors.list("api").size() == 2);
  CHECK_FALSE(f.errors.get("api", "default/volume"));
}

TEST_CASE("apiserver source: a relist clears the reports of refused pods that are gone",
          "[unit][apiclient]") {
  Fixture f;
  auto escape = pod("escape", "n1", "2");
  escape["spec"]["containers"][0]["name"] = "/tmp/x";
  f.lw->completeListWith({escape}, "5");
  f.poll();
  REQUIRE(f.errors.size() == 1);
  f.lw->endWatch(base::dataLossError("watch stream: malformed event"));
  f.poll();
  f.clock.advance(800ms);
  f.poll();
  REQUIRE_FALSE(f.lw->last().watch);
  f.lw->completeListWith({pod("a", "n1", "7")}, "8");
  f.poll();
  CHECK(f.errors.size() == 0);
  CHECK(f.ops().back() == "SET:a");
}
