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
  CHECK(formatLogLine(LogFormat::kText, at(), 'I', "a", 1,
                      "M file=\"/m/a b=c.yaml\" err= next=1") ==
        "2026-12-01T10:00:00.123456Z I a [1] M file=\"/m/a b=c.yaml\" err=\"\" next=1\n");
  // A newline in a value cannot forge a line.
  const auto forged = formatLogLine(LogFormat::kText, at(), 'E', "a", 1,
                                    "M reason=x\nI0101 forged");
  CHECK(forged.find('\n') == forged.size() - 1);
  // No key=value: the message alone; '=' inside words that follow no space is text.
  CHECK(formatLogLine(LogFormat::kText, at(), 'I', "a", 1, "Plain message, a=b-ish") ==
        "2026-12-01T10:00:00.123456Z I a [1] Plain message, a=b-ish\n");
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
