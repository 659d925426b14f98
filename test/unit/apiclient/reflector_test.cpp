#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "api/api_errors.h"
#include "config/reflector.h"
#include "test/support/fake_clock.h"
#include "test/unit/apiclient/fake_lister_watcher.h"

using namespace std::chrono_literals;
using nodeagent::api::RawWatchEvent;
using nodeagent::api::WatchEventType;
using nodeagent::config::ListerWatcher;
using nodeagent::config::ListResult;
using nodeagent::config::Reflector;
using nodeagent::config::WatchRequest;
using nodeagent::testing::FakeListerWatcher;
using nodeagent::testing::FixedRandom;
namespace base = nodeagent::base;
namespace asio = boost::asio;

namespace {

class RecordingHandler final : public Reflector::Handler {
 public:
  std::vector<std::string> log;
  void onReplace(std::vector<nlohmann::json> items, const std::string& rv) override {
    std::string s = "replace@" + rv + ":";
    for (auto& i : items) s += i["metadata"]["name"].get<std::string>() + ",";
    log.push_back(s);
  }
  void onWatchEvent(WatchEventType type, nlohmann::json obj) override {
    log.push_back(std::string(nodeagent::api::watchEventTypeName(type)) + ":" +
                  obj["metadata"]["name"].get<std::string>());
  }
};

base::Status gone() {
  return nodeagent::api::apiErrorStatus(
      "WATCH /api/v1/pods", 410,
      R"({"kind":"Status","code":410,"reason":"Expired","message":"too old resource version"})");
}

struct Fixture {
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(ioc);
  nodeagent::testing::FakeClock clock;
  FixedRandom random;
  std::shared_ptr<FakeListerWatcher> lw = std::make_shared<FakeListerWatcher>();
  std::shared_ptr<RecordingHandler> handler = std::make_shared<RecordingHandler>();
  std::shared_ptr<Reflector> reflector;

  Fixture() {
    reflector = std::make_shared<Reflector>(ioc.get_executor(), clock, random, lw, handler,
                                            Reflector::Options{});
  }
  ~Fixture() {
    reflector->stop();
    ioc.poll();
  }
  void poll() { ioc.poll(); }
  void advance(base::Duration d) {
    clock.advance(d);
    ioc.poll();
  }
};

}  // namespace

TEST_CASE("reflector: lists at resourceVersion 0, then watches from the list's version",
          "[unit][apiclient]") {
  Fixture f;
  f.random.value = 0.5;
  f.reflector->start();
  f.poll();
  REQUIRE(f.lw->calls.size() == 1);
  CHECK_FALSE(f.lw->calls[0].watch);
  CHECK(f.lw->calls[0].rv == "0");
  f.lw->completeList({"a", "b"}, "10");
  f.poll();
  CHECK(f.handler->log == std::vector<std::string>{"replace@10:a,b,"});
  REQUIRE(f.lw->calls.size() == 2);
  auto& w = f.lw->calls[1];
  CHECK(w.watch);
  CHECK(w.request.resource_version == "10");
  CHECK(w.request.allow_watch_bookmarks);
  CHECK(w.request.timeout_seconds >= 300);
  CHECK(w.request.timeout_seconds <= 600);
  CHECK(w.request.timeout_seconds == 450);
}

TEST_CASE("reflector: an empty initial list still replaces", "[unit][apiclient]") {
  Fixture f;
  f.reflector->start();
  f.poll();
  f.lw->completeList({}, "3");
  f.poll();
  CHECK(f.handler->log == std::vector<std::string>{"replace@3:"});
}

TEST_CASE("reflector: events pass through, bookmarks advance the version, a normal end re-watches",
          "[unit][apiclient]") {
  Fixture f;
  f.reflector->start();
  f.poll();
  f.lw->completeList({"a"}, "10");
  f.poll();
  f.lw->event(WatchEventType::kAdded, "b", "11");
  f.lw->event(WatchEventType::kModified, "a", "12");
  f.lw->event(WatchEventType::kDeleted, "b", "13");
  f.lw->event(WatchEventType::kBookmark, "", "20");
  f.poll();
  CHECK(f.handler->log ==
        std::vector<std::string>{"replace@10:a,", "ADDED:b", "MODIFIED:a", "DELETED:b"});
  CHECK(f.reflector->lastSyncResourceVersion() == "20");
  f.lw->endWatch();
  f.poll();
  REQUIRE(f.lw->calls.size() == 3);
  CHECK(f.lw->calls[2].watch);
  CHECK(f.lw->calls[2].rv == "20");
  CHECK(f.reflector->listsStarted() == 1);
}

