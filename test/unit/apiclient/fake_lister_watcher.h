// A scripted ListerWatcher for reflector and apiserver-source unit tests: records each LIST and
// WATCH call and lets the test complete it (completions then run on the reflector's strand after
// ioc.poll()).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/random.h"
#include "config/reflector.h"

namespace nodeagent::testing {

class FixedRandom final : public base::Random {
 public:
  double value = 0.0;
  double uniform() override { return value; }
  uint64_t next64() override { return 0; }
};

class FakeListerWatcher final : public config::ListerWatcher {
 public:
  struct Call {
    bool watch = false;
    std::string rv;
    config::WatchRequest request;
    ListDone list_done;
    EventFn on_event;
    WatchDone watch_done;
  };
  std::vector<Call> calls;
  int cancels = 0;

  void list(std::string rv, ListDone done) override {
    calls.push_back(Call{false, std::move(rv), {}, std::move(done), {}, {}});
  }
  void watch(config::WatchRequest req, EventFn on_event, WatchDone done) override {
    calls.push_back(
        Call{true, req.resource_version, req, {}, std::move(on_event), std::move(done)});
  }
  void cancel() override { ++cancels; }

  Call& last() { return calls.back(); }
  void completeList(std::vector<std::string> names, std::string rv) {
    std::vector<nlohmann::json> items;
    for (auto& n : names) items.push_back(pod(n, "1"));
    completeListWith(std::move(items), std::move(rv));
  }
  void completeListWith(std::vector<nlohmann::json> items, std::string rv) {
    config::ListResult r;
    r.items = std::move(items);
    r.resource_version = std::move(rv);
    last().list_done(std::move(r));
  }
  void failList(base::Status st) { last().list_done(std::move(st)); }
  void event(api::WatchEventType type, const std::string& name, const std::string& rv) {
    eventWith(type, pod(name, rv));
  }
  void eventWith(api::WatchEventType type, nlohmann::json object) {
    last().on_event(api::RawWatchEvent{type, std::make_shared<nlohmann::json>(std::move(object))});
  }
  void endWatch(base::Status st = {}) { last().watch_done(std::move(st)); }

  static nlohmann::json pod(const std::string& name, const std::string& rv) {
    return {{"metadata", {{"name", name}, {"resourceVersion", rv}}}};
  }
};

}  // namespace nodeagent::testing
