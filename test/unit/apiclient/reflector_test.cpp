#include <catch2/catch.hpp>

#include <algorithm>
#include <sstream>

#include <nlohmann/json.hpp>

#include "api/api_errors.h"
#include "base/log.h"
#include "config/reflector.h"
#include "test/support/fake_clock.h"
#include "test/support/log_capture.h"
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
  std::vector<std::string> losses;  // reasons given to on_state_lost

  Fixture() {
    Reflector::Options options;
    options.on_state_lost = [this](const std::string& reason) { losses.push_back(reason); };
    reflector = std::make_shared<Reflector>(ioc.get_executor(), clock, random, lw, handler,
                                            std::move(options));
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
  // Starts the reflector and answers its first list with `names` at `rv`.
  void startListed(const std::vector<std::string>& names, const std::string& rv) {
    reflector->start();
    poll();
    lw->completeList(names, rv);
    poll();
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
  f.startListed({}, "3");
  CHECK(f.handler->log == std::vector<std::string>{"replace@3:"});
}

TEST_CASE("reflector: events pass through, bookmarks advance the version, a normal end re-watches",
          "[unit][apiclient]") {
  Fixture f;
  f.startListed({"a"}, "10");
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

TEST_CASE("reflector: 410 on the watch relists at once from the last version",
          "[unit][apiclient]") {
  Fixture f;
  f.startListed({"a"}, "10");
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
  std::vector<base::Duration> expected = {800ms,   1600ms,  3200ms, 6400ms,
                                          12800ms, 25600ms, 30s,    30s};
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
  f.startListed({"a"}, "10");
  f.lw->endWatch(base::dataLossError("watch stream: malformed event"));
  f.poll();
  CHECK(f.lw->calls.size() == 2);
  f.advance(800ms);
  REQUIRE(f.lw->calls.size() == 3);
  CHECK_FALSE(f.lw->last().watch);
  CHECK(f.lw->last().rv == "10");
  f.lw->completeList({"a"}, "11");
  f.poll();
  f.lw->endWatch(
      nodeagent::api::apiErrorStatus("WATCH /api/v1/pods", 500, R"({"kind":"Status","code":500})"));
  f.poll();
  f.advance(1599ms);  // second failure in the streak: 1.6s
  CHECK(f.lw->calls.size() == 4);
  f.advance(1ms);
  REQUIRE(f.lw->calls.size() == 5);
  CHECK_FALSE(f.lw->last().watch);
  f.lw->completeList({"a"}, "12");
  f.poll();
  f.lw->event(WatchEventType::kModified, "a", "13");  // healthy again
  f.lw->endWatch(base::dataLossError("garbage"));
  f.poll();
  f.advance(800ms);
  CHECK(f.lw->calls.size() == 7);
}

TEST_CASE("reflector: a refused or dropped connection re-opens the watch from the last version",
          "[unit][apiclient]") {
  Fixture f;
  f.startListed({"a"}, "10");
  f.lw->event(WatchEventType::kModified, "a", "12");
  f.lw->endWatch(base::unavailableError("connection reset by peer"));
  f.poll();
  f.advance(799ms);
  CHECK(f.lw->calls.size() == 2);
  f.advance(1ms);
  REQUIRE(f.lw->calls.size() == 3);
  CHECK(f.lw->last().watch);
  CHECK(f.lw->last().rv == "12");
  // The server is down: refused again and again, the backoff grows, no LIST.
  f.lw->endWatch(base::unavailableError("connection refused"));
  f.poll();
  f.advance(1600ms);
  REQUIRE(f.lw->calls.size() == 4);
  CHECK(f.lw->last().watch);
  f.lw->endWatch(base::deadlineExceededError("connect timed out"));
  f.poll();
  f.advance(3200ms);
  REQUIRE(f.lw->calls.size() == 5);
  CHECK(f.lw->last().watch);
  CHECK(f.lw->last().rv == "12");
  CHECK(f.reflector->listsStarted() == 1);
  // Back with its history compacted: 410, relist at once.
  f.lw->endWatch(gone());
  f.poll();
  REQUIRE(f.lw->calls.size() == 6);
  CHECK_FALSE(f.lw->last().watch);
  CHECK(f.lw->last().rv == "12");
  CHECK(f.handler->log == std::vector<std::string>{"replace@10:a,", "MODIFIED:a"});
}

TEST_CASE("reflector: 429 re-opens the watch after at least its Retry-After", "[unit][apiclient]") {
  Fixture f;
  f.startListed({"a"}, "10");
  f.lw->endWatch(nodeagent::api::apiErrorStatus(
      "WATCH /api/v1/pods", 429, R"({"kind":"Status","code":429,"reason":"TooManyRequests"})",
      std::chrono::seconds(5)));
  f.poll();
  f.advance(4999ms);  // the backoff alone would be 800ms
  CHECK(f.lw->calls.size() == 2);
  f.advance(1ms);
  REQUIRE(f.lw->calls.size() == 3);
  CHECK(f.lw->last().watch);
  CHECK(f.lw->last().rv == "10");
}

TEST_CASE("reflector: a watch that ends at once without events counts as a failure",
          "[unit][apiclient]") {
  Fixture f;
  f.startListed({}, "10");
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
  f.startListed({"a"}, "10");
  auto watch_call = f.lw->last();
  f.reflector->stop();
  f.poll();
  CHECK(f.lw->cancels == 1);
  watch_call.on_event(RawWatchEvent{
      WatchEventType::kAdded, std::make_shared<nlohmann::json>(FakeListerWatcher::pod("x", "11"))});
  watch_call.watch_done(base::cancelledError("stopped"));
  f.poll();
  f.advance(60s);
  CHECK(f.handler->log.size() == 1);
  CHECK(f.lw->calls.size() == 2);
}

using nodeagent::testing::LogCapture;

TEST_CASE("reflector: each new kind of failure is logged once per streak", "[unit][apiclient]") {
  LogCapture logs;
  Fixture f;
  f.reflector->start();
  f.poll();
  auto fail_list = [&](base::Status st) {
    f.lw->failList(std::move(st));
    f.poll();
    f.advance(60s);
  };
  for (int i = 0; i < 3; ++i) fail_list(base::unavailableError("connection refused"));
  CHECK(logs.lines("failed, retrying").size() == 1);
  fail_list(
      nodeagent::api::apiErrorStatus("LIST /api/v1/pods", 503, R"({"kind":"Status","code":503})"));
  fail_list(base::unavailableError("connection refused"));
  fail_list(
      nodeagent::api::apiErrorStatus("LIST /api/v1/pods", 503, R"({"kind":"Status","code":503})"));
  auto warned = logs.lines("failed, retrying");
  REQUIRE(warned.size() == 2);
  CHECK(warned[0].rfind("warning ", 0) == 0);
  CHECK(warned[0].find("kind=\"list UNAVAILABLE\"") != std::string::npos);
  CHECK(warned[1].find("kind=\"list http 503") != std::string::npos);
  CHECK(logs.lines("recovered").empty());
  // A watch that delivers an event ends the streak: the same failure is news again.
  f.lw->completeList({"a"}, "10");
  f.poll();
  f.lw->event(WatchEventType::kModified, "a", "11");
  f.poll();
  CHECK(logs.lines("recovered").size() == 1);
  f.lw->endWatch(base::dataLossError("garbage"));
  f.poll();
  f.advance(60s);
  fail_list(base::unavailableError("connection refused"));
  warned = logs.lines("failed, retrying");
  REQUIRE(warned.size() == 4);
  CHECK(warned[2].find("kind=\"watch DATA_LOSS\"") != std::string::npos);
  CHECK(warned[3].find("kind=\"list UNAVAILABLE\"") != std::string::npos);
}

TEST_CASE("reflector: a quorum list older than the version held reports the lost state",
          "[unit][apiclient]") {
  Fixture f;
  f.startListed({"a", "b"}, "10");
  f.lw->event(WatchEventType::kModified, "a", "15");
  f.poll();
  // Restarted on an older store: the watch from 15 waits for a version the server never had.
  f.lw->endWatch(nodeagent::api::apiErrorStatus(
      "WATCH /api/v1/pods", 504,
      R"({"kind":"Status","code":504,"reason":"Timeout","message":"Too large resource version"})"));
  f.poll();
  CHECK(f.losses.empty());
  f.advance(800ms);
  REQUIRE(f.lw->calls.size() == 3);
  CHECK_FALSE(f.lw->last().watch);
  CHECK(f.lw->last().rv == "");  // a quorum read: the server cannot serve 15
  f.lw->completeList({"b"}, "3");
  f.poll();
  REQUIRE(f.losses.size() == 1);
  CHECK(f.losses[0] == "resourceVersion went backwards in a list from 15 to 3");
  CHECK(f.handler->log.back() == "replace@3:b,");
  CHECK(f.lw->last().watch);
  CHECK(f.lw->last().rv == "3");
}

TEST_CASE("reflector: a bookmark or event older than the version held relists with a quorum read",
          "[unit][apiclient]") {
  Fixture f;
  f.startListed({"a"}, "10");
  const bool bookmark = GENERATE(true, false);
  if (bookmark) {
    f.lw->event(WatchEventType::kBookmark, "", "7");
  } else {
    f.lw->event(WatchEventType::kAdded, "x", "7");
  }
  f.poll();
  REQUIRE(f.losses.size() == 1);
  CHECK(f.losses[0] == std::string("resourceVersion went backwards in a ") +
                           (bookmark ? "bookmark" : "watch event") + " from 10 to 7");
  // The old event is not passed on; the watch is dropped and a quorum list started at once.
  CHECK(f.handler->log == std::vector<std::string>{"replace@10:a,"});
  CHECK(f.lw->cancels == 1);
  REQUIRE(f.lw->calls.size() == 3);
  CHECK_FALSE(f.lw->last().watch);
  CHECK(f.lw->last().rv == "");
  f.lw->completeList({"x"}, "8");
  f.poll();
  CHECK(f.losses.size() == 1);  // the held version was dropped with the lost state
  CHECK(f.handler->log.back() == "replace@8:x,");
  CHECK(f.lw->last().rv == "8");
}

TEST_CASE("reflector: relist() drops the watch and its version and lists with a quorum read",
          "[unit][apiclient]") {
  Fixture f;
  f.reflector->relist("before start");
  f.poll();
  CHECK(f.lw->calls.empty());  // not started: nothing to redo
  f.startListed({"a"}, "10");
  f.lw->event(WatchEventType::kModified, "a", "12");
  f.poll();
  auto old_watch = f.lw->last();
  f.reflector->relist("Lease kube-node-lease/n1 not found");
  f.poll();
  CHECK(f.lw->cancels == 1);
  REQUIRE(f.lw->calls.size() == 3);
  CHECK_FALSE(f.lw->last().watch);
  CHECK(f.lw->last().rv == "");
  // The dropped watch's late completions change nothing.
  old_watch.on_event(
      RawWatchEvent{WatchEventType::kDeleted,
                    std::make_shared<nlohmann::json>(FakeListerWatcher::pod("a", "13"))});
  old_watch.watch_done(base::cancelledError("cancelled"));
  f.poll();
  // The new store reused versions (12 again): only the list counts, and it is no loss report.
  f.lw->completeList({"c"}, "12");
  f.poll();
  CHECK(f.losses.empty());
  CHECK(f.handler->log == std::vector<std::string>{"replace@10:a,", "MODIFIED:a", "replace@12:c,"});
  CHECK(f.lw->last().watch);
  CHECK(f.lw->last().rv == "12");
  SECTION("during a backoff wait, the pending retry is dropped") {
    f.lw->endWatch(nodeagent::api::apiErrorStatus("WATCH /api/v1/pods", 500, ""));
    f.poll();
    const size_t before = f.lw->calls.size();
    f.reflector->relist("Node n1 not found");
    f.poll();
    REQUIRE(f.lw->calls.size() == before + 1);
    CHECK_FALSE(f.lw->last().watch);
    f.advance(60s);
    CHECK(f.lw->calls.size() == before + 1);  // the old timer did not start another call
  }
}