TEST_CASE("reflector: 410 on the watch relists at once from the last version", "[unit][apiclient]") {
  Fixture f;
  f.reflector->start();
  f.poll();
  f.lw->completeList({"a"}, "10");
  f.poll();
  f.lw->event(WatchEventType::kModified, "a", "15");
  f.lw->endWatch(gone());
  f.poll();
  REQUIRE(f.lw->calls.size() == 3);
  CHECK_FALSE(f.lw->calls[2].watch);
  CHECK(f.lw->calls[2].rv == "15");
  SECTION("a LIST that is itself 410 falls back to a quorum list after backoff") {
    f.lw->failList(gone());
    f.poll();
    CHECK(f.lw->calls.size() == 3);
    f.advance(799ms);
    CHECK(f.lw->calls.size() == 3);
    f.advance(1ms);
    REQUIRE(f.lw->calls.size() == 4);
    CHECK(f.lw->calls[3].rv == "");
    f.lw->completeList({"a"}, "30");
    f.poll();
    CHECK(f.handler->log.back() == "replace@30:a,");
    CHECK(f.lw->last().watch);
    CHECK(f.lw->last().rv == "30");
  }
  SECTION("repeated 410 with nothing in between backs off") {
    f.lw->completeList({"a"}, "16");
    f.poll();
    f.lw->endWatch(gone());
    f.poll();
    CHECK(f.lw->calls.size() == 4);
    f.advance(800ms);
    CHECK(f.lw->calls.size() == 5);
    CHECK_FALSE(f.lw->last().watch);
  }
}

TEST_CASE("reflector: other failures back off exponentially, capped, and then relist",
          "[unit][apiclient]") {
  Fixture f;
  f.reflector->start();
  f.poll();
  std::vector<base::Duration> expected = {800ms, 1600ms, 3200ms, 6400ms, 12800ms, 25600ms, 30s, 30s};
  for (auto d : expected) {
    size_t before = f.lw->calls.size();
    f.lw->failList(base::unavailableError("connection refused"));
    f.poll();
    f.advance(d - 1ms);
    REQUIRE(f.lw->calls.size() == before);
    f.advance(1ms);
    REQUIRE(f.lw->calls.size() == before + 1);
    CHECK(f.lw->last().rv == "0");
  }
}

TEST_CASE("reflector: jitter stretches the backoff by up to 100%", "[unit][apiclient]") {
  Fixture f;
  f.random.value = 0.5;
  f.reflector->start();
  f.poll();
  f.lw->failList(base::unavailableError("down"));
  f.poll();
  f.advance(1199ms);
  CHECK(f.lw->calls.size() == 1);
  f.advance(1ms);
  CHECK(f.lw->calls.size() == 2);
}

TEST_CASE("reflector: a broken watch relists after backoff and a healthy watch resets the backoff",
          "[unit][apiclient]") {
  Fixture f;
  f.reflector->start();
  f.poll();
  f.lw->completeList({"a"}, "10");
  f.poll();
  f.lw->endWatch(base::dataLossError("watch stream: malformed event"));
  f.poll();
  CHECK(f.lw->calls.size() == 2);
  f.advance(800ms);
  REQUIRE(f.lw->calls.size() == 3);
  CHECK_FALSE(f.lw->last().watch);
  CHECK(f.lw->last().rv == "10");
  f.lw->completeList({"a"}, "11");
  f.poll();
  f.lw->endWatch(base::unavailableError("reset"));
  f.poll();
  f.advance(1600ms);  // second failure in the streak: 1.6s
  REQUIRE(f.lw->calls.size() == 5);
  f.lw->completeList({"a"}, "12");
  f.poll();
  f.lw->event(WatchEventType::kModified, "a", "13");  // healthy again
  f.lw->endWatch(base::unavailableError("reset"));
  f.poll();
  f.advance(800ms);
  CHECK(f.lw->calls.size() == 7);
}

TEST_CASE("reflector: a watch that ends at once without events counts as a failure",
          "[unit][apiclient]") {
  Fixture f;
  f.reflector->start();
  f.poll();
  f.lw->completeList({}, "10");
  f.poll();
  f.lw->endWatch();
  f.poll();
  CHECK(f.lw->calls.size() == 2);
  f.advance(800ms);
  CHECK(f.lw->calls.size() == 3);
  CHECK_FALSE(f.lw->last().watch);
}

TEST_CASE("reflector: stop cancels the call, drops late completions and pending timers",
          "[unit][apiclient]") {
  Fixture f;
  f.reflector->start();
  f.poll();
  f.lw->completeList({"a"}, "10");
  f.poll();
  auto watch_call = f.lw->last();
  f.reflector->stop();
  f.poll();
  CHECK(f.lw->cancels == 1);
  watch_call.on_event(RawWatchEvent{WatchEventType::kAdded,
                                    std::make_shared<nlohmann::json>(FakeListerWatcher::pod("x", "11"))});
  watch_call.watch_done(base::cancelledError("stopped"));
  f.poll();
  f.advance(60s);
  CHECK(f.handler->log.size() == 1);
  CHECK(f.lw->calls.size() == 2);
}
