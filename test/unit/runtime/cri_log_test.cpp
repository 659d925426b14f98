#include "agent/runtime/cri_log.h"

#include <catch2/catch.hpp>
#include <string>
#include <utility>
#include <vector>

using namespace nodeagent::runtime;

namespace {
using Pieces = std::vector<std::pair<std::string, bool>>;

Pieces split(LineSplitter& s, const std::vector<std::string>& chunks, bool finish) {
  Pieces out;
  auto sink = [&](std::string_view t, bool partial) { out.emplace_back(std::string(t), partial); };
  for (const auto& c : chunks) s.feed(c, sink);
  if (finish) s.finish(sink);
  return out;
}
}  // namespace

TEST_CASE("cri log: RFC3339Nano timestamps are UTC with trailing zeros trimmed",
          "[unit][runtime]") {
  CHECK(formatRfc3339Nano(0) == "1970-01-01T00:00:00Z");
  CHECK(formatRfc3339Nano(1'700'000'000'123'456'789) == "2023-11-14T22:13:20.123456789Z");
  CHECK(formatRfc3339Nano(1'700'000'000'120'000'000) == "2023-11-14T22:13:20.12Z");
  CHECK(formatRfc3339Nano(1'700'000'000'000'000'001) == "2023-11-14T22:13:20.000000001Z");
}

TEST_CASE("cri log: records carry stream and full/partial tags and parse back", "[unit][runtime]") {
  std::string out;
  appendCriRecord(out, 1'700'000'000'500'000'000, LogStream::kStdout, false, "hello world");
  appendCriRecord(out, 1'700'000'000'500'000'000, LogStream::kStderr, true, "part");
  appendCriRecord(out, 1'700'000'000'500'000'000, LogStream::kStdout, false, "");
  CHECK(out ==
        "2023-11-14T22:13:20.5Z stdout F hello world\n"
        "2023-11-14T22:13:20.5Z stderr P part\n"
        "2023-11-14T22:13:20.5Z stdout F \n");

  auto rec = parseCriRecord("2023-11-14T22:13:20.5Z stderr P a b  c");
  REQUIRE(rec);
  CHECK(rec->timestamp == "2023-11-14T22:13:20.5Z");
  CHECK(rec->stream == LogStream::kStderr);
  CHECK(rec->partial);
  CHECK(rec->text == "a b  c");
  auto empty = parseCriRecord("2023-11-14T22:13:20.5Z stdout F ");
  REQUIRE(empty);
  CHECK(empty->text.empty());
  CHECK_FALSE(parseCriRecord("2023-11-14T22:13:20.5Z stdin F x"));
  CHECK_FALSE(parseCriRecord("2023-11-14T22:13:20.5Z stdout X x"));
  CHECK_FALSE(parseCriRecord("just text"));
}

TEST_CASE("cri log: the splitter emits complete lines and splits long ones into P pieces",
          "[unit][runtime]") {
  SECTION("lines across chunk boundaries") {
    LineSplitter s(8);
    auto got = split(s, {"ab", "c\nde", "f\n\nxy"}, false);
    CHECK(got == Pieces{{"abc", false}, {"def", false}, {"", false}});
    CHECK(s.buffered() == 2);
    Pieces tail;
    s.finish([&](std::string_view t, bool p) { tail.emplace_back(std::string(t), p); });
    CHECK(tail == Pieces{{"xy", false}});
  }
  SECTION("a line longer than the buffer") {
    LineSplitter s(4);
    auto got = split(s, {"0123456789\n"}, true);
    CHECK(got == Pieces{{"0123", true}, {"4567", true}, {"89", false}});
  }
  SECTION("a line of exactly the buffer size stays one record") {
    LineSplitter s(4);
    auto got = split(s, {"01", "23", "\n"}, true);
    CHECK(got == Pieces{{"0123", false}});
  }
  SECTION("a long line fed in small chunks") {
    LineSplitter s(4);
    auto got = split(s, {"012", "345", "678", "9"}, true);
    CHECK(got == Pieces{{"0123", true}, {"4567", true}, {"89", false}});
  }
}

TEST_CASE("cri log: rotation happens only when a non-empty file would exceed the limit",
          "[unit][runtime]") {
  CHECK_FALSE(shouldRotate(0, 100, 10));  // an empty file takes any record
  CHECK_FALSE(shouldRotate(50, 50, 100));
  CHECK(shouldRotate(51, 50, 100));
  CHECK_FALSE(shouldRotate(1'000, 10, 0));  // no limit
}

TEST_CASE("cri log: rotated names sort by age and the oldest beyond max files are removed",
          "[unit][runtime]") {
  CHECK(rotatedLogName("/logs/0.log", 1'700'000'000'000'000'000) == "/logs/0.log.20231114-221320");
  std::vector<std::string> rotated{"0.log.20231114-221322", "0.log.20231114-221320",
                                   "0.log.20231114-221320-2", "0.log.20231114-221320-10",
                                   "0.log.20231114-221321"};
  // max 3 files = the live log + 2 rotated: the 3 oldest go, clash counters compared as numbers.
  CHECK(rotatedFilesToRemove(rotated, 3) == std::vector<std::string>{"0.log.20231114-221320",
                                                                     "0.log.20231114-221320-2",
                                                                     "0.log.20231114-221320-10"});
  CHECK(rotatedFilesToRemove(rotated, 6).empty());
  CHECK(rotatedFilesToRemove(rotated, 1).size() == 5);
}
