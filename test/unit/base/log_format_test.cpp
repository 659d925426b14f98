#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "base/log.h"

using nodeagent::base::formatLogLine;
using nodeagent::base::LogFormat;

namespace {

std::chrono::system_clock::time_point at() {
  // 2026-12-01T10:00:00.123456Z
  return std::chrono::system_clock::time_point(std::chrono::seconds(1796119200)) +
         std::chrono::microseconds(123456);
}

}  // namespace

TEST_CASE("log format text: values with spaces, quotes or control characters are quoted",
          "[unit][base][log]") {
  CHECK(formatLogLine(LogFormat::kText, at(), 'I', "config", 7,
                      "Pod added pod=default/web uid=abc source=file") ==
        "2026-12-01T10:00:00.123456Z I config [7] Pod added pod=default/web uid=abc source=file\n");
  CHECK(formatLogLine(LogFormat::kText, at(), 'W', "config", 7,
                      "Failed reading url=http://x/p reason=GET http://x/p: connection refused "
                      "failures=2") ==
        "2026-12-01T10:00:00.123456Z W config [7] Failed reading url=http://x/p "
        "reason=\"GET http://x/p: connection refused\" failures=2\n");
  // Already quoted values stay as they are, even with " key=" inside; empty values are "".
  CHECK(
      formatLogLine(LogFormat::kText, at(), 'I', "a", 1, "M file=\"/m/a b=c.yaml\" err= next=1") ==
      "2026-12-01T10:00:00.123456Z I a [1] M file=\"/m/a b=c.yaml\" err=\"\" next=1\n");
  // A newline in a value cannot forge a line.
  const auto forged =
      formatLogLine(LogFormat::kText, at(), 'E', "a", 1, "M reason=x\nI0101 forged");
  CHECK(forged.find('\n') == forged.size() - 1);
  // camelCase keys (klog's exitCode, podUID) end the value before them.
  CHECK(formatLogLine(LogFormat::kText, at(), 'I', "a", 1, "Exited id=abc exitCode=137 podUID=u") ==
        "2026-12-01T10:00:00.123456Z I a [1] Exited id=abc exitCode=137 podUID=u\n");
  // No key=value: the message alone.
  CHECK(formatLogLine(LogFormat::kText, at(), 'I', "a", 1, "Plain message, nothing more") ==
        "2026-12-01T10:00:00.123456Z I a [1] Plain message, nothing more\n");
  // A value that only starts with a quote (apiserver text such as `pods "x" not found` logged
  // raw) is quoted whole: nothing is lost, nothing unescaped gets through.
  CHECK(formatLogLine(LogFormat::kText, at(), 'W', "a", 1, "M err=\"x\" not found next=1") ==
        "2026-12-01T10:00:00.123456Z W a [1] M err=\"\\\"x\\\" not found\" next=1\n");
  for (const char* payload : {"M reason=x a=\"y\nI0101 forged", "M a=\"unterminated\nI0101 forged",
                              "Message\nI0101 forged k=v"}) {
    INFO(payload);
    const auto line = formatLogLine(LogFormat::kText, at(), 'E', "a", 1, payload);
    CHECK(line.find('\n') == line.size() - 1);
  }
}

TEST_CASE("log format json: bad escapes in a quoted value are kept as text, never thrown",
          "[unit][base][log]") {
  const auto line =
      formatLogLine(LogFormat::kJson, at(), 'I', "a", 1, "M a=\"\\xZZ\\u00e9\\a\" b=\"\\u0\"");
  auto j = nlohmann::json::parse(line);
  CHECK(j["a"] == "\\xZZ\xC3\xA9\a");
  CHECK(j["b"] == "\\u0");
}

TEST_CASE("log format json: one object per line with msg and the key=value fields",
          "[unit][base][log]") {
  const auto line = formatLogLine(LogFormat::kJson, at(), 'W', "config", 9,
                                  "Failed reading url=http://x/p reason=GET x: refused "
                                  "file=\"/m/a\\nb\\xff\" msg=clash");
  REQUIRE(line.back() == '\n');
  CHECK(line.find('\n') == line.size() - 1);
  auto j = nlohmann::json::parse(line);
  CHECK(j["ts"] == "2026-12-01T10:00:00.123456Z");
  CHECK(j["level"] == "warning");
  CHECK(j["logger"] == "config");
  CHECK(j["thread"] == 9);
  CHECK(j["msg"] == "Failed reading");
  CHECK(j["url"] == "http://x/p");
  CHECK(j["reason"] == "GET x: refused");
  CHECK(j["file"] == "/m/a\nb\xEF\xBF\xBD");  // unquoted, invalid UTF-8 replaced
  CHECK(j["_msg"] == "clash");
}
