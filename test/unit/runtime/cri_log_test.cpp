#include "agent/runtime/cri_log.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "test/support/test_util.h"

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

namespace {

std::string criLog(const std::vector<std::pair<std::string, bool>>& records) {
  std::string out;
  for (const auto& [text, partial] : records) {
    appendCriRecord(out, 1'700'000'000'000'000'000, LogStream::kStdout, partial, text);
  }
  return out;
}

struct TempFiles {
  nodeagent::testing::TempDir tmp{"nodeagent-crilog"};
  std::string dir = tmp.path().string();
  std::string write(const std::string& name, const std::string& content) {
    std::string path = dir + "/" + name;
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
};

}  // namespace

TEST_CASE("cri log: the log tail for termination messages keeps the last lines and bytes",
          "[unit][runtime]") {
  TempFiles t;
  std::vector<std::pair<std::string, bool>> records;
  for (int i = 1; i <= 100; ++i) records.emplace_back("line " + std::to_string(i), false);
  records.emplace_back("par", true);
  records.emplace_back("tial", false);
  auto path = t.write("0.log", criLog(records));
  auto text = tailCriLogText(path, 80, 100000);
  CHECK(text.rfind("line 23\n", 0) == 0);  // 80 records: lines 23..100 and the two pieces
  CHECK(text.size() >= 10);
  CHECK(text.substr(text.size() - 17) == "line 100\npartial\n");
  CHECK(tailCriLogText(path, 80, 10) == "0\npartial\n");
  CHECK(tailCriLogText(t.dir + "/missing.log", 80, 2048).empty());
}

TEST_CASE("cri log: termination messages come from the file, else the log on error",
          "[unit][runtime]") {
  TempFiles t;
  auto log = t.write("0.log", criLog({{"from the log", false}}));
  auto file = t.write("termination-log", "bye");
  CHECK(readTerminationMessage(file, true, log) == "bye");
  CHECK(readTerminationMessage(file, false, log) == "bye");
  auto empty = t.write("empty", "");
  CHECK(readTerminationMessage(empty, true, log) == "from the log\n");
  CHECK(readTerminationMessage(empty, false, log).empty());
  CHECK(readTerminationMessage(t.dir + "/missing", true, log) == "from the log\n");
  CHECK(readTerminationMessage("", true, log) == "from the log\n");
  // Only the last 4 KiB of a long message.
  auto big = t.write("big", std::string(5000, 'a') + std::string(4096, 'b'));
  CHECK(readTerminationMessage(big, false, log) == std::string(4096, 'b'));
  // A directory cannot be read: the error is the message.
  CHECK(readTerminationMessage(t.dir, false, log)
            .rfind("Error on reading termination log " + t.dir, 0) == 0);
}
