#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "api/watch_decoder.h"

using nodeagent::api::RawWatchEvent;
using nodeagent::api::WatchDecoder;
using nodeagent::api::WatchEventType;
using nodeagent::api::watchEventTypeName;

namespace {

const std::string kStream =
    R"({"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a","resourceVersion":"10"}}})"
    "\n"
    R"({"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"a","resourceVersion":"11"},"spec":{"x":"line\nbreak"}}})"
    "\n"
    R"({"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"12"}}})"
    "\n"
    R"({"type":"DELETED","object":{"kind":"Pod","metadata":{"name":"a","resourceVersion":"13"}}})"
    "\n"
    R"({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}})"
    "\n";

std::vector<std::string> summarize(const std::vector<RawWatchEvent>& evs) {
  std::vector<std::string> out;
  for (const auto& e : evs) {
    out.push_back(std::string(watchEventTypeName(e.type)) + ":" +
                  e.object->value("/metadata/resourceVersion"_json_pointer, std::string("-")));
  }
  return out;
}

}  // namespace

TEST_CASE("watch decoder: every split point of a stream yields the same events",
          "[unit][apiclient]") {
  const std::vector<std::string> expected = {"ADDED:10", "MODIFIED:11", "BOOKMARK:12", "DELETED:13",
                                             "ERROR:-"};
  for (size_t i = 0; i <= kStream.size(); ++i) {
    for (size_t j = i; j <= kStream.size(); j += 7) {
      std::vector<RawWatchEvent> evs;
      WatchDecoder d([&](RawWatchEvent&& e) {
        evs.push_back(std::move(e));
        return true;
      });
      REQUIRE(d.feed(std::string_view(kStream).substr(0, i)).ok());
      REQUIRE(d.feed(std::string_view(kStream).substr(i, j - i)).ok());
      REQUIRE(d.feed(std::string_view(kStream).substr(j)).ok());
      REQUIRE(d.finish().ok());
      REQUIRE(summarize(evs) == expected);
    }
  }
}

TEST_CASE("watch decoder: byte-at-a-time feeding works and a final event without newline is kept",
          "[unit][apiclient]") {
  std::string s = kStream.substr(0, kStream.size() - 1);
  std::vector<RawWatchEvent> evs;
  WatchDecoder d([&](RawWatchEvent&& e) {
    evs.push_back(std::move(e));
    return true;
  });
  for (char c : s) REQUIRE(d.feed(std::string_view(&c, 1)).ok());
  CHECK(evs.size() == 4);
  REQUIRE(d.finish().ok());
  CHECK(evs.size() == 5);
  CHECK(evs.back().type == WatchEventType::kError);
}

TEST_CASE("watch decoder: blank lines and CRLF are tolerated", "[unit][apiclient]") {
  std::vector<RawWatchEvent> evs;
  WatchDecoder d([&](RawWatchEvent&& e) {
    evs.push_back(std::move(e));
    return true;
  });
  REQUIRE(d.feed("\n\r\n"
                 R"({"type":"ADDED","object":{}})"
                 "\r\n\n")
              .ok());
  REQUIRE(d.finish().ok());
  CHECK(evs.size() == 1);
}

TEST_CASE("watch decoder: garbage is an error naming the offset and stops the stream",
          "[unit][apiclient]") {
  auto garbage = GENERATE(std::string("not json\n"), std::string("[1,2]\n"),
                          std::string(R"({"type":"WHAT","object":{}})"
                                      "\n"),
                          std::string(R"({"type":"ADDED"})"
                                      "\n"),
                          std::string(R"({"type":7,"object":{}})"
                                      "\n"),
                          std::string(R"({"type":"ADDED","object":"x"})"
                                      "\n"));
  std::vector<RawWatchEvent> evs;
  WatchDecoder d([&](RawWatchEvent&& e) {
    evs.push_back(std::move(e));
    return true;
  });
  std::string first = R"({"type":"ADDED","object":{}})"
                      "\n";
  std::string after = R"({"type":"ADDED","object":{}})"
                      "\n";
  auto st = d.feed(first + garbage + after);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("byte " + std::to_string(first.size())) != std::string::npos);
  CHECK(evs.size() == 1);
  CHECK(d.finished());
  CHECK_FALSE(d.feed(after).ok());
  CHECK(evs.size() == 1);
}

TEST_CASE("watch decoder: a truncated final event is an error at finish", "[unit][apiclient]") {
  WatchDecoder d([](RawWatchEvent&&) { return true; });
  REQUIRE(d.feed(R"({"type":"ADDED","obj)").ok());
  CHECK_FALSE(d.finish().ok());
}

TEST_CASE("watch decoder: an event over the size cap is an error, in one chunk or many",
          "[unit][apiclient]") {
  std::string big = R"({"type":"ADDED","object":{"data":")" + std::string(2000, 'x') + "\"}}\n";
  SECTION("one chunk") {
    WatchDecoder d([](RawWatchEvent&&) { return true; }, 1024);
    auto st = d.feed(big);
    REQUIRE_FALSE(st.ok());
    CHECK(st.code() == nodeagent::base::StatusCode::kResourceExhausted);
  }
  SECTION("many chunks, no newline yet") {
    WatchDecoder d([](RawWatchEvent&&) { return true; }, 1024);
    bool failed = false;
    for (size_t i = 0; i < big.size() && !failed; i += 100) {
      failed = !d.feed(std::string_view(big).substr(i, 100)).ok();
    }
    CHECK(failed);
  }
  SECTION("under the cap passes") {
    WatchDecoder d([](RawWatchEvent&&) { return true; }, 4096);
    CHECK(d.feed(big).ok());
  }
}

TEST_CASE("watch decoder: the callback returning false stops decoding", "[unit][apiclient]") {
  int n = 0;
  WatchDecoder d([&](RawWatchEvent&&) { return ++n < 2; });
  REQUIRE(d.feed(kStream).ok());
  CHECK(n == 2);
  CHECK(d.finished());
}

TEST_CASE("watch decoder: a very large object split over many small chunks decodes whole",
          "[unit][apiclient]") {
  // 8 MiB of annotation between two small events, at the default cap, fed in socket-sized chunks
  // whose boundaries fall anywhere (also inside the escapes).
  std::string big_value;
  big_value.reserve(8 << 20);
  while (big_value.size() < (8u << 20)) big_value += "abc\\\"def\\n0123456789";
  const std::string stream =
      R"({"type":"ADDED","object":{"metadata":{"name":"small","resourceVersion":"1"}}})"
      "\n"
      R"({"type":"MODIFIED","object":{"metadata":{"name":"big","resourceVersion":"2","annotations":{"a":")" +
      big_value + "\"}}}}\n" +
      R"({"type":"DELETED","object":{"metadata":{"name":"small","resourceVersion":"3"}}})"
      "\n";
  std::vector<RawWatchEvent> evs;
  WatchDecoder d([&](RawWatchEvent&& e) {
    evs.push_back(std::move(e));
    return true;
  });
  for (size_t i = 0; i < stream.size(); i += 4093) {
    REQUIRE(d.feed(std::string_view(stream).substr(i, 4093)).ok());
  }
  REQUIRE(d.finish().ok());
  REQUIRE(summarize(evs) == std::vector<std::string>{"ADDED:1", "MODIFIED:2", "DELETED:3"});
  const auto& annotation =
      (*evs[1].object)["metadata"]["annotations"]["a"].get_ref<const std::string&>();
  CHECK(annotation.size() > (7u << 20));
  CHECK(annotation.substr(0, 9) == "abc\"def\n0");
}
